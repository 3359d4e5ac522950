#!/usr/bin/python3
"""The Python package over the shared-memory segment (ipcfloor: its extension over libipcfloor.so).

Runs with the python of a venv the package was pip-installed into (test_python_package.py makes
it from the build tree's share/ipcfloor/python, as from a prefix), starts `ipcfloor serve --wait
backoff` on a small series and
checks: the zero-copy read-only series, sweep and backtest against `ipcfloor sweep --inproc
--json` bit for bit, per-combo statuses, the exception classes and their messages, how long a
series view keeps the lane, and the engine stopping under an attached client. Then live mode
against `ipcfloor serve --live`: bars appended by one Engine, signals of two subscriptions on
another equal to `sweep --inproc` on the whole series bit for bit, snapshot, and every refusal
(capacity full, bad price, not the writer, no room, window, not live) by class and message.
Then an engine of two series (serve --data ES.npy --data NQ.npy): series_names, zero-copy
series_at by index and by name, backtest and sweep with series= (index or name) equal to
`sweep --inproc --data NQ.npy` bit for bit, windows judged against the series named, and
NoSuchSeries / InvalidArgument for an index past the table and an unknown name. Then an OHLC CSV:
series_columns and series_at(..., column=) as read-only views of the file's columns. Last, threads:
a call that waits on the engine lets another Python thread run, and a second thread on the same
Engine while a call is in flight is refused.

Usage: VENV/bin/python test_python_shm.py IPCFLOOR_BINARY
"""

import ctypes
import gc
import json
import math
import os
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

from test_python_support import check, expect, finish, start, stop

BARS, SEED = 2500, 5
LENGTHS = [6, 7, 10, 19, 33, 64, 120, 200]


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def bits(x):
    return struct.pack("<d", x)


def check_not_live(ipcfloor, engine, name):
    """Every live call on an engine started without --live raises NotLive, saying how to start one."""
    check(engine.live is False and engine.capacity == BARS, f"a plain engine: live {engine.live}, capacity "
                                                            f"{engine.capacity}")
    check(engine.published_series.size == BARS, "a plain engine publishes its preloaded bars")
    for what, call in [("append", lambda: engine.append(100.0)), ("subscribe", lambda: engine.subscribe(6)),
                       ("snapshot", engine.snapshot), ("poll_signal", engine.poll_signal),
                       ("wait_signal", engine.wait_signal)]:
        error = expect(ipcfloor.NotLive, f"{what} on a plain engine", call)
        check(error is not None and error.code == -16 and "is not live" in str(error) and
              f"ipcfloor serve --name {name} --live" in str(error), f"NotLive says how: {error}")


LIVE_PRELOAD, LIVE_BARS = 360, 400


def check_live(binary, ipcfloor, tmp):
    """The engine preloads 360 of `gen --bars 400`; one Engine appends the other 40, another
    subscribes L=6 and L=8 and reads their signals."""
    full_path = os.path.join(tmp, "live-full.npy")
    preload_path = os.path.join(tmp, "live-preload.npy")
    subprocess.run([binary, "gen", "--bars", str(LIVE_BARS), "--seed", str(SEED), "-o", full_path], check=True,
                   capture_output=True)
    close = np.load(full_path)
    np.save(preload_path, close[:LIVE_PRELOAD])

    def rows(path):
        done = subprocess.run([binary, "sweep", "--inproc", "--json", "--quiet", "--data", path, "--lengths", "6,8"],
                              check=True, capture_output=True, text=True)
        return [json.loads(line) for line in done.stdout.splitlines()]
    before, after = rows(preload_path), rows(full_path)

    name = f"ipcfloor-pytest-live-{os.getpid()}"
    server, writer = start(binary, name, ["--data", preload_path, "--live", "--capacity", str(LIVE_BARS), "--lanes",
                                          "3", "--subscriptions", "2", "--signal-capacity", "256"], ipcfloor)
    try:
        reader = ipcfloor.attach(name, timeout=5.0, wait="backoff")
        idle = ipcfloor.attach(name, timeout=0.3, wait="backoff")
        check(reader.live and reader.capacity == LIVE_BARS, f"live {reader.live}, capacity {reader.capacity}")
        published = reader.published_series
        check(np.array_equal(published, close[:LIVE_PRELOAD]) and not published.flags.writeable,
              "the published series is the preload, read-only")

        # Nothing pending: None at once.
        started = time.monotonic()
        polled = [reader.poll_signal() for _ in range(1000)]
        took = time.monotonic() - started
        check(all(p is None for p in polled), "poll_signal with nothing pending returns None")
        check(took < 0.5, f"1,000 empty polls took {took * 1e3:.1f} ms: a poll must not wait")
        check(reader.last_error == "", f"no signal is not an error: {reader.last_error}")

        check(reader.subscribe(6) == 0, "the first subscription is id 0")
        sub, state = reader.subscribe(ipcfloor.combo_from_length(8), with_state=True)
        check(sub == 1 and isinstance(state, ipcfloor.Signal) and state.snapshot and not state.gap and
              state.bar == LIVE_PRELOAD - 1 and math.isnan(state.value0), f"subscribe's state {state}")
        check(state.trades == before[1]["trades"] and bits(state.pnl) == bits(before[1]["pnl"]),
              f"L=8 after the preload: {state}, want {before[1]}")
        error = expect(ipcfloor.NoRoom, "a third subscription (serve --subscriptions 2)", lambda: reader.subscribe(11))
        check(error is not None and "already holds 2 subscriptions" in str(error) and name in str(error),
              f"NoRoom: {error}")
        error = expect(ipcfloor.WindowOutOfRange, "a window past the capacity", lambda: idle.subscribe(401))
        check(error is not None and "parameter L (position 1) is 401, refused by strategy hma for a series of 400 bars" in str(error),
              f"WindowOutOfRange: {error}")
        expect(ipcfloor.InvalidArgument, "length 0", lambda: idle.subscribe(0))
        expect(ipcfloor.InvalidArgument, "five windows", lambda: idle.subscribe([1, 2, 3, 4, 5]))

        error = expect(ipcfloor.BadPrice, "a NaN close", lambda: writer.append(float("nan")))
        check(isinstance(error, ValueError) and "close nan" in str(error) and "finite number > 0" in str(error),
              f"BadPrice: {error}")
        expect(ipcfloor.BadPrice, "a negative close", lambda: writer.append(-3.0))
        expect(ipcfloor.InvalidArgument, "a close that is not a number", lambda: writer.append("100"))
        expect(ipcfloor.InvalidArgument, "a negative tick", lambda: writer.append(100.0, tick=-1))
        expect(ipcfloor.InvalidArgument, "a tick past 64 bits", lambda: writer.append(100.0, tick=1 << 64))
        check(reader.published_series.size == LIVE_PRELOAD, "refused appends publish nothing")

        for i in range(LIVE_PRELOAD, LIVE_BARS):
            bars = writer.append(close[i], tick=i + 1)
            check(bars == i + 1, f"append bar {i}: {bars}")
            if i == LIVE_PRELOAD:
                error = expect(ipcfloor.NotTheWriter, "a second writer", lambda: reader.append(99.0))
                check(error is not None and "another client is the series' writer" in str(error),
                      f"NotTheWriter: {error}")
        error = expect(ipcfloor.CapacityFull, "an append past the capacity", lambda: writer.append(100.0))
        check(error is not None and "full at its 400 bars" in str(error) and "nothing was overwritten" in str(error),
              f"CapacityFull: {error}")
        check(np.array_equal(reader.published_series, close), "the published series is the generated one")

        last, next_bar = {}, {0: LIVE_PRELOAD, 1: LIVE_PRELOAD}
        for i in range(2 * (LIVE_BARS - LIVE_PRELOAD)):
            got = reader.wait_signal() if i % 2 == 0 else reader.poll_signal()
            if got is None:
                check(False, f"signal {i} did not come")
                break
            check(got.bar == next_bar[got.subscription] and got.tick == got.bar + 1 and got.flags == 0 and
                  got.dropped == 0, f"signal {got}")
            next_bar[got.subscription] += 1
            last[got.subscription] = got
        check(reader.poll_signal() is None, "nothing after the last bar's signals")
        for k in (0, 1):
            check(k in last and last[k].trades == after[k]["trades"] and bits(last[k].pnl) == bits(after[k]["pnl"]),
                  f"L={after[k]['L']} after bar {LIVE_BARS - 1}: {last.get(k)}, want {after[k]} (sweep --inproc)")

        check(reader.snapshot() == 2, "a snapshot of two subscriptions")
        for k in (0, 1):
            got = reader.poll_signal()
            check(got is not None and got.snapshot and got.subscription == k and got.bar == LIVE_BARS - 1 and
                  got.trades == after[k]["trades"] and bits(got.pnl) == bits(after[k]["pnl"]), f"snapshot {got}")
        check(reader.signals_dropped == 0, f"dropped {reader.signals_dropped}")

        started = time.monotonic()
        error = expect(ipcfloor.Timeout, "a wait with nothing subscribed", idle.wait_signal)
        waited = time.monotonic() - started
        check(0.25 <= waited < 5.0, f"the wait lasted {waited:.3f} s for a 0.3 s timeout")
        check(error is not None and "no signal reached lane" in str(error), f"Timeout: {error}")

        idle.close()
        expect(ipcfloor.Closed, "poll_signal after close", idle.poll_signal)
        expect(ipcfloor.Closed, "append after close", lambda: idle.append(100.0))
        reader.close()
        writer.close()
    finally:
        code = stop(server)
    check(code == 0, f"serve --live exits 0 on SIGINT, got {code}")


def check_two_series(binary, ipcfloor, tmp):
    """serve --data ES.npy --data NQ.npy: the series table and requests on each series."""
    paths = {}
    for key, bars, seed in (("ES", 1300, 41), ("NQ", 1900, 42)):
        paths[key] = os.path.join(tmp, f"{key}.npy")
        subprocess.run([binary, "gen", "--bars", str(bars), "--seed", str(seed), "-o", paths[key]], check=True,
                       capture_output=True)
    close = {key: np.load(path) for key, path in paths.items()}

    def rows(path):
        done = subprocess.run([binary, "sweep", "--inproc", "--json", "--quiet", "--data", path, "--grid", "6:200:12"],
                              check=True, capture_output=True, text=True)
        return [json.loads(line) for line in done.stdout.splitlines()]
    es_rows, nq_rows = rows(paths["ES"]), rows(paths["NQ"])
    check(len(es_rows) == 12 and len(nq_rows) == 12, f"reference rows {len(es_rows)} {len(nq_rows)}")
    check(any(a["pnl"] != b["pnl"] for a, b in zip(es_rows, nq_rows)), "the two series give different answers")
    grid = np.array([row["params"] for row in nq_rows], dtype=np.int64)
    nq_pnl = np.array([row["pnl"] for row in nq_rows])
    es_pnl = np.array([row["pnl"] for row in es_rows])

    name = f"ipcfloor-pytest-two-{os.getpid()}"
    server, engine = start(binary, name, ["--data", paths["ES"], "--data", paths["NQ"], "--lanes", "1"], ipcfloor)
    try:
        check(engine.series_names == ["ES", "NQ"], f"series_names {engine.series_names}")
        engine.series_names.append("XX")
        check(engine.series_names == ["ES", "NQ"], "series_names is a copy")
        for which, key in ((0, "ES"), ("ES", "ES"), (1, "NQ"), ("NQ", "NQ"), (np.int64(1), "NQ")):
            view = engine.series_at(which)
            check(view.dtype == np.float64 and not view.flags.writeable and not view.flags.owndata and
                  np.array_equal(view, close[key]), f"series_at({which!r}) is {key}, zero-copy, read-only")
        check(engine.series_at("NQ") is engine.series_at(1), "one view per series")
        check(np.array_equal(engine.series, close["ES"]), "the main series is ES")

        result = engine.sweep(grid, series=1)
        check(result.refused == 0 and np.array_equal(result.pnl.view(np.int64), nq_pnl.view(np.int64)) and
              result.trades.tolist() == [row["trades"] for row in nq_rows],
              f"sweep on series 1 equals sweep --inproc --data NQ.npy: {result}")
        result = engine.sweep(grid, series="NQ")
        check(np.array_equal(result.pnl.view(np.int64), nq_pnl.view(np.int64)), "sweep on series 'NQ'")
        result = engine.sweep(grid)
        check(np.array_equal(result.pnl.view(np.int64), es_pnl.view(np.int64)), "sweep on the main series is ES")
        for i in range(0, len(grid), 3):
            check(engine.backtest(grid[i], series=1) == (nq_rows[i]["pnl"], nq_rows[i]["trades"]),
                  f"backtest {i} on series 1")
            check(engine.backtest(grid[i], series="NQ") == (nq_rows[i]["pnl"], nq_rows[i]["trades"]),
                  f"backtest {i} on series 'NQ'")
            check(engine.backtest(grid[i]) == (es_rows[i]["pnl"], es_rows[i]["trades"]), f"backtest {i} on ES")

        # L = 1500 fits NQ (1900 bars), not ES (1300).
        engine.backtest([3, 1500, 2, 1, 2, 3], series="NQ")
        error = expect(ipcfloor.WindowOutOfRange, "L=1500 on ES", lambda: engine.backtest([3, 1500, 2, 1, 2, 3]))
        check(error is not None and "is 1500, refused by strategy hma for a series of 1300 bars" in str(error), f"WindowOutOfRange: {error}")
        error = expect(ipcfloor.WindowOutOfRange, "L=1901 on NQ",
                       lambda: engine.backtest([3, 1901, 2, 1, 2, 3], series=1))
        check(error is not None and "on series 1 (NQ)" in str(error) and "for a series of 1900 bars" in str(error),
              f"WindowOutOfRange on NQ: {error}")

        for what, call in [("backtest", lambda: engine.backtest(grid[0], series=2)),
                           ("sweep", lambda: engine.sweep(grid, series=2)),
                           ("an empty sweep", lambda: engine.sweep(grid[:0], series=2)),
                           ("series_at", lambda: engine.series_at(2))]:
            error = expect(ipcfloor.NoSuchSeries, f"{what} on series 2", call)
            check(error is not None and error.code == -21 and isinstance(error, IndexError) and
                  "holds no series 2" in str(error) and "it holds 2 series, indices 0 to 1" in str(error) and
                  name in str(error), f"NoSuchSeries names the index and the count: {error}")
        expect(ipcfloor.NoSuchSeries, "series -1", lambda: engine.backtest(grid[0], series=-1))
        expect(ipcfloor.NoSuchSeries, "series 256", lambda: engine.backtest(grid[0], series=256))
        expect(ipcfloor.NoSuchSeries, "series 2**32", lambda: engine.sweep(grid, series=1 << 32))
        for what, call in [("backtest", lambda: engine.backtest(grid[0], series="YM")),
                           ("sweep", lambda: engine.sweep(grid, series="YM")),
                           ("series_at", lambda: engine.series_at("YM"))]:
            error = expect(ipcfloor.InvalidArgument, f"{what} on series 'YM'", call)
            check(error is not None and "no series named 'YM'" in str(error) and "ES, NQ" in str(error),
                  f"InvalidArgument names the known series: {error}")
        expect(ipcfloor.InvalidArgument, "series=True", lambda: engine.backtest(grid[0], series=True))
        expect(ipcfloor.InvalidArgument, "series=1.0", lambda: engine.sweep(grid, series=1.0))
        check(engine.backtest(grid[0], series=1) == (nq_rows[0]["pnl"], nq_rows[0]["trades"]), "usable after refusals")
        engine.close()
        expect(ipcfloor.Closed, "series_at after close", lambda: engine.series_at(1))
        expect(ipcfloor.Closed, "backtest on series 1 after close", lambda: engine.backtest(grid[0], series=1))
    finally:
        code = stop(server)
    check(code == 0, f"the two-series engine exits 0 on SIGINT, got {code}")


def check_columns(binary, ipcfloor, tmp):
    """An OHLC CSV (no volume): series_columns lists its columns, series_at(..., column=) gives each
    as a read-only zero-copy view equal to the file's, a column it lacks or an unknown name is
    InvalidArgument naming what it has."""
    path = os.path.join(tmp, "OHLC.csv")
    rng = np.random.default_rng(3)
    close = 100.0 + np.cumsum(rng.integers(-4, 5, 300)) / 8.0
    high, low, open_ = close + 0.5, close - 0.75, close - 0.125
    with open(path, "w", encoding="utf-8") as out:
        out.write('\ufeff"Date","Open","HIGH","low","Close","Adj Close"\n')
        for i in range(close.size):
            out.write(f"2024-01-{i},{open_[i]!r},{high[i]!r},{low[i]!r},{close[i]!r},{close[i] * 0.5!r}\n")
    name = f"ipcfloor-pytest-ohlc-{os.getpid()}"
    server, engine = start(binary, name, ["--data", path, "--lanes", "1"], ipcfloor)
    try:
        check(engine.series_columns(0) == ["close", "open", "high", "low"], f"columns {engine.series_columns(0)}")
        for column, want in (("high", high), ("LOW", low), ("open", open_), ("close", close)):
            view = engine.series_at("OHLC", column=column)
            check(view.dtype == np.float64 and not view.flags.writeable and not view.flags.owndata and
                  np.array_equal(view, want), f"series_at(column={column!r}) is the file's, zero-copy, read-only")
        check(engine.series_at(0, column="high") is engine.series_at(0, column="high"), "one view per column")
        error = expect(ipcfloor.InvalidArgument, "no volume", lambda: engine.series_at(0, column="volume"))
        check(error is not None and "has no volume column" in str(error) and "close, open, high, low" in str(error),
              f"InvalidArgument names the columns it has: {error}")
        expect(ipcfloor.InvalidArgument, "unknown column", lambda: engine.series_at(0, column="adj close"))
        expect(ipcfloor.NoSuchSeries, "column of series 1", lambda: engine.series_at(1, column="high"))
        engine.close()
    finally:
        code = stop(server)
    check(code == 0, f"the OHLC engine exits 0 on SIGINT, got {code}")
def check_reconnect(binary, ipcfloor, tmp):
    """attach(reconnect=True) outlives a SIGKILL of its engine (one with a journal, started again at
    once): the append in flight raises EngineRestarted and is not retried, the Engine then appends
    to the engine that came back, and the subscriber's next signal is its snapshot, flagged restart
    with the bars it missed (the one appended while it was away)."""
    name = f"ipcfloor-py-reconnect-{os.getpid()}"
    args = ["--bars", "500", "--seed", str(SEED), "--live", "--capacity", "2000", "--journal",
            os.path.join(tmp, "journal"), "--fsync", "none", "--heartbeat-ms", "5", "--hugepages", "off"]
    server, plain = start(binary, name, args, ipcfloor)
    try:
        plain.close()
        writer = ipcfloor.attach(name, timeout=10.0, wait="backoff", reconnect=True, reconnect_limit=20.0)
        reader = ipcfloor.attach(name, timeout=10.0, wait="backoff", reconnect=True)
        check(reader.restarts == 0, "no restart yet")
        reader.subscribe(6)
        for i in range(20):
            writer.append(100.0 + i)
        for _ in range(20):
            last = reader.wait_signal()
        check(last.bar == 519, f"the subscriber read every bar: {last.bar}")
        server.kill()
        server.wait()
        server = subprocess.Popen([binary, "serve", "--name", name, "--wait", "backoff", "--quiet", *args],
                                  stdout=subprocess.DEVNULL)
        error = expect(ipcfloor.EngineRestarted, "an append across the restart", lambda: writer.append(200.0))
        check(error is not None and "not retried" in str(error), f"EngineRestarted says the call is not retried: {error}")
        check(writer.restarts == 1 and writer.pid == server.pid, f"the writer re-attached: {writer.restarts} restarts, "
                                                                 f"pid {writer.pid} (the new engine: {server.pid})")
        check(writer.published_series.size == 520, f"the engine came back with every bar: {writer.published_series.size}")
        check(writer.append(200.0) == 521, "the writer appends to the engine that came back")
        # The reader finds its engine gone at its next wait: bar 520 went by while it was away.
        signal_after = reader.wait_signal()
        check(signal_after.restart and signal_after.snapshot and signal_after.missed == 1 and signal_after.bar == 520,
              f"the first signal after the restart is the snapshot, flagged with the bar missed: {signal_after} "
              f"restart {signal_after.restart} missed {signal_after.missed}")
        check(writer.append(201.0) == 522, "and the next bar")
        next_signal = reader.wait_signal()
        check(next_signal.bar == 521 and not next_signal.restart, f"then the new bar's, as usual: {next_signal}")
        check(reader.restarts == 1, f"the reader re-attached once: {reader.restarts}")
        expect(ipcfloor.InvalidArgument, "reconnect=1", lambda: ipcfloor.attach(name, reconnect=1))
        expect(ipcfloor.InvalidArgument, "reconnect_limit=0", lambda: ipcfloor.attach(name, reconnect=True,
                                                                                     reconnect_limit=0))
        writer.close()
        reader.close()
    finally:
        stop(server)


def check_threads(binary, ipcfloor):
    """A wait on the engine lets another Python thread run; a second thread on the same Engine
    while a call is in flight is refused, and the Engine stays usable."""
    name = f"ipcfloor-pytest-threads-{os.getpid()}"
    server, engine = start(binary, name, ["--bars", "2000", "--live", "--capacity", "3000", "--lanes", "2"], ipcfloor,
                           timeout=1.0)
    try:
        stamps = []
        stop_counting = threading.Event()

        def count():  # a time stamp every 1,000 turns of a pure-Python loop
            turns = 0
            while not stop_counting.is_set():
                turns += 1
                if turns % 1000 == 0:
                    stamps.append(time.monotonic())
        counter = threading.Thread(target=count)
        counter.start()
        started = time.monotonic()
        expect(ipcfloor.Timeout, "a wait with nothing subscribed", engine.wait_signal)
        ended = time.monotonic()
        stop_counting.set()
        counter.join()
        # Away from both ends (a thread may get the GIL for one switch interval before the call):
        # a held GIL would leave no stamp at all in the middle of the wait.
        during = sum(1 for t in stamps if started + 0.2 < t < ended - 0.2)
        check(ended - started >= 0.9 and during > 10,
              f"another thread ran {during} thousand turns in the middle of a {ended - started:.2f} s wait_signal: "
              f"the GIL was held")

        waiting = threading.Event()
        outcome = []

        def wait_in_thread():
            waiting.set()
            try:
                engine.wait_signal()
            except ipcfloor.Timeout:
                outcome.append("timeout")
        other = threading.Thread(target=wait_in_thread)
        other.start()
        waiting.wait()
        time.sleep(0.3)  # well inside the other thread's 1 s wait
        error = expect(ipcfloor.InvalidArgument, "a backtest while another thread waits on the same Engine",
                       lambda: engine.backtest(6))
        check(error is not None and "in a call from another thread" in str(error) and name in str(error),
              f"the refusal names the engine and why: {error}")
        other.join()
        check(outcome == ["timeout"], f"the first thread's wait ended as it would alone: {outcome}")
        check(engine.backtest(6)[1] >= 0, "the Engine is usable after the refusal")
        engine.close()
    finally:
        stop(server)


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: VENV/bin/python test_python_shm.py IPCFLOOR_BINARY")
    binary = sys.argv[1]
    import ipcfloor
    from ipcfloor import socket as ipcfloor_socket

    check(ipcfloor.version() == "0.2.0", f"version {ipcfloor.version()}")
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
                check(engine.series_names == ["default"], f"one generated series: {engine.series_names}")
                check(engine.serving_cpu >= 0 and engine.serving_cpu not in engine.near_cpus,
                      f"serving cpu {engine.serving_cpu}, near {engine.near_cpus}")
                if engine.near_cpus:
                    placed = {}
                    thread = threading.Thread(target=lambda: placed.update(cpu=engine.pin_near(),
                                                                            mask=os.sched_getaffinity(0)))
                    thread.start()
                    thread.join()
                    check(placed == {"cpu": engine.near_cpus[0], "mask": {engine.near_cpus[0]}},
                          f"pin_near pins the calling thread to the nearest cpu: {placed}")

                series = engine.series
                check(series.dtype == np.float64 and series.shape == (BARS,), f"{series.dtype} {series.shape}")
                check(not series.flags.writeable, "the series is read-only")
                check(not series.flags.owndata, "the series is a view, not a copy")
                view = memoryview(series)
                check(view.readonly and view.format == "d" and view.nbytes == 8 * BARS,
                      "the series exposes the buffer protocol: read-only float64, every bar")
                check(isinstance(series.base, ipcfloor._ipcfloor.SeriesBuffer) and len(series.base) == BARS and
                      memoryview(series.base).readonly, "under the numpy view, the extension's read-only buffer")
                error = expect(TypeError, "a writable buffer of the series (ctypes asks for one)",
                               lambda: ctypes.c_char.from_buffer(series.base))
                check(error is not None and "not writable" in str(error), f"the buffer refuses writers: {error}")
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
                check(error is not None and "parameter p2 (position 4) is 2501" in str(error) and name in str(error),
                      f"the message names the window: {error}")
                check(isinstance(error, ValueError), "WindowOutOfRange is a ValueError")
                check(engine.backtest(grid[0])[1] == want_trades[0], "usable after a refusal")
                check_not_live(ipcfloor, engine, name)
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
            stop(server)
        check_live(binary, ipcfloor, tmp)
        check_two_series(binary, ipcfloor, tmp)
        check_columns(binary, ipcfloor, tmp)
        check_reconnect(binary, ipcfloor, tmp)
    check_threads(binary, ipcfloor)

    return finish("python over the segment: {} combos match sweep --inproc bit for bit; read-only zero-copy series; "
                  "per-combo statuses and error classes hold; live signals match sweep --inproc after every append; "
                  "two series each match sweep --inproc on their file; waits let other threads run".format(len(LENGTHS)))

if __name__ == "__main__":
    sys.exit(main())
