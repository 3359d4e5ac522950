#!/usr/bin/env python3
"""Live mode from Python: subscribe L=6 on a running `ipcfloor serve --live` engine, append a few
closes that continue its series, and print the signal each new bar brings.

    ipcfloor serve --name prices --live --capacity 200000 &
    venv/bin/python live.py prices 20        # the venv of sweep.py's docstring

It starts nothing itself. Two attachments, two lanes: one appends (the series' writer), the other
subscribes and reads. The closes continue the published series as a random walk (numpy, seed 7).
Prints one JSON line per signal on stdout (the close appended, then the signal's fields) and, on
stderr, the subscription's state when it began and a backtest of L=6 over every published bar
beside the last signal: the two agree to the last bit.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import numpy.typing as npt

import ipcfloor


def continue_series(last: float, count: int, seed: int = 7) -> npt.NDArray[np.float64]:
    """`count` closes after `last`: geometric Brownian steps of one minute at 30 % a year."""
    rng = np.random.default_rng(seed)
    dt = 1.0 / (252 * 390)
    steps = (0.05 - 0.5 * 0.3 ** 2) * dt + 0.3 * np.sqrt(dt) * rng.standard_normal(count)
    closes: npt.NDArray[np.float64] = last * np.exp(np.cumsum(steps))
    return closes


def main() -> int:
    if len(sys.argv) not in (2, 3):
        raise SystemExit("usage: live.py ENGINE_NAME [BARS]")
    try:
        count = int(sys.argv[2]) if len(sys.argv) == 3 else 20
    except ValueError:
        raise SystemExit(f"live.py: BARS must be a whole number, got {sys.argv[2]!r}")
    if count < 1:
        raise SystemExit("live.py: BARS must be >= 1")

    try:
        writer = ipcfloor.attach(sys.argv[1], timeout=5.0, wait="backoff")
        reader = ipcfloor.attach(sys.argv[1], timeout=5.0, wait="backoff")
    except ipcfloor.Error as error:
        raise SystemExit(f"live.py: {error} ({type(error).__name__})")
    with writer, reader:
        if not reader.live:
            raise SystemExit(f"live.py: engine {reader.engine} is not live: start it with "
                             f"`ipcfloor serve --name {reader.engine} --live`")
        try:
            published = reader.published_series  # read-only numpy view, no copy
            room = reader.capacity - published.size
            print(f"{reader!r}: {published.size} bars published, room for {room} more", file=sys.stderr)
            sub, state = reader.subscribe(6, with_state=True)
            print(f"subscribed L=6 as {sub} after bar {state.bar}: position {state.position}, pnl {state.pnl!r}, "
                  f"trades {state.trades}", file=sys.stderr)

            for close in continue_series(float(published[-1]), count):
                bars = writer.append(float(close), tick=time.monotonic_ns())
                signal = reader.wait_signal()  # bounded by the attach timeout
                latency_us = (time.monotonic_ns() - signal.tick) / 1e3
                print(json.dumps({"close": float(close), "bars": bars, "bar": signal.bar,
                                  "subscription": signal.subscription, "cross": signal.cross,
                                  "position": signal.position, "pnl": signal.pnl, "trades": signal.trades,
                                  "hma": signal.value0, "hma3": signal.value1, "gap": signal.gap},
                                 separators=(",", ":")))
                print(f"bar {signal.bar}: tick to signal {latency_us:.1f} us", file=sys.stderr)
            if reader.poll_signal() is not None:  # one subscription, one signal per bar
                raise SystemExit("live.py: a signal more than the bars appended")

            pnl, trades = reader.backtest(ipcfloor.combo_from_length(6))  # over every published bar
            agree = (pnl, trades) == (signal.pnl, signal.trades)
            print(f"backtest L=6 over {reader.published_series.size} bars: pnl {pnl!r}, trades {trades}; the last "
                  f"signal {'agrees' if agree else 'DIFFERS'}", file=sys.stderr)
        except ipcfloor.Error as error:
            raise SystemExit(f"live.py: {error} ({type(error).__name__})")
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
