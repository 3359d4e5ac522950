#!/usr/bin/env python3
"""ipcfloor against vectorbt on the same research sweep, with the statistics, in one run.

The work: sma_cross stop-and-reverse, fast in 5..50 step 5 and slow in 20..400 step 20 with
fast < slow (190 combos), over 150,000 closes (numpy default_rng(42) GBM, sigma 0.001 a bar).

- vectorbt: `vbt.MA.run` with every window, `ma_crossed_above` / `ma_crossed_below`,
  `Portfolio.from_signals(direction='both', fees=0.0009)` (stop-and-reverse), then
  `pf.stats(agg_func=None)`: every figure for every combo, as a researcher ranks them.
- ipcfloor: `ipcfloor sweep --name ENGINE --strategy sma_cross --combos FILE --stats --json`
  through an engine serving the same closes, and the same sweep without `--stats`.

Each side runs `--reps` times after one warm-up (numba compiles or loads its cache in the
warm-up; the engine's first sweep pages its rings in), alternating, in this one process; the
figures are the medians and the ratio of the medians. Closed-trade counts are compared on every
combo (vectorbt's portfolio also counts the position still open at the end).

Usage: vectorbt_stats.py --vectorbt DIR --ipcfloor BIN --strategy sma_cross.so [--reps 5] [--json OUT]
(DIR holds vectorbt's source, importable with Debian's python3-numba and python3-pandas).
"""

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

FAST = range(5, 55, 5)
SLOW = range(20, 420, 20)
COMBOS = [(f, s) for f in FAST for s in SLOW if f < s]
BARS = 150_000


def closes():
    rng = np.random.default_rng(42)
    sigma = 0.001
    return 100.0 * np.exp(np.cumsum(rng.normal(-0.5 * sigma * sigma, sigma, BARS)))


def vectorbt_sweep(vbt, pd, close):
    fast = vbt.MA.run(close, window=[f for f, _ in COMBOS], short_name="fast")
    slow = vbt.MA.run(close, window=[s for _, s in COMBOS], short_name="slow")
    entries = fast.ma_crossed_above(slow)
    exits = fast.ma_crossed_below(slow)
    pf = vbt.Portfolio.from_signals(close, entries, exits, direction="both", fees=0.0009, freq="1min")
    figures = pf.stats(agg_func=None)
    return pf, figures


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vectorbt", required=True)
    ap.add_argument("--ipcfloor", required=True)
    ap.add_argument("--strategy", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json")
    args = ap.parse_args()
    sys.path.insert(0, args.vectorbt)
    import pandas as pd
    import vectorbt as vbt

    close_np = closes()
    close = pd.Series(close_np, index=pd.date_range("2000-01-01", periods=BARS, freq="1min"))
    with tempfile.TemporaryDirectory(prefix="ipcfloor-vbt-") as work:
        data = os.path.join(work, "close150k.f64")
        close_np.astype("<f8").tofile(data)
        combos = os.path.join(work, "grid190.csv")
        with open(combos, "w") as f:
            f.write("fast,slow\n" + "".join(f"{a},{b}\n" for a, b in COMBOS))
        name = f"vbt-{os.getpid()}"
        engine = subprocess.Popen([args.ipcfloor, "serve", "--name", name, "--data", data, "--strategy", args.strategy,
                                   "--socket-dir", work, "--quiet"], stdout=subprocess.PIPE, text=True)
        ready = engine.stdout.readline()
        if not ready.startswith("ready"):
            raise SystemExit(f"the engine did not start: {ready}")
        sweep = [args.ipcfloor, "sweep", "--name", name, "--socket-dir", work, "--strategy", "sma_cross", "--combos",
                 combos, "--json", "--quiet"]
        try:
            def ipcfloor(stats):
                done = subprocess.run(sweep + (["--stats"] if stats else []), capture_output=True, text=True, check=True)
                return [json.loads(line) for line in done.stdout.splitlines()]

            first_vbt, (pf, _) = timed(lambda: vectorbt_sweep(vbt, pd, close))
            ipcfloor(True)
            ipcfloor(False)
            times = {"vectorbt": [], "ipcfloor_stats": [], "ipcfloor_plain": []}
            for _ in range(args.reps):
                t, (pf, figures) = timed(lambda: vectorbt_sweep(vbt, pd, close))
                times["vectorbt"].append(t)
                t, rows = timed(lambda: ipcfloor(True))
                times["ipcfloor_stats"].append(t)
                t, _ = timed(lambda: ipcfloor(False))
                times["ipcfloor_plain"].append(t)
        finally:
            engine.send_signal(signal.SIGINT)
            engine.wait(timeout=30)
    counts = pf.trades.count()
    closed = pf.trades.closed.count()
    disagree = [(r["params"], int(r["trades"]), int(closed[tuple(r["params"])])) for r in rows
                if int(r["trades"]) != int(closed[tuple(r["params"])])]
    med = {k: statistics.median(v) for k, v in times.items()}
    report = {
        "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
        "nproc": os.cpu_count(), "python": platform.python_version(), "vectorbt": vbt.__version__,
        "combos": len(COMBOS), "bars": BARS, "reps": args.reps, "times_s": times, "median_s": med,
        "vectorbt_first_call_s": first_vbt,
        "ratio_vectorbt_over_ipcfloor_stats": med["vectorbt"] / med["ipcfloor_stats"],
        "ratio_stats_over_plain": med["ipcfloor_stats"] / med["ipcfloor_plain"],
        "trade_count_mismatches": disagree, "vectorbt_trades_incl_open": int(counts.sum()),
        "vectorbt_closed_trades": int(closed.sum()), "ipcfloor_trades": sum(int(r["trades"]) for r in rows),
        "vectorbt_figures": list(figures.columns), "loadavg": os.getloadavg(),
    }
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text)
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
