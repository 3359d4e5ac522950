#!/usr/bin/env python3
"""The statistics parity gate: every figure of `ipcfloor sweep --stats --json`, on every strategy
shipped (the built-in hma, sma_cross, donchian, vwma_cross, and the tests' trade_probe), equals
stats.py's (docs/STATISTICS.md in numpy) over that strategy's numpy reference trades, bit for bit:
the float bits compared, NaN equal to NaN (JSON writes NaN as null and infinities as "inf"/"-inf").
In process (`sweep --inproc --strategy FILE.so`, no --strategy for the built-in) and through an
engine that loaded them (`serve --strategy FILE.so ... --workers 1 --wait backoff`, then
`sweep --name N --strategy S`).

Series: GBM closes from `ipcfloor gen` on fixed seeds and sizes, and on two seeds drawn at random
on every run (printed; replay with --seed), each written as a CSV of Date,Open,High,Low,Close,Volume
(open = the previous close, high and low around the body, volume drawn, with some zero-volume
bars). Runs at the default fee and bars per year, and at other ones (`--fee`, `--bars-per-year`).

The cases docs/STATISTICS.md singles out, for every strategy (the reference's trades are checked
to be the case claimed, so no case passes vacuously):
  - no trades (a window as long as the series; the ratios are NaN, exposure 0);
  - one trade: trade_probe with n/2 < hold < n - 1; the others on a fixed series cut between their
    first trade's exit and their second's (they are causal: the bars after a cut change nothing
    before it), so one trade closes and the next is still open at the end (not a trade);
  - every bar in a position. trade_probe does it exactly (n - 1 a multiple of hold: trade k runs
    from k*hold to (k+1)*hold). The crossover strategies (hma, sma_cross, vwma_cross) and donchian
    cannot be in a position at bar 0: each enters on a comparison of bar i with what came before
    it (a crossing of bar i-1's lines, or a break of the previous bars' channel), so their first
    entry is at bar 1 at the earliest, and a position still open at the end is not a trade. Their
    case is the most they can do: from the first entry to the last bar in a position, every trade
    entering where the previous one left and the last one closing on the last bar (the series cut
    at a reversal the reference found);
  - zero equity variance, fee 0, with trades: every trade enters and leaves at the same constant
    close. On constant closes of 0.1 trade_probe trades, and so do sma_cross and vwma_cross (their
    running sums of a constant that is not a binary fraction round differently from bar to bar,
    so their averages cross); hma cannot there (its two lines are the same at every bar), but does
    on a step series (closes falling, then a step up to a constant 0.1: it enters after the step,
    its windows still holding the bars before it); donchian cannot (a close never breaks a channel
    of highs and lows equal to it), so its case is flat with no trade.
Besides: every trade a win (profit factor +inf, sortino and calmar NaN) and a 2-bar series (one
step: sd NaN).

donchian needs the High and Low columns and vwma_cross the Volume column, which the engine and
`sweep --inproc` keep from the OHLCV files: a refusal for a missing column is a mismatch. Exit 0 when every figure matches, 1 otherwise.
Usage: stats_parity.py --ipcfloor BIN --strategies DIR [--workdir DIR] [--seed S ...]
"""

import argparse
import math
import os
import random
import struct
import sys
import tempfile
from typing import Callable, NamedTuple, Optional

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import donchian  # noqa: E402
import hma_reference  # noqa: E402
import sma_cross  # noqa: E402
import stats  # noqa: E402
import trade_probe  # noqa: E402
import vwma_cross  # noqa: E402
from series_files import (ColumnSkips, Engine, Series, cut, flat_series, gbm_series, json_rows, run,  # noqa: E402
                          write_series)

DEFAULT_FEE = 0.09
RANDOM_BARS = 1500
ENGINE_BARS_PER_YEAR = 390.0


class Strategy(NamedTuple):
    name: str
    module: Optional[str]  # the .so's name; None: the built-in
    header: str            # the combo file's header
    trades: Callable       # (series, params, fee) -> [stats.Trade]
    columns: tuple = ()    # the columns besides close it requires


def hma_trades(series, params, fee):
    return [stats.Trade(*t) for t in hma_reference.trade_list(series.close, params, fee)]


STRATEGIES = {s.name: s for s in (
    Strategy("hma", None, "h,L,s,p3,p2,p", hma_trades),
    Strategy("sma_cross", "sma_cross", "fast,slow", lambda s, p, fee: sma_cross.trade_list(s.close, *p, fee)),
    Strategy("donchian", "donchian", "entry,exit",
             lambda s, p, fee: donchian.trade_list(s.high, s.low, s.close, *p, fee), ("high", "low")),
    Strategy("vwma_cross", "vwma_cross", "fast,slow",
             lambda s, p, fee: vwma_cross.trade_list(s.close, s.volume, *p, fee), ("volume",)),
    Strategy("trade_probe", "trade_probe", "hold", lambda s, p, fee: trade_probe.trade_list(s.close, *p, fee)),
)}

# The grids every GBM series runs (the built-in's by length, as the CLI turns a length into windows).
GRIDS = {
    "hma": [hma_reference.combo_from_length(n) for n in (6, 11, 30, 77)],
    "sma_cross": [(2, 8), (5, 30), (10, 50), (20, 120)],
    "donchian": [(5, 3), (20, 10), (55, 20)],
    "vwma_cross": [(2, 8), (5, 30), (10, 50)],
    "trade_probe": [(1,), (7,), (50,)],
}


class Case(NamedTuple):
    """Combos of one strategy on one series, at one fee and bars per year (None: the default)."""
    label: str
    series: Series
    strategy: str
    combos: list
    fee: Optional[float] = None
    bars_per_year: Optional[float] = None


# ---- The cases ----------------------------------------------------------------------------------

def cut_where(strategy, series, work, want_trades, at):
    """A grid combo of `strategy` and the series cut after bar at(trades) of its trades on
    `series`, on which the reference trades exactly want_trades(trades) (the strategies are
    causal: the bars after the cut change nothing before it)."""
    for params in GRIDS[strategy]:
        trades = STRATEGIES[strategy].trades(series, params, DEFAULT_FEE)
        if len(trades) < 2:
            continue
        short = cut(series, at(trades) + 1, work)
        again = STRATEGIES[strategy].trades(short, params, DEFAULT_FEE)
        if again == want_trades(trades):
            return short, params
    raise SystemExit(f"stats parity: no {strategy} combo of the grid gives the case wanted on a cut of {series.name}")


def contiguous_to_end(trades, n):
    """From the first entry every bar in a position, the last trade closing on the last bar."""
    return (len(trades) > 0 and trades[-1].exit_bar == n - 1 and
            all(t.entry_bar == p.exit_bar for p, t in zip(trades, trades[1:])))


def edge_cases(fixed: Series, constant: Series, step: Series, rising: Series, tiny: Series, work) -> list:
    """No trades, one trade, every bar in a position and zero variance, for every strategy."""
    n = fixed.n
    none = {"hma": [hma_reference.combo_from_length(n)], "sma_cross": [(2, n)], "donchian": [(n - 1, 1)],
            "vwma_cross": [(2, n)], "trade_probe": [(n,), (100000,)]}
    cases = []
    for name in STRATEGIES:
        for params in none[name]:
            trades = STRATEGIES[name].trades(fixed, params, DEFAULT_FEE)
            assert not trades, f"{name} {params} trades on {fixed.name}: not a no-trade case"
        cases.append(Case("no trades", fixed, name, none[name]))
        if name == "trade_probe":
            one = (n // 2 + 1,)
            assert len(trade_probe.trade_list(fixed.close, *one)) == 1
            cases.append(Case("one trade", fixed, name, [one]))
        else:
            # Cut between the first trade's exit and the second's: one trade, then a position
            # still open at the end (not a trade: the equity stays flat after its entry).
            short, params = cut_where(name, fixed, work, lambda t: t[:1],
                                      lambda t: (t[0].exit_bar + t[1].exit_bar) // 2)
            cases.append(Case("one trade, then one still open", short, name, [params]))
    cases += every_bar_cases(fixed, work)
    cases += zero_variance_cases(constant, step)
    # Every trade a win, fee 0: profit factor +inf, no loss (avg_loss NaN), no drawdown (calmar
    # NaN), no losing step (sortino NaN).
    for hold in (1, 20, 200):
        figures = stats.statistics(rising.close, trade_probe.trade_list(rising.close, hold, 0.0))
        assert figures["profit_factor"] == math.inf and math.isnan(figures["sortino"]), f"rising, hold {hold}"
    cases.append(Case("every trade a win", rising, "trade_probe", [(1,), (20,), (200,)], fee=0.0))
    # Two bars: one step, sd NaN (trade_probe holds it; the others cannot trade in two bars).
    cases.append(Case("two bars", tiny, "trade_probe", [(1,), (2,)]))
    cases.append(Case("two bars", tiny, "sma_cross", [(1, 2)]))
    return cases


# Zero variance, fee 0: on each series, the combos of each strategy, and whether they must trade.
# hma on constant closes cannot (its two lines are the same at every bar, so they never cross), nor
# can donchian on constant closes (a close never breaks a channel of highs and lows equal to it; on
# the step series it trades the fall before the step).
ZERO_VARIANCE = {
    "constant": {"hma": ([hma_reference.combo_from_length(length) for length in (6, 11, 30)], False),
                 "sma_cross": ([(2, 8), (3, 17), (5, 30)], True),
                 "donchian": ([(5, 3), (20, 10)], False),
                 "vwma_cross": ([(2, 8), (3, 17), (5, 30)], True),
                 "trade_probe": ([(1,), (7,), (299,)], True)},
    "step": {"hma": ([hma_reference.combo_from_length(length) for length in (8, 11, 14)], True),
             "sma_cross": ([(2, 8), (5, 30), (10, 50)], True),
             "vwma_cross": ([(2, 8), (5, 30), (10, 50)], True)},
}


def zero_variance_cases(constant: Series, step: Series) -> list:
    """Flat equity with trades: every trade enters and leaves at the same constant close, fee 0.
    On constant closes of 0.1 (not a binary fraction) the running sums of sma_cross and
    vwma_cross round differently from bar to bar, so their averages cross; on the step series
    (closes falling, then a step up to a constant 0.1) every crossover strategy enters after the
    step, its windows still holding the bars before it."""
    cases = []
    for series in (constant, step):
        for name, (combos, must_trade) in ZERO_VARIANCE[series.name.split("-")[0]].items():
            traded = 0
            for params in combos:
                trades = STRATEGIES[name].trades(series, params, 0.0)
                figures = stats.statistics(series.close, trades)
                assert math.isnan(figures["sharpe"]) and figures["max_drawdown"] == 0.0, f"{name} {params}: variance"
                traded += len(trades)
            assert traded > 0 or not must_trade, f"{name} never trades on {series.name}: add a combo that does"
            cases.append(Case("zero variance, fee 0", series, name, combos, fee=0.0))
    return cases


def every_bar_cases(fixed: Series, work) -> list:
    """trade_probe in a position on every bar; the others from their first entry to the last bar."""
    n = fixed.n
    holds = [h for h in (1, 2, 3, 6, 9, 18, 37, 111, 333, 499) if (n - 1) % h == 0]
    assert holds, f"{fixed.name}: n - 1 = {n - 1} has no divisor in the list"
    for h in holds:
        assert sum(t.exit_bar - t.entry_bar for t in trade_probe.trade_list(fixed.close, h)) == n - 1
    cases = [Case("every bar in a position", fixed, "trade_probe", [(h,) for h in holds])]
    for name in ("hma", "sma_cross", "donchian", "vwma_cross"):
        # Cut at the exit of the last trade of the first run of trades without a gap (each entering
        # where the previous one left): the last trade closes on the last bar.
        def run_end(trades):
            k = 0
            while k + 1 < len(trades) and trades[k + 1].entry_bar == trades[k].exit_bar:
                k += 1
            return k

        short, params = cut_where(name, fixed, work, lambda t: t[:run_end(t) + 1], lambda t: t[run_end(t)].exit_bar)
        trades = STRATEGIES[name].trades(short, params, DEFAULT_FEE)
        assert len(trades) >= 2 and contiguous_to_end(trades, short.n), f"{name}: not always in a position"
        cases.append(Case("in a position from the first entry to the last bar", short, name, [params]))
    return cases


def gbm_cases(series_list, random_series) -> list:
    """Every grid on every GBM series, at the defaults and at other fees and bars per year."""
    cases = []
    for s in series_list + random_series:
        for name, combos in GRIDS.items():
            cases.append(Case("grid", s, name, combos))
    first, second = series_list[-1], random_series[0]
    for name, combos in GRIDS.items():
        cases.append(Case("fee 0.02, minute bars", first, name, combos, fee=0.02, bars_per_year=98280.0))
        cases.append(Case("fee 0, 390 bars a year", second, name, combos, fee=0.0, bars_per_year=390.0))
    return cases


# ---- Comparing ----------------------------------------------------------------------------------

def from_json(value) -> float:
    """A figure as the JSON row writes it: NaN as null, infinities as "inf" and "-inf"."""
    if value is None:
        return math.nan
    if value in ("inf", "-inf"):
        return float(value)
    return float(value)


def same_bits(a: float, b: float) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    return struct.pack("<d", a) == struct.pack("<d", b)


class Verdicts:
    """The mismatches, the rows compared in each place, and the strategies skipped (and why)."""

    def __init__(self):
        self.bad = 0
        self.rows = {}
        self.columns = ColumnSkips("stats parity")

    def mismatch(self, text):
        print(f"MISMATCH {text}", file=sys.stderr)
        self.bad += 1

    def compare(self, where, case: Case, rows, bars_per_year):
        fee = DEFAULT_FEE if case.fee is None else case.fee
        if len(rows) != len(case.combos):
            self.mismatch(f"{case.strategy} on {case.series.name} ({case.label}, {where}): {len(rows)} rows for "
                          f"{len(case.combos)} combos")
            return
        for params, row in zip(case.combos, rows):
            label = f"{case.strategy} {list(params)} on {case.series.name} ({case.label}, {where})"
            if row.get("error") or list(row.get("params", [])) != list(params):
                self.mismatch(f"{label}: row {row}")
                continue
            self.rows[where] = self.rows.get(where, 0) + 1
            trades = STRATEGIES[case.strategy].trades(case.series, params, fee)
            want = stats.statistics(case.series.close, trades, bars_per_year)
            for field in stats.FIELDS:
                if field not in row:
                    self.mismatch(f"{label}: no {field} in the row")
                    continue
                got = from_json(row[field])
                if not same_bits(got, float(want[field])):
                    self.mismatch(f"{label}: {field} ipcfloor {got!r}, numpy {want[field]!r}")


def combo_file(work, case: Case, tag) -> str:
    path = os.path.join(work, f"combos-{case.strategy}-{tag}.csv")
    with open(path, "w") as f:
        f.write(STRATEGIES[case.strategy].header + "\n")
        f.write("".join(",".join(str(v) for v in params) + "\n" for params in case.combos))
    return path


def sweep_options(work, case: Case, tag):
    argv = ["--combos", combo_file(work, case, tag), "--stats", "--json", "--quiet"]
    if case.fee is not None:
        argv += ["--fee", repr(case.fee)]
    if case.bars_per_year is not None:
        argv += ["--bars-per-year", repr(case.bars_per_year)]
    return argv


def sweep_and_compare(argv, case: Case, place, where, default_bars_per_year, verdicts):
    done = run(argv, check=False)
    if verdicts.columns.refused(case.strategy, STRATEGIES[case.strategy].columns, done, place, verdicts.mismatch):
        return
    rows = json_rows(done)
    if done.returncode != 0 or not rows:
        verdicts.mismatch(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")
        return
    verdicts.compare(where, case, rows, case.bars_per_year or default_bars_per_year)


def in_process(args, work, cases, verdicts):
    """`sweep --inproc --data SERIES.csv [--strategy FILE.so]`, bars per year 252 unless a case says."""
    for k, case in enumerate(cases):
        if (case.strategy, "in process") in verdicts.columns.skipped:
            continue
        argv = [args.ipcfloor, "sweep", "--inproc", "--data", case.series.path, "--threads", "1"]
        module = STRATEGIES[case.strategy].module
        if module is not None:
            argv += ["--strategy", os.path.join(args.strategies, f"{module}.so")]
        sweep_and_compare(argv + sweep_options(work, case, f"inproc-{k}"), case, "in process", "in process",
                          stats.DEFAULT_BARS_PER_YEAR, verdicts)


def through_engine(args, work, cases, verdicts):
    """The cases again through one engine that preloaded every series they use and loaded every
    strategy, with `serve --bars-per-year 390` (what a case that names none gets)."""
    series = list({case.series.path: case.series for case in cases}.values())
    files = [os.path.join(args.strategies, f"{s.module}.so") for s in STRATEGIES.values() if s.module is not None]
    with Engine(args.ipcfloor, work, "stats-parity", series, files,
                ("--bars-per-year", repr(ENGINE_BARS_PER_YEAR))) as engine:
        for k, case in enumerate(cases):
            if (case.strategy, "through an engine") in verdicts.columns.skipped:
                continue
            argv = engine.sweep_argv(args.ipcfloor) + ["--series", case.series.name]
            if STRATEGIES[case.strategy].module is not None:
                argv += ["--strategy", case.strategy]
            sweep_and_compare(argv + sweep_options(work, case, f"engine-{k}"), case, "through an engine",
                              f"through engine {engine.name}", ENGINE_BARS_PER_YEAR, verdicts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ipcfloor", required=True)
    ap.add_argument("--strategies", required=True,
                    help="folder holding sma_cross.so, donchian.so, vwma_cross.so and trade_probe.so")
    ap.add_argument("--workdir")
    ap.add_argument("--seed", type=int, action="append",
                    help=f"a seed ({RANDOM_BARS} bars) to run instead of one drawn at random (up to two)")
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="stats-parity-")
    os.makedirs(work, exist_ok=True)
    given = (args.seed or [])[:2]
    drawn = given + [random.SystemRandom().randrange(1, 2**31) for _ in range(2 - len(given))]
    fixed = [(500, 1), (3000, 7)]
    print(f"stats parity: fixed series {fixed}, seeds {drawn} ({RANDOM_BARS} bars; replay with --seed S --seed S)")
    gbm = [gbm_series(args.ipcfloor, work, bars, seed) for bars, seed in fixed]
    randoms = [gbm_series(args.ipcfloor, work, RANDOM_BARS, seed) for seed in drawn]
    constant = flat_series("constant", work, np.full(300, 0.1))
    step = flat_series("step", work, np.concatenate((np.linspace(0.099, 0.09, 40), np.full(260, 0.1))))
    rising = flat_series("rising", work, np.linspace(50.0, 80.0, 201))
    tiny = write_series("two-bars", work, *(np.array(v) for v in ([100.0, 101.5], [100.0, 100.0], [101.0, 102.0],
                                                                  [99.0, 100.0], [10.0, 20.0])))
    cases = gbm_cases(gbm, randoms) + edge_cases(gbm[0], constant, step, rising, tiny, work)
    verdicts = Verdicts()
    in_process(args, work, cases, verdicts)
    # Through the engine: every case but the grids on the fixed series.
    through_engine(args, work, [c for c in cases if c.label != "grid" or c.series is randoms[0]], verdicts)
    counts = ", ".join(f"{n} rows {where}" for where, n in verdicts.rows.items())
    print(f"stats parity: {counts}: " + ("every figure matches" if verdicts.bad == 0 else
                                         f"{verdicts.bad} mismatches") + verdicts.columns.summary())
    return 0 if verdicts.bad == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
