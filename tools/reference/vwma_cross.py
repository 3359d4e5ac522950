#!/usr/bin/env python3
"""The volume-weighted moving-average crossover of examples/strategies/vwma_cross.c, written
independently in numpy: vwma_n[i] = (pv[i] - pv[i-n]) / (v[i] - v[i-n]) from the running sums
pv of close*volume and v of volume (np.cumsum adds in order; pv[-1] = v[-1] = 0), NaN before the
window fills and where it traded no volume (0/0). Long when the fast VWMA crosses above the slow
one, short when it crosses below, each reversal closing the open trade at that bar's close net of
the fee. What the C strategy must equal bit for bit, and the trade list the statistics come from."""

import numpy as np

from crossover import crossover_trades
from stats import Trade, total_pnl

DEFAULT_FEE = 0.09


def vwma(close: np.ndarray, volume: np.ndarray, n: int) -> np.ndarray:
    """vwma_n[i] for every bar: NaN for i < n - 1, and where the window's volume is 0."""
    pv = np.cumsum(close * volume)
    v = np.cumsum(volume)
    pv_before = np.concatenate(([0.0], pv[:-1]))  # pv_before[j] = pv[j-1], 0 for j = 0
    v_before = np.concatenate(([0.0], v[:-1]))
    out = np.full(close.shape, np.nan)
    start = np.arange(close.size - n + 1)  # bar i's window starts at bar i - n + 1
    with np.errstate(invalid="ignore", divide="ignore"):
        out[n - 1:] = (pv[n - 1:] - pv_before[start]) / (v[n - 1:] - v_before[start])
    return out


def trade_list(close: np.ndarray, volume: np.ndarray, fast: int, slow: int,
               fee: float = DEFAULT_FEE) -> list[Trade]:
    """The closed trades, in the order closed, each with the pnl the backtest adds."""
    return crossover_trades(close, vwma(close, volume, fast), vwma(close, volume, slow), fee)


def backtest(close: np.ndarray, volume: np.ndarray, fast: int, slow: int,
             fee: float = DEFAULT_FEE) -> tuple[float, int]:
    """(pnl, trades): the trades' pnl summed in the order closed."""
    return total_pnl(trade_list(close, volume, fast, slow, fee))
