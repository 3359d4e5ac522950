#!/usr/bin/env python3
"""The Donchian breakout with a channel stop of examples/strategies/donchian.c, written
independently in numpy: the channels are the highest high and the lowest low of sliding windows
of the bars before each bar (a max or a min: exact in any order), the rules in plain Python. What
the C strategy must equal bit for bit, and the trade list the engine's statistics come from."""

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from stats import Trade, total_pnl

DEFAULT_FEE = 0.09


def channels(high: np.ndarray, low: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """upper[i], lower[i]: the max of high[i-n .. i-1] and the min of low[i-n .. i-1], for i >= n;
    NaN before."""
    upper = np.full(high.shape, np.nan)
    lower = np.full(low.shape, np.nan)
    # windows[j] = bars j .. j+n-1: the channel of bar i = j + n.
    upper[n:] = sliding_window_view(high[:-1], n).max(axis=1)
    lower[n:] = sliding_window_view(low[:-1], n).min(axis=1)
    return upper, lower


def trade_list(high: np.ndarray, low: np.ndarray, close: np.ndarray, entry_n: int, exit_n: int,
               fee: float = DEFAULT_FEE) -> list[Trade]:
    """The closed trades, in the order closed, each with the pnl the backtest adds. At bar i >= 1:
    an open long closes when the close falls below the lowest low of the previous exit_n bars (a
    short when it rises above their highest high); then, once i >= entry_n, a close above the
    highest high of the previous entry_n bars goes long (closing a short) and one below their
    lowest low goes short (closing a long)."""
    upper, lower = channels(high, low, entry_n)
    stop_high, stop_low = channels(high, low, exit_n)
    trades = []
    position, entry, entry_bar = 0, 0.0, 0

    def close_trade(price, i):
        nonlocal position
        change = price / entry - 1.0 if position == 1 else entry / price - 1.0
        trades.append(Trade(entry_bar, i, position, entry, price, change * 100.0 - fee))
        position = 0

    for i in range(1, close.size):
        price = float(close[i])
        if position != 0 and i >= exit_n:
            if (position == 1 and price < stop_low[i]) or (position == -1 and price > stop_high[i]):
                close_trade(price, i)
        if i < entry_n:
            continue
        if price > upper[i] and position != 1:
            if position == -1:
                close_trade(price, i)
            position, entry, entry_bar = 1, price, i
        elif price < lower[i] and position != -1:
            if position == 1:
                close_trade(price, i)
            position, entry, entry_bar = -1, price, i
    return trades


def backtest(high: np.ndarray, low: np.ndarray, close: np.ndarray, entry_n: int, exit_n: int,
             fee: float = DEFAULT_FEE) -> tuple[float, int]:
    """(pnl, trades): the trades' pnl summed in the order closed."""
    return total_pnl(trade_list(high, low, close, entry_n, exit_n, fee))
