#!/usr/bin/env python3
"""The parity gate of the example strategies: every combo of a grid, swept by ipcfloor through
each strategy's shared object (`sweep --inproc --strategy FILE.so`, and through an engine that
loaded it: `serve --strategy FILE.so` then `sweep --name --strategy NAME`), equals its independent
numpy reference (sma_cross.py, donchian.py) bit for bit: trades exactly, pnl to the last bit.

On several series: fixed seeds and sizes, and on every run two seeds drawn at random (printed, so
a failure can be replayed with --seed). Exit 0 when every row matches, 1 otherwise.
Usage: strategy_parity.py --ipcfloor BIN --strategies DIR [--workdir DIR] [--seed S ...]
"""

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import donchian  # noqa: E402
import sma_cross  # noqa: E402

GRIDS = {
    "sma_cross": ("fast,slow", sma_cross.backtest,
                  [(f, s) for f in (2, 5, 10, 20) for s in (8, 30, 50, 120) if s > f]),
    "donchian": ("entry,exit", donchian.backtest,
                 [(e, x) for e in (5, 20, 55) for x in (3, 10, 20)]),
}
FIXED = [(500, 1), (3000, 7), (20000, 2026)]


def run(argv, **kwargs):
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def compare(label, rows, close, reference, combos):
    bad = 0
    for (a, b), row in zip(combos, rows):
        want_pnl, want_trades = reference(close, a, b)
        got = row.get("pnl"), row.get("trades")
        if row.get("params") != [a, b] or got[1] != want_trades or float(got[0]) != want_pnl:
            print(f"MISMATCH {label} [{a}, {b}]: ipcfloor {got}, numpy ({want_pnl!r}, {want_trades})", file=sys.stderr)
            bad += 1
    if len(rows) != len(combos):
        print(f"MISMATCH {label}: {len(rows)} rows for {len(combos)} combos", file=sys.stderr)
        bad += 1
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ipcfloor", required=True)
    ap.add_argument("--strategies", required=True, help="folder holding sma_cross.so and donchian.so")
    ap.add_argument("--workdir")
    ap.add_argument("--seed", type=int, action="append", help="run this seed (3000 bars) instead of random ones")
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="strategy-parity-")
    os.makedirs(work, exist_ok=True)
    drawn = args.seed or [random.SystemRandom().randrange(1, 2**31) for _ in range(2)]
    print(f"strategy parity: fixed series {FIXED}, drawn seeds {drawn} (3000 bars; replay with --seed)")
    cases = FIXED + [(3000, seed) for seed in drawn]
    bad = 0
    for bars, seed in cases:
        data = os.path.join(work, f"gbm-{bars}-{seed}.f64")
        run([args.ipcfloor, "gen", "--bars", str(bars), "--seed", str(seed), "-o", data])
        close = np.fromfile(data, dtype="<f8")
        for name, (header, reference, combos) in GRIDS.items():
            combo_file = os.path.join(work, f"{name}.csv")
            with open(combo_file, "w") as f:
                f.write(header + "\n" + "".join(f"{a},{b}\n" for a, b in combos))
            so = os.path.join(args.strategies, f"{name}.so")
            out = run([args.ipcfloor, "sweep", "--inproc", "--data", data, "--strategy", so, "--combos", combo_file,
                       "--json", "--quiet", "--threads", "2"])
            rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            bad += compare(f"{name} in-process, {bars} bars seed {seed}", rows, close, reference, combos)
    bad += through_engine(args, work)
    print("strategy parity:", "every row matches" if bad == 0 else f"{bad} mismatches")
    return 0 if bad == 0 else 1


def through_engine(args, work):
    """Both strategies through one engine that loaded them, on its series, against numpy."""
    data = os.path.join(work, "engine.f64")
    run([args.ipcfloor, "gen", "--bars", "5000", "--seed", "99", "-o", data])
    close = np.fromfile(data, dtype="<f8")
    name = f"parity-{os.getpid()}"
    argv = [args.ipcfloor, "serve", "--name", name, "--data", data, "--wait", "backoff", "--socket-dir", work,
            "--hugepages", "off", "--quiet"]
    for strategy in GRIDS:
        argv += ["--strategy", os.path.join(args.strategies, f"{strategy}.so")]
    engine = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    bad = 0
    try:
        ready = engine.stdout.readline()
        if not ready.startswith("ready"):
            engine.kill()
            print(f"MISMATCH: serve did not start: {ready}{engine.stderr.read()}", file=sys.stderr)
            return 1
        for strategy, (header, reference, combos) in GRIDS.items():
            combo_file = os.path.join(work, f"{strategy}-engine.csv")
            with open(combo_file, "w") as f:
                f.write(header + "\n" + "".join(f"{a},{b}\n" for a, b in combos))
            out = run([args.ipcfloor, "sweep", "--name", name, "--socket-dir", work, "--strategy", strategy,
                       "--combos", combo_file, "--json", "--quiet"])
            rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            bad += compare(f"{strategy} through engine {name}", rows, close, reference, combos)
    finally:
        engine.send_signal(signal.SIGINT)
        try:
            engine.wait(timeout=30)
        except subprocess.TimeoutExpired:
            engine.kill()
    return bad


if __name__ == "__main__":
    sys.exit(main())
