#!/usr/bin/env python3
"""The parity gate of the example strategies: every combo of a grid, swept by ipcfloor through
each strategy's shared object (`sweep --inproc --strategy FILE.so`, and through an engine that
loaded it: `serve --strategy FILE.so` then `sweep --name --strategy NAME`), equals its independent
numpy reference (sma_cross.py, donchian.py, vwma_cross.py) bit for bit: trades exactly, pnl to the
last bit.

On several series: fixed seeds and sizes, and on every run two seeds drawn at random (printed, so
a failure can be replayed with --seed), each a GBM close series from `ipcfloor gen` with bars
drawn around it, written as a CSV of Date,Open,High,Low,Close,Volume (series_files.py). donchian
needs the High and Low columns and vwma_cross the Volume column, which the engine and `sweep
--inproc` keep from those files: a refusal for a missing column is a mismatch. Exit 0 when every
row matches, 1 otherwise.
Usage: strategy_parity.py --ipcfloor BIN --strategies DIR [--workdir DIR] [--seed S ...]
"""

import argparse
import os
import random
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import donchian  # noqa: E402
import sma_cross  # noqa: E402
import vwma_cross  # noqa: E402
from series_files import ColumnSkips, Engine, gbm_series, json_rows, run  # noqa: E402

# name: (combo file header, reference (series, a, b) -> (pnl, trades), grid, columns it requires)
GRIDS = {
    "sma_cross": ("fast,slow", lambda s, a, b: sma_cross.backtest(s.close, a, b),
                  [(f, s) for f in (2, 5, 10, 20) for s in (8, 30, 50, 120) if s > f], ()),
    "donchian": ("entry,exit", lambda s, a, b: donchian.backtest(s.high, s.low, s.close, a, b),
                 [(e, x) for e in (5, 20, 55) for x in (3, 10, 20)], ("high", "low")),
    "vwma_cross": ("fast,slow", lambda s, a, b: vwma_cross.backtest(s.close, s.volume, a, b),
                   [(f, s) for f in (2, 5, 10) for s in (8, 30, 120) if s > f], ("volume",)),
}
FIXED = [(500, 1), (3000, 7), (20000, 2026)]


class Gate:
    def __init__(self):
        self.bad = 0
        self.columns = ColumnSkips("strategy parity")

    def refused(self, name, done, place):
        return self.columns.refused(name, GRIDS[name][3], done, place, self.mismatch)

    def mismatch(self, text):
        print(f"MISMATCH {text}", file=sys.stderr)
        self.bad += 1

    def compare(self, label, done, series, name):
        _, reference, combos, _ = GRIDS[name]
        rows = json_rows(done)
        if done.returncode != 0 or len(rows) != len(combos):
            self.mismatch(f"{label}: exit {done.returncode}, {len(rows)} rows for {len(combos)} combos: "
                          f"{done.stderr.strip()}")
            return
        for (a, b), row in zip(combos, rows):
            want_pnl, want_trades = reference(series, a, b)
            got = row.get("pnl"), row.get("trades")
            if row.get("params") != [a, b] or got[1] != want_trades or float(got[0]) != want_pnl:
                self.mismatch(f"{label} [{a}, {b}]: ipcfloor {got}, numpy ({want_pnl!r}, {want_trades})")


def combo_file(work, name):
    header, _, combos, _ = GRIDS[name]
    path = os.path.join(work, f"{name}.csv")
    with open(path, "w") as f:
        f.write(header + "\n" + "".join(f"{a},{b}\n" for a, b in combos))
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ipcfloor", required=True)
    ap.add_argument("--strategies", required=True, help="folder holding sma_cross.so, donchian.so and vwma_cross.so")
    ap.add_argument("--workdir")
    ap.add_argument("--seed", type=int, action="append", help="run this seed (3000 bars) instead of random ones")
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="strategy-parity-")
    os.makedirs(work, exist_ok=True)
    drawn = args.seed or [random.SystemRandom().randrange(1, 2**31) for _ in range(2)]
    print(f"strategy parity: fixed series {FIXED}, drawn seeds {drawn} (3000 bars; replay with --seed)")
    gate = Gate()
    for bars, seed in FIXED + [(3000, seed) for seed in drawn]:
        series = gbm_series(args.ipcfloor, work, bars, seed)
        for name in GRIDS:
            if (name, "in process") in gate.columns.skipped:
                continue
            done = run([args.ipcfloor, "sweep", "--inproc", "--data", series.path, "--strategy",
                        os.path.join(args.strategies, f"{name}.so"), "--combos", combo_file(work, name), "--json",
                        "--quiet", "--threads", "2"], check=False)
            if not gate.refused(name, done, "in process"):
                gate.compare(f"{name} in-process, {bars} bars seed {seed}", done, series, name)
    through_engine(args, work, gate)
    verdict = "every row matches" if gate.bad == 0 else f"{gate.bad} mismatches"
    print("strategy parity:", verdict + gate.columns.summary())
    return 0 if gate.bad == 0 else 1


def through_engine(args, work, gate):
    """Every strategy through one engine that loaded them, on its series, against numpy."""
    series = gbm_series(args.ipcfloor, work, 5000, 99)
    files = [os.path.join(args.strategies, f"{name}.so") for name in GRIDS]
    with Engine(args.ipcfloor, work, "parity", [series], files) as engine:
        for name in GRIDS:
            done = run(engine.sweep_argv(args.ipcfloor) + ["--strategy", name, "--combos", combo_file(work, name),
                                                           "--json", "--quiet"], check=False)
            if not gate.refused(name, done, "through an engine"):
                gate.compare(f"{name} through engine {engine.name}", done, series, name)


if __name__ == "__main__":
    sys.exit(main())
