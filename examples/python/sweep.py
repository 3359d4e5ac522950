#!/usr/bin/env python3
"""Attach to a running ipcfloor engine from Python, run a grid of lengths through the segment,
and set the engine's answers beside what numpy says about the same (zero-copy) series.

    python3 -m venv --system-site-packages venv
    venv/bin/pip install --no-build-isolation PREFIX/share/ipcfloor/python
    venv/bin/python sweep.py ENGINE_NAME 6,8,11,50,200     # lengths, or
    venv/bin/python sweep.py ENGINE_NAME 6:200:80          # FIRST:LAST:COUNT, as `sweep --grid`

Prints one JSON line per combo on stdout (as `ipcfloor sweep --json` does) and, on stderr, the
series' min/max/last and buy-and-hold return from numpy next to the best combo. Ctrl-C stops the
sweep at once (KeyboardInterrupt).
"""

from __future__ import annotations

import json
import sys

import numpy as np

import ipcfloor


def main() -> int:
    if len(sys.argv) != 3:
        raise SystemExit("usage: sweep.py ENGINE_NAME L1,L2,... | FIRST:LAST:COUNT")
    try:
        if ":" in sys.argv[2]:
            first, last, count = sys.argv[2].split(":")
            grid = ipcfloor.grid(float(first), float(last), int(count))
        else:
            grid = ipcfloor.grid([int(text) for text in sys.argv[2].split(",")])
    except (ValueError, ipcfloor.Error) as error:
        raise SystemExit(f"sweep.py: {sys.argv[2]!r}: {error}")
    lengths = [int(length) for length in grid[:, 1]]  # the L window of each combo is its length

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

        result = engine.sweep(grid)
        names = ipcfloor.status_name(result.status)
        for length, params, pnl, trades, status in zip(lengths, grid, result.pnl, result.trades, names):
            if status != "ok":
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
