#!/usr/bin/env python3
"""The parity gate (docs/SPEC.md §1): the C++ kernel against the independent numba reference.

Both sides compute on the same bytes: each data set is written to a file once, the reference
reads that file, and `ipcfloor sweep --inproc --json` reads it too (the default data set: the
bytes `ipcfloor gen` writes, which the embedded default is). For every combo of the grid the
gate requires trades equal and pnl bit-identical: the kernel sums in the reference's order, so
any difference, even 1e-15, means an operation changed order and is a failure.

Every instruction-set path the CPU supports is gated (`--isa all`, the default), or one
(`--isa avx2`), run under IPCFLOOR_ISA. A path this CPU lacks exits 77 (ctest: skipped).
`--workdir DIR --prepare-only` computes the reference once into DIR; later runs with the same
--workdir reuse it, so ctest gates each path without re-running numba.

Separately, `ipcfloor gen` must reproduce numpy's series within 1e-14 relative: numpy's exp
differs between CPUs, so that claim is about the generator, not the kernel.
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
ISAS = ("avx512", "avx2", "scalar")
SKIPPED = 77

# (name, bars, seed, mu, sigma, file format or None for the embedded default)
DATA_SETS = [
    ("default (embedded, seed 42, 150000 bars)", 150_000, 42, 0.05, 0.30, None),
    ("seed 7, 60000 bars, mu 0.1, sigma 0.5, .npy", 60_000, 7, 0.10, 0.50, "npy"),
    ("seed 2024, 20000 bars, sigma 0.2, .csv", 20_000, 2024, 0.05, 0.20, "csv"),
    ("seed 99, 1000 bars, .f64", 1_000, 99, 0.05, 0.30, "f64"),
]


def run_ipcfloor(binary, args, isa=None):
    env = dict(os.environ)
    env.pop("IPCFLOOR_ISA", None)
    if isa is not None:
        env["IPCFLOOR_ISA"] = isa
    proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=600, env=env)
    if proc.returncode != 0:
        where = f"IPCFLOOR_ISA={isa} " if isa else ""
        sys.exit(f"parity: `{where}ipcfloor {' '.join(args)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def supported_isas(binary):
    """The paths this CPU runs: ipcfloor refuses (exit 3) an IPCFLOOR_ISA the CPU lacks."""
    found = []
    for isa in ISAS:
        env = dict(os.environ, IPCFLOOR_ISA=isa)
        proc = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60, env=env)
        if proc.returncode == 0:
            found.append(isa)
    return found


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


def prepare(binary, workdir, grid):
    """Writes every data set to a file in workdir and the reference's results to reference.json."""
    first, last, count = grid.split(":")
    lengths = ref.default_grid(float(first), float(last), int(count))
    ref.warm_up()
    failures = []
    failures += check_generator(binary, workdir, 150_000, 42)
    failures += check_generator(binary, workdir, 5_000, 7)
    sets = []
    for name, bars, seed, mu, sigma, fmt in DATA_SETS:
        if fmt is None:
            # The embedded default: the bytes ipcfloor computes on, whatever numpy gives here.
            path = os.path.join(workdir, "series_default.f64")
            run_ipcfloor(binary, ["gen", "--bars", str(bars), "--seed", str(seed), "-o", path])
            close = np.fromfile(path, dtype="<f8")
        else:
            path = os.path.join(workdir, f"series_{seed}.{fmt}")
            write_series(path, ref.gbm_series(bars=bars, seed=seed, mu=mu, sigma=sigma), fmt)
            close = np.fromfile(path, dtype="<f8") if fmt == "f64" else None
            if fmt == "npy":
                close = np.load(path)
            elif fmt == "csv":
                close = np.loadtxt(path, delimiter=",", skiprows=1, usecols=1, dtype=np.float64)
        results = [[length, list(params), pnl, trades] for length, params, pnl, trades in ref.sweep(close, lengths)]
        sets.append({"name": name, "path": path, "embedded": fmt is None, "results": results})
    with open(os.path.join(workdir, "reference.json"), "w") as f:
        json.dump({"grid": grid, "sets": sets, "generator_failures": failures}, f)
    return failures


def check_path(binary, isa, reference):
    """Every data set through `ipcfloor sweep --inproc` on one path, against the reference."""
    failures = []
    for data in reference["sets"]:
        name = data["name"]
        cli = ["sweep", "--inproc", "--json", "--grid", reference["grid"]]
        if not data["embedded"]:
            cli += ["--data", data["path"]]
        ours = [json.loads(line) for line in run_ipcfloor(binary, cli, isa).splitlines()]
        theirs = data["results"]
        if len(ours) != len(theirs):
            failures.append(f"{isa}: {name}: {len(ours)} results for {len(theirs)} combos")
            continue
        max_dpnl = 0.0
        bad = 0
        for row, (length, params, pnl, trades) in zip(ours, theirs):
            dpnl = abs(row["pnl"] - pnl)
            max_dpnl = max(max_dpnl, dpnl)
            if row["L"] != length or row["params"] != list(params):
                failures.append(f"{isa}: {name}: L={row['L']} params {row['params']}, reference {length} {params}")
                bad += 1
            elif row["trades"] != trades or row["pnl"] != pnl:
                failures.append(f"{isa}: {name}: L={length} trades {row['trades']} vs {trades}, "
                                f"pnl {row['pnl']!r} vs {pnl!r} (differs by {dpnl:.3g})")
                bad += 1
        total_trades = sum(t for *_, t in theirs)
        print(f"  {isa}: {name}: {len(ours) - bad}/{len(ours)} combos bit-identical, {total_trades} trades, "
              f"max |dpnl| {max_dpnl:.3g}")
        if data["embedded"]:
            l6 = next((r for r in ours if r["L"] == 6), None)
            if l6 is None or (l6["pnl"], l6["trades"]) != FINGERPRINT:
                failures.append(f"{isa}: fingerprint: L=6 gave {l6}, published {FINGERPRINT}")
            else:
                print(f"  {isa}: fingerprint L=6: pnl {l6['pnl']!r}, trades {l6['trades']}: matches")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ipcfloor", required=True, help="path to the ipcfloor binary")
    ap.add_argument("--grid", default="6:200:80")
    ap.add_argument("--isa", default="all", help="all (every path this CPU runs), or one of " + ", ".join(ISAS))
    ap.add_argument("--workdir", help="keep the data files and the reference's results here (reused when present)")
    ap.add_argument("--prepare-only", action="store_true", help="compute the reference into --workdir and stop")
    args = ap.parse_args()

    supported = supported_isas(args.ipcfloor)
    if args.isa == "all":
        isas = supported
    elif args.isa not in ISAS:
        sys.exit(f"parity: --isa {args.isa!r} is not one of all, {', '.join(ISAS)}")
    elif args.isa not in supported:
        print(f"parity: skipped: this CPU cannot run the {args.isa} path (it runs: {', '.join(supported)})")
        return SKIPPED
    else:
        isas = [args.isa]

    with tempfile.TemporaryDirectory(prefix="ipcfloor-parity-") as tmp:
        workdir = args.workdir or tmp
        os.makedirs(workdir, exist_ok=True)
        cached = os.path.join(workdir, "reference.json")
        failures = []
        if args.prepare_only or not os.path.exists(cached):
            failures += prepare(args.ipcfloor, workdir, args.grid)
        with open(cached) as f:
            reference = json.load(f)
        if reference["grid"] != args.grid:
            sys.exit(f"parity: {cached} holds grid {reference['grid']}, not {args.grid}: run with --prepare-only")
        failures += reference["generator_failures"] if not args.prepare_only else []
        if args.prepare_only:
            print(f"parity: reference for {len(reference['sets'])} data sets written to {cached}")
            return 1 if failures else 0
        for isa in isas:
            failures += check_path(args.ipcfloor, isa, reference)
    if failures:
        print("parity gate FAILED:")
        for f in failures:
            print("  " + f)
        return 1
    print(f"parity gate holds on {', '.join(isas)}: every combo bit-identical to the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
