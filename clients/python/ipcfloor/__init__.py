"""ipcfloor: Python over a running engine's shared-memory segment.

    import ipcfloor
    with ipcfloor.attach("ipcfloor", timeout=5.0, wait="backoff") as engine:
        close = engine.series                        # the engine's closes: numpy, zero-copy, read-only
        pnl, trades = engine.backtest([3, 6, 2, 1, 2, 3])   # h, L, s, p3, p2, p
        pnl, trades = engine.backtest(6)             # a length L: its six windows (combo_from_length)
        result = engine.sweep([6, 8, 11])            # lengths -> pnl, trades, status arrays
        result = engine.sweep(ipcfloor.grid(6, 200, 80))     # `sweep --grid 6:200:80`: an (n, 6) array

backtest and subscribe take the same three forms: six windows, a length L, or an (n, 6) array
(then arrays of answers, or a list of ids); sweep takes lengths or an (n, 6) array. Windows and
lengths are whole numbers: ints, or floats whose value is whole (np.round(np.linspace(6, 200, 80))
is taken as is); nothing is truncated, and 3.5, a bool or a value past int64 raises
InvalidArgument naming the argument, the position and the value. ipcfloor.grid(lengths) and
ipcfloor.grid(first, last, count) (round(linspace), half to even, as `--grid FIRST:LAST:COUNT`)
build (n, 6) arrays.

Several series (an engine started with `ipcfloor serve --data ES.f64 --data NQ.csv`): backtest
and sweep take series=, an index (0, the default, is the main series) or a name:

    engine.series_names                                  # ["ES", "NQ"]: the files' names
    nq = engine.series_at("NQ")                          # numpy, zero-copy, read-only
    pnl, trades = engine.backtest([3, 6, 2, 1, 2, 3], series="NQ")
    by_name = engine.sweep([6, 8, 11], series="all")    # {"ES": SweepResult, "NQ": SweepResult}

Statistics, bar ranges and trade lists (docs/STATISTICS.md defines every figure):

    table = engine.sweep(grid, stats=True)              # {"h": ..., "L": ..., "pnl": ..., "sharpe": ...}
    frame = pandas.DataFrame(table)                      # one row per combo, as it is
    part = engine.sweep(grid, stats=True, bars=slice(1000, 5000), fee=0.05, bars_per_year=252)
    one = engine.stats([10, 40, 0, 0, 0, 0], strategy="sma_cross")     # a dict of the figures
    full = engine.trades([10, 40, 0, 0, 0, 0], strategy="sma_cross")   # TradeList(trades, equity, stats)
    result = engine.sweep(grid, progress=True)           # a tqdm bar where tqdm is installed
    study = ipcfloor.search.optuna(engine, "sma_cross", {"fast": (2, 50), "slow": (10, 400)},
                                   n_trials=500, metric="sharpe")      # Optuna, a generation per sweep

Live mode (an engine started with `ipcfloor serve --live --capacity N`): one Engine appends
closes, others subscribe combos and read one Signal per subscribed combo per new bar:

    writer.append(101.25, tick=time.monotonic_ns())      # -> bars in the series now
    sub = reader.subscribe(6)                            # a length, six windows or (n, 6) -> id(s)
    signal = reader.poll_signal()                        # a Signal, or None: never waits
    signal = reader.wait_signal()                        # waits up to the timeout (Timeout)
    bars = reader.published_series                       # numpy, zero-copy: the bars so far

An Engine attached with reconnect=True outlives a restart of its engine (a crash, a deploy): the
call in flight raises EngineRestarted (never retried), the Engine re-attaches by itself and
renews its subscriptions, and the first Signal of each one afterwards has restart True and
`missed`, the bars it did not see as they happened:

    reader = ipcfloor.attach("ipcfloor", reconnect=True, reconnect_limit=30.0)

The per-call methods are a compiled extension over the C ABI (libipcfloor.so, shipped inside
the package); every call that waits on the engine lets other Python threads run meanwhile, and
sees Ctrl-C within a few tens of ms (KeyboardInterrupt; the Engine stays usable). Timeouts are
seconds from TIMEOUT_MIN (1 ms) to TIMEOUT_MAX (one day). The socket client is ipcfloor.socket.

Errors: every exception derives from ipcfloor.Error and carries the C ABI's code and sentence
(`code`, `message`): NoEngine, Busy, EngineGone, Timeout, InvalidArgument, ... one class per code
of ipcfloor.h. ipcfloor.Status names the codes (SweepResult.status holds them) and
ipcfloor.status_name(code) gives a code's, or an array's, names.

Fork: an Engine belongs to the process that attached it. In a child made by fork() its calls
raise Forked (attach again in the child); the parent's Engine goes on working.

Naming: what is read from the segment without asking the engine is an attribute (series,
published_series, series_names, signals_dropped, bars, fee, ...); what takes an argument or asks
the engine is a method.

Threads: an Engine is one lane of the engine; use it from one thread at a time (a second thread
is refused while a call is in flight: attach one Engine per thread to run requests in parallel).
"""

from __future__ import annotations

import ctypes
import os


def _load_carried() -> None:
    """Loads the shared libraries the package carries for libipcfloor.so.0 (setup.py lists them in
    _carried.txt, a dependency before its users) from the package itself, so the extension finds
    them here whatever the host has."""
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        with open(os.path.join(here, "_carried.txt")) as listing:
            names = listing.read().split()
    except FileNotFoundError:
        return
    for name in names:
        ctypes.CDLL(os.path.join(here, name))


_load_carried()

from . import _ipcfloor  # noqa: E402 - after the libraries it needs
from ._engine import STATS_FIGURES, TRADE_DTYPE, Engine, StrategyInfo, SweepResult, TradeList, attach
from ._errors import (BadPrice, BadRange, BadSegment, Busy, CapacityFull, Closed, Corrupt, EngineGone, EngineHung,
                      EngineRestarted, Error, Forked, InternalError, Interrupted, InvalidArgument, JournalFailed,
                      JournalFull, MissingColumn, NoEngine, NoLiveStep, NoRoom, NoSuchSeries, NoSuchStrategy,
                      NoTradeReport, NotLive, SignalsFull, NotTheWriter, PermissionDenied, Rejected, ResourceFailure,
                      Status, SystemFailure, Timeout,
                      VersionMismatch, WindowOutOfRange, status_name)
from ._input import TIMEOUT_MAX, TIMEOUT_MIN, Grid, combo_from_length, grid
from ._ipcfloor import Signal
from . import search  # noqa: E402 - ipcfloor.search.optuna; Optuna itself is imported when a search runs

__all__ = [
    "attach", "Engine", "SweepResult", "StrategyInfo", "TradeList", "STATS_FIGURES", "TRADE_DTYPE", "Signal", "combo_from_length", "grid", "Grid", "version", "__version__", "Status",
    "status_name", "TIMEOUT_MIN", "TIMEOUT_MAX",
    "Error", "InvalidArgument", "NoEngine", "Busy", "PermissionDenied", "VersionMismatch", "BadSegment",
    "EngineGone", "EngineHung", "Timeout", "Corrupt", "WindowOutOfRange", "Rejected", "SystemFailure",
    "ResourceFailure", "InternalError", "Closed", "NotLive", "CapacityFull", "BadPrice", "NotTheWriter", "NoRoom",
    "NoSuchSeries", "Forked", "Interrupted", "NoSuchStrategy", "NoLiveStep", "SignalsFull", "NoTradeReport",
    "MissingColumn", "BadRange", "EngineRestarted", "JournalFull", "JournalFailed",
]

# The package's version is the C library's it was built with ("MAJOR.MINOR.PATCH").
__version__: str = _ipcfloor.version()


def version() -> str:
    """The C library's version, "MAJOR.MINOR.PATCH" (the package's own, as it was built with it)."""
    return _ipcfloor.version()
