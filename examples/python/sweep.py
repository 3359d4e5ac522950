#!/usr/bin/env python3
"""Attach to a running ipcfloor engine from Python, run a grid of lengths through the segment,
and set the engine's answers beside what numpy says about the same (zero-copy) series.

    python3 -m venv --system-site-packages venv
    venv/bin/pip install --no-build-isolation PREFIX/share/ipcfloor/python
    venv/bin/python sweep.py ENGINE_NAME 6,8,11,50,200

Prints one JSON line per combo on stdout (as `ipcfloor sweep --json` does) and, on stderr, the
series' min/max/last and buy-and-hold return from numpy next to the best combo.
"""

from __future__ import annotations

import json
import sys

import numpy as np

import ipcfloor


def main() -> int:
    if len(sys.argv) != 3:
        raise SystemExit("usage: sweep.py ENGINE_NAME L1,L2,...")
    try:
        lengths = [int(text) for text in sys.argv[2].split(",")]
    except ValueError:
        raise SystemExit(f"sweep.py: lengths must be whole numbers, got {sys.argv[2]!r}")
    if min(lengths) < 1:
        raise SystemExit("sweep.py: lengths must be >= 1")

    try:
        engine = ipcfloor.attach(sys.argv[1], timeout=5.0)
    except ipcfloor.Error as error:
        raise SystemExit(f"sweep.py: {error} ({type(error).__name__})")
    with engine:
        close = engine.series  # read-only numpy view of the engine's memory
        print(f"{engine!r}", file=sys.stderr)
        try:  # the round trips are shortest from the cpus the engine published as nearest it
            print(f"on cpu {engine.pin_near()}, next to the engine's serving cpu {engine.serving_cpu}", file=sys.stderr)
        except ipcfloor.ResourceFailure as error:
            print(f"not pinned: {error}", file=sys.stderr)
        print(f"series: min {close.min()!r} max {close.max()!r} last {close[-1]!r}", file=sys.stderr)
        hold = (close[-1] / close[0] - 1.0) * 100.0

        grid = ipcfloor.grid(lengths)
        result = engine.sweep(grid)
        for length, params, pnl, trades, status in zip(lengths, grid, result.pnl, result.trades, result.status):
            if status:
                print(f"L={length}: refused ({status})", file=sys.stderr)
                continue
            print(json.dumps({"L": length, "params": params.tolist(), "pnl": float(pnl), "trades": int(trades)},
                             separators=(",", ":")))
        best = int(np.nanargmax(result.pnl))
        print(f"best L={lengths[best]}: pnl {result.pnl[best]:.4f} % points over {result.trades[best]} trades; "
              f"buy and hold {hold:.4f} %", file=sys.stderr)
    return 1 if result.refused else 0


if __name__ == "__main__":
    sys.exit(main())
