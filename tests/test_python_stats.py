#!/usr/bin/python3
"""The Python package's statistics, bar ranges and trade lists, against a real engine of two
series: a GBM series and a copy of its bars [FROM, TO) saved as a file of its own.

- sweep(stats=True) is a dict of numpy arrays, the strategy's parameters by name, then pnl,
  trades, every figure of docs/STATISTICS.md (ipcfloor.STATS_FIGURES, the CLI's names), status and
  reason; every figure equals `ipcfloor sweep --inproc --stats --json` on the same file bit for bit
  (the built-in hma on a grid, sma_cross on combos; the engine's defaults, and a fee and bars per
  year given as options); pandas.DataFrame takes the table as it is (where pandas is installed).
- bars=slice(FROM, TO) on the whole series equals the sliced file as its own series, bit for bit,
  with and without statistics, in sweep and backtest (one combo or an array; fee= too);
  series="all" with stats=True is a table per series; negative ends count from the end; a step, an end outside the
  series, fewer than 2 bars or a non-slice is InvalidArgument (a ValueError) naming it, and so are
  a fee or bars per year out of range.
- A refused combo's row says why (status and reason; figures NaN, trades 0); stats() of one combo
  is its row, and raises the refusal's class (WindowOutOfRange; NoTradeReport for a version-1
  strategy).
- trades() on a combo: the trades' pnl, summed in order, is the sweep's pnl bit for bit, their
  count its trades, the equity one value per bar of the range; on a range it equals the sliced
  series' list.
- progress=True gives the same answers (a tqdm bar where tqdm is installed, silently none else).

Usage: VENV/bin/python test_python_stats.py IPCFLOOR_BINARY STRATEGIES_DIR
"""

import contextlib
import io
import json
import math
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np

import ipcfloor
from test_python_support import check, expect, finish, start, stop

BARS = 1500
FROM, TO = 300, 1300
ENGINE_BARS_PER_YEAR = 390.0
HMA_GRID = "6:200:12"
SMA_COMBOS = [(5, 20), (10, 40), (3, 8), (20, 60), (2, 3)]


def bits(value):
    return "nan" if math.isnan(value) else struct.pack("<d", value).hex()


def from_json(value):
    """A JSON row's figure: NaN is null, infinities "inf" and "-inf"."""
    return math.nan if value is None else float(value)


def cli_rows(binary, data, extra):
    done = subprocess.run([binary, "sweep", "--inproc", "--data", data, "--threads", "1", "--stats", "--json",
                           "--quiet", *extra], capture_output=True, text=True)
    check(done.returncode == 0, f"sweep --inproc {' '.join(extra)}: {done.stderr}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def same_as_cli(table, rows, names, what):
    """Every row of `table` (parameters `names`) is the CLI's row, every figure bit for bit."""
    if not check(len(rows) == len(table["pnl"]), f"{what}: {len(rows)} CLI rows, {len(table['pnl'])} in the table"):
        return
    bad = []
    for i, row in enumerate(rows):
        if [int(table[name][i]) for name in names] != list(row["params"][:len(names)]):
            bad.append(f"row {i}: params {[int(table[n][i]) for n in names]} vs {row['params']}")
            continue
        for field in ("pnl", "trades", *ipcfloor.STATS_FIGURES):
            if bits(float(table[field][i])) != bits(from_json(row[field])):
                bad.append(f"row {i} {field}: {table[field][i]!r} vs CLI {row[field]!r}")
    check(not bad, f"{what}: sweep(stats=True) equals sweep --inproc --stats --json bit for bit: {bad[:5]}")


def check_table_shape(engine, table):
    want = ["h", "L", "s", "p3", "p2", "p", "pnl", "trades", *ipcfloor.STATS_FIGURES, "status", "reason"]
    check(list(table) == want, f"the table's columns: {list(table)}")
    check(ipcfloor.STATS_FIGURES == ("wins", "win_rate", "profit_factor", "expectancy", "best_trade", "worst_trade",
                                     "avg_win", "avg_loss", "avg_trade_bars", "exposure", "max_drawdown",
                                     "max_drawdown_bars", "sharpe", "sortino", "calmar", "bars"),
          f"STATS_FIGURES are docs/STATISTICS.md's names in its order: {ipcfloor.STATS_FIGURES}")
    check(all(isinstance(v, np.ndarray) and v.ndim == 1 and len(v) == len(table["pnl"]) for v in table.values()),
          "every column is a 1-D numpy array of one value per combo")
    try:
        import pandas
    except ImportError:
        print("test_python_stats: pandas is not installed; the DataFrame check is skipped")
        return
    frame = pandas.DataFrame(table)
    check(list(frame.columns) == want and len(frame) == len(table["pnl"]) and
          np.array_equal(frame["sharpe"].to_numpy().view(np.int64), table["sharpe"].view(np.int64)),
          f"pandas.DataFrame(table) takes it as it is: {list(frame.columns)}")


def check_cli_parity(binary, engine, full, strategies):
    table = engine.sweep(ipcfloor.grid(6, 200, 12), stats=True)
    check_table_shape(engine, table)
    hma = ["h", "L", "s", "p3", "p2", "p"]
    same_as_cli(table, cli_rows(binary, full, ["--grid", HMA_GRID, "--bars-per-year", str(ENGINE_BARS_PER_YEAR)]),
                hma, "hma, the engine's fee and bars per year")
    given = engine.sweep(ipcfloor.grid(6, 200, 12), stats=True, fee=0.25, bars_per_year=252)
    same_as_cli(given, cli_rows(binary, full, ["--grid", HMA_GRID, "--fee", "0.25", "--bars-per-year", "252"]), hma,
                "hma, fee=0.25, bars_per_year=252")
    check(not np.array_equal(given["pnl"], table["pnl"]), "fee= changes the answers")
    with tempfile.NamedTemporaryFile("w", suffix=".csv") as combos:
        combos.write("fast,slow\n" + "".join(f"{a},{b}\n" for a, b in SMA_COMBOS))
        combos.flush()
        sma = engine.sweep(np.array(SMA_COMBOS), strategy="sma_cross", stats=True, fee=0.05, bars_per_year=1000)
        check(list(sma)[:3] == ["fast", "slow", "pnl"], f"sma_cross's table names its parameters: {list(sma)[:3]}")
        same_as_cli(sma, cli_rows(binary, full, ["--strategy", os.path.join(strategies, "sma_cross.so"), "--combos",
                                                 combos.name, "--fee", "0.05", "--bars-per-year", "1000"]),
                    ["fast", "slow"], "sma_cross, fee=0.05, bars_per_year=1000")
    plain = engine.sweep(ipcfloor.grid(6, 200, 12))
    check(np.array_equal(plain.pnl.view(np.int64), table["pnl"].view(np.int64)) and
          np.array_equal(plain.trades, table["trades"]), "the table's pnl and trades are the plain sweep's")
    return table


def check_ranges(engine):
    grid = ipcfloor.grid(6, 200, 12)
    for bars in (slice(FROM, TO), slice(FROM - BARS, TO - BARS)):
        ranged = engine.sweep(grid, stats=True, bars=bars)
        alone = engine.sweep(grid, series="part", stats=True)
        bad = [f for f in ("pnl", "trades", *ipcfloor.STATS_FIGURES)
               if not np.array_equal(np.asarray(ranged[f]).view(np.int64), np.asarray(alone[f]).view(np.int64))]
        check(not bad and int(ranged["bars"][0]) == TO - FROM,
              f"sweep(stats=True, bars={bars}) equals the sliced series as its own, bit for bit (differ: {bad})")
    plain, part = engine.sweep(grid, bars=slice(FROM, TO)), engine.sweep(grid, series=1)
    check(np.array_equal(plain.pnl.view(np.int64), part.pnl.view(np.int64)) and
          np.array_equal(plain.trades, part.trades), "sweep(bars=slice) without stats equals the sliced series")
    for i, combo in enumerate(grid.tolist()):
        one = engine.backtest(combo, bars=slice(FROM, TO))
        check(bits(one[0]) == bits(float(part.pnl[i])) and one[1] == part.trades[i] and isinstance(one[1], int),
              f"backtest({combo}, bars=slice) is the sliced series' answer: {one}, {part.pnl[i]!r}")
    pnl, trades = engine.backtest(grid, bars=slice(FROM, TO), fee=0.25)
    fee_part = engine.sweep(grid, series="part", fee=0.25)
    check(np.array_equal(pnl.view(np.int64), fee_part.pnl.view(np.int64)) and np.array_equal(trades, fee_part.trades),
          "backtest(grid, bars=, fee=) answers arrays, those of the sliced series at that fee")
    expect(ipcfloor.WindowOutOfRange, "backtest(bars=) of a window past the range",
           lambda: engine.backtest(TO - FROM + 1, bars=slice(FROM, TO)))
    expect(ipcfloor.InvalidArgument, "backtest(bars=slice(0, 1))", lambda: engine.backtest(6, bars=slice(0, 1)))
    every = engine.sweep(grid, series="all", stats=True)
    check(list(every) == engine.series_names and
          all(np.array_equal(every[key]["sharpe"].view(np.int64),
                             engine.sweep(grid, series=key, stats=True)["sharpe"].view(np.int64)) for key in every),
          "series='all' with stats=True: a table per series, each that series' own")
    tail = engine.sweep(grid, stats=True, bars=slice(-200, None))
    check(np.array_equal(tail["pnl"].view(np.int64),
                         engine.sweep(grid, stats=True, bars=slice(BARS - 200, BARS))["pnl"].view(np.int64)),
          "a negative start counts from the series' end")
    for bars in (slice(FROM, TO, 2), slice(0, BARS + 1), slice(-BARS - 1, 10), slice(5, 6), slice(10, 5),
                 slice(0.5, 10), (FROM, TO), range(FROM, TO)):
        error = expect(ipcfloor.InvalidArgument, f"bars={bars!r}", lambda: engine.sweep(grid, stats=True, bars=bars))
        check(error is None or (isinstance(error, ValueError) and "bars" in str(error)),
              f"bars={bars!r}: a ValueError naming bars: {error}")
    for option, value in (("fee", -0.1), ("fee", 100.5), ("fee", math.nan), ("fee", "0.1"), ("bars_per_year", 0),
                          ("bars_per_year", -5.0), ("bars_per_year", math.inf), ("bars_per_year", True)):
        error = expect(ipcfloor.InvalidArgument, f"{option}={value!r}",
                       lambda: engine.sweep(grid, stats=True, **{option: value}))
        check(error is None or option in str(error), f"{option}={value!r}: the error names it: {error}")


def check_refusals(engine):
    grid = ipcfloor.grid([6, 8, 11])
    grid[1, 1] = BARS + 1
    table = engine.sweep(grid, stats=True)
    check(table["status"].tolist() == [0, ipcfloor.Status.WINDOW_OUT_OF_RANGE, 0] and
          table["reason"][0] == "" and table["reason"][2] == "" and "L" in str(table["reason"][1]) and
          math.isnan(table["sharpe"][1]) and table["trades"][1] == 0,
          f"a refused row says why: status {table['status'].tolist()}, reason {table['reason'].tolist()}")
    one = engine.stats([3, 6, 2, 1, 2, 3])
    row = engine.sweep(ipcfloor.grid([6]), stats=True)
    check(set(one) == {"pnl", "trades", *ipcfloor.STATS_FIGURES} and
          all(bits(float(one[k])) == bits(float(row[k][0])) for k in one) and isinstance(one["trades"], int),
          f"stats(combo) is its sweep row: {one}")
    expect(ipcfloor.WindowOutOfRange, "stats() of a refused combo", lambda: engine.stats(BARS + 1))
    error = expect(ipcfloor.NoTradeReport, "stats() on a version-1 strategy",
                   lambda: engine.stats([3], strategy="probe"))
    check(error is None or "probe" in str(error), f"the error names the strategy: {error}")


def check_trades(engine):
    combos = ipcfloor.grid([6, 20, 50])
    sweep = engine.sweep(combos, stats=True)
    for i, combo in enumerate(combos.tolist()):
        full = engine.trades(combo)
        summed = 0.0
        for pnl in full.trades["pnl"].tolist():
            summed += pnl
        check(full.trades.dtype.names == ("entry_bar", "exit_bar", "side", "entry_price", "exit_price", "pnl") and
              len(full.trades) == sweep["trades"][i] and bits(summed) == bits(float(sweep["pnl"][i])) and
              bits(full.stats["sharpe"]) == bits(float(sweep["sharpe"][i])) and len(full.equity) == BARS,
              f"trades({combo}): {len(full.trades)} trades summing to {summed!r}, the sweep's {sweep['pnl'][i]!r} "
              f"({sweep['trades'][i]} trades); equity of {len(full.equity)}")
    combo = combos[0].tolist()
    ranged, alone = engine.trades(combo, bars=slice(FROM, TO)), engine.trades(combo, series="part")
    same = all(np.array_equal(ranged.trades[f].view(np.uint64 if ranged.trades[f].itemsize == 8 else np.uint32),
                              alone.trades[f].view(np.uint64 if alone.trades[f].itemsize == 8 else np.uint32))
               for f in ranged.trades.dtype.names)
    check(same and ranged.trades.tobytes() == alone.trades.tobytes() and len(ranged.trades) == len(alone.trades) and
          np.array_equal(ranged.equity.view(np.int64), alone.equity.view(np.int64)) and len(ranged.equity) == TO - FROM,
          "trades(bars=slice) equals the sliced series' list and equity, bars counted from the range's start")
    sma = engine.trades([10, 40], strategy="sma_cross", fee=0.05)
    check(len(sma.trades) == sma.stats["trades"] and set(np.unique(sma.trades["side"]).tolist()) <= {-1, 1},
          f"trades() of sma_cross from its two parameters: {len(sma.trades)} trades")


def check_progress(engine, table):
    grid = ipcfloor.grid(6, 200, 12)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        again = engine.sweep(grid, stats=True, progress=True)
        plain = engine.sweep(grid, progress=True)
    check(np.array_equal(again["pnl"].view(np.int64), table["pnl"].view(np.int64)) and
          np.array_equal(plain.pnl.view(np.int64), table["pnl"].view(np.int64)), "progress=True answers the same")
    try:
        import tqdm  # noqa: F401
        check("12/12" in err.getvalue(), f"a tqdm bar reached 12/12 on stderr: {err.getvalue()[-200:]!r}")
    except ImportError:
        check(err.getvalue() == "", "without tqdm, progress=True prints nothing")


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: VENV/bin/python test_python_stats.py IPCFLOOR_BINARY STRATEGIES_DIR")
    binary, strategies = sys.argv[1:]
    name = f"ipcfloor-pystats-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="ipcfloor-pystats-") as tmp:
        full, part = os.path.join(tmp, "full.npy"), os.path.join(tmp, "part.npy")
        subprocess.run([binary, "gen", "--bars", str(BARS), "--seed", "11", "-o", full], check=True,
                       capture_output=True)
        np.save(part, np.load(full)[FROM:TO])
        args = ["--data", full, "--data", part, "--bars-per-year", str(ENGINE_BARS_PER_YEAR),
                "--strategy", os.path.join(strategies, "sma_cross.so"), "--strategy", os.path.join(strategies, "probe.so")]
        server, engine = start(binary, name, args, ipcfloor)
        try:
            table = check_cli_parity(binary, engine, full, strategies)
            check_ranges(engine)
            check_refusals(engine)
            check_trades(engine)
            check_progress(engine, table)
            engine.close()
        finally:
            stop(server)
    return finish("python stats: sweep(stats=True) equals sweep --inproc --stats --json bit for bit and makes a "
                  "DataFrame; bars=slice equals the sliced series; bad ranges and options refused; refusals say why; "
                  "trades() sums to the sweep's pnl; progress=True")


if __name__ == "__main__":
    sys.exit(main())
