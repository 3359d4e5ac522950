#!/usr/bin/python3
"""The Python socket client (ipcfloor.socket, clients/python/ipcfloor/socket.py) against a real engine.

Starts `ipcfloor serve --no-shm --socket ... --tcp ...`, runs the default grid stateless and
stateful through the client, and compares every combo with `ipcfloor sweep --inproc --json`
exactly (trades equal, pnl bit for bit). Also checks echo, echo_params and error replies, and
then, on a server that holds a series of its own, use_preloaded and backtest.

Runs with the python of a venv the package was pip-installed into (the ctest fixture python_venv).

Usage: VENV/bin/python test_python_socket_client.py [IPCFLOOR_BINARY]   (or the IPCFLOOR_BINARY environment variable)
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

import ipcfloor
from ipcfloor import socket as ips
from test_python_support import check, finish, stop

def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def wait_until_up(server, path, limit=10.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"ipcfloor serve exited early with code {server.returncode}")
        try:
            ips.SocketClient.unix(path, timeout=1.0).close()
            return
        except ipcfloor.NoEngine:  # not listening yet (every error of the package is an ipcfloor.Error)
            time.sleep(0.01)
    raise SystemExit(f"ipcfloor serve did not listen on {path} within {limit} s")


def compare(label, pnl, trades, reference):
    check(len(pnl) == len(reference), f"{label}: {len(pnl)} results for {len(reference)} combos")
    for i, row in enumerate(reference):
        if pnl[i] != row["pnl"] or trades[i] != row["trades"]:
            check(False, f"{label}: combo {i} (L={row['L']}): got pnl {pnl[i]!r} trades {trades[i]}, "
                         f"want {row['pnl']!r} {row['trades']}")
            return


def check_preloaded(binary, tmp):
    """A --no-shm server given --bars/--seed holds that series: use_preloaded, then combos only."""
    reference = [json.loads(line) for line in
                 subprocess.run([binary, "sweep", "--inproc", "--json", "--bars", "3000", "--seed", "7",
                                 "--lengths", "6,9,31,200"], check=True, capture_output=True, text=True).stdout.splitlines()]
    series_path = os.path.join(tmp, "small.npy")
    subprocess.run([binary, "gen", "--bars", "3000", "--seed", "7", "-o", series_path], check=True, capture_output=True)
    close = np.load(series_path)
    params = np.array([row["params"] for row in reference], dtype="<i8")
    path = os.path.join(tmp, "preloaded.sock")
    server = subprocess.Popen([binary, "serve", "--no-shm", "--quiet", "--socket", path, "--bars", "3000", "--seed", "7"])
    try:
        wait_until_up(server, path)
        with ips.SocketClient.unix(path) as engine:
            series = engine.use_preloaded()
            check(series.bars == 3000 and series.fee == 0.09 and series.name.startswith("gbm(bars=3000, seed=7"),
                  f"use_preloaded names the series: {series}")
            check(series.checksum == fnv1a64(close.astype("<f8").tobytes()), "use_preloaded answers the checksum")
            pnl, trades = engine.sweep_loaded(params)
            compare("use_preloaded + sweep_loaded", pnl, trades, reference)
            for i, row in enumerate(reference):
                check(engine.backtest(params[i]) == (row["pnl"], row["trades"]), f"backtest of combo {i}")
            try:
                engine.backtest([1, 3001, 1, 1, 1, 1])
                check(False, "a window past the preloaded series' bars must be refused")
            except ips.ServerError as error:
                check(error.name == "window_out_of_range" and "3001" in error.message, f"got {error}")
            check(engine.backtest(params[0]) == (reference[0]["pnl"], reference[0]["trades"]),
                  "backtest after a refusal")
    finally:
        stop(server)


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("IPCFLOOR_BINARY")
    if not binary:
        raise SystemExit("usage: test_python_socket_client.py IPCFLOOR_BINARY (or set IPCFLOOR_BINARY)")
    with tempfile.TemporaryDirectory(prefix="ipcfloor-py-") as tmp:
        reference = [json.loads(line) for line in
                     subprocess.run([binary, "sweep", "--inproc", "--json"], check=True,
                                    capture_output=True, text=True).stdout.splitlines()]
        check(len(reference) == 80, f"the default grid has 80 combos, got {len(reference)}")
        check(reference[0]["pnl"] == -5165.577039790348 and reference[0]["trades"] == 57029,
              "the reference holds the published fingerprint")
        params = np.array([ips.combo_from_length(row["L"]) for row in reference], dtype="<i8")
        check(params.tolist() == [row["params"] for row in reference],
              "combo_from_length builds the windows the engine prints")

        series_path = os.path.join(tmp, "default.npy")
        subprocess.run([binary, "gen", "--bars", "150000", "--seed", "42", "-o", series_path], check=True,
                       capture_output=True)
        close = np.load(series_path)

        path = os.path.join(tmp, "engine.sock")
        port = free_port()
        server = subprocess.Popen([binary, "serve", "--no-shm", "--quiet", "--socket", path,
                                   "--tcp", f"127.0.0.1:{port}"])
        try:
            wait_until_up(server, path)
            check(oct(os.stat(path).st_mode & 0o777) == "0o600", "the socket file is mode 0600")
            for connect in (lambda: ips.SocketClient.unix(path), lambda: ips.SocketClient.tcp("127.0.0.1", port)):
                with connect() as engine:
                    pnl, trades = engine.sweep(close, params)
                    compare(f"{engine.server} stateless", pnl, trades, reference)
                    checksum, fee = engine.load(close)
                    check(checksum == fnv1a64(close.astype("<f8").tobytes()), "load answers the series' FNV-1a 64")
                    check(fee == 0.09, f"the server's fee is 0.09, got {fee}")
                    pnl, trades = engine.sweep_loaded(params)
                    compare(f"{engine.server} stateful", pnl, trades, reference)
                    check(np.array_equal(engine.echo(close[:1000]), close[:1000]), "echo returns the array verbatim")
                    check(engine.echo_params([1, -2, 3, -4, 5, 2**63 - 1]) == (1, -2, 3, -4, 5, 2**63 - 1),
                          "echo_params returns the 48 bytes verbatim")

            with ips.SocketClient.unix(path) as engine:
                bad = close[:500].copy()
                bad[17] = np.nan
                try:
                    engine.sweep(bad, params[:1])
                    check(False, "a NaN price must be refused")
                except ips.ServerError as error:
                    check(error.code == 5 and error.name == "bad_price", f"NaN price gives bad_price, got {error}")
                    check("bar 17" in error.message, f"the error names the bar: {error.message}")
                try:
                    engine.sweep_loaded(params[:1])
                    check(False, "sweep_loaded before load must be refused")
                except ips.ServerError as error:
                    check(error.name == "no_series_loaded", f"got {error}")
                try:
                    engine.call_raw(b"\x09\x00\x00\x00" + bytes([77]) + b"\x00" * 8, opcode=77)
                    check(False, "an unknown opcode must be refused")
                except ips.ServerError as error:
                    check(error.name == "unknown_opcode" and "opcode 77" in error.message, f"got {error}")
                try:
                    engine.sweep(close[:500], [[1, 501, 1, 1, 1, 1]])
                    check(False, "a window over n_bars must be refused")
                except ips.ServerError as error:
                    check(error.name == "window_out_of_range" and "combo 0" in error.message and "501" in error.message,
                          f"got {error}")
                try:
                    engine.use_preloaded()
                    check(False, "use_preloaded on a server without a series must be refused")
                except ips.ServerError as error:
                    check(error.name == "no_preloaded_series" and "holds no series" in error.message, f"got {error}")
                # Errors leave the connection usable.
                check(engine.echo_params([6, 5, 4, 3, 2, 1]) == (6, 5, 4, 3, 2, 1), "the connection still works")
        finally:
            code = stop(server)
        check(code == 0, f"ipcfloor serve exits 0 on SIGINT, got {code}")
        check(not os.path.exists(path), "the socket file is removed at shutdown")
        check_preloaded(binary, tmp)

    return finish("python socket client: default grid stateless and stateful over unix and tcp match --inproc "
                  "exactly; error replies decoded; use_preloaded and backtest on the server's own series")

if __name__ == "__main__":
    sys.exit(main())
