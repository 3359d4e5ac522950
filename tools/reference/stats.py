#!/usr/bin/env python3
"""The statistics of docs/STATISTICS.md, computed again in numpy from that page alone: given the
closes of the bars a backtest ran on and the trades it reported, in order, the marked-to-market
equity curve and every figure, bit for bit as the page defines them.

The page's rules, as this file keeps them:
  - every `sum` is a running sum in index order starting from 0.0, one rounding per addition:
    np.cumsum over [0.0, v0, v1, ...] and its last element (np.sum and np.mean add pairwise and
    would round differently);
  - `/`, `*`, `-` and sqrt are single IEEE-754 double operations in the order written (numpy's
    element-wise ufuncs and Python floats are exactly that; nothing is fused);
  - the largest and smallest of several values are exact, whatever the order (max, min).

A trade is `Trade(entry_bar, exit_bar, side, entry_price, exit_price, pnl)` (side +1 long, -1
short; pnl in percentage points, net of the fee, the very value the strategy added to its pnl).
`statistics(close, trades, bars_per_year)` returns a dict of the figures in the page's order
(FIELDS): the integer figures as int, the others as float (NaN and infinities as IEEE values).
"""

import math
from typing import NamedTuple, Sequence

import numpy as np

DEFAULT_BARS_PER_YEAR = 252.0

# The figures in the page's order: pnl and trades, then those every output lists after them.
FIELDS = ("pnl", "trades", "wins", "win_rate", "profit_factor", "expectancy", "best_trade", "worst_trade",
          "avg_win", "avg_loss", "avg_trade_bars", "exposure", "max_drawdown", "max_drawdown_bars",
          "sharpe", "sortino", "calmar", "bars")
INTEGER_FIELDS = frozenset(("trades", "wins", "max_drawdown_bars", "bars"))

NAN = float("nan")
INF = float("inf")


class Trade(NamedTuple):
    entry_bar: int
    exit_bar: int
    side: int
    entry_price: float
    exit_price: float
    pnl: float


def running_sum(values) -> float:
    """0.0 + v0 + v1 + ... in index order, one rounding per addition (np.cumsum adds in order)."""
    v = np.asarray(values, dtype=np.float64)
    return float(np.cumsum(np.concatenate(([0.0], v)))[-1])


def total_pnl(trades: Sequence[Trade]) -> tuple[float, int]:
    """A backtest's (pnl, trades) from its trade list: the pnl summed in order from 0.0."""
    return running_sum([t.pnl for t in trades]), len(trades)


def check_trades(n: int, trades: Sequence[Trade]) -> None:
    """Raises ValueError for a trade list the page's engine would answer engine_error."""
    if n < 2:
        raise ValueError(f"the statistics need at least 2 bars, not {n}")
    previous_exit = 0
    for k, t in enumerate(trades):
        if not 0 <= t.entry_bar <= t.exit_bar < n:
            raise ValueError(f"trade {k}: bars {t.entry_bar}..{t.exit_bar} outside [0, {n}) or entry after exit")
        if k > 0 and t.entry_bar < previous_exit:
            raise ValueError(f"trade {k}: enters at {t.entry_bar}, before the previous exit {previous_exit}")
        if t.side not in (1, -1):
            raise ValueError(f"trade {k}: side {t.side}")
        for price in (t.entry_price, t.exit_price):
            if not (math.isfinite(price) and price > 0.0):
                raise ValueError(f"trade {k}: price {price!r}")
        if not math.isfinite(t.pnl):
            raise ValueError(f"trade {k}: pnl {t.pnl!r}")
        previous_exit = t.exit_bar


def equity(close: np.ndarray, trades: Sequence[Trade]) -> np.ndarray:
    """eq[0..n): R_k + m_k(t) where trade k is open (e_k <= t < x_k), else R_j, j the number of
    trades with x_k <= t; R_k the running sum of the pnl of the trades before k."""
    close = np.asarray(close, dtype=np.float64)
    n = close.size
    pnls = np.array([t.pnl for t in trades], dtype=np.float64)
    realised = np.cumsum(np.concatenate(([0.0], pnls)))  # realised[k] = R_k, k = 0..T
    exits = np.array([t.exit_bar for t in trades], dtype=np.int64)
    # Not in a position: j = how many exits lie at or before t (exits are in order).
    eq = realised[np.searchsorted(exits, np.arange(n), side="right")]
    for k, t in enumerate(trades):
        bars = close[t.entry_bar:t.exit_bar]
        if t.side == 1:
            mark = (bars / t.entry_price - 1.0) * 100.0
        else:
            mark = (t.entry_price / bars - 1.0) * 100.0
        eq[t.entry_bar:t.exit_bar] = realised[k] + mark
    return eq


def first_extreme(values: Sequence[float], better) -> float:
    """The first value no later one beats (`better(a, b)`: a beats b)."""
    best = values[0]
    for v in values[1:]:
        if better(v, best):
            best = v
    return best


def ratio_or_nan(numerator: float, denominator: float) -> float:
    return NAN if denominator == 0.0 else numerator / denominator


def trade_figures(n: int, trades: Sequence[Trade]) -> dict:
    """The figures of the trade list alone (the table's rows up to exposure)."""
    p = [float(t.pnl) for t in trades]
    count = len(p)
    pnl = running_sum(p)
    wins = sum(1 for v in p if v > 0.0)
    losses = sum(1 for v in p if v < 0.0)
    gains = running_sum([v for v in p if v > 0.0])      # G, in trade order
    losses_sum = running_sum([v for v in p if v < 0.0])  # L, in trade order
    if count == 0:
        profit_factor = NAN
    elif losses_sum == 0.0:
        profit_factor = INF if gains > 0.0 else NAN
    else:
        profit_factor = gains / -losses_sum
    held = sum(int(t.exit_bar) - int(t.entry_bar) for t in trades)  # D, an integer sum
    return {
        "pnl": pnl,
        "trades": count,
        "wins": wins,
        "win_rate": ratio_or_nan(float(wins), float(count)),
        "profit_factor": profit_factor,
        "expectancy": ratio_or_nan(pnl, float(count)),
        "best_trade": first_extreme(p, lambda a, b: a > b) if count else NAN,
        "worst_trade": first_extreme(p, lambda a, b: a < b) if count else NAN,
        "avg_win": ratio_or_nan(gains, float(wins)),
        "avg_loss": ratio_or_nan(losses_sum, float(losses)),
        "avg_trade_bars": ratio_or_nan(float(held), float(count)),
        "exposure": float(held) / float(n - 1),
    }


def equity_figures(eq: np.ndarray, bars_per_year: float) -> dict:
    """The drawdowns and the three ratios of the equity curve (the table's rows from max_drawdown)."""
    n = eq.size
    steps = float(n - 1)
    mu = float((eq[n - 1] - eq[0]) / steps)
    r = eq[1:] - eq[:-1]
    d = r - mu
    squares = running_sum(d * d)
    loss = np.minimum(r, 0.0)
    downside = running_sum(loss * loss)
    sd = math.sqrt(squares / float(n - 2)) if n > 2 else NAN
    dd = math.sqrt(downside / steps)
    peak = np.maximum.accumulate(eq)
    max_drawdown = float(np.max(peak - eq))
    # q(t): the last bar <= t where eq stood at its running peak; the longest t - q(t).
    bars = np.arange(n)
    last_peak = np.maximum.accumulate(np.where(eq == peak, bars, 0))
    max_drawdown_bars = int(np.max(bars - last_peak))
    root_b = math.sqrt(bars_per_year)
    return {
        "max_drawdown": max_drawdown,
        "max_drawdown_bars": max_drawdown_bars,
        "sharpe": NAN if sd == 0.0 or math.isnan(sd) else (mu / sd) * root_b,
        "sortino": NAN if dd == 0.0 else (mu / dd) * root_b,
        "calmar": NAN if max_drawdown == 0.0 else (mu * bars_per_year) / max_drawdown,
    }


def statistics(close: np.ndarray, trades: Sequence[Trade], bars_per_year: float = DEFAULT_BARS_PER_YEAR) -> dict:
    """Every figure of docs/STATISTICS.md, in FIELDS order, for `trades` over `close`."""
    close = np.asarray(close, dtype=np.float64)
    trades = [Trade(*t) for t in trades]
    check_trades(close.size, trades)
    if not (math.isfinite(bars_per_year) and bars_per_year > 0.0):
        raise ValueError(f"bars per year must be finite and > 0, not {bars_per_year!r}")
    figures = trade_figures(close.size, trades)
    figures.update(equity_figures(equity(close, trades), float(bars_per_year)))
    figures["bars"] = close.size
    return {name: figures[name] for name in FIELDS}
