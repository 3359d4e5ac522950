#!/usr/bin/python3
"""The Python package reads like numpy and introspects like a Python library, against a real
engine of two series.

Grids: ipcfloor.grid(np.round(np.linspace(6, 200, 80))) (a float array of whole numbers: it was
refused) and ipcfloor.grid(first, last, count) are the lengths `ipcfloor sweep --grid
FIRST:LAST:COUNT` runs, compared with the CLI's own rows for several grids (fractional ends,
one length, duplicates); sweep takes lengths as backtest takes a length, and series="all" as
`sweep --series all` does (a dict by series name, each equal to that series' sweep).
Introspection: ipcfloor.__version__ is the C library's; Status and status_name name every code
of the C ABI, with docs/PROTOCOL.md's names for the statuses the engine sends; every exception
class shows, raises and pickles as ipcfloor.<Name>; inspect.signature reads every method of the
extension.

Usage: VENV/bin/python test_python_api.py IPCFLOOR_BINARY
"""

import inspect
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile
import traceback

import numpy as np

import ipcfloor
import ipcfloor._ipcfloor as extension
import ipcfloor.socket
from test_python_support import check, expect, finish, start, stop

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BARS = 1200


def cli_lengths(binary, grid):
    """The lengths `ipcfloor sweep --inproc --grid GRID` runs, in its order."""
    done = subprocess.run([binary, "sweep", "--inproc", "--json", "--quiet", "--bars", str(BARS), "--grid", grid],
                          capture_output=True, text=True)
    check(done.returncode == 0, f"sweep --grid {grid}: {done.stderr}")
    return [json.loads(line)["L"] for line in done.stdout.splitlines()]


def check_grids(binary):
    for spec in ("6:200:80", "1:10:4", "7.5:99.5:13", "5:5:3", "1:2:9", "2:1000:7", "333:333:1"):
        first, last, count = spec.split(":")
        want = cli_lengths(binary, spec)
        made = ipcfloor.grid(float(first), float(last), int(count))
        check(made[:, 1].tolist() == want, f"grid({spec}) is --grid {spec}'s lengths: {made[:, 1].tolist()}, CLI {want}")
        check(np.array_equal(made, ipcfloor.grid(want)), f"grid({spec}) holds each length's combo")
    readme = ipcfloor.grid(np.round(np.linspace(6, 200, 80)))
    check(np.array_equal(readme, ipcfloor.grid(6, 200, 80)) and readme.dtype == np.int64 and readme.shape == (80, 6),
          "grid(np.round(np.linspace(6, 200, 80))), the README's, is grid(6, 200, 80)")
    check(np.array_equal(ipcfloor.grid(np.array([6.0, 8.0, 11.0], np.float32)), ipcfloor.grid([6, 8, 11])) and
          np.array_equal(ipcfloor.grid([6.0, 8, np.float64(11)]), ipcfloor.grid([6, 8, 11])),
          "whole floats, in arrays or lists, are taken exactly")


def check_sweeps(engine):
    lengths = [6, 8, 11, 50, 200]
    by_grid = engine.sweep(ipcfloor.grid(lengths))
    for form in (lengths, tuple(lengths), range(6, 7), np.array(lengths, np.uint16), np.array(lengths, np.float64)):
        got = engine.sweep(form)
        rows = len(list(form)) if not isinstance(form, range) else 1
        check(np.array_equal(got.pnl.view(np.int64), by_grid.pnl[:rows].view(np.int64)) and got.refused == 0,
              f"sweep({form!r}) runs those lengths, as sweep(grid(...)) does")
    check(engine.backtest(lengths[2]) == (by_grid.pnl[2], by_grid.trades[2]), "backtest(L) is sweep([L])'s answer")
    every = engine.sweep(lengths, series="all")
    check(isinstance(every, dict) and list(every) == engine.series_names,
          f"series='all' answers every series by name, in the table's order: {list(every)}")
    for index, key in enumerate(engine.series_names):
        one = engine.sweep(lengths, series=index)
        check(np.array_equal(every[key].pnl.view(np.int64), one.pnl.view(np.int64)) and
              np.array_equal(every[key].trades, one.trades), f"series='all'[{key!r}] is the sweep on series {index}")
    expect(ipcfloor.InvalidArgument, "series='all' with out=",
           lambda: engine.sweep(lengths, series="all", out=by_grid))
    bad = ipcfloor.grid(lengths)
    bad[1, 5] = BARS + 1
    names = ipcfloor.status_name(engine.sweep(bad).status)
    check(names.tolist() == ["ok", "window_out_of_range", "ok", "ok", "ok"], f"status_name of a sweep's status: {names}")
    # The strategies the engine serves: the built-in one alone here (test_strategies and
    # strategy_parity load others), chosen by name or index.
    strategies = engine.strategies()
    check(len(strategies) >= 1 and strategies[0] == ("hma", 0, ("h", "L", "s", "p3", "p2", "p"), True) and
          isinstance(strategies[0], ipcfloor.StrategyInfo), f"strategies() names the built-in one first: {strategies}")
    for chosen in ("hma", 0):
        again = engine.sweep(lengths, strategy=chosen)
        check(np.array_equal(again.pnl.view(np.int64), by_grid.pnl.view(np.int64)) and
              np.array_equal(again.trades, by_grid.trades), f"sweep(strategy={chosen!r}) is the default sweep")
    expect(ipcfloor.NoSuchStrategy, "an unknown strategy", lambda: engine.sweep(lengths, strategy="nope"))
    expect(ipcfloor.NoSuchStrategy, "a strategy index past the table",
           lambda: engine.sweep(lengths, strategy=len(strategies)))


def check_statuses():
    codes = {name[2:]: getattr(extension, name) for name in dir(extension) if name.startswith("E_")}
    check(sorted(int(s) for s in ipcfloor.Status if s) == sorted(codes.values()),
          f"Status names every code of the C ABI: {sorted(codes)}")
    check(ipcfloor.Status.WINDOW_OUT_OF_RANGE == extension.E_WINDOW and ipcfloor.Status(-11).name ==
          "WINDOW_OUT_OF_RANGE", "Status(-11) is WINDOW_OUT_OF_RANGE")
    check(ipcfloor.status_name(0) == "ok" and ipcfloor.status_name(np.int32(-21)) == "no_such_series" and
          ipcfloor.status_name(-22) == "forked" and ipcfloor.status_name(-99) == "unknown",
          "status_name of single codes")
    expect(ipcfloor.InvalidArgument, "status_name of a str", lambda: ipcfloor.status_name("ok"))
    expect(ipcfloor.InvalidArgument, "status_name of a float array", lambda: ipcfloor.status_name(np.zeros(2)))
    # docs/PROTOCOL.md's statuses: the engine's own get their wire name; the rest arrive as REJECTED.
    protocol = open(os.path.join(ROOT, "docs", "PROTOCOL.md")).read()
    table = protocol[protocol.index("| status | name | meaning |"):]
    table = table[:table.index("\n\n")]
    wire = set(re.findall(r"^\| \d+ \| `(\w+)` \|", table, re.MULTILINE))
    named = {status.name.lower() for status in ipcfloor.Status}
    # subscribers_behind answers only a paced APPEND, which this package does not send (the C ABI's
    # ipcfloor_append_paced does); bad_option arrives as 'invalid'.
    check(wire - named == {"unknown_opcode", "reserved_bits_set", "engine_error", "bulk_out_of_range", "too_costly",
                           "bad_option", "subscribers_behind"},
          f"PROTOCOL.md's statuses are Status names, but those that arrive as 'rejected' (and bad_option, as 'invalid'): {sorted(wire - named)}")
    check(ipcfloor.__version__ == ipcfloor.version() == extension.version() and
          re.fullmatch(r"\d+\.\d+\.\d+", ipcfloor.__version__), f"__version__ {ipcfloor.__version__}")


def check_names(binary, engine, name):
    exceptions = [getattr(ipcfloor, n) for n in ipcfloor.__all__
                  if isinstance(getattr(ipcfloor, n), type) and issubclass(getattr(ipcfloor, n), BaseException)]
    check(len(exceptions) >= 24, f"{len(exceptions)} exception classes")
    for cls in exceptions + [ipcfloor.Engine, ipcfloor.SweepResult, ipcfloor.Signal]:
        check(cls.__module__ == "ipcfloor" and repr(cls) == f"<class 'ipcfloor.{cls.__name__}'>",
              f"{cls!r} shows as ipcfloor.{cls.__name__}")
    check(ipcfloor.Status.__module__ == "ipcfloor" and pickle.loads(pickle.dumps(ipcfloor.Status.NO_ROOM)) is
          ipcfloor.Status.NO_ROOM, "Status lives in ipcfloor and pickles")
    error = expect(ipcfloor.NoEngine, "attach to nothing", lambda: ipcfloor.attach(name + "-none"))
    if error is not None:
        shown = "".join(traceback.format_exception_only(type(error), error))
        check(shown.startswith("ipcfloor.NoEngine: "), f"a traceback shows ipcfloor.NoEngine: {shown}")
        back = pickle.loads(pickle.dumps(error))
        check(type(back) is ipcfloor.NoEngine and back.code == error.code and back.message == error.message,
              f"an error pickles as itself: {back!r}")
    window = expect(ipcfloor.WindowOutOfRange, "a window past the bars", lambda: engine.backtest(BARS + 1))
    check(window is not None and type(window).__module__ == "ipcfloor", "the extension raises ipcfloor's classes")
    server_error = ipcfloor.socket.ServerError("unix socket x", 3, 4, "window 9")
    back = pickle.loads(pickle.dumps(server_error))
    check(str(back) == str(server_error) and back.name == "window_out_of_range", f"ServerError pickles: {back}")

    want = {"backtest": "(params, series=0, bars=None, fee=None)", "echo": "(params, /)", "append": "(close, tick=0)",
            "subscribe": "(params, with_state=False)", "snapshot": "()", "poll_signal": "()", "wait_signal": "()",
            "close": "() -> 'None'"}
    for method, signature in want.items():
        try:
            got = str(inspect.signature(getattr(engine, method)))
        except (TypeError, ValueError) as failure:
            got = f"no signature: {failure}"
        check(got == signature, f"inspect.signature(engine.{method}) is {signature}: {got}")
    for function, signature in ((extension.combo_from_length, "(length, /)"), (extension.strerror, "(code, /)"),
                                (extension.attach, "(cls, name, wait, timeout_ns, reconnect, reconnect_limit_ns, /)"),
                                (ipcfloor.attach, "(name: 'str', timeout: 'float' = 5.0, wait: 'WaitMode | None' = None, "
                                                  "reconnect: 'bool' = False, reconnect_limit: 'float' = 30.0) -> 'Engine'")):
        try:
            got = str(inspect.signature(function))
        except (TypeError, ValueError) as failure:
            got = f"no signature: {failure}"
        check(got == signature, f"inspect.signature({function.__qualname__}) is {signature}: {got}")


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: VENV/bin/python test_python_api.py IPCFLOOR_BINARY")
    binary = sys.argv[1]
    check_grids(binary)
    check_statuses()
    name = f"ipcfloor-pyapi-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="ipcfloor-pyapi-") as tmp:
        paths = []
        for key, seed in (("ES", 3), ("NQ", 4)):
            paths += ["--data", os.path.join(tmp, f"{key}.npy")]
            subprocess.run([binary, "gen", "--bars", str(BARS), "--seed", str(seed), "-o", paths[-1]], check=True,
                           capture_output=True)
        server, engine = start(binary, name, paths, ipcfloor)
        try:
            check_sweeps(engine)
            check_names(binary, engine, name)
            engine.close()
        finally:
            stop(server)
    return finish("python api: grid() of whole floats and of first/last/count equals --grid; sweep of lengths and "
                  "series='all'; __version__, Status, status_name; classes named ipcfloor.X; signatures readable")


if __name__ == "__main__":
    sys.exit(main())
