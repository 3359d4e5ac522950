#!/usr/bin/env python3
"""What the parity scripts share: series written as vendor-shaped OHLCV CSV files that ipcfloor
reads (`sweep --data`, `serve --data`) and the reference reads back as the same doubles, the
ipcfloor command run as a subprocess, and an engine started for the length of a `with`."""

import datetime
import json
import os
import signal
import subprocess
from typing import NamedTuple

import numpy as np


class Series(NamedTuple):
    name: str  # the file's name without .csv: the name `sweep --series` picks it by
    path: str
    close: np.ndarray
    open: np.ndarray
    high: np.ndarray
    low: np.ndarray
    volume: np.ndarray

    @property
    def n(self) -> int:
        return self.close.size


def run(argv, check=True):
    """The command's CompletedProcess (text); with check, a nonzero exit stops the script."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if check and done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done


def json_rows(done):
    """The JSON rows a `sweep --json` printed."""
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


class ColumnSkips:
    """Until ipcfloor's series keep the columns besides close, a strategy that requires one is
    refused (missing_column). That refusal is right, and its strategy skipped where it came (in
    process or through an engine), only when it names a column the strategy requires; any other
    is reported as a mismatch."""

    def __init__(self, tool):
        self.tool = tool
        self.skipped = {}  # (strategy, place) -> the refusal

    def refused(self, strategy, required, done, place, mismatch) -> bool:
        """Whether `done` (a sweep of `strategy`) was refused for a missing column."""
        lines = [line.strip() for line in (done.stderr + done.stdout).splitlines() if "missing_column" in line]
        if not lines:
            return False
        why = lines[0]
        if why.startswith("{"):  # a JSON row's error
            why = json.loads(why).get("error", why)
        # Every series here is an OHLCV file, which the engine and the readers keep whole: a refusal
        # for a missing column is a failure, whichever column it names.
        mismatch(f"{strategy} ({place}) refused for a missing column the OHLCV series has: {why}")
        return True

    def summary(self) -> str:
        return "".join(f"; {strategy} skipped {place}" for strategy, place in sorted(self.skipped))


def write_series(name, work, close, open_, high, low, volume) -> Series:
    """work/NAME.csv with the columns Date,Open,High,Low,Close,Volume, one row per bar."""
    path = os.path.join(work, f"{name}.csv")
    day = datetime.date(2000, 1, 3)
    with open(path, "w") as f:
        f.write("Date,Open,High,Low,Close,Volume\n")
        for i in range(close.size):
            date = (day + datetime.timedelta(days=i)).isoformat()
            # repr: the shortest text that reads back as the same double.
            f.write(f"{date},{float(open_[i])!r},{float(high[i])!r},{float(low[i])!r},{float(close[i])!r},"
                    f"{float(volume[i])!r}\n")
    return Series(name, path, *(np.asarray(a, dtype=np.float64) for a in (close, open_, high, low, volume)))


def ohlcv_series(name, close, work, seed) -> Series:
    """The closes with drawn bars around them: open the previous close, high and low up to 0.4%
    beyond the body, volume 100..9999 with about 2% of the bars at zero."""
    rng = np.random.default_rng(seed)
    n = close.size
    open_ = np.concatenate(([close[0]], close[:-1]))
    high = np.maximum(open_, close) * (1.0 + rng.uniform(0.0, 0.004, n))
    low = np.minimum(open_, close) * (1.0 - rng.uniform(0.0, 0.004, n))
    volume = rng.integers(100, 10_000, n).astype(np.float64)
    volume[rng.random(n) < 0.02] = 0.0
    return write_series(name, work, close, open_, high, low, volume)


def gbm_series(ipcfloor, work, bars, seed) -> Series:
    """`ipcfloor gen --bars BARS --seed SEED` (docs/SPEC.md's GBM), with bars drawn around it."""
    raw = os.path.join(work, f"gbm-{bars}-{seed}.f64")
    run([ipcfloor, "gen", "--bars", str(bars), "--seed", str(seed), "-o", raw])
    return ohlcv_series(f"gbm-{bars}-{seed}", np.fromfile(raw, dtype="<f8"), work, seed)


def flat_series(name, work, close) -> Series:
    """Open, high and low equal to the close, volume 1..999."""
    volume = np.random.default_rng(close.size).integers(1, 1000, close.size).astype(np.float64)
    return write_series(f"{name}-{close.size}", work, close, close.copy(), close.copy(), close.copy(), volume)


def cut(series: Series, bars: int, work) -> Series:
    """The first `bars` bars of a series."""
    columns = (series.close, series.open, series.high, series.low, series.volume)
    return write_series(f"{series.name}-first-{bars}", work, *(a[:bars].copy() for a in columns))


class Engine:
    """`ipcfloor serve` of `series` and the strategy files, named uniquely, for a `with` block:
    the workers and the serving thread wait with backoff, so a test does not hold the cores."""

    def __init__(self, ipcfloor, work, tag, series, strategy_files, extra=()):
        self.name = f"{tag}-{os.getpid()}"
        self.socket_dir = work
        self.argv = [ipcfloor, "serve", "--name", self.name, "--wait", "backoff", "--workers", "1", "--socket-dir",
                     work, "--hugepages", "off", "--quiet", *extra]
        for s in series:
            self.argv += ["--data", s.path]
        for path in strategy_files:
            self.argv += ["--strategy", path]
        self.process = None

    def __enter__(self):
        self.process = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = self.process.stdout.readline()
        if not ready.startswith("ready"):
            self.process.kill()
            raise SystemExit(f"{' '.join(self.argv)} did not start: {ready}{self.process.stderr.read()}")
        return self

    def __exit__(self, *exc):
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        return False

    def sweep_argv(self, ipcfloor):
        return [ipcfloor, "sweep", "--name", self.name, "--socket-dir", self.socket_dir, "--wait", "backoff"]
