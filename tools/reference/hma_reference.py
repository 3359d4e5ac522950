"""Independent numpy/numba reference for the HMA/HMA3 stop-and-reverse backtest (docs/SPEC.md §1).

Written straight from the specification, deliberately naive: every weighted moving average
is summed term by term (k = 1..n), one combo at a time, on one thread. It is the yardstick
for the C++ kernel's parity gate and for the compute benchmark; it must never be "optimised"
in a way that changes its summation order.
"""

import math

import numpy as np
from numba import njit

DEFAULT_FEE = 0.09


def gbm_series(bars=150_000, seed=42, mu=0.05, sigma=0.30, s0=100.0, dt=1.0 / (252 * 390)):
    """The default data set of docs/SPEC.md §1, exactly as numpy builds it."""
    rng = np.random.default_rng(seed)
    lr = mu * dt + sigma * np.sqrt(dt) * rng.standard_normal(bars - 1)
    close = np.empty(bars)
    close[0] = s0
    close[1:] = s0 * np.exp(np.cumsum(lr))
    return close


def combo_from_length(length):
    """The client's frame for a user-facing length: round-half-to-even, each window >= 1."""
    h = max(round(length / 2), 1)
    s = max(round(math.sqrt(length)), 1)
    p = max(round(length / 2), 1)
    p3 = max(round(p / 3), 1)
    p2 = max(round(p / 2), 1)
    return (h, length, s, p3, p2, p)


def default_grid(first=6, last=200, count=80):
    return [int(round(v)) for v in np.linspace(first, last, count)]


@njit(cache=False)
def wma(x, n):
    out = np.full(x.shape[0], np.nan)
    denom = n * (n + 1) / 2.0
    for i in range(n - 1, x.shape[0]):
        acc = 0.0
        for k in range(1, n + 1):
            acc += k * x[i - n + k]
        out[i] = acc / denom
    return out


@njit(cache=False)
def indicators(close, h, L, s, p3, p2, p):
    """The two lines whose crossings trade: hma (h, L, s) and hma3 (p3, p2, p)."""
    hma = wma(2.0 * wma(close, h) - wma(close, L), s)
    hma3 = wma(3.0 * wma(close, p3) - wma(close, p2) - wma(close, p), p)
    return hma, hma3


@njit(cache=False)
def stop_and_reverse(close, hma, hma3, fee, bars, prices):
    """The stop-and-reverse loop: returns (pnl, trades). Each closed trade's pnl is computed once
    and added as that very value; when `bars` has rows (an int64 (n, 3) array) the k-th closed
    trade is also written there as (entry bar, exit bar, side) and in `prices` (float64 (n, 3))
    as (entry price, exit price, pnl). With zero rows nothing is recorded."""
    record = bars.shape[0] > 0
    pos = 0
    entry = 0.0
    entry_bar = 0
    pnl = 0.0
    trades = 0
    for i in range(1, close.shape[0]):
        if hma3[i - 1] <= hma[i - 1] and hma3[i] > hma[i]:
            if pos == -1:
                trade_pnl = (entry / close[i] - 1.0) * 100.0 - fee
                pnl += trade_pnl
                if record:
                    bars[trades, 0], bars[trades, 1], bars[trades, 2] = entry_bar, i, pos
                    prices[trades, 0], prices[trades, 1], prices[trades, 2] = entry, close[i], trade_pnl
                trades += 1
            if pos != 1:
                pos = 1
                entry = close[i]
                entry_bar = i
        elif hma3[i - 1] >= hma[i - 1] and hma3[i] < hma[i]:
            if pos == 1:
                trade_pnl = (close[i] / entry - 1.0) * 100.0 - fee
                pnl += trade_pnl
                if record:
                    bars[trades, 0], bars[trades, 1], bars[trades, 2] = entry_bar, i, pos
                    prices[trades, 0], prices[trades, 1], prices[trades, 2] = entry, close[i], trade_pnl
                trades += 1
            if pos != -1:
                pos = -1
                entry = close[i]
                entry_bar = i
    return pnl, trades


@njit(cache=False)
def backtest(close, h, L, s, p3, p2, p, fee):
    hma, hma3 = indicators(close, h, L, s, p3, p2, p)
    return stop_and_reverse(close, hma, hma3, fee, np.zeros((0, 3), np.int64), np.zeros((0, 3), np.float64))


def trade_list(close, params, fee=DEFAULT_FEE):
    """The closed trades of one combo (h, L, s, p3, p2, p), in the order closed, each with the
    pnl the backtest adds: [(entry_bar, exit_bar, side, entry_price, exit_price, pnl)]."""
    close = np.ascontiguousarray(close, dtype=np.float64)
    hma, hma3 = indicators(close, *params)
    bars = np.zeros((close.shape[0], 3), np.int64)
    prices = np.zeros((close.shape[0], 3), np.float64)
    _, count = stop_and_reverse(close, hma, hma3, fee, bars, prices)
    return [(int(bars[k, 0]), int(bars[k, 1]), int(bars[k, 2]), float(prices[k, 0]), float(prices[k, 1]),
             float(prices[k, 2])) for k in range(count)]


def sweep(close, lengths, fee=DEFAULT_FEE):
    """[(L, params, pnl, trades)] for each length, one combo at a time on one thread."""
    out = []
    for length in lengths:
        params = combo_from_length(length)
        pnl, trades = backtest(close, *params, fee)
        out.append((length, params, pnl, int(trades)))
    return out


def warm_up():
    """Compiles the numba kernels so that a timed run measures execution only."""
    backtest(gbm_series(bars=64, seed=1), 3, 6, 2, 1, 2, 3, DEFAULT_FEE)
