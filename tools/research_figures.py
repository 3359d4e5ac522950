#!/usr/bin/env python3
"""The research loop's figures on one engine, in one run (docs/RESULTS.md, "The research loop"):

- sweep --stats of sma_cross's 190-combo grid (fast 5..50 step 5, slow 20..400 step 20, fast <
  slow) over 150,000 bars, beside the same sweep without --stats;
- a random search of 190 trials over the same ranges (--where 'fast < slow'), combos per second;
- walk-forward, 10 folds (train 50,000 bars, test 10,000, step 10,000) of the 190-combo grid,
  beside the 10 plain sweeps --stats of the same training ranges;
- Optuna through the engine (ipcfloor.search.optuna, batches of 16): trials per second, when the
  Python package and python3-optuna are importable by --python.

Every side runs --reps times (after one warm-up), alternating; each time is one process's wall
clock, and the figures are medians. The closes are numpy default_rng(42) GBM, sigma 0.001 a bar
(the vectorbt comparison's).

Usage: research_figures.py --ipcfloor BIN --strategy sma_cross.so [--python VENV_PYTHON] [--reps 3]
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import tempfile
import time

import numpy as np

COMBOS = [(f, s) for f in range(5, 55, 5) for s in range(20, 420, 20) if f < s]
BARS = 150_000

OPTUNA = r"""
import json, sys, time, optuna, ipcfloor, ipcfloor.search
optuna.logging.set_verbosity(30)
with ipcfloor.attach(sys.argv[1], timeout=30.0) as engine:
    start = time.perf_counter()
    study = ipcfloor.search.optuna(engine, "sma_cross", {"fast": (5, 50), "slow": (20, 400)}, n_trials=int(sys.argv[2]),
                                   metric="sharpe", seed=7)
    print(json.dumps({"seconds": time.perf_counter() - start, "trials": len(study.trials)}))
"""


def timed(argv, env=None):
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr}")
    return time.perf_counter() - start, done.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ipcfloor", required=True)
    ap.add_argument("--strategy", required=True)
    ap.add_argument("--python")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(42)
    close = 100.0 * np.exp(np.cumsum(rng.normal(-0.5e-6, 0.001, BARS)))
    with tempfile.TemporaryDirectory(prefix="ipcfloor-figures-") as work:
        data = os.path.join(work, "close150k.f64")
        close.astype("<f8").tofile(data)
        grid = os.path.join(work, "grid190.csv")
        with open(grid, "w") as f:
            f.write("fast,slow\n" + "".join(f"{a},{b}\n" for a, b in COMBOS))
        name = f"figures-{os.getpid()}"
        engine = subprocess.Popen([args.ipcfloor, "serve", "--name", name, "--data", data, "--strategy", args.strategy,
                                   "--socket-dir", work, "--quiet"], stdout=subprocess.PIPE, text=True)
        if not engine.stdout.readline().startswith("ready"):
            raise SystemExit("the engine did not start")
        base = ["--name", name, "--socket-dir", work, "--strategy", "sma_cross", "--quiet"]
        sweep = [args.ipcfloor, "sweep", *base, "--combos", grid, "--json"]
        runs = {
            "grid_plain": sweep,
            "grid_stats": sweep + ["--stats"],
            "random_190_stats": [args.ipcfloor, "sweep", *base, "--search", "random", "--trials", "190", "--seed", "1",
                                 "--param", "fast=5:50", "--param", "slow=20:400", "--where", "fast < slow", "--stats",
                                 "--json"],
            "walkforward_10": [args.ipcfloor, "walkforward", *base, "--combos", grid, "--train", "50000", "--test",
                               "10000", "--by", "sharpe", "--json"],
        }
        folds = [(s, s + 50_000) for s in range(0, 100_000, 10_000)]
        times = {key: [] for key in list(runs) + ["ten_sweeps_stats", "optuna_190"]}
        try:
            for rep in range(args.reps + 1):
                for key, argv in runs.items():
                    seconds, _ = timed(argv)
                    if rep:
                        times[key].append(seconds)
                total = 0.0
                for a, b in folds:
                    seconds, _ = timed(sweep + ["--stats", "--from", str(a), "--to", str(b)])
                    total += seconds
                if rep:
                    times["ten_sweeps_stats"].append(total)
                if args.python:
                    seconds, out = timed([args.python, "-c", OPTUNA, name, "190"],
                                         env=dict(os.environ, IPCFLOOR_SOCKET_DIR=work))
                    if rep:
                        times["optuna_190"].append(json.loads(out)["seconds"])
        finally:
            engine.send_signal(signal.SIGINT)
            engine.wait(timeout=30)
    med = {k: statistics.median(v) for k, v in times.items() if v}
    report = {
        "cpu": next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?"),
        "nproc": os.cpu_count(), "reps": args.reps, "times_s": times, "median_s": med,
        "grid_combos_per_s_stats": len(COMBOS) / med["grid_stats"],
        "random_combos_per_s_stats": 190 / med["random_190_stats"],
        "stats_over_plain": med["grid_stats"] / med["grid_plain"],
        "walkforward_over_ten_sweeps": med["walkforward_10"] / med["ten_sweeps_stats"],
        "loadavg": os.getloadavg(),
    }
    if "optuna_190" in med:
        report["optuna_trials_per_s"] = 190 / med["optuna_190"]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
