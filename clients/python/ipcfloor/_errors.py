"""The one error family of the package: ipcfloor.Error and one subclass per code of ipcfloor.h,
and the codes' public names (Status, status_name).

Every exception the package raises about a value or a call derives from Error and carries the C
ABI's code (`code`, an IPCFLOOR_E_* value) and a sentence (`message`): the library's own when it
refused the call, else one naming the argument and the value that were wrong (code E_INVALID).
The classes are shown, raised and pickled as ipcfloor.<Name> (their __module__ is "ipcfloor").
"""

from __future__ import annotations

import enum
from typing import Any, overload

import numpy as np
import numpy.typing as npt

from . import _ipcfloor

__all__ = [
    "Error", "InvalidArgument", "NoEngine", "Busy", "PermissionDenied", "VersionMismatch", "BadSegment",
    "EngineGone", "EngineHung", "Timeout", "Corrupt", "WindowOutOfRange", "Rejected", "SystemFailure",
    "ResourceFailure", "InternalError", "Closed", "NotLive", "CapacityFull", "BadPrice", "NotTheWriter", "NoRoom",
    "NoSuchSeries", "Forked", "Interrupted", "NoSuchStrategy", "NoLiveStep", "SignalsFull", "NoTradeReport",
    "MissingColumn", "BadRange", "EngineRestarted", "JournalFull", "JournalFailed", "Status", "status_name",
    "error_for", "invalid",
]


class Status(enum.IntEnum):
    """The codes of ipcfloor.h by name: SweepResult.status holds them (0, or the code that refused
    each combo), and so does every Error's `code`. A combo refused by the engine carries the name
    docs/PROTOCOL.md gives its status (window_out_of_range, no_such_series, ...; too_costly and
    engine_error arrive as REJECTED); the others name the C ABI's IPCFLOOR_E_* code."""

    OK = _ipcfloor.OK
    INVALID = _ipcfloor.E_INVALID
    NO_ENGINE = _ipcfloor.E_NO_ENGINE
    BUSY = _ipcfloor.E_BUSY
    PERMISSION = _ipcfloor.E_PERMISSION
    VERSION = _ipcfloor.E_VERSION
    BAD_SEGMENT = _ipcfloor.E_BAD_SEGMENT
    ENGINE_GONE = _ipcfloor.E_ENGINE_GONE
    ENGINE_HUNG = _ipcfloor.E_ENGINE_HUNG
    TIMEOUT = _ipcfloor.E_TIMEOUT
    CORRUPT = _ipcfloor.E_CORRUPT
    WINDOW_OUT_OF_RANGE = _ipcfloor.E_WINDOW
    REJECTED = _ipcfloor.E_REJECTED
    IO = _ipcfloor.E_IO
    RESOURCE = _ipcfloor.E_RESOURCE
    INTERNAL = _ipcfloor.E_INTERNAL
    NOT_LIVE = _ipcfloor.E_NOT_LIVE
    CAPACITY_FULL = _ipcfloor.E_CAPACITY_FULL
    BAD_PRICE = _ipcfloor.E_BAD_PRICE
    NOT_THE_WRITER = _ipcfloor.E_NOT_WRITER
    NO_ROOM = _ipcfloor.E_NO_ROOM
    NO_SUCH_SERIES = _ipcfloor.E_NO_SUCH_SERIES
    FORKED = _ipcfloor.E_FORKED
    INTERRUPTED = _ipcfloor.E_INTERRUPTED
    NO_SUCH_STRATEGY = _ipcfloor.E_NO_SUCH_STRATEGY
    NO_LIVE_STEP = _ipcfloor.E_NO_LIVE_STEP
    SIGNALS_FULL = _ipcfloor.E_SIGNALS_FULL
    NO_TRADE_REPORT = _ipcfloor.E_NO_TRADE_REPORT
    MISSING_COLUMN = _ipcfloor.E_MISSING_COLUMN
    BAD_RANGE = _ipcfloor.E_BAD_RANGE
    ENGINE_RESTARTED = _ipcfloor.E_ENGINE_RESTARTED
    JOURNAL_FULL = _ipcfloor.E_JOURNAL_FULL
    JOURNAL_FAILED = _ipcfloor.E_JOURNAL_FAILED


_NAMES = {int(status): status.name.lower() for status in Status}


@overload
def status_name(code: int | np.integer[Any]) -> str: ...
@overload
def status_name(code: npt.NDArray[np.integer[Any]]) -> npt.NDArray[np.str_]: ...
def status_name(code: int | np.integer[Any] | npt.NDArray[np.integer[Any]]) -> str | npt.NDArray[np.str_]:
    """The name of a status code, lower case ("ok", "window_out_of_range", ...; Status names
    them), or "unknown" for a code this package does not know. An integer array (a sweep's
    status) gives an array of names of the same shape."""
    if isinstance(code, np.ndarray):
        if code.dtype.kind not in "iu":
            raise invalid(f"status_name: code is a {code.dtype} array: give an integer code or an integer array "
                          f"(SweepResult.status)")
        return np.array([_NAMES.get(int(c), "unknown") for c in code.ravel().tolist()], dtype=np.str_).reshape(
            code.shape)
    if isinstance(code, bool) or not isinstance(code, (int, np.integer)):
        raise invalid(f"status_name: code is {code!r}: give an integer code (Status, an Error's code) or an integer "
                      f"array (SweepResult.status)")
    return _NAMES.get(int(code), "unknown")


class Error(Exception):
    """An ipcfloor call failed. `code` is the IPCFLOOR_E_* value, `message` the sentence."""

    code: int
    message: str

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        # Pickled (multiprocessing, concurrent.futures) as the class with its code and sentence.
        return type(self), (self.code, self.message)


class InvalidArgument(Error, ValueError):
    """A caller's value is unusable (a window, a length, a name, a wait mode, an array's shape);
    the message names the argument and the value."""


class NoEngine(Error):
    """Nothing serves that name: no segment, or its engine is dead or stopping."""


class Busy(Error):
    """Every lane is held by a live client, or the segment is still being built."""


class PermissionDenied(Error):
    """The segment is not this uid's, or not mode 0600."""


class VersionMismatch(Error):
    """The segment was built by an engine of another layout version."""


class BadSegment(Error):
    """The object is not an ipcfloor segment, or it is corrupt."""


class EngineGone(Error):
    """The engine died or is stopping: close this Engine and attach again later."""


class EngineHung(Error):
    """The engine lives but stopped beating (e.g. SIGSTOP)."""


class Timeout(Error):
    """No answer within the timeout while the engine looked alive."""


class Corrupt(Error):
    """The lane's rings hold impossible positions: close this Engine."""


class WindowOutOfRange(Error, ValueError):
    """The engine refused the combo: a window outside [1, bars]."""


class Rejected(Error):
    """The engine refused the request for another reason."""


class SystemFailure(Error):
    """The operating system refused a mapping or file operation."""


class ResourceFailure(Error):
    """Out of memory or another host resource."""


class InternalError(Error):
    """The library failed in a way its contract does not name."""


class Closed(Error):
    """The Engine was closed (code E_INVALID)."""


class NotLive(Error):
    """A live call (append, subscribe, snapshot, signals) on an engine started without --live."""


class CapacityFull(Error):
    """append: the series already holds its --capacity bars; nothing was overwritten."""


class BadPrice(Error, ValueError):
    """append: the close is not a finite number > 0."""


class NotTheWriter(Error):
    """append: another client is the series' writer (the first to append, until it detaches)."""


class NoRoom(Error):
    """subscribe: this lane holds as many combos as the engine allows (serve --subscriptions)."""


class NoSuchSeries(Error, IndexError):
    """A series index the engine does not hold (its table has len(series_names) entries)."""


class Forked(Error):
    """The Engine was attached by the parent of this process (fork()): a child may not use its
    parent's lane. Attach again in the child; the parent's Engine goes on working."""


class Interrupted(Error):
    """A call stopped by the library's interrupt check without a Python exception to show for it
    (Ctrl-C raises KeyboardInterrupt instead). The Engine stays usable."""


class NoSuchStrategy(Error, KeyError):
    """A strategy the engine does not serve (Engine.strategies() lists those it does; an
    operator loads one with `ipcfloor serve --strategy FILE.so`)."""


class NoLiveStep(Error):
    """subscribe: the strategy has no per-bar step, so it cannot stream signals."""


class SignalsFull(Error):
    """snapshot: the lane's signal ring has no room for one signal per subscription; read the
    signals waiting there first."""


class NoTradeReport(Error):
    """Statistics or a trade list asked of a strategy built against version 1 of the strategy ABI:
    it reports no trades (its backtests still work)."""


class MissingColumn(Error):
    """The strategy needs a column (open, high, low, volume) the series does not have; the
    sentence names it."""


class BadRange(Error, ValueError):
    """A bar range outside the series, or of fewer than 2 bars; the sentence gives the series'
    bars."""


class EngineRestarted(Error):
    """attach(reconnect=True): the engine went away while this call was in flight, and the Engine
    re-attached to the one that came back (its subscriptions renewed, a snapshot asked for). The
    call was not answered and is not retried: an append may or may not have been journaled
    (Engine.bars says). The Engine stays usable."""


class JournalFull(Error):
    """append: the engine's journal (serve --journal) had no room on its disk for the bar, so the
    bar was not added; the append succeeds again once the disk has room."""


class JournalFailed(Error):
    """append: the engine's journal could not write the bar's record, so the bar was not added
    (`ipcfloor status` says why)."""


_BY_CODE: dict[int, type[Error]] = {
    _ipcfloor.E_INVALID: InvalidArgument,
    _ipcfloor.E_NO_ENGINE: NoEngine,
    _ipcfloor.E_BUSY: Busy,
    _ipcfloor.E_PERMISSION: PermissionDenied,
    _ipcfloor.E_VERSION: VersionMismatch,
    _ipcfloor.E_BAD_SEGMENT: BadSegment,
    _ipcfloor.E_ENGINE_GONE: EngineGone,
    _ipcfloor.E_ENGINE_HUNG: EngineHung,
    _ipcfloor.E_TIMEOUT: Timeout,
    _ipcfloor.E_CORRUPT: Corrupt,
    _ipcfloor.E_WINDOW: WindowOutOfRange,
    _ipcfloor.E_REJECTED: Rejected,
    _ipcfloor.E_IO: SystemFailure,
    _ipcfloor.E_RESOURCE: ResourceFailure,
    _ipcfloor.E_INTERNAL: InternalError,
    _ipcfloor.E_NOT_LIVE: NotLive,
    _ipcfloor.E_CAPACITY_FULL: CapacityFull,
    _ipcfloor.E_BAD_PRICE: BadPrice,
    _ipcfloor.E_NOT_WRITER: NotTheWriter,
    _ipcfloor.E_NO_ROOM: NoRoom,
    _ipcfloor.E_NO_SUCH_SERIES: NoSuchSeries,
    _ipcfloor.E_FORKED: Forked,
    _ipcfloor.E_INTERRUPTED: Interrupted,
    _ipcfloor.E_NO_SUCH_STRATEGY: NoSuchStrategy,
    _ipcfloor.E_NO_LIVE_STEP: NoLiveStep,
    _ipcfloor.E_SIGNALS_FULL: SignalsFull,
    _ipcfloor.E_NO_TRADE_REPORT: NoTradeReport,
    _ipcfloor.E_MISSING_COLUMN: MissingColumn,
    _ipcfloor.E_BAD_RANGE: BadRange,
    _ipcfloor.E_ENGINE_RESTARTED: EngineRestarted,
    _ipcfloor.E_JOURNAL_FULL: JournalFull,
    _ipcfloor.E_JOURNAL_FAILED: JournalFailed,
}

for _class in (Status, Error, Closed, *_BY_CODE.values()):
    _class.__module__ = "ipcfloor"

# The extension raises these same classes from C.
_ipcfloor._configure(Error, _BY_CODE, Closed)


def error_for(code: int, message: str) -> Error:
    """The exception for a code of ipcfloor.h and its sentence."""
    return _BY_CODE.get(code, Error)(code, message)


def invalid(message: str) -> InvalidArgument:
    """InvalidArgument (code E_INVALID) with `message`."""
    return InvalidArgument(_ipcfloor.E_INVALID, message)
