#!/usr/bin/python3
"""Draws one combo's equity curve with its drawdowns shaded, from the file `ipcfloor trades
--equity-out FILE` writes (.csv, .json lines or .npy: bar, close, equity, drawdown per bar), and,
when given, its trades (`--trades-out`) as entry and exit marks on the closes.

Usage: plot_equity.py EQUITY_FILE OUT.png [--trades TRADES_FILE] [--title TEXT]
       (installed as PREFIX/share/ipcfloor/tools/plot_equity.py)

The upper panel is the closes (with the trades' entries and exits when given), the lower one the
marked-to-market equity in percentage points (docs/STATISTICS.md) with every stretch under water
shaded down to the running peak, and the deepest drawdown marked. Needs matplotlib: Debian's
python3-matplotlib for /usr/bin/python3 (tools/setup installs it); another python without it
makes this script say so and exit 3.
"""

import argparse
import json
import sys

import numpy as np

try:
    import matplotlib
except ImportError as error:
    print(f"plot_equity.py: {error} for {sys.executable}: run it with /usr/bin/python3 after apt-get install "
          f"python3-matplotlib (tools/setup does)", file=sys.stderr)
    sys.exit(3)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path, fields):
    """The named fields of an `ipcfloor trades` output file as a dict of numpy arrays."""
    if path.endswith(".npy"):
        records = np.load(path)
        return {name: np.asarray(records[name]) for name in fields}
    if path.endswith(".csv"):
        table = np.genfromtxt(path, delimiter=",", names=True, dtype=None, encoding="utf-8")
        table = np.atleast_1d(table)
        return {name: np.asarray(table[name], dtype=float) for name in fields}
    rows = [json.loads(line) for line in open(path, encoding="utf-8") if line.strip()]
    return {name: np.array([float("nan") if row[name] is None else float(row[name]) for row in rows]) for name in fields}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("equity")
    parser.add_argument("out")
    parser.add_argument("--trades")
    parser.add_argument("--title", default="")
    args = parser.parse_args()
    try:
        curve = load(args.equity, ["bar", "close", "equity", "drawdown"])
    except (OSError, ValueError, KeyError) as error:
        print(f"plot_equity.py: {args.equity}: {error} (give the file `ipcfloor trades --equity-out` wrote)",
              file=sys.stderr)
        return 3
    bar, close, equity, drawdown = (curve[k] for k in ("bar", "close", "equity", "drawdown"))
    peak = equity + drawdown
    figure, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(11, 6.5), height_ratios=(1, 1.2))
    top.plot(bar, close, color="#455a64", linewidth=0.8, label="close")
    if args.trades:
        trades = load(args.trades, ["entry_bar", "exit_bar", "side"])
        first = int(bar[0]) if len(bar) else 0
        for side, colour, label in ((1, "#2e7d32", "long entry"), (-1, "#c62828", "short entry")):
            entries = trades["entry_bar"][trades["side"] == side].astype(int) - first
            entries = entries[(entries >= 0) & (entries < len(bar))]
            top.scatter(bar[entries], close[entries], s=10, color=colour, marker="^" if side == 1 else "v",
                        label=label, zorder=3)
        exits = trades["exit_bar"].astype(int) - first
        exits = exits[(exits >= 0) & (exits < len(bar))]
        top.scatter(bar[exits], close[exits], s=8, color="#6a1b9a", marker="x", label="exit", zorder=3)
    top.set_ylabel("close")
    top.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    bottom.plot(bar, equity, color="#1565c0", linewidth=1.0, label="equity (points)")
    bottom.plot(bar, peak, color="#90a4ae", linewidth=0.6, linestyle="--", label="running peak")
    bottom.fill_between(bar, equity, peak, where=drawdown > 0, color="#ef9a9a", alpha=0.6, linewidth=0,
                        label="drawdown")
    if len(drawdown) and np.nanmax(drawdown) > 0:
        deepest = int(np.nanargmax(drawdown))
        bottom.annotate(f"max drawdown {drawdown[deepest]:.2f}", (bar[deepest], equity[deepest]),
                        xytext=(10, -18), textcoords="offset points", fontsize=8,
                        arrowprops={"arrowstyle": "->", "color": "#b71c1c"})
    bottom.set_xlabel("bar")
    bottom.set_ylabel("percentage points")
    bottom.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8)
    figure.suptitle(args.title or f"equity of {args.equity}")
    figure.tight_layout()
    figure.savefig(args.out, dpi=110)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
