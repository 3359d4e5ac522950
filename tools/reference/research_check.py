#!/usr/bin/env python3
"""The research loop around a sweep, checked against numpy and against itself:

- walk-forward: `ipcfloor walkforward` (in process and through an engine) equals a numpy
  walk-forward over the sma_cross reference and stats.py, fold by fold and stitched, bit for bit;
- bar ranges: `sweep --stats --from A --to B` equals the same bars loaded as a series of their
  own, every figure bit for bit, in process and through an engine;
- random search: the same seed gives the same combos (and numpy's Generator.integers gives them
  too); another seed gives others;
- results files: `--out` then `--replay` finds no difference; a file whose series checksum
  differs is refused, naming the series;
- Ctrl-C in the middle of a sweep with `--out` exits 130 and leaves a valid file, flushed, with
  as many rows as the message says;
- a random search of 10^6 combos with `--top 100 --out` holds O(100) rows: its peak RSS stays
  under a bound far below what 10^6 rows would take.

Usage: research_check.py --ipcfloor BIN --strategies DIR (the folder that holds sma_cross.so)."""

import argparse
import json
import math
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sma_cross  # noqa: E402
import stats  # noqa: E402
from series_files import Engine, gbm_series, json_rows, run, write_series  # noqa: E402

FAILURES = []


def fail(text):
    print(f"FAIL {text}", file=sys.stderr)
    FAILURES.append(text)


def from_json(value) -> float:
    if value is None:
        return math.nan
    return float(value)


def same_bits(a: float, b: float) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    return struct.pack("<d", a) == struct.pack("<d", b)


def figures_equal(label, got: dict, prefix: str, want: dict):
    for field in stats.FIELDS:
        key = prefix + field
        if key not in got:
            fail(f"{label}: no {key}")
        elif not same_bits(from_json(got[key]), float(want[field])):
            fail(f"{label}: {key} ipcfloor {got[key]!r}, numpy {want[field]!r}")


# ---- walk-forward -------------------------------------------------------------------------------

def better(a: float, b: float) -> bool:
    """a ranks before b for a figure where larger is better; NaN after every number."""
    if math.isnan(a):
        return False
    return math.isnan(b) or a > b


def numpy_walk_forward(close, combos, train, test, fee, bars_per_year, by="sharpe"):
    folds, pieces, moved = [], [], []
    offset = 0
    s = 0
    while s + train + test <= close.size:
        a, b, c = s, s + train, s + train + test
        best, best_stats = None, None
        for fast, slow in combos:  # the first of equals wins: only a strictly better one replaces it
            figures = stats.statistics(close[a:b], sma_cross.trade_list(close[a:b], fast, slow, fee), bars_per_year)
            if best is None or better(float(figures[by]), float(best_stats[by])):
                best, best_stats = (fast, slow), figures
        trades = sma_cross.trade_list(close[b:c], best[0], best[1], fee)
        folds.append((a, b, b, c, best, best_stats, stats.statistics(close[b:c], trades, bars_per_year)))
        pieces.append(close[b:c])
        moved += [t._replace(entry_bar=t.entry_bar + offset, exit_bar=t.exit_bar + offset) for t in trades]
        offset += c - b
        s += test
    stitched = np.concatenate(pieces)
    return folds, stats.statistics(stitched, moved, bars_per_year)


def check_walk_forward(args, where, argv, series, combos, train, test, fee, bars_per_year):
    done = run(argv + ["--strategy", args.sma_name if where == "engine" else args.sma, "--combos", args.combo_file,
                       "--train", str(train), "--test", str(test), "--by", "sharpe", "--json"])
    rows = json_rows(done)
    folds, stitched = numpy_walk_forward(series.close, combos, train, test, fee, bars_per_year)
    if len(rows) != len(folds) + 1:
        fail(f"walkforward {where}: {len(rows)} lines for {len(folds)} folds and the stitched one")
        return
    for k, (row, fold) in enumerate(zip(rows, folds)):
        a, b, c, d, best, is_stats, oos_stats = fold
        label = f"walkforward {where} fold {k}"
        if [row["train_from"], row["train_to"], row["test_from"], row["test_to"]] != [a, b, c, d]:
            fail(f"{label}: ranges {row}")
        if row["params"] != list(best):
            fail(f"{label}: params {row['params']}, numpy {list(best)}")
            continue
        figures_equal(label, row, "is_", is_stats)
        figures_equal(label, row, "oos_", oos_stats)
    if not rows[-1].get("stitched"):
        fail(f"walkforward {where}: the last line is not the stitched one: {rows[-1]}")
    else:
        figures_equal(f"walkforward {where} stitched", rows[-1], "oos_", stitched)
    print(f"research check: walkforward {where}: {len(folds)} folds of {len(combos)} combos match numpy")


# ---- ranges -------------------------------------------------------------------------------------

def range_parity(label, whole_argv, part_argv):
    whole = json_rows(run(whole_argv))
    part = json_rows(run(part_argv))
    if len(whole) != len(part) or not whole:
        fail(f"range {label}: {len(whole)} rows against {len(part)}")
        return
    for w, p in zip(whole, part):
        if w.get("error") or p.get("error"):
            fail(f"range {label}: an error row {w} {p}")
            continue
        for field in stats.FIELDS:
            if not same_bits(from_json(w[field]), from_json(p[field])):
                fail(f"range {label} {w['params']}: {field} on the range {w[field]!r}, as a series {p[field]!r}")
    print(f"research check: range {label}: {len(whole)} rows equal bit for bit")


# ---- random search ------------------------------------------------------------------------------

def numpy_draws(seed, ranges, trials, keep):
    rng = np.random.default_rng(seed)
    out = []
    while len(out) < trials:
        values = [int(rng.integers(lo, hi, endpoint=True)) for lo, hi in ranges]
        if keep(values):
            out.append(values)
    return out


def check_random_search(args, series):
    argv = [args.ipcfloor, "sweep", "--inproc", "--strategy", args.sma, "--data", series.path, "--search", "random",
            "--trials", "40", "--param", "fast=2:30", "--param", "slow=5:90", "--where", "fast < slow", "--json"]
    first = [r["params"] for r in json_rows(run(argv + ["--seed", "11"]))]
    again = [r["params"] for r in json_rows(run(argv + ["--seed", "11"]))]
    other = [r["params"] for r in json_rows(run(argv + ["--seed", "12"]))]
    want = numpy_draws(11, [(2, 30), (5, 90)], 40, lambda v: v[0] < v[1])
    if first != again:
        fail("random search: the same seed gave other combos")
    if first != want:
        fail(f"random search: seed 11 gave {first[:3]}..., numpy {want[:3]}...")
    if first == other:
        fail("random search: seeds 11 and 12 gave the same combos")
    print("research check: random search: seed 11 twice gives numpy's 40 combos; seed 12 others")


# ---- results files ------------------------------------------------------------------------------

def check_replay(args, work, series, other):
    base = [args.ipcfloor, "sweep", "--inproc", "--strategy", args.sma, "--combos", args.combo_file, "--stats"]
    for ext in ("csv", "jsonl", "npz"):
        path = os.path.join(work, f"results.{ext}")
        run(base + ["--data", series.path, "--quiet", "--out", path])
        again = run(base[:5] + ["--data", series.path, "--replay", path], check=False)
        if again.returncode != 0 or " 0 differ" not in again.stdout:
            fail(f"replay {ext}: exit {again.returncode}: {again.stdout} {again.stderr}")
    refused = run([args.ipcfloor, "sweep", "--inproc", "--strategy", args.sma, "--data", other.path, "--series",
                   other.name, "--replay", os.path.join(work, "results.jsonl")], check=False)
    if refused.returncode != 3 or "series" not in refused.stderr or "checksum" not in refused.stderr:
        fail(f"replay of another series: exit {refused.returncode}, {refused.stderr}")
    print("research check: --out csv/jsonl/npz replays with 0 differences; another series is refused")


def check_interrupt(args, work):
    path = os.path.join(work, "stopped.csv")
    argv = [args.ipcfloor, "sweep", "--inproc", "--bars", "150000", "--grid", "6:200:4000", "--threads", "1",
            "--csv", "--out", path]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if os.path.exists(path) and sum(1 for line in open(path) if line[:1].isdigit()) >= 20:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    text = open(path).read()
    rows = [line for line in text.splitlines() if line and not line.startswith("#")][1:]
    if process.returncode != 130:
        fail(f"Ctrl-C: exit {process.returncode}, not 130: {err}")
    if not text.endswith("\n") or any(len(r.split(",")) != len(rows[0].split(",")) for r in rows):
        fail("Ctrl-C: the file's last row is cut")
    if f"{len(rows)} written" not in err:
        fail(f"Ctrl-C: the file holds {len(rows)} rows, the message says: {err.strip()}")
    if len(rows) >= 4000:
        fail("Ctrl-C: the sweep was not stopped")
    print(f"research check: Ctrl-C stopped the sweep after {len(rows)} rows, written and flushed, exit 130")


# 10^6 rows kept would take well over 200 MB (a SweepRow is over 300 bytes with its strings);
# the process itself (the binary, the libraries, one chunk of combos) is about 10 MB.
RSS_BOUND_MB = 64


def check_top_memory(args, work):
    path = os.path.join(work, "top.csv")
    argv = [args.ipcfloor, "sweep", "--inproc", "--bars", "256", "--threads", "1", "--search", "random",
            "--trials", "1000000", "--seed", "3", "--param", "h=2:8", "--param", "L=4:20", "--param", "s=1:4",
            "--param", "p3=1:4", "--param", "p2=1:8", "--param", "p=2:16", "--stats", "--sort-by", "sharpe",
            "--top", "100", "--out", path, "--quiet", "--csv"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    started = time.monotonic()
    done = run(argv)
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    rows = [line for line in open(path).read().splitlines() if line and not line.startswith("#")][1:]
    if len(rows) != 100 or len([l for l in done.stdout.splitlines() if l[:1].isdigit()]) != 100:
        fail(f"--top 100 of 10^6: {len(rows)} rows in the file")
    if before / 1024.0 > RSS_BOUND_MB:
        print(f"research check: a child before this one peaked at {before / 1024.0:.0f} MB; the bound is unmeasurable")
    elif peak_mb > RSS_BOUND_MB:
        fail(f"--top 100 of 10^6 combos: peak RSS {peak_mb:.0f} MB, over {RSS_BOUND_MB} MB")
    print(f"research check: 10^6 random combos, --top 100 --out: peak RSS {peak_mb:.1f} MB "
          f"(bound {RSS_BOUND_MB} MB), {time.monotonic() - started:.1f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ipcfloor", required=True)
    ap.add_argument("--strategies", required=True)
    args = ap.parse_args()
    args.sma = os.path.join(args.strategies, "sma_cross.so")
    args.sma_name = "sma_cross"
    fee, bars_per_year = sma_cross.DEFAULT_FEE, stats.DEFAULT_BARS_PER_YEAR
    with tempfile.TemporaryDirectory(prefix="ipcfloor-research-") as work:
        check_top_memory(args, work)  # first: RUSAGE_CHILDREN keeps the largest child so far
        series = gbm_series(args.ipcfloor, work, 6000, 20261207)
        other = gbm_series(args.ipcfloor, work, 6000, 7)
        a, b = 1200, 4700
        part = write_series(f"{series.name}-part", work, *(x[a:b].copy() for x in
                            (series.close, series.open, series.high, series.low, series.volume)))
        combos = [(f, s) for f in (5, 10, 20) for s in (30, 60, 120) if f < s]
        args.combo_file = os.path.join(work, "combos.csv")
        with open(args.combo_file, "w") as f:
            f.write("fast,slow\n" + "".join(f"{x},{y}\n" for x, y in combos))
        inproc = [args.ipcfloor, "walkforward", "--inproc", "--data", series.path, "--quiet"]
        check_walk_forward(args, "inproc", inproc, series, combos, 2000, 700, fee, bars_per_year)
        sweep = [args.ipcfloor, "sweep", "--inproc", "--stats", "--json", "--quiet"]
        range_parity("hma inproc", sweep + ["--data", series.path, "--grid", "6:60:8", "--from", str(a), "--to", str(b)],
                     sweep + ["--data", part.path, "--grid", "6:60:8"])
        with Engine(args.ipcfloor, work, "research", [series, part], [args.sma]) as engine:
            through = [args.ipcfloor, "walkforward", "--name", engine.name, "--socket-dir", work, "--quiet"]
            check_walk_forward(args, "engine", through, series, combos, 2000, 700, fee, bars_per_year)
            on_engine = engine.sweep_argv(args.ipcfloor) + ["--strategy", "sma_cross", "--combos", args.combo_file,
                                                            "--stats", "--json", "--quiet"]
            range_parity("sma_cross engine", on_engine + ["--series", series.name, "--from", str(a), "--to", str(b)],
                         on_engine + ["--series", part.name])
        check_random_search(args, series)
        check_replay(args, work, series, other)
        check_interrupt(args, work)
    if FAILURES:
        print(f"research check: {len(FAILURES)} failures", file=sys.stderr)
        return 1
    print("research check: all good")
    return 0


if __name__ == "__main__":
    sys.exit(main())
