"""ipcfloor: Python over a running engine's shared-memory segment.

    import ipcfloor
    with ipcfloor.attach("ipcfloor", timeout=5.0, wait="backoff") as engine:
        close = engine.series                        # the engine's closes: numpy, zero-copy, read-only
        pnl, trades = engine.backtest([3, 6, 2, 1, 2, 3])   # h, L, s, p3, p2, p
        pnl, trades = engine.backtest(6)             # a length L: its six windows (combo_from_length)
        result = engine.sweep(ipcfloor.grid(range(6, 201)))  # (n, 6) -> pnl, trades, status arrays

backtest and subscribe take the same three forms: six windows, a length L, or an (n, 6) array
(then arrays of answers, or a list of ids). Windows are Python ints or integer numpy arrays:
a float, a bool or a value past int64 raises InvalidArgument naming the argument and the value.

Several series (an engine started with `ipcfloor serve --data ES.f64 --data NQ.csv`): backtest
and sweep take series=, an index (0, the default, is the main series) or a name:

    engine.series_names                                  # ["ES", "NQ"]: the files' names
    nq = engine.series_at("NQ")                          # numpy, zero-copy, read-only
    pnl, trades = engine.backtest([3, 6, 2, 1, 2, 3], series="NQ")

Live mode (an engine started with `ipcfloor serve --live --capacity N`): one Engine appends
closes, others subscribe combos and read one Signal per subscribed combo per new bar:

    writer.append(101.25, tick=time.monotonic_ns())      # -> bars in the series now
    sub = reader.subscribe(6)                            # a length, six windows or (n, 6) -> id(s)
    signal = reader.poll_signal()                        # a Signal, or None: never waits
    signal = reader.wait_signal()                        # waits up to the timeout (Timeout)
    bars = reader.published_series                       # numpy, zero-copy: the bars so far

The per-call methods are a compiled extension over the C ABI (libipcfloor.so, shipped inside
the package); every call that waits on the engine lets other Python threads run meanwhile.
The socket client is ipcfloor.socket.

Errors: every exception derives from ipcfloor.Error and carries the C ABI's code and sentence
(`code`, `message`): NoEngine, Busy, EngineGone, Timeout, InvalidArgument, ... one class per code
of ipcfloor.h.

Naming: what is read from the segment without asking the engine is an attribute (series,
published_series, series_names, signals_dropped, bars, fee, ...); what takes an argument or asks
the engine is a method.

Threads: an Engine is one lane of the engine; use it from one thread at a time (a second thread
is refused while a call is in flight: attach one Engine per thread to run requests in parallel).
"""

from __future__ import annotations

from . import _ipcfloor
from ._engine import Engine, SweepResult, attach
from ._errors import (BadPrice, BadSegment, Busy, CapacityFull, Closed, Corrupt, EngineGone, EngineHung, Error,
                      InternalError, InvalidArgument, NoEngine, NoRoom, NoSuchSeries, NotLive, NotTheWriter,
                      PermissionDenied, Rejected, ResourceFailure, SystemFailure, Timeout, VersionMismatch,
                      WindowOutOfRange)
from ._input import combo_from_length, grid
from ._ipcfloor import Signal

__all__ = [
    "attach", "Engine", "SweepResult", "Signal", "combo_from_length", "grid", "version",
    "Error", "InvalidArgument", "NoEngine", "Busy", "PermissionDenied", "VersionMismatch", "BadSegment",
    "EngineGone", "EngineHung", "Timeout", "Corrupt", "WindowOutOfRange", "Rejected", "SystemFailure",
    "ResourceFailure", "InternalError", "Closed", "NotLive", "CapacityFull", "BadPrice", "NotTheWriter", "NoRoom",
    "NoSuchSeries",
]


def version() -> str:
    """The C library's version, "MAJOR.MINOR.PATCH" (the package's own, as it was built with it)."""
    return _ipcfloor.version()
