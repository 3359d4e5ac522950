"""Engine: one lane of an attached engine. The per-call methods (backtest, echo, subscribe,
append, poll_signal, wait_signal, snapshot) are the extension's (ipcfloor._ipcfloor.Client);
this class adds the views, the sweeps' arrays and the slow paths the extension hands any value
that is not in its canonical form.

Naming rule: what is read from the segment without asking the engine is an attribute (series,
published_series, series_names, signals_dropped, bars, fee, ...); what takes an argument or asks
the engine is a method (series_at, backtest, sweep, echo, append, subscribe, snapshot,
poll_signal, wait_signal, close).
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Any, Literal, NamedTuple, Tuple, Union, cast, overload

import numpy as np
import numpy.typing as npt

from . import _input, _ipcfloor
from ._errors import NoSuchSeries, NoSuchStrategy, error_for, invalid

__all__ = ["Engine", "SweepResult", "attach"]

WaitMode = Literal["spin", "backoff", "block", "engine"]
_WAIT_MODES = {None: _ipcfloor.WAIT_ENGINE, "engine": _ipcfloor.WAIT_ENGINE, "spin": _ipcfloor.WAIT_SPIN,
               "backoff": _ipcfloor.WAIT_BACKOFF, "block": _ipcfloor.WAIT_BLOCK}
_U32_END = 1 << 32


class StrategyInfo(NamedTuple):
    """A strategy an engine serves (Engine.strategies()): its name, its number (the index a
    request names it by), its parameters' names and whether it streams signals in live mode."""

    name: str
    number: int
    params: tuple[str, ...]
    live: bool


class SweepResult(NamedTuple):
    """ipcfloor_sweep's answer, in the order of the combos: status[i] is 0 or the code that
    refused combo i (pnl NaN, trades 0 then); refused counts them."""

    pnl: npt.NDArray[np.float64]
    trades: npt.NDArray[np.int64]
    status: npt.NDArray[np.intc]
    refused: int


# sweep's out=: a SweepResult or its three arrays.
Outputs = Union[SweepResult, Tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.intc]]]


def _read_only(buffer: _ipcfloor.SeriesBuffer) -> npt.NDArray[np.float64]:
    """A numpy view of a series buffer: zero-copy, read-only, holding the buffer (and so the
    mapping) alive. (The buffer has the buffer protocol, which numpy's stubs cannot name.)"""
    return np.frombuffer(cast(memoryview, buffer), dtype=np.float64)


class Engine(_ipcfloor.Client):
    """One lane of an attached engine (see attach). Use it from one thread at a time: a call
    from a second thread while one is in flight is refused (InvalidArgument); attach one Engine
    per thread to run requests in parallel. Its series and metadata may be read from any thread."""

    __slots__ = ("_views",)
    _views: dict[int, npt.NDArray[np.float64]]

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"lane {self.lane}, {self.wait}"
        return (f"<ipcfloor.Engine {self.engine} (pid {self.pid}, {state}): {self.name}, {self.bars} bars, "
                f"fee {self.fee}>")

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Gives the lane back. A series view still alive keeps the mapping (and the lane) until
        it goes; the Engine itself refuses every request from now on (Closed)."""
        self._views = {}
        super().close()

    # ---- The series (read in place) ---------------------------------------------------------

    @property
    def series(self) -> npt.NDArray[np.float64]:
        """The engine's main series (index 0) as a backtest on it runs on it now, a read-only
        float64 numpy array over the mapping, without a copy: on a live engine every bar published
        so far (the same as published_series; read it again for newer ones), else the preloaded
        closes."""
        return self.series_at(0)

    @property
    def series_names(self) -> list[str]:
        """The names of the engine's series, in index order (index 0 is the main series): a
        --data file's name without its extension, or "default" for a generated series."""
        return list(self._series_names)

    def series_at(self, series: _input.SeriesKey) -> npt.NDArray[np.float64]:
        """Series `series` of the engine's table, an index or a name from series_names, as a
        read-only float64 numpy array, without a copy, of the bars a backtest on it runs on now:
        its preloaded closes, or, for a live engine's main series (index 0), every bar published so
        far. Raises NoSuchSeries for an index past the table, InvalidArgument for a name the engine
        does not hold."""
        index = self._series_index("series_at", series)
        if index == 0 and self.live:
            return self.published_series  # it grows: a new view each time, never a cached one
        view = self._views.get(index)
        if view is None:
            buffer = self._series_buffer(index)
            if buffer is None:
                raise NoSuchSeries(_ipcfloor.E_NO_SUCH_SERIES, self._no_such_series(index))
            view = self._views[index] = _read_only(buffer)
        return view

    @property
    def published_series(self) -> npt.NDArray[np.float64]:
        """The bars published so far (the preloaded ones, then, live, the appended ones) as a
        read-only float64 numpy view, without a copy. Its length is the count when read: every
        bar it covers is complete; read it again for newer ones."""
        return _read_only(self._published_buffer())

    # ---- Placement --------------------------------------------------------------------------

    def pin_near(self) -> int:
        """Pins the calling thread to the first of near_cpus (the cpus the engine published as
        nearest its serving thread, serving_cpu) that this process may use, and returns it: the
        round trip to the engine is shortest from there. Call it from the thread that makes the
        requests, before the first. Raises ResourceFailure when the engine published no cpu or
        none of them can take the thread (a cpuset excludes them), naming the cpus tried."""
        refused: list[str] = []
        for cpu in self.near_cpus:
            try:
                os.sched_setaffinity(0, {cpu})
                return cpu
            except OSError as error:
                refused.append(f"cpu {cpu}: {error.strerror}")
        what = "; ".join(refused) if refused else "it publishes none"
        raise error_for(_ipcfloor.E_RESOURCE, f"engine {self.engine} (pid {self.pid}) serves on cpu "
                                              f"{self.serving_cpu}; no cpu near it can take this thread: {what}")

    # ---- Requests ---------------------------------------------------------------------------

    def strategies(self) -> list[StrategyInfo]:
        """The strategies this engine serves, by index: the built-in "hma" first, then those its
        operator loaded (`ipcfloor serve --strategy FILE.so`), each with its parameter names (a
        combo's first len(params) windows; the others are 0) and whether it streams signals."""
        return [StrategyInfo(name, index, params, live) for index, (name, params, live) in enumerate(self._strategies())]

    def _strategy_index(self, fn: str, strategy: str | int) -> int:
        table = self._strategies()
        if isinstance(strategy, str):
            for index, (name, _, _) in enumerate(table):
                if name == strategy:
                    return index
        elif isinstance(strategy, int) and not isinstance(strategy, bool) and 0 <= strategy < len(table):
            return strategy
        raise NoSuchStrategy(_ipcfloor.E_NO_SUCH_STRATEGY,
                             f"{fn}: engine {self.engine} serves no strategy {strategy!r}; it serves: "
                             f"{', '.join(name for name, _, _ in table)} (serve --strategy FILE.so loads one)")

    @overload  # "all" is a str too: this variant comes first and wins
    def sweep(self, params: _input.SweepParams, series: Literal["all"],  # type: ignore[misc]
              out: None = None, strategy: str | int = 0) -> dict[str, SweepResult]:
        ...

    @overload
    def sweep(self, params: _input.SweepParams, series: _input.SeriesKey = 0,
              out: Outputs | None = None, strategy: str | int = 0) -> SweepResult:
        ...

    def sweep(self, params: _input.SweepParams, series: _input.SeriesKey = 0,
              out: Outputs | None = None, strategy: str | int = 0) -> SweepResult | dict[str, SweepResult]:
        """Every combo, pipelined through the ring in one C call (ipcfloor_sweep_on): params are
        lengths (a sequence or 1-D array, as ipcfloor.grid takes them: sweep([6, 8, 11])) or an
        (n, 6) array of windows (ipcfloor.grid builds one). On series `series`: an index (0, the
        main series), a name, or "all", as `ipcfloor sweep --series all`: every series of the
        engine, a dict {name: SweepResult} in the table's order. The answers go into pnl
        float64[n], trades int64[n] and status int32[n] (0, or the code that refused the combo:
        ipcfloor.Status, ipcfloor.status_name): new arrays, or the three of `out` (a SweepResult or
        a tuple), filled in place. Returns SweepResult(pnl, trades, status, refused). A refused
        combo does not stop the others; a failing lane raises, and so does a series the engine
        does not hold. Ctrl-C stops it within a few tens of ms (KeyboardInterrupt); the Engine
        stays usable. `strategy` (a name from strategies(), or its index; default the built-in
        "hma") is the strategy the combos run on: another strategy's combos are an (n, 6) array
        whose first len(params) columns are its parameters and the rest 0."""
        chosen = self._strategy_index("sweep", strategy)
        if chosen != 0 and np.ndim(np.asarray(params, dtype=object)) != 2:
            raise invalid(f"sweep: lengths build combos of the built-in strategy; give strategy {strategy!r} an (n, 6) "
                          f"array of its parameters (strategies() names them)")
        if isinstance(series, str) and series == "all":
            combos = _input.sweep_combos("sweep", params)
            if out is not None:
                raise invalid("sweep: out= fills one series' arrays; with series='all' every series gets arrays of "
                              "its own")
            return {name: self._sweep_one(combos, index, None, chosen)
                    for index, name in enumerate(self._series_names)}
        index = self._series_index("sweep", series)
        return self._sweep_one(_input.sweep_combos("sweep", params), index, out, chosen)

    def _sweep_one(self, combos: npt.NDArray[np.int64], index: int, out: object, strategy: int = 0) -> SweepResult:
        n = combos.shape[0]
        if out is None:
            pnl, trades, status = np.empty(n, np.float64), np.empty(n, np.int64), np.empty(n, np.intc)
        else:
            pnl, trades, status = self._outputs(out, n)
        refused = self._sweep_into(combos, index, pnl, trades, status, strategy)
        return SweepResult(pnl, trades, status, refused)

    # ---- The slow paths: every form the extension does not take at once -----------------------

    def _backtest_slow(self, params: object, series: object = 0) -> tuple[Any, Any]:
        index = self._series_index("backtest", series)
        request = _input.request("backtest", params)
        if isinstance(request, tuple):
            return super().backtest(request, index)
        result = self._sweep_one(request, index, None)
        if result.refused:
            row = int(np.flatnonzero(result.status)[0])
            code = int(result.status[row])
            raise error_for(code, f"backtest: combo {row} {request[row].tolist()} of {len(request)} was refused: "
                                  f"{_ipcfloor.strerror(code)} (sweep() gives every combo's status)")
        return result.pnl, result.trades

    def _echo_slow(self, params: object) -> _input.Combo:
        return super().echo(_input.six("echo", params))

    def _subscribe_slow(self, params: object, with_state: bool = False) -> Any:
        request = _input.request("subscribe", params)
        if isinstance(request, tuple):
            return super().subscribe(request, with_state)
        done: list[Any] = []
        for row, combo in enumerate(request.tolist()):
            try:
                done.append(super().subscribe(tuple(combo), with_state))
            except Exception as error:
                ids = [d[0] if with_state else d for d in done]
                code, message = getattr(error, "code", _ipcfloor.E_INVALID), getattr(error, "message", str(error))
                raise error_for(code, f"subscribe: combo {row} {combo} of {len(request)}: {message}; the combos "
                                      f"before it were subscribed (ids {ids})") from error
        return done

    def _append_slow(self, close: object, tick: object = 0) -> int:
        return super().append(_input.close_price("append", close), _input.tick("append", tick))

    # ---- Helpers ----------------------------------------------------------------------------

    def _series_index(self, fn: str, series: object) -> int:
        """The index `series` names: an int as it is (the library judges it against the table),
        a str looked up in series_names."""
        if isinstance(series, str):
            try:
                return self._series_names.index(series)
            except ValueError:
                raise invalid(f"{fn}: engine {self.engine} holds no series named {series!r}; it holds: "
                              f"{', '.join(self._series_names)}") from None
        if _input.is_int(series):
            index = int(series)
            if 0 <= index < _U32_END:
                return index
            raise NoSuchSeries(_ipcfloor.E_NO_SUCH_SERIES, self._no_such_series(index))
        raise invalid(f"{fn}: series is {series!r}: give an index (int) or a name (str) of engine {self.engine}'s "
                      f"series {list(self._series_names)}")

    def _no_such_series(self, index: int) -> str:
        count = len(self._series_names)
        return (f"engine {self.engine} (pid {self.pid}) holds no series {index} (lane {self.lane}): it holds {count} "
                f"series, indices 0 to {count - 1} ({', '.join(self._series_names)})")

    @staticmethod
    def _outputs(out: object, n: int) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.intc]]:
        """sweep's out=: three C-contiguous writeable arrays of n, float64, int64 and int32."""
        if not isinstance(out, tuple) or len(out) not in (3, 4):
            raise invalid(f"sweep: out is {type(out).__name__}: give a SweepResult or (pnl, trades, status) arrays")
        for name, array, dtype in zip(("pnl", "trades", "status"), out[:3], (np.float64, np.int64, np.intc)):
            if not (isinstance(array, np.ndarray) and array.dtype == dtype and array.shape == (n,) and
                    array.flags.c_contiguous and array.flags.writeable):
                got = f"{array.dtype} {array.shape}" if isinstance(array, np.ndarray) else type(array).__name__
                raise invalid(f"sweep: out.{name} is {got}: want a writeable C-contiguous {np.dtype(dtype)} array of "
                              f"shape ({n},)")
        return out[0], out[1], out[2]


def attach(name: str, timeout: float = 5.0, wait: WaitMode | None = None, reconnect: bool = False,
           reconnect_limit: float = 30.0) -> Engine:
    """Attaches to engine NAME (`ipcfloor serve --name NAME`) and claims a lane.

    timeout: seconds, the bound on any one wait (a lane being freed, an answer, a signal): 0.001
    (1 ms) to 86400 (one day), the range `ipcfloor sweep --timeout` takes.
    wait: "spin", "backoff", "block", or None (or "engine") for the engine's own mode.
    reconnect: True to re-attach by itself when the engine goes away (a crash, a restart): the
    call in flight raises EngineRestarted (it is never retried: an append may or may not have
    been journaled; `bars` says), the Engine attaches to the engine that comes back under NAME,
    subscribes its combos again and asks for a snapshot; wait_signal waits across it, and the first
    Signal of each subscription after it has restart True and `missed`, the bars it did not see as
    they happened. `restarts` counts the engines it re-attached to. False: EngineGone.
    reconnect_limit: seconds one outage may last before it gives up (EngineGone): 0.001 to 86400.
    The Engine belongs to this process: in a child made by fork() its calls raise Forked (attach
    again there), and the parent's Engine goes on working.
    Raises NoEngine, Busy, PermissionDenied, VersionMismatch, InvalidArgument, ... (ipcfloor.Error)."""
    if not isinstance(name, str) or "\0" in name:
        raise invalid(f"attach: name is {name!r}: the engine name is a str (`ipcfloor serve --name NAME`)")
    if wait not in _WAIT_MODES:
        raise invalid(f"attach: wait is {wait!r}: give 'spin', 'backoff', 'block' or None (the engine's mode)")
    if not isinstance(reconnect, bool):
        raise invalid(f"attach: reconnect is {reconnect!r}: give True or False")
    limit_ns = round(_input.seconds("attach", reconnect_limit, "reconnect_limit") * 1e9)
    engine = _ipcfloor.attach(Engine, name.encode(), _WAIT_MODES[wait], _input.timeout_ns(timeout),
                              1 if reconnect else 0, limit_ns)
    engine._views = {}
    return engine


for _class in (Engine, SweepResult):
    _class.__module__ = "ipcfloor"

