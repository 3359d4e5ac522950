"""The ctypes binding of libipcfloor.so (include/ipcfloor/ipcfloor.h), loaded on first use.

Where the library is looked for, first found wins:
  1. the IPCFLOOR_LIBRARY environment variable (a path to libipcfloor.so.N);
  2. next to this package as the installation laid it out (_layout.py, written by CMake: an
     install prefix, or a build tree, which mirrors it);
  3. the dynamic loader's own search (ldconfig, LD_LIBRARY_PATH), by its SONAME.
"""

import ctypes
import os
import threading

# The C ABI this package speaks; a library of another major version is refused.
ABI_MAJOR = 0
SONAME = f"libipcfloor.so.{ABI_MAJOR}"

OK = 0
E_INVALID = -1
E_NO_ENGINE = -2
E_BUSY = -3
E_PERMISSION = -4
E_VERSION = -5
E_BAD_SEGMENT = -6
E_ENGINE_GONE = -7
E_ENGINE_HUNG = -8
E_TIMEOUT = -9
E_CORRUPT = -10
E_WINDOW = -11
E_REJECTED = -12
E_IO = -13
E_RESOURCE = -14
E_INTERNAL = -15
E_NOT_LIVE = -16
E_CAPACITY_FULL = -17
E_BAD_PRICE = -18
E_NOT_WRITER = -19
E_NO_ROOM = -20
E_NO_SUCH_SERIES = -21
NO_SIGNAL = 1  # ipcfloor_poll_signal: nothing waiting (not an error)

SIGNAL_GAP = 1
SIGNAL_SNAPSHOT = 2

WAIT_MODES = {None: 0, "engine": 0, "spin": 1, "backoff": 2, "block": 3}
WAIT_NAMES = {1: "spin", 2: "backoff", 3: "block"}


class Options(ctypes.Structure):
    _fields_ = [("size", ctypes.c_uint32), ("wait", ctypes.c_int32), ("timeout_ns", ctypes.c_int64)]


class SignalStruct(ctypes.Structure):
    """ipcfloor_signal: one subscribed combo's state after one bar (64 bytes)."""
    _fields_ = [("bar", ctypes.c_uint64), ("subscription", ctypes.c_uint32), ("dropped", ctypes.c_uint32),
                ("hma", ctypes.c_double), ("hma3", ctypes.c_double), ("pnl", ctypes.c_double),
                ("trades", ctypes.c_int64), ("tick", ctypes.c_uint64), ("cross", ctypes.c_int8),
                ("position", ctypes.c_int8), ("flags", ctypes.c_uint16)]


assert ctypes.sizeof(SignalStruct) == 64, "ipcfloor_signal is 64 bytes (ipcfloor.h)"

_c_p = ctypes.c_void_p
_i64 = ctypes.c_int64
_i64_p = ctypes.POINTER(ctypes.c_int64)
_f64_p = ctypes.POINTER(ctypes.c_double)
_int_p = ctypes.POINTER(ctypes.c_int)

_SIGNATURES = {
    "ipcfloor_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "ipcfloor_version": (ctypes.c_uint32, []),
    "ipcfloor_version_string": (ctypes.c_char_p, []),
    "ipcfloor_options_init": (None, [ctypes.POINTER(Options)]),
    "ipcfloor_attach_with": (_c_p, [ctypes.c_char_p, ctypes.POINTER(Options), _int_p]),
    "ipcfloor_detach": (None, [_c_p]),
    "ipcfloor_series": (ctypes.c_size_t, [_c_p, ctypes.POINTER(_f64_p)]),
    "ipcfloor_fee": (ctypes.c_double, [_c_p]),
    "ipcfloor_series_name": (ctypes.c_char_p, [_c_p]),
    "ipcfloor_series_checksum": (ctypes.c_uint64, [_c_p]),
    "ipcfloor_engine_name": (ctypes.c_char_p, [_c_p]),
    "ipcfloor_engine_pid": (ctypes.c_int32, [_c_p]),
    "ipcfloor_lane": (ctypes.c_uint32, [_c_p]),
    "ipcfloor_ring_capacity": (ctypes.c_uint32, [_c_p]),
    "ipcfloor_wait_mode": (ctypes.c_int32, [_c_p]),
    "ipcfloor_backtest": (ctypes.c_int, [_c_p, _i64_p, _f64_p, _i64_p]),
    # Arrays travel as raw addresses (numpy's .ctypes.data): no per-call conversion objects.
    "ipcfloor_sweep": (ctypes.c_int, [_c_p, _c_p, ctypes.c_size_t, _c_p, _c_p, _c_p]),
    "ipcfloor_echo": (ctypes.c_int, [_c_p, _i64_p, _i64_p]),
    "ipcfloor_is_live": (ctypes.c_int, [_c_p]),
    "ipcfloor_capacity": (ctypes.c_uint64, [_c_p]),
    "ipcfloor_published_series": (ctypes.c_size_t, [_c_p, ctypes.POINTER(_f64_p)]),
    "ipcfloor_signals_dropped": (ctypes.c_uint64, [_c_p]),
    "ipcfloor_series_count": (ctypes.c_uint32, [_c_p]),
    "ipcfloor_series_key": (ctypes.c_char_p, [_c_p, ctypes.c_uint32]),
    "ipcfloor_series_at": (ctypes.c_size_t, [_c_p, ctypes.c_uint32, ctypes.POINTER(_f64_p)]),
    "ipcfloor_backtest_on": (ctypes.c_int, [_c_p, ctypes.c_uint32, _i64_p, _f64_p, _i64_p]),
    "ipcfloor_sweep_on": (ctypes.c_int, [_c_p, ctypes.c_uint32, _c_p, ctypes.c_size_t, _c_p, _c_p, _c_p]),
    "ipcfloor_append": (ctypes.c_int, [_c_p, ctypes.c_double, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64)]),
    "ipcfloor_subscribe": (ctypes.c_int, [_c_p, _i64_p, ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(SignalStruct)]),
    "ipcfloor_snapshot": (ctypes.c_int, [_c_p]),
    "ipcfloor_poll_signal": (ctypes.c_int, [_c_p, ctypes.POINTER(SignalStruct)]),
    "ipcfloor_wait_signal": (ctypes.c_int, [_c_p, ctypes.POINTER(SignalStruct)]),
    "ipcfloor_combo_from_length": (ctypes.c_int, [_i64, _i64_p]),
    "ipcfloor_last_error": (ctypes.c_char_p, [_c_p]),
}

_lib = None
_lock = threading.Lock()


class LibraryNotFound(ImportError):
    """libipcfloor.so could not be loaded (the message lists every place looked at)."""


def _candidates():
    explicit = os.environ.get("IPCFLOOR_LIBRARY")
    if explicit:
        yield explicit, "IPCFLOOR_LIBRARY"
        return
    try:
        from . import _layout  # written by CMake at build and install time
    except ImportError:
        _layout = None
    if _layout is not None:
        here = os.path.dirname(os.path.abspath(__file__))
        yield os.path.normpath(os.path.join(here, _layout.LIBRARY)), "next to the package"
    yield SONAME, "the dynamic loader's search path"


def untyped(lib, name):
    """A second handle on function `name` of `lib` with no argtypes, returning a C int. Converting
    through argtypes costs ctypes a Python-level check per argument on every call, more than the
    round trip to the engine (`ipcfloor bench python`, docs/RESULTS.md); a handle without them
    passes ctypes objects (c_void_p, ctypes arrays, byref) as the pointers they hold. Only for
    per-request calls whose every argument the package builds itself as such an object: a plain
    Python int would go as a 32-bit C int, so none is ever passed to one."""
    function = lib[name]  # indexing makes a new function object; the declared one keeps its argtypes
    function.restype = ctypes.c_int
    function.argtypes = None
    return function


def library():
    """The loaded library, with every signature declared. Raises LibraryNotFound."""
    global _lib
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        tried = []
        for path, where in _candidates():
            try:
                lib = ctypes.CDLL(path)
            except OSError as error:
                tried.append(f"{path} ({where}): {error}")
                continue
            major = lib.ipcfloor_version() // 10000
            if major != ABI_MAJOR:
                tried.append(f"{path} ({where}): C ABI major version {major}, this package speaks {ABI_MAJOR}")
                continue
            for name, (restype, argtypes) in _SIGNATURES.items():
                function = getattr(lib, name)
                function.restype = restype
                function.argtypes = argtypes
            _lib = lib
            return lib
        raise LibraryNotFound(
            "ipcfloor: cannot load the C library " + SONAME + "; looked at:\n  " + "\n  ".join(tried) +
            "\ninstall ipcfloor (cmake --install BUILD --prefix PREFIX) and import this package from "
            "PREFIX/share/ipcfloor/python, or set IPCFLOOR_LIBRARY to the library's path")
