"""ipcfloor: Python over a running engine's shared-memory segment.

    import ipcfloor
    with ipcfloor.attach("ipcfloor", timeout=5.0, wait="backoff") as engine:
        close = engine.series                        # the engine's closes: numpy, zero-copy, read-only
        pnl, trades = engine.backtest([3, 6, 2, 1, 2, 3])   # h, L, s, p3, p2, p
        result = engine.sweep(grid)                  # (n, 6) int64 -> pnl, trades, status arrays

Several series (an engine started with `ipcfloor serve --data ES.f64 --data NQ.csv`): backtest
and sweep take series=, an index (0, the default, is the main series) or a name:

    engine.series_names                                  # ["ES", "NQ"]: the files' names
    nq = engine.series_at("NQ")                          # numpy, zero-copy, read-only
    pnl, trades = engine.backtest([3, 6, 2, 1, 2, 3], series="NQ")
    result = engine.sweep(grid, series=1)

Live mode (an engine started with `ipcfloor serve --live --capacity N`): one Engine appends
closes, others subscribe combos and read one Signal per subscribed combo per new bar:

    writer.append(101.25, tick=time.monotonic_ns())      # -> bars in the series now
    sub = reader.subscribe(6)                            # a length, or six windows -> its id
    signal = reader.poll_signal()                        # a Signal, or None: never waits
    signal = reader.wait_signal()                        # waits up to the timeout (Timeout)

Pure Python on ctypes over the C ABI (libipcfloor.so, found as ipcfloor._native describes). The
socket client is ipcfloor.socket and needs no library.

Errors raise ipcfloor.Error (code, message): NoEngine, Busy, EngineGone, Timeout, ... one class
per code of ipcfloor.h, and the message names the engine, its pid and the lane.

Threads: an Engine is one lane of the engine; use it from one thread at a time (attach one per
thread to run requests in parallel). Its series and metadata may be read from any thread.
"""

import collections
import ctypes
import numbers

import numpy as np

from . import _native
from ._native import LibraryNotFound
from .socket import combo_from_length

__all__ = [
    "attach", "Engine", "SweepResult", "Signal", "combo_from_length", "grid", "version", "LibraryNotFound",
    "Error", "InvalidArgument", "NoEngine", "Busy", "PermissionDenied", "VersionMismatch", "BadSegment",
    "EngineGone", "EngineHung", "Timeout", "Corrupt", "WindowOutOfRange", "Rejected", "SystemFailure",
    "ResourceFailure", "InternalError", "Closed", "NotLive", "CapacityFull", "BadPrice", "NotTheWriter", "NoRoom",
    "NoSuchSeries",
]


class Error(Exception):
    """An ipcfloor call failed. `code` is the IPCFLOOR_E_* value, `message` the library's sentence."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


class InvalidArgument(Error, ValueError):
    """A caller's value is unusable (a name, a wait mode, a timeout, an array's shape)."""


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
    """The Engine was closed."""


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


_ERRORS = {
    _native.E_INVALID: InvalidArgument,
    _native.E_NO_ENGINE: NoEngine,
    _native.E_BUSY: Busy,
    _native.E_PERMISSION: PermissionDenied,
    _native.E_VERSION: VersionMismatch,
    _native.E_BAD_SEGMENT: BadSegment,
    _native.E_ENGINE_GONE: EngineGone,
    _native.E_ENGINE_HUNG: EngineHung,
    _native.E_TIMEOUT: Timeout,
    _native.E_CORRUPT: Corrupt,
    _native.E_WINDOW: WindowOutOfRange,
    _native.E_REJECTED: Rejected,
    _native.E_IO: SystemFailure,
    _native.E_RESOURCE: ResourceFailure,
    _native.E_INTERNAL: InternalError,
    _native.E_NOT_LIVE: NotLive,
    _native.E_CAPACITY_FULL: CapacityFull,
    _native.E_BAD_PRICE: BadPrice,
    _native.E_NOT_WRITER: NotTheWriter,
    _native.E_NO_ROOM: NoRoom,
    _native.E_NO_SUCH_SERIES: NoSuchSeries,
}


def _error(code, message):
    return _ERRORS.get(code, Error)(code, message)


# ipcfloor_sweep's answer: three arrays of n, in the order of the combos. status[i] is 0 or the
# code that refused combo i (pnl NaN, trades 0 then); refused counts them.
SweepResult = collections.namedtuple("SweepResult", "pnl trades status refused")


class Signal(collections.namedtuple("Signal", "bar subscription hma hma3 pnl trades tick dropped cross position flags")):
    """One subscribed combo's state after one bar, as the batch kernel has it after that bar.

    bar: 0-based index in the whole series; subscription: the id subscribe gave; hma, hma3: the
    two averages (NaN until their windows fill); pnl (percentage points, net of fees) and trades
    up to this bar; tick: the append's tick (0 in a snapshot); dropped: signals of this lane lost
    just before this one; cross: +1 HMA3 crossed above HMA here, -1 below, 0 neither; position
    after this bar: +1 long, -1 short, 0 flat; flags: gap and snapshot bits."""

    __slots__ = ()

    @property
    def gap(self):
        """Signals of this lane were dropped before this one: ask for a snapshot."""
        return bool(self.flags & _native.SIGNAL_GAP)

    @property
    def snapshot(self):
        """A state asked for (snapshot, subscribe), not a new bar."""
        return bool(self.flags & _native.SIGNAL_SNAPSHOT)


_U64_END = 1 << 64
_U32_END = 1 << 32


def _signal_of(s):
    return Signal(s.bar, s.subscription, s.hma, s.hma3, s.pnl, s.trades, s.tick, s.dropped, s.cross, s.position,
                  s.flags)


def version():
    """The C library's version, "MAJOR.MINOR.PATCH"."""
    return _native.library().ipcfloor_version_string().decode()


def grid(lengths):
    """An (n, 6) int64 array of combos for user-facing lengths, as the engine's CLI builds them."""
    return np.array([combo_from_length(int(length)) for length in lengths], dtype=np.int64).reshape(-1, 6)


class _Handle:
    """Owns the C client: detaches when the last reference goes. The Engine holds one and so
    does every series view, so a view never outlives the mapping it shows."""

    __slots__ = ("pointer", "_detach")

    def __init__(self, pointer, detach):
        self.pointer = pointer
        self._detach = detach

    def __del__(self):
        if self.pointer:
            self._detach(self.pointer)
            self.pointer = None


class Engine:
    """One lane of an attached engine (see attach)."""

    def __init__(self, lib, pointer):
        self._lib = lib
        self._handle = _Handle(pointer, lib.ipcfloor_detach)
        self._ptr = ctypes.c_void_p(pointer)
        self._closed = False
        self._series = None
        # Reused on every backtest and echo: the per-call path builds no ctypes objects.
        self._params = (ctypes.c_int64 * 6)()
        self._echoed = (ctypes.c_int64 * 6)()
        self._pnl = ctypes.c_double()
        self._trades = ctypes.c_int64()
        self._pnl_ref = ctypes.byref(self._pnl)
        self._trades_ref = ctypes.byref(self._trades)
        # The per-request calls, without argtypes (see _native.untyped): every argument below is
        # a ctypes object built here, the series index too.
        self._backtest = _native.untyped(lib, "ipcfloor_backtest")
        self._backtest_on = _native.untyped(lib, "ipcfloor_backtest_on")
        self._echo = _native.untyped(lib, "ipcfloor_echo")
        self._series_arg = ctypes.c_uint32()
        # Live mode, the same way: one signal buffer and one counter, reused.
        self._signal = _native.SignalStruct()
        self._signal_ref = ctypes.byref(self._signal)
        self._bars_now = ctypes.c_uint64()
        self._bars_now_ref = ctypes.byref(self._bars_now)
        self._subscription = ctypes.c_uint32()
        self._append = lib.ipcfloor_append
        self._poll_signal = _native.untyped(lib, "ipcfloor_poll_signal")
        self.live = bool(lib.ipcfloor_is_live(self._ptr))
        self.capacity = int(lib.ipcfloor_capacity(self._ptr))
        self.bars = int(lib.ipcfloor_series(self._ptr, None))
        self.fee = float(lib.ipcfloor_fee(self._ptr))
        self.name = lib.ipcfloor_series_name(self._ptr).decode("utf-8", errors="replace")
        self.checksum = int(lib.ipcfloor_series_checksum(self._ptr))
        self.engine = lib.ipcfloor_engine_name(self._ptr).decode()
        self.pid = int(lib.ipcfloor_engine_pid(self._ptr))
        self.lane = int(lib.ipcfloor_lane(self._ptr))
        self.ring_capacity = int(lib.ipcfloor_ring_capacity(self._ptr))
        self.wait = _native.WAIT_NAMES.get(lib.ipcfloor_wait_mode(self._ptr), "engine")
        # The series table, fixed at attach: one name per series, index 0 the main one.
        self._series_names = tuple(lib.ipcfloor_series_key(self._ptr, i).decode("utf-8", errors="replace")
                                   for i in range(lib.ipcfloor_series_count(self._ptr)))
        self._series_views = {}

    def __repr__(self):
        state = "closed" if self._closed else f"lane {self.lane}, {self.wait}"
        return f"<ipcfloor.Engine {self.engine} (pid {self.pid}, {state}): {self.name}, {self.bars} bars, fee {self.fee}>"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Gives the lane back. A series view still alive keeps the mapping (and the lane) until
        it goes; the Engine itself refuses every request from now on."""
        if self._closed:
            return
        self._closed = True
        self._ptr = ctypes.c_void_p(None)
        self._series = None
        self._series_views = {}
        self._handle = None

    @property
    def closed(self):
        return self._closed

    def _view(self, first, n):
        """n doubles from `first` as a read-only numpy array that keeps the mapping alive."""
        memory = (ctypes.c_double * n).from_address(ctypes.addressof(first.contents)) if n else (ctypes.c_double * 0)()
        memory._ipcfloor_handle = self._handle  # the view keeps the mapping alive
        return np.frombuffer(memoryview(memory).toreadonly(), dtype=np.float64)

    @property
    def series(self):
        """The engine's preloaded closes as a read-only float64 numpy array, without a copy."""
        self._check_open()
        if self._series is None:
            first = ctypes.POINTER(ctypes.c_double)()
            n = self._lib.ipcfloor_series(self._ptr, ctypes.byref(first))
            self._series = self._view(first, n)
        return self._series

    @property
    def series_names(self):
        """The names of the engine's series, in index order (index 0 is the main series): a
        --data file's name without its extension, or "default" for a generated series."""
        return list(self._series_names)

    def series_at(self, series):
        """Series `series` of the engine's table, an index or a name from series_names, as a
        read-only float64 numpy array of its preloaded closes, without a copy (series_at(0) holds
        what `series` holds). Raises NoSuchSeries for an index past the table, InvalidArgument for
        a name the engine does not hold."""
        self._check_open()
        index = self._series_index(series)
        if index >= len(self._series_names):
            raise NoSuchSeries(_native.E_NO_SUCH_SERIES, self._no_such_series(index))
        view = self._series_views.get(index)
        if view is None:
            first = ctypes.POINTER(ctypes.c_double)()
            n = self._lib.ipcfloor_series_at(self._ptr, index, ctypes.byref(first))
            view = self._series_views[index] = self._view(first, n)
        return view

    def backtest(self, params, series=0):
        """One combo (six windows h, L, s, p3, p2, p): returns (pnl, trades). series: the index
        (0, the main series) or the name of the series to run on; its bars bound the windows.
        Raises WindowOutOfRange or Rejected when the engine refuses it, NoSuchSeries for an index
        the engine does not hold, InvalidArgument for an unknown name, EngineGone, Timeout, ...
        when the lane fails."""
        p = self._params
        p[:] = params  # six ints, or ValueError / TypeError
        if type(series) is int and series == 0:
            code = self._backtest(self._ptr, p, self._pnl_ref, self._trades_ref)
        else:
            self._series_arg.value = self._series_index(series)
            code = self._backtest_on(self._ptr, self._series_arg, p, self._pnl_ref, self._trades_ref)
        if code:
            self._raise(code)
        return self._pnl.value, self._trades.value

    def sweep(self, params, series=0):
        """Every combo of an (n, 6) int64 array, pipelined through the ring in one C call, on
        series `series` (an index, 0 the main series, or a name).
        Returns SweepResult(pnl float64[n], trades int64[n], status int32[n], refused). A refused
        combo does not stop the others; a failing lane raises, and so does a series the engine
        does not hold (NoSuchSeries, or InvalidArgument for an unknown name)."""
        self._check_open()
        index = self._series_index(series)
        combos = np.ascontiguousarray(params, dtype=np.int64)
        if combos.ndim != 2 or combos.shape[1] != 6:
            raise InvalidArgument(_native.E_INVALID,
                                  f"sweep takes an (n, 6) array of int64 windows [h, L, s, p3, p2, p]; got shape "
                                  f"{np.shape(params)}")
        n = combos.shape[0]
        pnl = np.empty(n, dtype=np.float64)
        trades = np.empty(n, dtype=np.int64)
        status = np.empty(n, dtype=np.intc)
        # n == 0 still asks the library: an empty sweep on a series it does not hold is refused.
        refused = self._lib.ipcfloor_sweep_on(self._ptr, index, combos.ctypes.data, n, pnl.ctypes.data,
                                              trades.ctypes.data, status.ctypes.data)
        if refused < 0:
            self._raise(refused)
        return SweepResult(pnl, trades, status, refused)

    def echo(self, params):
        """Six int64 values to the engine and back untouched (the transport alone)."""
        p = self._params
        p[:] = params
        code = self._echo(self._ptr, p, self._echoed)
        if code:
            self._raise(code)
        return tuple(self._echoed)

    # ---- Live mode (serve --live) ---------------------------------------------------------

    def published_series(self):
        """The bars published so far (the preloaded ones, then the appended ones) as a read-only
        float64 numpy view, without a copy. Its length is the count when called: every bar it
        covers is complete; call again for newer ones."""
        self._check_open()
        first = ctypes.POINTER(ctypes.c_double)()
        n = self._lib.ipcfloor_published_series(self._ptr, ctypes.byref(first))
        return self._view(first, n)

    @property
    def signals_dropped(self):
        """Signals this lane lost to a full signal ring since the engine started."""
        self._check_open()
        return int(self._lib.ipcfloor_signals_dropped(self._ptr))

    def append(self, close, tick=0):
        """Appends one close to the series (the first Engine to append becomes its one writer);
        tick, a non-negative int from any clock the subscribers share, comes back in this bar's
        signals. Returns the bars in the series now. Raises CapacityFull, BadPrice, NotTheWriter,
        NotLive, or EngineGone, Timeout, ... when the lane fails."""
        try:
            if not 0 <= tick < _U64_END:  # ctypes would wrap it silently
                raise ValueError(tick)
            code = self._append(self._ptr, close, tick, self._bars_now_ref)
        except (ctypes.ArgumentError, TypeError, ValueError):
            raise InvalidArgument(_native.E_INVALID, f"append takes a float close and an int tick in [0, 2**64); "
                                                     f"got {close!r}, {tick!r}") from None
        if code:
            self._raise(code)
        return self._bars_now.value

    def subscribe(self, params, with_state=False):
        """Subscribes a combo on this lane until the Engine closes: a length L (the engine's own
        windows for it) or six windows h, L, s, p3, p2, p, each in [1, capacity]. Every new bar then
        brings one Signal for it. Returns its id, or (id, state) with with_state: the Signal after
        the bars so far (snapshot flag; hma and hma3 NaN, the answer does not carry them).
        Raises WindowOutOfRange, NoRoom, Rejected (too costly to replay), NotLive, ..."""
        if isinstance(params, numbers.Integral) and not isinstance(params, bool):
            if params < 1:
                raise InvalidArgument(_native.E_INVALID, f"subscribe: length {params} is not a whole number >= 1")
            params = combo_from_length(int(params))
        p = self._params
        try:
            p[0], p[1], p[2], p[3], p[4], p[5] = params
        except (TypeError, ValueError):
            raise InvalidArgument(_native.E_INVALID, f"subscribe takes a length or six int windows [h, L, s, p3, p2, "
                                                     f"p]; got {params!r}") from None
        code = self._lib.ipcfloor_subscribe(self._ptr, p, ctypes.byref(self._subscription),
                                            self._signal_ref if with_state else None)
        if code:
            self._raise(code)
        if with_state:
            return self._subscription.value, _signal_of(self._signal)
        return self._subscription.value

    def snapshot(self):
        """Asks for one Signal per subscription of this Engine with its state now (snapshot flag):
        how a subscriber that saw a gap re-synchronises. Returns the number of subscriptions."""
        code = self._lib.ipcfloor_snapshot(self._ptr)
        if code < 0:
            self._raise(code)
        return code

    def poll_signal(self):
        """The next Signal, or None when none is waiting. Never waits, so it does not notice an
        engine that died (nothing more comes): wait_signal does."""
        code = self._poll_signal(self._ptr, self._signal_ref)
        if code == 0:
            return _signal_of(self._signal)
        if code == _native.NO_SIGNAL:
            return None
        self._raise(code)

    def wait_signal(self):
        """The next Signal, waiting up to the timeout given to attach. Raises Timeout when none
        came (the engine alive), EngineGone, EngineHung, NotLive, ..."""
        code = self._lib.ipcfloor_wait_signal(self._ptr, self._signal_ref)
        if code:
            self._raise(code)
        return _signal_of(self._signal)

    @property
    def last_error(self):
        """The sentence behind this Engine's last failure ("" when none)."""
        if self._closed:
            return ""
        return self._lib.ipcfloor_last_error(self._ptr).decode("utf-8", errors="replace")

    def _series_index(self, series):
        """The index `series` names: an int as it is (the library judges it against the table),
        a str looked up in series_names."""
        if isinstance(series, str):
            try:
                return self._series_names.index(series)
            except ValueError:
                raise InvalidArgument(_native.E_INVALID, f"engine {self.engine} holds no series named {series!r}; it "
                                                         f"holds: {', '.join(self._series_names)}") from None
        if isinstance(series, numbers.Integral) and not isinstance(series, bool):
            index = int(series)
            if 0 <= index < _U32_END:  # ctypes would wrap it silently
                return index
            raise NoSuchSeries(_native.E_NO_SUCH_SERIES, self._no_such_series(index))
        raise InvalidArgument(_native.E_INVALID, f"series is an index (int) or a name (str) of engine {self.engine}'s "
                                                 f"series {list(self._series_names)}; got {series!r}")

    def _no_such_series(self, index):
        count = len(self._series_names)
        return (f"engine {self.engine} (pid {self.pid}) holds no series {index} (lane {self.lane}): it holds {count} "
                f"series, indices 0 to {count - 1} ({', '.join(self._series_names)})")

    def _check_open(self):
        if self._closed:
            raise Closed(_native.E_INVALID, f"engine {self.engine}: this Engine was closed")

    def _raise(self, code):
        self._check_open()
        raise _error(code, self.last_error or self._lib.ipcfloor_strerror(code).decode())


def attach(name, timeout=5.0, wait=None):
    """Attaches to engine NAME (`ipcfloor serve --name NAME`) and claims a lane.

    timeout: seconds, the bound on any one wait (a lane being freed, an answer).
    wait: "spin", "backoff", "block", or None for the engine's own mode.
    Raises NoEngine, Busy, InvalidArgument, ... (ipcfloor.Error) or LibraryNotFound."""
    if not isinstance(name, str):
        raise InvalidArgument(_native.E_INVALID, f"the engine name must be a str, got {type(name).__name__}")
    if wait not in _native.WAIT_MODES:
        raise InvalidArgument(_native.E_INVALID, f"wait must be 'spin', 'backoff', 'block' or None (the engine's "
                                                 f"mode); got {wait!r}")
    try:
        timeout_ns = int(float(timeout) * 1e9)
    except (TypeError, ValueError):
        timeout_ns = 0
    if not timeout_ns > 0:
        raise InvalidArgument(_native.E_INVALID, f"timeout must be a positive number of seconds; got {timeout!r}")
    lib = _native.library()
    options = _native.Options()
    lib.ipcfloor_options_init(ctypes.byref(options))
    options.wait = _native.WAIT_MODES[wait]
    options.timeout_ns = timeout_ns
    err = ctypes.c_int(0)
    pointer = lib.ipcfloor_attach_with(name.encode(), ctypes.byref(options), ctypes.byref(err))
    if not pointer:
        raise _error(err.value, lib.ipcfloor_last_error(None).decode("utf-8", errors="replace"))
    return Engine(lib, pointer)
