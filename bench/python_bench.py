#!/usr/bin/env python3
"""Python's view of the engine: the same requests through the segment (ipcfloor, ctypes over
libipcfloor.so) and through the Unix socket (ipcfloor.socket), in one run.

Starts `ipcfloor serve` with both (spin mode, --bars N of seed-42 GBM, --socket), pins this
process to the client cpu and measures, in interleaved rounds so both paths see the same
moments of the host:

  backtest   RTT of one combo (L = --length) as the Python caller sees it: engine.backtest(p)
             over the segment, client.backtest(p) over the socket (opcode 3 on the server's
             preloaded series, adopted once with opcode 5): no series crosses either way;
  echo       the transport alone: engine.echo(p) against the socket's echo_params;
  call-floor Python's own share of engine.backtest: the same parameter copy and the same ctypes
             call into libipcfloor.so, on a null handle the library refuses before it does
             anything. No transport, no compute: no call through any transport can cost less.

Every call is timed on its own with time.perf_counter_ns (never a batch divided by its size);
the report gives percentiles. Then sweep throughput: the --grid combos through the ring in one
C call (engine.sweep) against one sweep_loaded frame over the socket, each sweep timed on its
own, combos per second at the median. Before timing, both paths must answer the same bits.

`ipcfloor bench python` runs this and prints its table; standalone:
    python_bench.py --ipcfloor PATH/bin/ipcfloor [--package-root PATH/share/ipcfloor/python] [--json]
"""

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
except ImportError:
    print("python_bench: numpy is missing: apt-get install python3-numpy", file=sys.stderr)
    sys.exit(3)


def percentiles(samples):
    ordered = sorted(samples)
    n = len(ordered)

    def at(q):
        return ordered[min(n - 1, int(q * n))]

    return {"samples": n, "p50": at(0.50), "p90": at(0.90), "p99": at(0.99), "p99.9": at(0.999),
            "max": ordered[-1], "min": ordered[0]}


def time_calls(call, argument, count, clock=time.perf_counter_ns):
    samples = [0] * count
    for i in range(count):
        start = clock()
        call(argument)
        samples[i] = clock() - start
    return samples


def python_call_floor(ipcfloor):
    """A callable that does what Engine.backtest does in Python (copy six windows into a reused
    ctypes array, one ctypes call with four ctypes-object arguments through a handle without
    argtypes, read pnl and trades back), against a null handle: libipcfloor refuses it at once
    with E_INVALID."""
    import ctypes
    from ipcfloor import _native

    lib = _native.library()
    params = (ctypes.c_int64 * 6)()
    pnl, trades = ctypes.c_double(), ctypes.c_int64()
    pnl_ref, trades_ref = ctypes.byref(pnl), ctypes.byref(trades)
    backtest = _native.untyped(lib, "ipcfloor_backtest")
    null = ctypes.c_void_p(None)

    def call(p):
        params[:] = p
        code = backtest(null, params, pnl_ref, trades_ref)
        if code != _native.E_INVALID:
            raise SystemExit(f"python_bench: a null handle gave {code}, not E_INVALID")
        return pnl.value, trades.value

    return call


def start_engine(binary, name, socket_path, bars, server_cpu):
    argv = [binary, "serve", "--name", name, "--bars", str(bars), "--seed", "42", "--socket", socket_path,
            "--wait", "spin", "--lanes", "2", "--quiet"]
    if server_cpu is not None:
        argv += ["--cpu", str(server_cpu)]
    # serve prints its `ready {...}` line on stdout: keep it out of this report.
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL)


def attach_when_up(ipcfloor, server, name, limit=10.0):
    deadline = time.monotonic() + limit
    while True:
        try:
            return ipcfloor.attach(name, timeout=5.0, wait="spin")
        except (ipcfloor.NoEngine, ipcfloor.Busy):
            if server.poll() is not None:
                raise SystemExit(f"python_bench: ipcfloor serve exited early with code {server.returncode}")
            if time.monotonic() > deadline:
                raise SystemExit(f"python_bench: engine {name} did not come up within {limit} s")
            time.sleep(0.02)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ipcfloor", required=True, help="the ipcfloor executable that serves")
    ap.add_argument("--package-root", help="folder holding the ipcfloor package (default: ../python beside this file)")
    ap.add_argument("--bars", type=int, default=1000)
    ap.add_argument("--length", type=int, default=6, help="the combo's user-facing length L")
    ap.add_argument("--samples", type=int, default=100_000, help="timed calls per path, over all rounds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2_000, help="untimed calls per path and round")
    ap.add_argument("--grid", default="6:200:80", help="FIRST:LAST:COUNT for the sweep throughput")
    ap.add_argument("--sweeps", type=int, default=30, help="timed sweeps per path")
    ap.add_argument("--client-cpu", type=int, help="core of this process (default: the first allowed)")
    ap.add_argument("--server-cpu", type=int, help="core of the engine's serving thread (default: the last allowed)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args()
    if args.samples < args.rounds or args.rounds < 1 or args.bars < 2 or args.length < 1 or args.sweeps < 1:
        ap.error("need --rounds >= 1, --samples >= --rounds, --bars >= 2, --length >= 1, --sweeps >= 1")

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, args.package_root or os.path.join(here, "..", "python"))
    try:
        import ipcfloor
        from ipcfloor.socket import SocketClient
    except ImportError as error:
        raise SystemExit(f"python_bench: cannot import the ipcfloor package ({error}); give --package-root "
                         "PREFIX/share/ipcfloor/python")

    allowed = sorted(os.sched_getaffinity(0))
    client_cpu = args.client_cpu if args.client_cpu is not None else allowed[0]
    server_cpu = args.server_cpu if args.server_cpu is not None else allowed[-1]
    os.sched_setaffinity(0, {client_cpu})

    first, last, count = (float(x) for x in args.grid.split(":"))
    lengths = [int(round(v)) for v in np.linspace(first, last, int(count))]
    grid = ipcfloor.grid(lengths)
    combo = tuple(ipcfloor.combo_from_length(args.length))
    name = f"ipcfloor-pybench-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="ipcfloor-pybench-") as tmp:
        socket_path = os.path.join(tmp, "engine.sock")
        server = start_engine(args.ipcfloor, name, socket_path, args.bars, server_cpu)
        try:
            engine = attach_when_up(ipcfloor, server, name)
            sock = SocketClient.unix(socket_path, timeout=30.0)
            served = sock.use_preloaded()
            if served.checksum != engine.checksum:
                raise SystemExit("python_bench: the socket serves another series than the segment")

            # Both paths answer the same bits before anything is timed.
            shm_answer, uds_answer = engine.backtest(combo), sock.backtest(combo)
            if shm_answer != uds_answer:
                raise SystemExit(f"python_bench: segment {shm_answer} and socket {uds_answer} disagree")
            swept = engine.sweep(grid)
            pnl, trades = sock.sweep_loaded(grid)
            if swept.refused or not (np.array_equal(swept.pnl.view(np.int64), pnl.view(np.int64)) and
                                     np.array_equal(swept.trades, trades)):
                raise SystemExit("python_bench: segment and socket sweeps disagree")

            paths = {
                "backtest-shm": (engine.backtest, combo),
                "backtest-uds": (sock.backtest, combo),
                "echo-shm": (engine.echo, combo),
                "echo-uds": (sock.echo_params, combo),
                "call-floor-py": (python_call_floor(ipcfloor), combo),
            }
            per_round = -(-args.samples // args.rounds)
            samples = {key: [] for key in paths}
            round_p50 = {key: [] for key in paths}
            for _ in range(args.rounds):
                for key, (call, argument) in paths.items():
                    time_calls(call, argument, args.warmup)
                    timed = time_calls(call, argument, per_round)
                    samples[key] += timed
                    round_p50[key].append(percentiles(timed)["p50"])

            sweep_seconds = {"shm": [], "uds": []}
            for _ in range(args.sweeps):
                start = time.perf_counter_ns()
                engine.sweep(grid)
                sweep_seconds["shm"].append((time.perf_counter_ns() - start) / 1e9)
                start = time.perf_counter_ns()
                sock.sweep_loaded(grid)
                sweep_seconds["uds"].append((time.perf_counter_ns() - start) / 1e9)
            lane, wait = engine.lane, engine.wait
            sock.close()
            engine.close()
        finally:
            server.send_signal(signal.SIGINT)
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()

    results = []
    for key in paths:
        row = percentiles(samples[key])
        row.update(name=key, kind="rtt", round_p50=round_p50[key])
        results.append(row)
    by_name = {row["name"]: row for row in results}
    ratio = by_name["backtest-uds"]["p50"] / by_name["backtest-shm"]["p50"]
    median = {key: float(np.median(values)) for key, values in sweep_seconds.items()}
    report = {
        "suite": "python",
        "config": {"bars": args.bars, "length": args.length, "params": list(combo), "samples": args.samples,
                   "rounds": args.rounds, "warmup": args.warmup, "grid": args.grid, "combos": len(grid),
                   "sweeps": args.sweeps, "client_cpu": client_cpu, "server_cpu": server_cpu,
                   "engine": "ipcfloor serve --wait spin --socket", "shm_lane": lane, "shm_wait": wait,
                   "series": served.name, "checksum": f"{served.checksum:016x}"},
        "python": platform.python_version(),
        "numpy": np.__version__,
        "clock": "time.perf_counter_ns per call",
        "results": results,
        "ratios": {
            "backtest uds/shm p50": ratio,
            "echo uds/shm p50": by_name["echo-uds"]["p50"] / by_name["echo-shm"]["p50"],
            "backtest uds/shm per round p50": [u / s for u, s in zip(round_p50["backtest-uds"],
                                                                     round_p50["backtest-shm"])],
        },
        "sweep": {"shm_median_s": median["shm"], "uds_median_s": median["uds"],
                  "shm_combos_per_s": len(grid) / median["shm"], "uds_combos_per_s": len(grid) / median["uds"],
                  "uds/shm": median["uds"] / median["shm"], "shm_seconds": sweep_seconds["shm"],
                  "uds_seconds": sweep_seconds["uds"]},
        "parity": {"backtest": list(shm_answer), "sweep_combos": len(grid), "holds": True},
        "goal": {"what": "backtest RTT p50, Unix socket / segment", "target": 20.0, "ratio": ratio,
                 "met": ratio >= 20.0},
        # What 20x would leave a call through the segment, against what Python itself spends on one
        # call (call-floor-py) and what the backtest computes (segment backtest minus segment echo).
        "bound": {"allowed_shm_p50": by_name["backtest-uds"]["p50"] / 20.0,
                  "python_call_floor_p50": by_name["call-floor-py"]["p50"],
                  "compute_p50_estimate": by_name["backtest-shm"]["p50"] - by_name["echo-shm"]["p50"],
                  "best_ratio_with_zero_transport_and_compute": by_name["backtest-uds"]["p50"] /
                  by_name["call-floor-py"]["p50"]},
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0


def print_report(report):
    config = report["config"]
    print(f"python: one combo {config['params']} on {config['bars']} bars, from Python {report['python']}, "
          f"RTT ns ({report['clock']})")
    print(f"  {'path':<14} {'p50':>9} {'p90':>9} {'p99':>9} {'p99.9':>9} {'max':>11}")
    for row in report["results"]:
        print(f"  {row['name']:<14} {row['p50']:>9} {row['p90']:>9} {row['p99']:>9} {row['p99.9']:>9} {row['max']:>11}")
    ratios = report["ratios"]
    print(f"  backtest: socket/segment p50 {ratios['backtest uds/shm p50']:.1f}x (goal 20x: "
          f"{'met' if report['goal']['met'] else 'not met'}); echo {ratios['echo uds/shm p50']:.1f}x")
    bound = report["bound"]
    print(f"  20x would leave {bound['allowed_shm_p50']:.0f} ns per call; Python's own share of one call is "
          f"{bound['python_call_floor_p50']} ns (call-floor-py) and the backtest computes about "
          f"{bound['compute_p50_estimate']} ns: with no transport and no compute at all the ratio would be "
          f"{bound['best_ratio_with_zero_transport_and_compute']:.1f}x")
    sweep = report["sweep"]
    print(f"  sweep of {config['combos']} combos: segment {sweep['shm_combos_per_s']:.0f} combos/s, socket "
          f"{sweep['uds_combos_per_s']:.0f} combos/s ({sweep['uds/shm']:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
