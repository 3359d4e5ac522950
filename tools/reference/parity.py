#!/usr/bin/env python3
"""The parity gate (docs/SPEC.md §1): the C++ kernel against the independent numba reference.

For each data set, runs `ipcfloor sweep --inproc --json` and the reference on the same
series and requires, for every combo of the grid, trades exactly equal and |dpnl| <= 1e-6.
On the embedded default data it also requires the published fingerprint (L=6: pnl
-5165.577039790348, trades 57029) and checks that `ipcfloor gen` reproduces numpy's series.
Other seeds and sizes are written by numpy in each file format, so the loaders are on the
path too. Exits non-zero, naming each failing combo, when the gate does not hold.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hma_reference as ref  # noqa: E402

FINGERPRINT = (-5165.577039790348, 57029)
PNL_TOLERANCE = 1e-6

# (name, bars, seed, mu, sigma, file format or None for the embedded default)
DATA_SETS = [
    ("default (embedded, seed 42, 150000 bars)", 150_000, 42, 0.05, 0.30, None),
    ("seed 7, 60000 bars, mu 0.1, sigma 0.5, .npy", 60_000, 7, 0.10, 0.50, "npy"),
    ("seed 2024, 20000 bars, sigma 0.2, .csv", 20_000, 2024, 0.05, 0.20, "csv"),
    ("seed 99, 1000 bars, .f64", 1_000, 99, 0.05, 0.30, "f64"),
]


def run_ipcfloor(binary, args):
    proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.exit(f"parity: `ipcfloor {' '.join(args)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def write_series(path, close, fmt):
    if fmt == "npy":
        np.save(path, close)
    elif fmt == "csv":
        with open(path, "w") as f:
            f.write("bar,close\n")
            for i, v in enumerate(close):
                f.write(f"{i},{v!r}\n")
    else:
        close.astype("<f8").tofile(path)


def check_generator(binary, tmp, bars, seed):
    path = os.path.join(tmp, f"gen_{seed}_{bars}.f64")
    run_ipcfloor(binary, ["gen", "--bars", str(bars), "--seed", str(seed), "-o", path])
    ours = np.fromfile(path, dtype="<f8")
    theirs = ref.gbm_series(bars=bars, seed=seed)
    if ours.shape != theirs.shape:
        return [f"gen seed {seed}: {ours.size} bars, numpy has {theirs.size}"]
    rel = np.max(np.abs(ours - theirs) / np.abs(theirs))
    print(f"  gen seed {seed}, {bars} bars: max relative difference to numpy {rel:.3g}")
    return [] if rel <= 1e-14 else [f"gen seed {seed}: max relative difference {rel:.3g} > 1e-14"]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ipcfloor", required=True, help="path to the ipcfloor binary")
    ap.add_argument("--grid", default="6:200:80")
    args = ap.parse_args()

    first, last, count = args.grid.split(":")
    lengths = ref.default_grid(float(first), float(last), int(count))
    ref.warm_up()
    failures = []
    with tempfile.TemporaryDirectory(prefix="ipcfloor-parity-") as tmp:
        failures += check_generator(args.ipcfloor, tmp, 150_000, 42)
        failures += check_generator(args.ipcfloor, tmp, 5_000, 7)
        for name, bars, seed, mu, sigma, fmt in DATA_SETS:
            close = ref.gbm_series(bars=bars, seed=seed, mu=mu, sigma=sigma)
            cli = ["sweep", "--inproc", "--json", "--grid", args.grid]
            if fmt is not None:
                path = os.path.join(tmp, f"series_{seed}.{fmt}")
                write_series(path, close, fmt)
                cli += ["--data", path]
            ours = [json.loads(line) for line in run_ipcfloor(args.ipcfloor, cli).splitlines()]
            theirs = ref.sweep(close, lengths)
            if len(ours) != len(theirs):
                failures.append(f"{name}: {len(ours)} results for {len(theirs)} combos")
                continue
            max_dpnl = 0.0
            bad = 0
            for row, (length, params, pnl, trades) in zip(ours, theirs):
                dpnl = abs(row["pnl"] - pnl)
                max_dpnl = max(max_dpnl, dpnl)
                if row["L"] != length or row["params"] != list(params):
                    failures.append(f"{name}: L={row['L']} params {row['params']}, reference {length} {list(params)}")
                    bad += 1
                elif row["trades"] != trades or not dpnl <= PNL_TOLERANCE:
                    failures.append(f"{name}: L={length} trades {row['trades']} vs {trades}, "
                                    f"pnl {row['pnl']!r} vs {pnl!r}")
                    bad += 1
            total_trades = sum(t for *_, t in theirs)
            print(f"  {name}: {len(ours) - bad}/{len(ours)} combos match, {total_trades} trades, "
                  f"max |dpnl| {max_dpnl:.3g}")
            if fmt is None:
                l6 = next((r for r in ours if r["L"] == 6), None)
                if l6 is None or (l6["pnl"], l6["trades"]) != FINGERPRINT:
                    failures.append(f"fingerprint: L=6 gave {l6}, published {FINGERPRINT}")
                else:
                    print(f"  fingerprint L=6: pnl {l6['pnl']!r}, trades {l6['trades']}: matches")
    if failures:
        print("parity gate FAILED:")
        for f in failures:
            print("  " + f)
        return 1
    print("parity gate holds: 1 passed, 0 failed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
