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
def backtest(close, h, L, s, p3, p2, p, fee):
    hma = wma(2.0 * wma(close, h) - wma(close, L), s)
    hma3 = wma(3.0 * wma(close, p3) - wma(close, p2) - wma(close, p), p)
    pos = 0
    entry = 0.0
    pnl = 0.0
    trades = 0
    for i in range(1, close.shape[0]):
        if hma3[i - 1] <= hma[i - 1] and hma3[i] > hma[i]:
            if pos == -1:
                pnl += (entry / close[i] - 1.0) * 100.0 - fee
                trades += 1
            if pos != 1:
                pos = 1
                entry = close[i]
        elif hma3[i - 1] >= hma[i - 1] and hma3[i] < hma[i]:
            if pos == 1:
                pnl += (close[i] / entry - 1.0) * 100.0 - fee
                trades += 1
            if pos != -1:
                pos = -1
                entry = close[i]
    return pnl, trades


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
