#!/usr/bin/python3
"""The Python package over the shared-memory segment (ipcfloor, ctypes over libipcfloor.so).

Imports the package the way an installation lays it out (the build tree mirrors it: PACKAGE_ROOT
is <build>/share/ipcfloor/python), starts `ipcfloor serve --wait backoff` on a small series and
checks: the zero-copy read-only series, sweep and backtest against `ipcfloor sweep --inproc
--json` bit for bit, per-combo statuses, the exception classes and their messages, how long a
series view keeps the lane, and the engine stopping under an attached client.

Usage: test_python_shm.py IPCFLOOR_BINARY PACKAGE_ROOT
"""

import gc
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

failures = []
BARS, SEED = 2500, 5
LENGTHS = [6, 7, 10, 19, 33, 64, 120, 200]


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr)


def expect(error_class, what, call):
    try:
        call()
    except error_class as error:
        return error
    except Exception as error:  # noqa: BLE001 - the wrong class is the finding
        check(False, f"{what}: raised {type(error).__name__}: {error}, want {error_class.__name__}")
        return None
    check(False, f"{what}: nothing raised, want {error_class.__name__}")
    return None


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: test_python_shm.py IPCFLOOR_BINARY PACKAGE_ROOT")
    binary, package_root = sys.argv[1], sys.argv[2]
    sys.path.insert(0, package_root)
    import ipcfloor
    from ipcfloor import socket as ipcfloor_socket

    check(ipcfloor.version() == "0.1.0", f"version {ipcfloor.version()}")
    check(ipcfloor_socket.SocketClient is not None, "ipcfloor.socket lives in the same package")

    name = f"ipcfloor-pytest-{os.getpid()}"
    error = expect(ipcfloor.NoEngine, "attach without an engine", lambda: ipcfloor.attach(name))
    check(error is not None and error.code == -2 and name in error.message, f"NoEngine names the engine: {error}")
    expect(ipcfloor.InvalidArgument, "bad wait", lambda: ipcfloor.attach(name, wait="sometimes"))
    expect(ipcfloor.InvalidArgument, "bad timeout", lambda: ipcfloor.attach(name, timeout=0))
    expect(ipcfloor.InvalidArgument, "bad name type", lambda: ipcfloor.attach(b"bytes"))
    expect(ipcfloor.InvalidArgument, "bad name", lambda: ipcfloor.attach("../x"))

    reference = [json.loads(line) for line in subprocess.run(
        [binary, "sweep", "--inproc", "--json", "--bars", str(BARS), "--seed", str(SEED), "--lengths",
         ",".join(map(str, LENGTHS))], check=True, capture_output=True, text=True).stdout.splitlines()]
    grid = ipcfloor.grid(LENGTHS)
    check(grid.tolist() == [row["params"] for row in reference], "ipcfloor.grid builds the engine's windows")
    want_pnl = np.array([row["pnl"] for row in reference])
    want_trades = np.array([row["trades"] for row in reference], dtype=np.int64)

    with tempfile.TemporaryDirectory(prefix="ipcfloor-pyshm-") as tmp:
        series_path = os.path.join(tmp, "series.npy")
        subprocess.run([binary, "gen", "--bars", str(BARS), "--seed", str(SEED), "-o", series_path], check=True,
                       capture_output=True)
        close = np.load(series_path)
        server = subprocess.Popen([binary, "serve", "--name", name, "--bars", str(BARS), "--seed", str(SEED),
                                   "--wait", "backoff", "--lanes", "2", "--quiet"])
        try:
            deadline = time.monotonic() + 10
            engine = None
            while engine is None:
                try:
                    engine = ipcfloor.attach(name, timeout=5.0, wait="backoff")
                except (ipcfloor.NoEngine, ipcfloor.Busy):
                    if time.monotonic() > deadline or server.poll() is not None:
                        raise SystemExit(f"ipcfloor serve --name {name} did not come up")
                    time.sleep(0.02)

            with engine:
                check(engine.bars == BARS and engine.fee == 0.09 and engine.pid == server.pid, repr(engine))
                check(engine.name.startswith(f"gbm(bars={BARS}, seed={SEED}"), engine.name)
                check(engine.engine == name and engine.wait == "backoff" and engine.ring_capacity >= 2, repr(engine))

                series = engine.series
                check(series.dtype == np.float64 and series.shape == (BARS,), f"{series.dtype} {series.shape}")
                check(not series.flags.writeable, "the series is read-only")
                check(not series.flags.owndata, "the series is a view, not a copy")
                check(np.array_equal(series, close), "the view holds the generated series")
                check(fnv1a64(series.tobytes()) == engine.checksum, "checksum is FNV-1a 64 of the bytes")
                check(engine.series is series, "the view is made once")
                expect(ValueError, "writing the series", lambda: series.__setitem__(0, 1.0))

                def make_writeable():
                    series.flags.writeable = True
                expect(ValueError, "making the series writeable", make_writeable)

                result = engine.sweep(grid)
                check(result.refused == 0 and not result.status.any(), f"statuses {result.status}")
                check(np.array_equal(result.pnl.view(np.int64), want_pnl.view(np.int64)), "sweep pnl bit for bit")
                check(np.array_equal(result.trades, want_trades), "sweep trades")
                for i, params in enumerate(grid):
                    pnl, trades = engine.backtest(params)
                    check(pnl == want_pnl[i] and trades == want_trades[i], f"backtest {i}")
                check(engine.backtest(tuple(int(v) for v in grid[0])) == (want_pnl[0], want_trades[0]),
                      "backtest of a tuple")
                check(engine.echo([1, -2, 3, -(2 ** 63), 5, 2 ** 63 - 1]) == (1, -2, 3, -(2 ** 63), 5, 2 ** 63 - 1),
                      "echo")

                bad = grid.copy()
                bad[2, 1] = 0
                bad[5, 4] = BARS + 1
                result = engine.sweep(bad)
                check(result.refused == 2 and result.status[2] == -11 and result.status[5] == -11,
                      f"per-combo statuses {result.status}")
                check(np.isnan(result.pnl[2]) and result.trades[5] == 0, "refused combos: pnl NaN, trades 0")
                ok = [i for i in range(len(LENGTHS)) if i not in (2, 5)]
                check(np.array_equal(result.pnl[ok].view(np.int64), want_pnl[ok].view(np.int64)),
                      "the other combos are untouched")
                error = expect(ipcfloor.WindowOutOfRange, "backtest of a bad window", lambda: engine.backtest(bad[5]))
                check(error is not None and "window p2 (position 4) is 2501" in str(error) and name in str(error),
                      f"the message names the window: {error}")
                check(isinstance(error, ValueError), "WindowOutOfRange is a ValueError")
                check(engine.backtest(grid[0])[1] == want_trades[0], "usable after a refusal")
                expect(ipcfloor.InvalidArgument, "a sweep of the wrong shape", lambda: engine.sweep(grid[:, :5]))
                check(engine.sweep(np.empty((0, 6), dtype=np.int64)).pnl.size == 0, "an empty sweep")

                # Lanes: a series view keeps its Engine's lane until the view goes.
                second = ipcfloor.attach(name, timeout=2.0)
                expect(ipcfloor.Busy, "a third client of two lanes", lambda: ipcfloor.attach(name, timeout=2.0))
                view = second.series[10:20]
                second.close()
                check(second.closed, "closed")
                expect(ipcfloor.Closed, "a request after close", lambda: second.backtest(grid[0]))
                expect(ipcfloor.Closed, "the series after close", lambda: second.series)
                check(np.array_equal(view, close[10:20]), "a view taken before close still reads the series")
                expect(ipcfloor.Busy, "the view still holds the lane", lambda: ipcfloor.attach(name, timeout=2.0))
                del view
                gc.collect()
                third = ipcfloor.attach(name, timeout=2.0)
                check(third.lane != engine.lane, "the lane came back once the view was gone")
                third.close()

                # The engine stops: EngineGone, naming it.
                server.send_signal(signal.SIGINT)
                check(server.wait(timeout=10) == 0, "serve exits 0 on SIGINT")
                error = expect(ipcfloor.EngineGone, "backtest after the engine stopped", lambda: engine.backtest(grid[0]))
                check(error is not None and name in str(error), f"EngineGone names the engine: {error}")
                expect(ipcfloor.EngineGone, "sweep after the engine stopped", lambda: engine.sweep(grid))
            check(engine.closed, "the with block closed the engine")
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGINT)
                try:
                    server.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()

    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print(f"python over the segment: {len(LENGTHS)} combos match sweep --inproc bit for bit; read-only zero-copy "
          "series; per-combo statuses and error classes hold")
    return 0


if __name__ == "__main__":
    sys.exit(main())
