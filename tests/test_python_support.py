"""What the Python tests share (imported by them, not a test itself): a list of failed checks,
check() and expect() to fill it, finish() to report it, and an `ipcfloor serve` started under a
name, attached to once it is up, and stopped with SIGINT."""

import signal
import subprocess
import sys
import time

failures = []


def check(condition, what):
    """Records `what` as a failure (and prints it) unless `condition` holds; returns condition."""
    if not condition:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr)
    return condition


def expect(error_class, what, call):
    """call() must raise error_class: returns the error, else records a failure and returns None."""
    try:
        call()
    except error_class as error:
        return error
    except Exception as error:  # noqa: BLE001 - the wrong class is the finding
        check(False, f"{what}: raised {type(error).__name__}: {error}, want {error_class.__name__}")
        return None
    check(False, f"{what}: nothing raised, want {error_class.__name__}")
    return None


def finish(summary):
    """The exit code: 1 with the count of failed checks, else 0 after printing `summary`."""
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print(summary)
    return 0


def stop(server):
    """SIGINT, then SIGKILL after 10 s; the exit code."""
    if server.poll() is None:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
    return server.returncode


def start(binary, name, args, ipcfloor, timeout=5.0, wait="backoff"):
    """`ipcfloor serve --name NAME --wait WAIT --quiet ARGS` and an Engine attached to it once it
    is up (within 10 s, else SystemExit)."""
    server = subprocess.Popen([binary, "serve", "--name", name, "--wait", wait, "--quiet", *args],
                              stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while True:
        try:
            return server, ipcfloor.attach(name, timeout=timeout, wait=wait)
        except (ipcfloor.NoEngine, ipcfloor.Busy):
            if time.monotonic() > deadline or server.poll() is not None:
                stop(server)
                raise SystemExit(f"ipcfloor serve --name {name} did not come up")
            time.sleep(0.02)
