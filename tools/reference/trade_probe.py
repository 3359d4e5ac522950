#!/usr/bin/env python3
"""The test strategy tests/strategies/trade_probe.c, from its rule: one parameter `hold`; trade k
is long from bar k*hold to bar (k+1)*hold, entering and leaving at those bars' closes, for every
k with (k+1)*hold < n. With n - 1 a multiple of hold every bar is in a position; with hold >= n
there is no trade. Its trades are known from the series alone, so every statistic of stats.py
can be checked by hand."""

import numpy as np

from stats import Trade, total_pnl

DEFAULT_FEE = 0.09


def trade_list(close: np.ndarray, hold: int, fee: float = DEFAULT_FEE) -> list[Trade]:
    trades = []
    for entry in range(0, close.size - hold, hold):
        exit_ = entry + hold
        pnl = (float(close[exit_]) / float(close[entry]) - 1.0) * 100.0 - fee
        trades.append(Trade(entry, exit_, 1, float(close[entry]), float(close[exit_]), pnl))
    return trades


def backtest(close: np.ndarray, hold: int, fee: float = DEFAULT_FEE) -> tuple[float, int]:
    return total_pnl(trade_list(close, hold, fee))
