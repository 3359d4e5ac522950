#!/usr/bin/python3
"""Ctrl-C and fork() in the Python package, against real engines.

Ctrl-C: a SIGINT sent by another process (as a terminal sends it) while a call waits raises
KeyboardInterrupt long before the call's timeout would have ended it (the call used to hold it
until then: 20 s for wait_signal, 21 s for a sweep): wait_signal with nothing coming, a sweep
whose answers keep flowing, and a sweep on an engine stopped with SIGSTOP, each once with the
GIL kept (one thread) and once handed over (another thread alive). After each interrupt the same
Engine answers correctly: a signal of the next bar equal to a backtest over the bars so far, and
a sweep equal bit for bit to the one before the interrupt (what the stopped sweep left owed is
dropped on the way).

Fork: a child's calls on the Engine its parent attached raise ipcfloor.Forked, whose sentence
says to attach again, before they touch the lane; the child's close leaves the parent's lane
alone, and attached again the child is served. The parent's Engine answers as before, during
and after (it used to be quarantined, "impossible ring positions").

Usage: VENV/bin/python test_python_interrupt_fork.py IPCFLOOR_BINARY
"""

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

import ipcfloor
from test_python_support import check, expect, finish, start, stop

TIMEOUT = 20.0  # each call's bound: an interrupt must come long before it
SIGINT_AFTER = 0.3


def same_bits(a, b):
    return np.array_equal(np.asarray(a, np.float64).view(np.int64), np.asarray(b, np.float64).view(np.int64))


def interrupted(what, call, other_thread):
    """Runs call() while another process sends this one SIGINT after SIGINT_AFTER s (with a Python
    thread alive when other_thread): it must raise KeyboardInterrupt, well before TIMEOUT.
    Returns the seconds from the signal to the exception, or None."""
    idle = threading.Event()
    thread = threading.Thread(target=idle.wait) if other_thread else None
    if thread:
        thread.start()
    killer = subprocess.Popen(["sh", "-c", f"sleep {SIGINT_AFTER}; kill -INT {os.getpid()}"])
    started = time.monotonic()
    latency = None
    try:
        call()
        check(False, f"{what}: returned instead of raising KeyboardInterrupt")
    except KeyboardInterrupt:
        latency = time.monotonic() - started - SIGINT_AFTER
    except Exception as error:  # noqa: BLE001 - the wrong class is the finding
        check(False, f"{what}: raised {type(error).__name__}: {error}, want KeyboardInterrupt")
    finally:
        killer.wait()
        if thread:
            idle.set()
            thread.join()
    if latency is not None:
        # The verdict is "before the call would have ended"; the figure itself is printed.
        check(latency < TIMEOUT / 4, f"{what}: KeyboardInterrupt came {latency:.2f} s after SIGINT (the call's "
                                     f"timeout is {TIMEOUT:.0f} s): the wait held the signal")
        print(f"{what}: KeyboardInterrupt {latency * 1e3:.0f} ms after SIGINT", file=sys.stderr)
    return latency


def check_wait_signal(binary):
    """wait_signal with nothing coming; then the next bar's signal equals a backtest."""
    name = f"ipcfloor-pyint-live-{os.getpid()}"
    server, writer = start(binary, name, ["--bars", "400", "--live", "--capacity", "1000", "--lanes", "2"], ipcfloor)
    try:
        reader = ipcfloor.attach(name, timeout=TIMEOUT, wait="backoff")
        check(reader.subscribe(6) == 0, "subscribe L=6")
        for other_thread in (False, True):
            interrupted(f"wait_signal (another thread: {other_thread})", reader.wait_signal, other_thread)
            bars = writer.append(float(writer.published_series[-1]) * 1.001)
            signal_now = reader.wait_signal()
            pnl, trades = reader.backtest(6)
            check(signal_now.bar == bars - 1 and signal_now.trades == trades and same_bits(signal_now.pnl, pnl),
                  f"after the interrupt the reader gets bar {bars - 1}'s signal, equal to a backtest: {signal_now}, "
                  f"backtest ({pnl}, {trades})")
        reader.close()
        writer.close()
    finally:
        stop(server)


def check_sweeps(binary):
    """A sweep stopped while answers flow, and one on a stopped engine; after each the same
    Engine sweeps the reference again."""
    name = f"ipcfloor-pyint-sweep-{os.getpid()}"
    server, engine = start(binary, name, ["--bars", "50000", "--lanes", "1"], ipcfloor, timeout=TIMEOUT)
    try:
        grid = ipcfloor.grid(6, 200, 80)
        started = time.monotonic()
        reference = engine.sweep(grid)
        one = time.monotonic() - started
        check(reference.refused == 0, "the reference sweep")
        # Long enough that, uninterrupted, it would run far past the interrupt (about 4 s).
        repeats = max(2, int(4.0 / max(one, 1e-3)))
        big = np.tile(grid, (repeats, 1))
        for other_thread in (False, True):
            latency = interrupted(f"a sweep of {len(big)} combos (another thread: {other_thread})",
                                  lambda: engine.sweep(big), other_thread)
            check(latency is None or latency < repeats * one / 2,
                  f"the sweep stopped long before its {repeats * one:.1f} s: {latency}")
            again = engine.sweep(grid)
            check(again.refused == 0 and same_bits(again.pnl, reference.pnl) and
                  np.array_equal(again.trades, reference.trades),
                  "after the interrupted sweep, the same Engine sweeps the reference bit for bit")
        os.kill(server.pid, signal.SIGSTOP)
        try:
            interrupted("a sweep on a stopped engine", lambda: engine.sweep(grid), False)
        finally:
            os.kill(server.pid, signal.SIGCONT)
        again = engine.sweep(grid)
        check(again.refused == 0 and same_bits(again.pnl, reference.pnl),
              "once the engine runs again, the same Engine sweeps the reference bit for bit")
        check(engine.backtest(grid[7]) == (reference.pnl[7], reference.trades[7]), "and backtests it")
        engine.close()
    finally:
        stop(server)


def check_fork(binary):
    name = f"ipcfloor-pyint-fork-{os.getpid()}"
    server, engine = start(binary, name, ["--bars", "3000", "--lanes", "2"], ipcfloor)
    try:
        grid = ipcfloor.grid([6, 8, 11, 50, 200])
        reference = engine.sweep(grid)
        sys.stdout.flush()
        sys.stderr.flush()
        child = os.fork()
        if child == 0:
            bad = 0
            for what, call in (("backtest", lambda: engine.backtest(6)), ("sweep", lambda: engine.sweep(grid)),
                               ("echo", lambda: engine.echo([1, 2, 3, 4, 5, 6])),
                               ("poll_signal", engine.poll_signal)):
                try:
                    call()
                    print(f"FAIL child: {what} on the parent's Engine was served", file=sys.stderr)
                    bad = 1
                except ipcfloor.Forked as error:
                    if "attach again" not in str(error) or error.code != ipcfloor.Status.FORKED:
                        print(f"FAIL child: {what}: {error!r}", file=sys.stderr)
                        bad = 1
                except BaseException as error:  # noqa: BLE001 - anything else is the finding
                    print(f"FAIL child: {what} raised {type(error).__name__}: {error}", file=sys.stderr)
                    bad = 1
            if not np.array_equal(engine.series[:10], engine.series[:10]):  # the mapping still reads
                bad = 1
            engine.close()  # unmaps here; the lane stays the parent's
            try:
                own = ipcfloor.attach(name, timeout=5.0)
                if own.backtest(grid[1]) != (reference.pnl[1], reference.trades[1]):
                    print("FAIL child: attached again, a wrong answer", file=sys.stderr)
                    bad = 1
                own.close()
            except BaseException as error:  # noqa: BLE001
                print(f"FAIL child: attach again: {error!r}", file=sys.stderr)
                bad = 1
            os._exit(bad)
        during = engine.sweep(grid)
        _, status = os.waitpid(child, 0)
        check(os.waitstatus_to_exitcode(status) == 0, "the child's calls were refused with Forked, and it was "
                                                      "served once attached again")
        after = engine.sweep(grid)
        check(same_bits(during.pnl, reference.pnl) and same_bits(after.pnl, reference.pnl) and
              np.array_equal(after.trades, reference.trades),
              "the parent's Engine answers the same during and after the child")
        check(engine.backtest(grid[4]) == (reference.pnl[4], reference.trades[4]), "and backtests the same")
        engine.close()
    finally:
        stop(server)


def main():
    if len(sys.argv) != 2:
        raise SystemExit("usage: VENV/bin/python test_python_interrupt_fork.py IPCFLOOR_BINARY")
    binary = sys.argv[1]
    check_wait_signal(binary)
    check_sweeps(binary)
    check_fork(binary)
    return finish("python interrupts and fork: Ctrl-C stops wait_signal and sweeps (flowing or stalled) within "
                  "tens of ms and the Engine answers right after; a forked child is refused with Forked and the "
                  "parent's lane keeps answering")


if __name__ == "__main__":
    sys.exit(main())
