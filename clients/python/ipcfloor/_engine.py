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

import importlib
import math
import os
from types import TracebackType
from typing import Any, Callable, Dict, Iterator, Literal, NamedTuple, Optional, Tuple, Union, cast, overload

import numpy as np
import numpy.typing as npt

from . import _input, _ipcfloor
from ._errors import NoSuchSeries, NoSuchStrategy, error_for, invalid

__all__ = ["Engine", "SweepResult", "TradeList", "STATS_FIGURES", "TRADE_DTYPE", "attach"]

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


# One combo's statistics as the C ABI lays them out (ipcfloor_stats: pnl, trades, then the figures
# of docs/STATISTICS.md in its order), so a sweep writes straight into a record array of them.
STATS_DTYPE = np.dtype([
    ("pnl", np.float64), ("trades", np.int64), ("wins", np.int64), ("win_rate", np.float64),
    ("profit_factor", np.float64), ("expectancy", np.float64), ("best_trade", np.float64),
    ("worst_trade", np.float64), ("avg_win", np.float64), ("avg_loss", np.float64),
    ("avg_trade_bars", np.float64), ("exposure", np.float64), ("max_drawdown", np.float64),
    ("max_drawdown_bars", np.int64), ("sharpe", np.float64), ("sortino", np.float64), ("calmar", np.float64),
    ("bars", np.uint64)])
# The figures after pnl and trades, by their names in docs/STATISTICS.md (the CLI's columns).
_STATS_NAMES: tuple[str, ...] = cast(Tuple[str, ...], STATS_DTYPE.names)
STATS_FIGURES: tuple[str, ...] = _STATS_NAMES[2:]
# One closed trade (ipcfloor_trade, 48 bytes; its reserved word left out of the fields): bars count
# from the first bar the request ran on; side +1 long, -1 short; pnl in percentage points, net of fees.
TRADE_DTYPE = np.dtype({"names": ["entry_bar", "exit_bar", "side", "entry_price", "exit_price", "pnl"],
                        "formats": [np.uint64, np.uint64, np.int32, np.float64, np.float64, np.float64],
                        "offsets": [0, 8, 40, 16, 24, 32], "itemsize": 48})
if STATS_DTYPE.itemsize != _ipcfloor.STATS_BYTES or TRADE_DTYPE.itemsize != _ipcfloor.TRADE_BYTES:
    raise ImportError(f"ipcfloor: the extension's records ({_ipcfloor.STATS_BYTES}, {_ipcfloor.TRADE_BYTES} bytes) are "
                      f"not this package's ({STATS_DTYPE.itemsize}, {TRADE_DTYPE.itemsize}): rebuild the package")
_REASON_DTYPE = np.dtype(f"S{_ipcfloor.REASON_BYTES}")
# Combos per C call of a sweep with options or statistics: bounds the buffer of refusal reasons
# (128 bytes a combo), and a progress bar moves once per call.
_CHUNK = 65536
# The most bars per year a request takes (docs/PROTOCOL.md, bad_option): one a second for 1000 years.
_BARS_PER_YEAR_MAX = 31_622_400_000.0

# A sweep's statistics: column name -> numpy array, one row per combo (pandas.DataFrame takes it as
# it is): the strategy's parameters, pnl, trades, every figure, then status and reason.
StatsTable = Dict[str, npt.NDArray[Any]]
# (strategy, series, from_bar, to_bar, fee, bars_per_year), as the extension takes a request.
_Request = Tuple[int, int, int, int, float, float]


class TradeList(NamedTuple):
    """One combo in full (Engine.trades): its closed trades (a TRADE_DTYPE record array), its
    bar-by-bar marked-to-market equity over the bars it ran on (float64, docs/STATISTICS.md), and
    its statistics (a dict as Engine.stats gives)."""

    trades: npt.NDArray[np.void]
    equity: npt.NDArray[np.float64]
    stats: dict[str, float | int]


# sweep's out=: a SweepResult or its three arrays.
Outputs = Union[SweepResult, Tuple[npt.NDArray[np.float64], npt.NDArray[np.int64], npt.NDArray[np.intc]]]


# The columns a series may have, in the order of the IPCFLOOR_COLUMN_* bits (close is bit 0).
_COLUMNS = ("close", "open", "high", "low", "volume")


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

    def series_columns(self, series: _input.SeriesKey) -> list[str]:
        """The columns series `series` has, in the order close, open, high, low, volume: close
        always, the others where its file had them (serve --data of an OHLCV CSV or a structured
        .npy). Raises as series_at does."""
        index = self._series_index("series_columns", series)
        bits = self._series_columns(index)
        if bits == 0:
            raise NoSuchSeries(_ipcfloor.E_NO_SUCH_SERIES, self._no_such_series(index))
        return [name for k, name in enumerate(_COLUMNS) if bits >> k & 1]

    def series_at(self, series: _input.SeriesKey, column: str = "close") -> npt.NDArray[np.float64]:
        """Series `series` of the engine's table, an index or a name from series_names, as a
        read-only float64 numpy array, without a copy, of the bars a backtest on it runs on now:
        its preloaded closes, or, for a live engine's main series (index 0), every bar published so
        far. `column` picks another column of it (open, high, low or volume, as series_columns
        lists them), read-only and as long as its closes. Raises NoSuchSeries for an index past the
        table, InvalidArgument for a name the engine does not hold, a column name that is none of
        those, or a column the series lacks."""
        index = self._series_index("series_at", series)
        if column != "close":
            return self._column_at(index, column)
        if index == 0 and self.live:
            return self.published_series  # it grows: a new view each time, never a cached one
        view = self._views.get(index)
        if view is None:
            buffer = self._series_buffer(index)
            if buffer is None:
                raise NoSuchSeries(_ipcfloor.E_NO_SUCH_SERIES, self._no_such_series(index))
            view = self._views[index] = _read_only(buffer)
        return view

    def _column_at(self, index: int, column: str) -> npt.NDArray[np.float64]:
        """series_at's view of a column besides close (cached: such a series never grows)."""
        if not isinstance(column, str) or column.lower() not in _COLUMNS:
            raise invalid(f"series_at: column is {column!r}: give one of {', '.join(_COLUMNS)}")
        bit = 1 << _COLUMNS.index(column.lower())
        if bit == 1:
            return self.series_at(index)
        key = (index + 1) * 32 + bit
        view = self._views.get(key)
        if view is None:
            buffer = self._column_buffer(index, bit)
            if buffer is None:
                have = self.series_columns(index)  # raises NoSuchSeries past the table
                raise invalid(f"series_at: series {index} ({self._series_names[index]}) of engine {self.engine} has no "
                              f"{column.lower()} column: it has {', '.join(have)}")
            view = self._views[key] = _read_only(buffer)
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

    @overload  # "all" is a str too: these variants come first and win
    def sweep(self, params: _input.SweepParams, series: Literal["all"],  # type: ignore[misc]
              out: None = None, strategy: str | int = 0, *, stats: Literal[True], bars: slice | None = None,
              fee: float | None = None, bars_per_year: float | None = None,
              progress: bool = False) -> dict[str, StatsTable]:
        ...

    @overload
    def sweep(self, params: _input.SweepParams, series: Literal["all"],  # type: ignore[misc]
              out: None = None, strategy: str | int = 0, *, stats: Literal[False] = False,
              bars: slice | None = None, fee: float | None = None, bars_per_year: float | None = None,
              progress: bool = False) -> dict[str, SweepResult]:
        ...

    @overload
    def sweep(self, params: _input.SweepParams, series: _input.SeriesKey = 0,
              out: None = None, strategy: str | int = 0, *, stats: Literal[True], bars: slice | None = None,
              fee: float | None = None, bars_per_year: float | None = None, progress: bool = False) -> StatsTable:
        ...

    @overload
    def sweep(self, params: _input.SweepParams, series: _input.SeriesKey = 0,
              out: Outputs | None = None, strategy: str | int = 0, *, stats: Literal[False] = False,
              bars: slice | None = None, fee: float | None = None, bars_per_year: float | None = None,
              progress: bool = False) -> SweepResult:
        ...

    def sweep(self, params: _input.SweepParams, series: _input.SeriesKey = 0,
              out: Outputs | None = None, strategy: str | int = 0, *, stats: bool = False,
              bars: slice | None = None, fee: float | None = None, bars_per_year: float | None = None,
              progress: bool = False) -> SweepResult | StatsTable | dict[str, SweepResult] | dict[str, StatsTable]:
        """Every combo, pipelined through the ring (ipcfloor_sweep_on, or ipcfloor_sweep_request /
        ipcfloor_sweep_stats with options): params are lengths (a sequence or 1-D array, as
        ipcfloor.grid takes them: sweep([6, 8, 11])) or an (n, 6) array of windows (ipcfloor.grid
        builds one). On series `series`: an index (0, the main series), a name, or "all", as
        `ipcfloor sweep --series all`: every series of the engine, a dict {name: answer} in the
        table's order. `strategy` (a name from strategies(), or its index; default the built-in
        "hma") is the strategy the combos run on: another strategy's combos are an (n, k) array of
        its k parameters (strategies() names them), or (n, 6) with the rest 0.

        Without stats the answers go into pnl float64[n], trades int64[n] and status int32[n] (0,
        or the code that refused the combo: ipcfloor.Status, ipcfloor.status_name): new arrays, or
        the three of `out` (a SweepResult or a tuple), filled in place. Returns SweepResult(pnl,
        trades, status, refused).

        stats=True: returns a dict of numpy arrays, one row per combo, that pandas.DataFrame takes
        as it is: the strategy's parameters by name, pnl, trades, every figure of
        docs/STATISTICS.md by its name (STATS_FIGURES), status, and reason (the engine's or the
        strategy's words for a refused combo, "" for the others; its figures NaN, trades 0).

        Options (the engine's own when not given): bars=slice(a, b), the bars [a, b) of the series
        (negative ends count from its end; no step; at least 2 bars); fee, percentage points per
        round trip in [0, 100]; bars_per_year, for sharpe, sortino and calmar, in (0, 3.16e10].
        A bad one raises InvalidArgument (a ValueError) before anything is sent.

        progress=True shows a tqdm bar on stderr where tqdm is installed (none otherwise).
        A refused combo does not stop the others; a failing lane raises, and so does a series the
        engine does not hold. Ctrl-C stops it within a few tens of ms (KeyboardInterrupt); the
        Engine stays usable."""
        chosen = self._strategy_index("sweep", strategy)
        combos = self._strategy_combos("sweep", params, chosen, strategy)
        options = (bars, fee, bars_per_year)
        if isinstance(series, str) and series == "all":
            if out is not None:
                raise invalid("sweep: out= fills one series' arrays; with series='all' every series gets arrays of "
                              "its own")
            return {name: self._sweep_one(combos, index, None, chosen, options, stats, progress, name)  # type: ignore
                    for index, name in enumerate(self._series_names)}
        if stats and out is not None:
            raise invalid("sweep: out= takes pnl, trades and status arrays; stats=True returns a table of its own")
        index = self._series_index("sweep", series)
        return self._sweep_one(combos, index, out, chosen, options, stats, progress)

    def stats(self, params: _input.Windows, series: _input.SeriesKey = 0, strategy: str | int = 0, *,
              bars: slice | None = None, fee: float | None = None,
              bars_per_year: float | None = None) -> dict[str, float | int]:
        """One combo's statistics (ipcfloor_sweep_stats of one): a dict of pnl, trades and every
        figure of docs/STATISTICS.md by its name (STATS_FIGURES; the counts as int). params: a
        length or six windows for the built-in strategy; another strategy's k parameters (or six,
        the rest 0). series, strategy, bars, fee and bars_per_year as sweep takes them. A refused
        combo raises its code's class with the reason (WindowOutOfRange, MissingColumn,
        NoTradeReport, ...)."""
        chosen = self._strategy_index("stats", strategy)
        combo = self._one_combo("stats", params, chosen)
        index = self._series_index("stats", series)
        request = self._request("stats", chosen, index, bars, fee, bars_per_year)
        records, status = np.zeros(1, STATS_DTYPE), np.zeros(1, np.intc)
        reasons = np.zeros(1, _REASON_DTYPE)
        if self._sweep_stats_into(request, np.array([combo], np.int64), records, status, reasons):
            code = int(status[0])
            why = reasons[0].decode("utf-8", "replace") or _ipcfloor.strerror(code)
            raise error_for(code, f"stats: combo {list(combo)} on strategy {self._strategies()[chosen][0]!r}: {why}")
        return _record_dict(records[0])

    def trades(self, params: _input.Windows, series: _input.SeriesKey = 0, strategy: str | int = 0, *,
               bars: slice | None = None, fee: float | None = None, bars_per_year: float | None = None) -> TradeList:
        """One combo in full (ipcfloor_trades): TradeList(trades, equity, stats). trades is a
        record array of TRADE_DTYPE (entry_bar, exit_bar, side, entry_price, exit_price, pnl), bars
        counted from the first bar it ran on (bars=slice(a, b): bar a is 0); their pnl, summed in
        order, is the combo's pnl. equity is the bar-by-bar marked-to-market equity over those
        bars; stats the dict stats() gives. Arguments as stats takes them. The engine sends the
        list a page at a time through the lane's bulk region (ResourceFailure when it runs with
        --bulk-bytes 0)."""
        chosen = self._strategy_index("trades", strategy)
        combo = self._one_combo("trades", params, chosen)
        index = self._series_index("trades", series)
        request = self._request("trades", chosen, index, bars, fee, bars_per_year)
        equity = np.zeros(self._request_bars(request), np.float64)
        record = np.zeros(1, STATS_DTYPE)
        room = max(16, len(equity))  # non-overlapping trades of at least one bar each fit
        while True:
            trades = np.zeros(room, TRADE_DTYPE)
            count = self._trades_into(request, combo, trades, record, equity)
            if count <= room:
                kept = np.zeros(count, TRADE_DTYPE)  # its reserved bytes zero, as the C record's
                kept[...] = trades[:count]
                return TradeList(kept, equity, _record_dict(record[0]))
            room = count

    def _sweep_one(self, combos: npt.NDArray[np.int64], index: int, out: object, strategy: int,
                   options: tuple[slice | None, float | None, float | None] = (None, None, None),
                   stats: bool = False, progress: bool = False,
                   label: str | None = None) -> SweepResult | StatsTable:
        n = combos.shape[0]
        plain = options == (None, None, None) and not stats
        if plain and not progress:
            if out is None:
                pnl, trades, status = np.empty(n, np.float64), np.empty(n, np.int64), np.empty(n, np.intc)
            else:
                pnl, trades, status = self._outputs(out, n)
            refused = self._sweep_into(combos, index, pnl, trades, status, strategy)
            return SweepResult(pnl, trades, status, refused)
        request = self._request("sweep", strategy, index, *options)
        status = np.empty(n, np.intc)
        if stats:
            records = np.empty(n, STATS_DTYPE)
            reasons: list[tuple[int, str]] = []
            for lo, hi, why in self._chunks(n, progress, label):
                if self._sweep_stats_into(request, combos[lo:hi], records[lo:hi], status[lo:hi], why):
                    reasons += [(lo + int(i), why[i].decode("utf-8", "replace")) for i in np.flatnonzero(status[lo:hi])]
            return self._stats_table(strategy, combos, records, status, reasons)
        if out is None:
            pnl, trades = np.empty(n, np.float64), np.empty(n, np.int64)
        else:
            pnl, trades, status = self._outputs(out, n)
        refused = 0
        for lo, hi, why in self._chunks(n, progress, label):
            refused += (self._sweep_into(combos[lo:hi], index, pnl[lo:hi], trades[lo:hi], status[lo:hi], strategy)
                        if plain else
                        self._sweep_request_into(request, combos[lo:hi], pnl[lo:hi], trades[lo:hi], status[lo:hi], why))
        return SweepResult(pnl, trades, status, refused)

    def _chunks(self, n: int, progress: bool, label: str | None) -> Iterator[tuple[int, int, npt.NDArray[np.bytes_]]]:
        """The sweep's combos in C calls of at most _CHUNK (about a hundredth of them each with a
        progress bar), each with a buffer for its refusal reasons; the bar moves after each call."""
        step = _CHUNK if not progress else max(1, min(_CHUNK, max(4 * self.ring_capacity, -(-n // 100))))
        why = np.zeros(min(step, max(n, 1)), _REASON_DTYPE)
        bar = _progress_bar(n, label) if progress else None
        try:
            for lo in range(0, n, step):
                hi = min(n, lo + step)
                yield lo, hi, why[:hi - lo]
                if bar is not None:
                    bar(hi - lo)
        finally:
            if bar is not None:
                bar(-1)

    def _stats_table(self, strategy: int, combos: npt.NDArray[np.int64], records: npt.NDArray[np.void],
                     status: npt.NDArray[np.intc], reasons: list[tuple[int, str]]) -> StatsTable:
        table: StatsTable = {}
        for k, name in enumerate(self._strategies()[strategy][1]):
            # A parameter named like a column keeps its value under param_<name>.
            table[name if name not in _STATS_NAMES and name not in ("status", "reason") else f"param_{name}"] = \
                np.ascontiguousarray(combos[:, k])
        for name in _STATS_NAMES:
            table[name] = np.ascontiguousarray(records[name])
        table["status"] = status
        reason = np.zeros(len(status), np.str_)
        if reasons:
            rows, words = zip(*reasons)
            reason = reason.astype(np.array(words).dtype)
            reason[list(rows)] = words
        table["reason"] = reason
        return table

    # ---- Requests' arguments ----------------------------------------------------------------

    def _strategy_combos(self, fn: str, params: object, chosen: int, strategy: object) -> npt.NDArray[np.int64]:
        """A sweep's combos: for the built-in strategy lengths or (n, 6) windows; for another one an
        (n, k) array of its k parameters (padded with 0 to six) or (n, 6)."""
        if chosen == 0:
            return _input.sweep_combos(fn, params)
        array = _input.int64_array(fn, "params", params)
        k = len(self._strategies()[chosen][1])
        if array.ndim == 2 and array.shape[1] in (k, 6):
            return _padded(array)
        raise invalid(f"{fn}: params has shape {array.shape}: give strategy {strategy!r} an (n, {k}) array of its "
                      f"parameters {list(self._strategies()[chosen][1])} (or (n, 6), the rest 0)")

    def _one_combo(self, fn: str, params: object, chosen: int) -> _input.Combo:
        """One combo: a length or six windows for the built-in strategy; another's k parameters or six."""
        if chosen == 0:
            combo = _input.request(fn, params)
            if isinstance(combo, tuple):
                return combo
            raise invalid(f"{fn}: params has shape {combo.shape}: give one combo (a length or six windows)")
        names = self._strategies()[chosen][1]
        array = _input.int64_array(fn, "params", params)
        if array.ndim == 1 and array.shape[0] in (len(names), 6):
            h, length, s, p3, p2, p = (int(v) for v in _padded(array[np.newaxis, :])[0].tolist())
            return h, length, s, p3, p2, p
        raise invalid(f"{fn}: params has shape {array.shape}: give the strategy's {len(names)} parameters "
                      f"{list(names)} (or six, the rest 0)")

    def _request(self, fn: str, strategy: int, series: int, bars: slice | None, fee: float | None,
                 bars_per_year: float | None) -> _Request:
        """The request tuple the extension takes, every option judged here first."""
        from_bar, to_bar = self._bar_range(fn, series, bars)
        fee_value = math.nan if fee is None else _number(fn, "fee", fee, 0.0, 100.0, "percentage points per round "
                                                                                        "trip, in [0, 100]")
        year = 0.0 if bars_per_year is None else _number(fn, "bars_per_year", bars_per_year, 0.0, _BARS_PER_YEAR_MAX,
                                                         "in (0, 31622400000]", open_low=True)
        return strategy, series, from_bar, to_bar, fee_value, year

    def _bar_range(self, fn: str, series: int, bars: object) -> tuple[int, int]:
        """bars=slice(a, b) as [from_bar, to_bar) of series `series`; None: the whole series (0, 0)."""
        if bars is None:
            return 0, 0
        n = len(self.series_at(series))
        if not isinstance(bars, slice):
            raise invalid(f"{fn}: bars is {bars!r}: give a slice of the series' bars, bars=slice(a, b) (the series "
                          f"holds {n})")
        if bars.step is not None and not (_input.is_int(bars.step) and int(bars.step) == 1):
            raise invalid(f"{fn}: bars={bars!r} has a step: a range is every bar from a to b, slice(a, b)")
        ends = []
        for what, end, default in (("start", bars.start, 0), ("stop", bars.stop, n)):
            if end is None:
                ends.append(default)
                continue
            if not _input.is_int(end):
                raise invalid(f"{fn}: bars={bars!r}: its {what} is {end!r}: give whole bar numbers")
            value = int(end) + n if int(end) < 0 else int(end)
            if not 0 <= value <= n:
                raise invalid(f"{fn}: bars={bars!r}: its {what} {int(end)} is outside series {series}'s {n} bars")
            ends.append(value)
        if ends[1] - ends[0] < 2:
            raise invalid(f"{fn}: bars={bars!r} holds {max(0, ends[1] - ends[0])} bar(s) of series {series}'s {n}: a "
                          f"range holds at least 2")
        return ends[0], ends[1]

    # ---- The slow paths: every form the extension does not take at once -----------------------

    def _backtest_slow(self, params: object, series: object = 0) -> tuple[Any, Any]:
        index = self._series_index("backtest", series)
        request = _input.request("backtest", params)
        if isinstance(request, tuple):
            return super().backtest(request, index)
        result = cast(SweepResult, self._sweep_one(request, index, None, 0))
        if result.refused:
            row = int(np.flatnonzero(result.status)[0])
            code = int(result.status[row])
            raise error_for(code, f"backtest: combo {row} {request[row].tolist()} of {len(request)} was refused: "
                                  f"{_ipcfloor.strerror(code)} (sweep() gives every combo's status)")
        return result.pnl, result.trades

    def _backtest_options(self, params: object, series: object, bars: slice | None,
                          fee: float | None) -> tuple[Any, Any]:
        """backtest with bars= or fee=: one combo (pnl, trades), or an (n, 6) array's arrays, as
        ipcfloor_backtest_request / ipcfloor_sweep_request answer them; a refused combo raises its
        code's class with the engine's words."""
        index = self._series_index("backtest", series)
        request = _input.request("backtest", params)
        combos = np.array([request], np.int64) if isinstance(request, tuple) else request
        result = cast(SweepResult, self._sweep_one(combos, index, None, 0, (bars, fee, None)))
        if result.refused:
            row = int(np.flatnonzero(result.status)[0])
            code = int(result.status[row])
            why = self.last_error or _ipcfloor.strerror(code)
            raise error_for(code, f"backtest: combo {combos[row].tolist()} was refused: {why}")
        if isinstance(request, tuple):
            return float(result.pnl[0]), int(result.trades[0])
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


def _padded(array: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """(n, k) parameters as (n, 6) C-contiguous int64, the rest 0."""
    if array.shape[1] == 6:
        return np.ascontiguousarray(array, np.int64)
    combos = np.zeros((array.shape[0], 6), np.int64)
    combos[:, :array.shape[1]] = array
    return combos


def _number(fn: str, arg: str, value: object, low: float, high: float, what: str, open_low: bool = False) -> float:
    """A float option in [low, high] ((low, high] with open_low); else InvalidArgument saying so."""
    number = float(value) if isinstance(value, (int, float, np.integer, np.floating)) and \
        not isinstance(value, bool) else math.nan
    if not (math.isfinite(number) and (low < number if open_low else low <= number) and number <= high):
        raise invalid(f"{fn}: {arg} is {value!r}: {arg} is {what}")
    return number


def _record_dict(record: np.void) -> dict[str, float | int]:
    """A stats record as {name: value}: the counts as int, the rest as float."""
    return {name: (int(record[name]) if STATS_DTYPE.fields[name][0].kind in "iu" else float(record[name]))  # type: ignore
            for name in _STATS_NAMES}


def _progress_bar(total: int, label: str | None) -> Optional[Callable[[int], None]]:
    """A tqdm bar on stderr as a function: f(k) moves it by k, f(-1) closes it; None without tqdm."""
    try:
        tqdm: Any = importlib.import_module("tqdm").tqdm  # untyped: imported by name
    except ImportError:
        return None
    bar = tqdm(total=total, desc=label or "sweep", unit="combo")

    def move(k: int) -> None:
        if k < 0:
            bar.close()
        else:
            bar.update(k)
    return move


for _class in (Engine, SweepResult, TradeList):
    _class.__module__ = "ipcfloor"

