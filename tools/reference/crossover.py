#!/usr/bin/env python3
"""The stop-and-reverse rule the crossover examples share (sma_cross.c, vwma_cross.c), in plain
Python: at bar i >= 1, the fast line crossing above the slow one (fast[i-1] <= slow[i-1] and
fast[i] > slow[i]) goes long, crossing below (>= then <) goes short; each reversal closes the open
trade at that bar's close, net of the fee. Any NaN makes a comparison false, so a line that has
not filled its window never crosses. A position still open at the end is not a trade."""

import numpy as np

from stats import Trade


def crossover_trades(close: np.ndarray, fast: np.ndarray, slow: np.ndarray, fee: float) -> list[Trade]:
    """The closed trades, in the order closed, each with the pnl the backtest adds:
    (price / entry - 1) * 100 - fee long, (entry / price - 1) * 100 - fee short."""
    trades = []
    position, entry, entry_bar = 0, 0.0, 0
    for i in range(1, close.size):
        price = float(close[i])
        if fast[i - 1] <= slow[i - 1] and fast[i] > slow[i]:
            side = 1
        elif fast[i - 1] >= slow[i - 1] and fast[i] < slow[i]:
            side = -1
        else:
            continue
        if position == -side:
            change = price / entry - 1.0 if position == 1 else entry / price - 1.0
            trades.append(Trade(entry_bar, i, position, entry, price, change * 100.0 - fee))
        if position != side:
            position, entry, entry_bar = side, price, i
    return trades
