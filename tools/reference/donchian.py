#!/usr/bin/env python3
"""The Donchian breakout with a channel stop of examples/strategies/donchian.c, written
independently in numpy: each channel the max or min of a sliding window of the previous closes
(exact in any order), the rules in plain Python. What the C strategy must equal bit for bit."""

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

DEFAULT_FEE = 0.09


def channels(close: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """high[i], low[i]: the max and min of close[i-n .. i-1] for i >= n; NaN before."""
    high = np.full(close.shape, np.nan)
    low = np.full(close.shape, np.nan)
    windows = sliding_window_view(close[:-1], n)  # windows[j] = close[j .. j+n-1], for bar i = j + n
    high[n:] = windows.max(axis=1)
    low[n:] = windows.min(axis=1)
    return high, low


def backtest(close: np.ndarray, entry_n: int, exit_n: int, fee: float = DEFAULT_FEE) -> tuple[float, int]:
    upper, lower = channels(close, entry_n)
    stop_high, stop_low = channels(close, exit_n)
    position, entry, pnl, trades = 0, 0.0, 0.0, 0

    def close_trade(price):
        nonlocal position, pnl, trades
        change = price / entry - 1.0 if position == 1 else entry / price - 1.0
        pnl += change * 100.0 - fee
        trades += 1
        position = 0

    for i in range(1, close.size):
        price = close[i]
        if position != 0 and i >= exit_n:
            if (position == 1 and price < stop_low[i]) or (position == -1 and price > stop_high[i]):
                close_trade(price)
        if i < entry_n:
            continue
        if price > upper[i] and position != 1:
            if position == -1:
                close_trade(price)
            position, entry = 1, price
        elif price < lower[i] and position != -1:
            if position == 1:
                close_trade(price)
            position, entry = -1, price
    return pnl, trades
