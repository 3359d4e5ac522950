#!/usr/bin/python3
"""Strict input and one error family in the Python package (ipcfloor), against a real engine.

Every bad value is refused before anything is sent, with ipcfloor.InvalidArgument (an
ipcfloor.Error and a ValueError, code IPCFLOOR_E_INVALID) whose sentence names the call, the
argument and the value; the Engine stays usable after each. Windows and lengths are whole
numbers: ints, or floats whose value is whole (np.round's output, taken exactly); a float that is
not whole (a grid `g + 0.5`, nan), a bool, a string, a value past int64 (`backtest([2**64,
...])`, which once wrapped to 0), a wrong shape and a list nested 5,000 deep (once a
RecursionError) are refused. backtest and subscribe take the same three forms (six windows, a
length L, an (n, 6) array), so `backtest(6)` is the combo of L = 6 as `subscribe(6)` is; sweep
takes lengths or an (n, 6) array; `grid([-5])` names the length. sweep(out=) fills the caller's
arrays. Timeouts are seconds in [0.001, 86400] (1e9 was accepted). ipcfloor.socket refuses a bad
shape with InvalidArgument too (it leaked numpy's ValueError), and a connect to nothing with
NoEngine. The attributes follow one rule: what is read from the segment is an attribute (series,
published_series), what asks the engine a method.

Usage: VENV/bin/python test_python_input.py IPCFLOOR_BINARY
"""

import os
import sys
import tempfile

import numpy as np

import ipcfloor
import ipcfloor.socket
from test_python_support import check, expect, finish, start, stop

BARS = 1500


def refused(what, call, *fragments, error_class=None):
    """call() must raise error_class (InvalidArgument by default), an ipcfloor.Error carrying a code
    and a message, whose sentence holds every fragment."""
    error_class = error_class or ipcfloor.InvalidArgument
    error = expect(error_class, what, call)
    if error is None:
        return None
    check(isinstance(error, ipcfloor.Error) and isinstance(error.code, int) and error.code < 0 and
          error.message == str(error) and error.message,
          f"{what}: the error is an ipcfloor.Error carrying the code and the sentence: {error!r}")
    if error_class is ipcfloor.InvalidArgument:
        check(error.code == -1 and isinstance(error, ValueError), f"{what}: code {error.code}, a ValueError")
    for fragment in fragments:
        check(fragment in str(error), f"{what}: {fragment!r} not in the sentence: {error}")
    return error


def check_windows(engine):
    g = ipcfloor.grid([6, 8, 11, 50, 200])
    combo = [3, 6, 2, 1, 2, 3]
    good = engine.backtest(combo)

    # The float grid once truncated and run; a float is taken only when its value is whole.
    refused("sweep(g + 0.5)", lambda: engine.sweep(g + 0.5), "sweep: params[0][0] is 3.5", "float64",
            "not a whole number", "np.round")
    refused("backtest(g + 0.5)", lambda: engine.backtest(g + 0.5), "backtest: params[0][0] is 3.5")
    refused("a float window in a list", lambda: engine.backtest([3, 6.5, 2, 1, 2, 3]), "params[1] is 6.5", "a float")
    refused("a float length", lambda: engine.backtest(6.5), "backtest: params is 6.5", "a float")
    refused("a numpy float length", lambda: engine.backtest(np.float32(6.25)), "params is 6.25", "numpy float32")
    refused("nan in a grid", lambda: engine.sweep(np.where(g == 8, np.nan, g)), "params[1][1] is nan")
    refused("inf as a length", lambda: engine.backtest(float("inf")), "params is inf")
    refused("a whole float past int64", lambda: engine.backtest([3, 6, 2, 1, 2, 1e19]), "params[5] is 1e+19",
            "past int64")
    for form in ([3, 6.0, 2, 1, 2, 3], np.array(combo, dtype=np.float64), 6.0, np.float64(6), np.float32(6)):
        check(engine.backtest(form) == good, f"backtest({form!r}): a whole float is taken exactly")
    check(np.array_equal(engine.sweep(g.astype(np.float64)).pnl.view(np.int64), engine.sweep(g).pnl.view(np.int64)),
          "a float grid whose values are whole sweeps as the int grid")
    # Nesting: a grid nests two levels; 5,000 once raised RecursionError.
    deep = [6]
    for _ in range(5000):
        deep = [deep]
    for what, call in (("backtest", lambda: engine.backtest(deep)), ("sweep", lambda: engine.sweep(deep)),
                       ("subscribe", lambda: engine.subscribe(deep)), ("grid", lambda: ipcfloor.grid(deep)),
                       ("echo", lambda: engine.echo(deep))):
        refused(f"{what} of a list nested 5,000 deep", call, f"{what}: params" if what != "grid" else "grid: lengths",
                "nested 3 levels deep")
    refused("a 2-D array inside a list", lambda: engine.sweep([np.zeros((1, 6), np.int64)]), "params[0] is a 2-D array")
    # Past int64: once wrapped to 0 and reported as "window is 0".
    refused("backtest([2**64, ...])", lambda: engine.backtest([2 ** 64, 6, 2, 1, 2, 3]),
            "backtest: params[0] is 18446744073709551616, past int64")
    refused("backtest([2**63, ...])", lambda: engine.backtest([3, 2 ** 63, 2, 1, 2, 3]),
            "params[1] is 9223372036854775808, past int64")
    refused("backtest([-2**63 - 1, ...])", lambda: engine.backtest([3, 6, 2, 1, 2, -(2 ** 63) - 1]),
            "params[5] is -9223372036854775809, past int64")
    refused("a uint64 array past int64", lambda: engine.sweep(np.array([[2 ** 63, 6, 2, 1, 2, 3]], dtype=np.uint64)),
            "sweep: params[0][0] is 9223372036854775808, past int64")
    refused("a big int in a grid of lists", lambda: engine.sweep([combo, [3, 6, 2, 1, 2, 2 ** 70]]),
            "params[1][5] is 1180591620717411303424, past int64")
    refused("a length past int64", lambda: engine.backtest(2 ** 64), "params (a length) is 18446744073709551616")
    # Bools are not windows, though Python and numpy treat them as ints.
    refused("a bool window", lambda: engine.backtest([True, 6, 2, 1, 2, 3]), "params[0] is True", "a bool")
    refused("a bool length", lambda: engine.backtest(True), "params is True", "a bool")
    refused("a bool array", lambda: engine.sweep(np.ones((2, 6), dtype=bool)), "params[0][0] is True")
    refused("a str window", lambda: engine.backtest(["3", 6, 2, 1, 2, 3]), "params[0] is '3'", "a str")
    refused("a str", lambda: engine.backtest("6"), "params is '6'")
    refused("None", lambda: engine.backtest(None), "params is None")
    # Shapes.
    refused("five windows", lambda: engine.backtest([3, 6, 2, 1, 2]), "params has shape (5,)", "a length L")
    refused("(2, 5)", lambda: engine.backtest(np.zeros((2, 5), dtype=np.int64)), "params has shape (2, 5)")
    refused("ragged", lambda: engine.sweep([[3, 6, 2, 1, 2, 3], [3, 6]]), "params is ragged")
    refused("sweep of one length", lambda: engine.sweep(6), "sweep: params is one length (6)", "[6]", "backtest(6)")
    refused("sweep of a 3-D array", lambda: engine.sweep(np.ones((1, 1, 6), np.int64)), "params has shape (1, 1, 6)")
    refused("sweep of (n, 5)", lambda: engine.sweep(g[:, :5]), "params has shape (5, 5)")
    refused("echo of three", lambda: engine.echo([1, 2, 3]), "echo: params has shape (3,)")
    refused("echo of a float", lambda: engine.echo([1, 2, 3, 4, 5, 6.5]), "echo: params[5] is 6.5")
    refused("a length of 0", lambda: engine.backtest(0), "params (a length) is 0", ">= 1")
    # The engine judges windows it can hold: WindowOutOfRange, the C ABI's code and sentence.
    error = refused("a window past the bars", lambda: engine.backtest([3, 6, 2, 1, 2, BARS + 1]),
                    f"is {BARS + 1}, refused by strategy hma for a series of {BARS} bars", error_class=ipcfloor.WindowOutOfRange)
    check(error is not None and error.code == -11, f"WindowOutOfRange carries code -11: {error}")
    check(engine.backtest(combo) == good, "the Engine answers the same after every refusal")


def check_forms(engine):
    """The three forms of backtest, and the integer types each takes."""
    combo = ipcfloor.combo_from_length(6)
    check(combo == (3, 6, 2, 1, 2, 3), f"combo_from_length(6) {combo}")
    want = engine.backtest(combo)
    for form in (6, np.int64(6), np.uint8(6), np.array(6), list(combo), np.array(combo), np.array(combo, np.int32),
                 np.array(combo, np.uint16), [np.int64(v) for v in combo]):
        check(engine.backtest(form) == want, f"backtest({form!r}) is backtest of L = 6")
    g = ipcfloor.grid(np.array([6, 8, 11, 50, 200], dtype=np.uint32))
    check(np.array_equal(g, ipcfloor.grid(range(6, 12))[[0, 2, 5]].tolist() + ipcfloor.grid([50, 200]).tolist()),
          "grid takes lists, ranges and unsigned arrays alike")
    pnl, trades = engine.backtest(g)
    swept = engine.sweep(g)
    check(np.array_equal(pnl.view(np.int64), swept.pnl.view(np.int64)) and np.array_equal(trades, swept.trades),
          "backtest of an (n, 6) array equals sweep")
    check(pnl.dtype == np.float64 and trades.dtype == np.int64, f"arrays of answers {pnl.dtype} {trades.dtype}")
    for i in range(len(g)):
        check(engine.backtest(g[i]) == (pnl[i], trades[i]), f"backtest of row {i} equals the array's answer {i}")
    bad = g.copy()
    bad[3, 1] = BARS + 5
    refused("backtest of a grid with a bad row", lambda: engine.backtest(bad), "combo 3", "of 5 was refused",
            "window out of range", error_class=ipcfloor.WindowOutOfRange)

    # sweep(out=) fills the caller's arrays in place.
    out = ipcfloor.SweepResult(np.full(5, -1.0), np.full(5, -1, np.int64), np.full(5, 7, np.intc), 0)
    result = engine.sweep(g, out=out)
    check(result.pnl is out.pnl and result.trades is out.trades and result.status is out.status and
          np.array_equal(out.pnl.view(np.int64), swept.pnl.view(np.int64)) and not out.status.any(),
          "sweep(out=) fills the given arrays")
    refused("out of the wrong dtype", lambda: engine.sweep(g, out=(np.empty(5), np.empty(5), np.empty(5, np.intc))),
            "out.trades is float64 (5,)", "int64")
    refused("out of the wrong length", lambda: engine.sweep(g, out=(np.empty(4), np.empty(4, np.int64),
                                                                     np.empty(4, np.intc))), "out.pnl", "shape (5,)")

    refused("grid([-5])", lambda: ipcfloor.grid([-5]), "grid: lengths[0] is -5", ">= 1")
    refused("grid([6, 0])", lambda: ipcfloor.grid([6, 0]), "lengths[1] is 0")
    refused("grid of floats", lambda: ipcfloor.grid([6.0, 8.5]), "lengths[1] is 8.5", "a float", "not a whole number")
    refused("grid of a float array", lambda: ipcfloor.grid(np.array([6.5])), "lengths[0] is 6.5")
    refused("grid of a linspace not rounded", lambda: ipcfloor.grid(np.linspace(6, 200, 80)),
            "lengths[1] is 8.455", "np.round", "ipcfloor.grid(first, last, count)")
    refused("grid(0, 10, 5)", lambda: ipcfloor.grid(0, 10, 5), "grid(0, 10, 5)", "1 <= first <= last")
    refused("grid(10, 6, 5)", lambda: ipcfloor.grid(10, 6, 5), "1 <= first <= last")
    refused("grid(6, 200, 0)", lambda: ipcfloor.grid(6, 200, 0), "1 <= count <= 100000")
    refused("grid(6, 200, 100001)", lambda: ipcfloor.grid(6, 200, 100001), "1 <= count <= 100000")
    refused("grid(6, inf, 5)", lambda: ipcfloor.grid(6, float("inf"), 5), "last is inf", "finite")
    refused("grid(6, 200, 7.5)", lambda: ipcfloor.grid(6, 200, 7.5), "count is 7.5")
    refused("grid(6, 200)", lambda: ipcfloor.grid(6, 200), "grid(first, last, count)")
    refused("grid of bools", lambda: ipcfloor.grid([True]), "lengths[0] is True")
    refused("grid of a 2-D array", lambda: ipcfloor.grid([[6, 8]]), "lengths has shape (1, 2)")
    refused("grid of a str", lambda: ipcfloor.grid("68"), "lengths is '68'")
    refused("combo_from_length(0)", lambda: ipcfloor.combo_from_length(0), "length is 0")
    refused("combo_from_length(2**63)", lambda: ipcfloor.combo_from_length(2 ** 63), "length is 9223372036854775808")
    refused("combo_from_length(7.5)", lambda: ipcfloor.combo_from_length(7.5), "length is 7.5")

    refused("series=1.5", lambda: engine.backtest(6, series=1.5), "series is 1.5")
    refused("series=True", lambda: engine.backtest(6, series=True), "series is True")
    refused("series=None", lambda: engine.sweep(g, series=None), "series is None")
    refused("series=2**40", lambda: engine.backtest(6, series=2 ** 40), "holds no series 1099511627776",
            error_class=ipcfloor.NoSuchSeries)


def check_live_forms(binary):
    """subscribe takes the forms backtest takes, and append its close and tick strictly."""
    name = f"ipcfloor-pyinput-live-{os.getpid()}"
    server, engine = start(binary, name, ["--bars", "400", "--live", "--capacity", "500", "--subscriptions", "5"],
                           ipcfloor)
    try:
        check(engine.subscribe(6) == 0, "subscribe(6): a length, like backtest(6)")
        check(engine.subscribe([3, 6, 2, 1, 2, 3]) == 1, "subscribe of six windows")
        check(engine.subscribe(ipcfloor.grid([8, 11])) == [2, 3], "subscribe of an (n, 6) array: the ids")
        sub, state = engine.subscribe(np.int64(6), with_state=True)
        pnl, trades = engine.backtest(6)
        check(sub == 4 and state.trades == trades and state.pnl == pnl, f"subscribe(np.int64(6)) with state {state}")
        error = refused("subscribe of a grid past the room", lambda: engine.subscribe(ipcfloor.grid([20, 30])),
                        "combo 0 [10, 20, 4, 3, 5, 10] of 2", error_class=ipcfloor.NoRoom)
        check(error is not None and error.code == -20, f"NoRoom keeps its code: {error}")
        refused("subscribe(6.5)", lambda: engine.subscribe(6.5), "subscribe: params is 6.5")
        refused("subscribe(True)", lambda: engine.subscribe(True), "subscribe: params is True")
        refused("subscribe of a float window", lambda: engine.subscribe([3, 6, 2, 1, 2, 3.5]), "params[5] is 3.5")
        refused("subscribe([2**64, ...])", lambda: engine.subscribe([2 ** 64, 6, 2, 1, 2, 3]), "past int64")
        refused("subscribe(0)", lambda: engine.subscribe(0), "subscribe: params (a length) is 0")
        refused("append('100')", lambda: engine.append("100"), "append: close is '100'", "a str")
        refused("append(True)", lambda: engine.append(True), "close is True")
        refused("append(tick=-1)", lambda: engine.append(100.0, tick=-1), "tick is -1")
        refused("append(tick=2**64)", lambda: engine.append(100.0, tick=2 ** 64), "tick is 18446744073709551616")
        refused("append(tick=1.5)", lambda: engine.append(100.0, tick=1.5), "tick is 1.5")
        refused("append(nan)", lambda: engine.append(float("nan")), "finite number > 0", error_class=ipcfloor.BadPrice)
        check(engine.append(100) == 401 and engine.append(np.float32(101.5), tick=np.uint64(7)) == 402,
              "append takes an int close, numpy floats and ticks")
        check(not callable(engine.published_series) and engine.published_series.size == 402 and
              not callable(engine.series) and engine.series.size == 402,
              "series and published_series are both attributes (read in place); live, series is every published bar")
        engine.close()
    finally:
        stop(server)


def check_attach(name):
    for what, call, fragment in [
        ("a bytes name", lambda: ipcfloor.attach(b"x"), "attach: name is b'x'"),
        ("a NUL in the name", lambda: ipcfloor.attach("a\0b"), "attach: name is 'a\\x00b'"),
        ("timeout=True", lambda: ipcfloor.attach(name, timeout=True), "attach: timeout is True"),
        ("timeout='5'", lambda: ipcfloor.attach(name, timeout="5"), "attach: timeout is '5'"),
        ("timeout=nan", lambda: ipcfloor.attach(name, timeout=float("nan")), "attach: timeout is nan"),
        ("timeout=0", lambda: ipcfloor.attach(name, timeout=0), "attach: timeout is 0"),
        ("timeout=1e9", lambda: ipcfloor.attach(name, timeout=1e9), "attach: timeout is 1000000000.0"),
        ("timeout=86400.5", lambda: ipcfloor.attach(name, timeout=86400.5), "from 0.001 (1 ms) to 86400 (one day)"),
        ("timeout=0.0005", lambda: ipcfloor.attach(name, timeout=0.0005), "attach: timeout is 0.0005"),
        ("wait='sometimes'", lambda: ipcfloor.attach(name, wait="sometimes"), "attach: wait is 'sometimes'"),
    ]:
        refused(what, call, fragment)
    refused("a name no engine serves", lambda: ipcfloor.attach(name + "-none"), name + "-none",
            error_class=ipcfloor.NoEngine)
    refused("a timeout of a day is in range (no engine)", lambda: ipcfloor.attach(name + "-none", timeout=86400),
            name + "-none", error_class=ipcfloor.NoEngine)


def check_socket_input(tmp):
    """ipcfloor.socket: every bad value an ipcfloor.Error, refused before anything is sent (no server
    is needed for that); a connect to nothing NoEngine."""
    import socket as pysocket
    path = os.path.join(tmp, "listener.sock")
    listener = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    client = ipcfloor.socket.SocketClient.unix(path, timeout=5.0)
    close = np.linspace(100.0, 120.0, 50)
    try:
        for what, call, fragment in [
            ("sweep of (2, 5) windows", lambda: client.sweep(close, np.zeros((2, 5), np.int64)), "params has shape (2, 5)"),
            ("sweep of a 2-D close", lambda: client.sweep(close.reshape(5, 10), [6]), "close has shape (5, 10)"),
            ("sweep of float windows", lambda: client.sweep(close, [[3, 6, 2, 1, 2, 3.5]]), "params[0][5] is 3.5"),
            ("sweep of words", lambda: client.sweep(["a", "b"], [6]), "close is not an array of numbers"),
            ("sweep_loaded of one length", lambda: client.sweep_loaded(6), "params is one length"),
            ("echo of a 2-D array", lambda: client.echo(np.zeros((2, 2))), "echo: close has shape (2, 2)"),
            ("load of a str", lambda: client.load("abc"), "load: close"),
            ("backtest of five windows", lambda: client.backtest([1, 2, 3, 4, 5]), "backtest: params has shape (5,)"),
            ("backtest of 3.5", lambda: client.backtest([1, 2, 3, 4, 5, 3.5]), "params[5] is 3.5"),
            ("echo_params of nine", lambda: client.echo_params(list(range(9))), "echo_params: params has shape (9,)"),
            ("build_request of a bad opcode", lambda: ipcfloor.socket.build_request(300), "opcode is 300"),
            ("a timeout of 1e9", lambda: ipcfloor.socket.SocketClient.unix(path, timeout=1e9),
             "SocketClient.unix: timeout is 1000000000.0"),
            ("a tcp port of 0", lambda: ipcfloor.socket.SocketClient.tcp("127.0.0.1", 0), "port 0"),
        ]:
            refused(what, call, fragment)
    finally:
        client.close()
        listener.close()
    refused("a socket nothing listens at", lambda: ipcfloor.socket.SocketClient.unix(os.path.join(tmp, "none.sock")),
            "nothing listens at unix socket", error_class=ipcfloor.NoEngine)


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: VENV/bin/python test_python_input.py IPCFLOOR_BINARY")
    binary = sys.argv[1]
    name = f"ipcfloor-pyinput-{os.getpid()}"
    check_attach(name)
    server, engine = start(binary, name, ["--bars", str(BARS), "--seed", "3", "--lanes", "1"], ipcfloor)
    try:
        check_windows(engine)
        check_forms(engine)
        engine.close()
        refused("backtest after close", lambda: engine.backtest(6), "this Engine was closed",
                error_class=ipcfloor.Closed)
    finally:
        code = stop(server)
    check(code == 0, f"serve exits 0 on SIGINT, got {code}")
    check_live_forms(binary)
    with tempfile.TemporaryDirectory(prefix="ipcfloor-pyinput-") as tmp:
        check_socket_input(tmp)
    classes = [getattr(module, n) for module in (ipcfloor, ipcfloor.socket) for n in module.__all__]
    exceptions = [c for c in classes if isinstance(c, type) and issubclass(c, BaseException)]
    check(len(exceptions) >= 26 and all(issubclass(c, ipcfloor.Error) for c in exceptions),
          f"every exception class of the package derives from ipcfloor.Error: {exceptions}")

    return finish("python input: every bad window, length, shape, series, close, tick and attach argument refused "
                  "with InvalidArgument naming it; backtest and subscribe take the same three forms")

if __name__ == "__main__":
    sys.exit(main())
