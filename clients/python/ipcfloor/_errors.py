"""The one error family of the package: ipcfloor.Error and one subclass per code of ipcfloor.h.

Every exception the package raises about a value or a call derives from Error and carries the C
ABI's code (`code`, an IPCFLOOR_E_* value) and a sentence (`message`): the library's own when it
refused the call, else one naming the argument and the value that were wrong (code E_INVALID).
"""

from __future__ import annotations

from . import _ipcfloor

__all__ = [
    "Error", "InvalidArgument", "NoEngine", "Busy", "PermissionDenied", "VersionMismatch", "BadSegment",
    "EngineGone", "EngineHung", "Timeout", "Corrupt", "WindowOutOfRange", "Rejected", "SystemFailure",
    "ResourceFailure", "InternalError", "Closed", "NotLive", "CapacityFull", "BadPrice", "NotTheWriter", "NoRoom",
    "NoSuchSeries", "error_for", "invalid",
]


class Error(Exception):
    """An ipcfloor call failed. `code` is the IPCFLOOR_E_* value, `message` the sentence."""

    code: int
    message: str

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


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
}

# The extension raises these same classes from C.
_ipcfloor._configure(Error, _BY_CODE, Closed)


def error_for(code: int, message: str) -> Error:
    """The exception for a code of ipcfloor.h and its sentence."""
    return _BY_CODE.get(code, Error)(code, message)


def invalid(message: str) -> InvalidArgument:
    """InvalidArgument (code E_INVALID) with `message`."""
    return InvalidArgument(_ipcfloor.E_INVALID, message)
