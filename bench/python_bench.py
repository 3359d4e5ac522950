#!/usr/bin/env python3
"""Python's view of the engine: the same requests through the segment (the ipcfloor package, its
compiled extension over libipcfloor.so) and through the Unix socket (ipcfloor.socket), beside the
C++ client and the command line, in one run.

Latency. Starts `ipcfloor serve --wait spin --bars N --seed 42 --socket ...`, pins this process
to the client cpu and times, in interleaved rounds so every path sees the same moments of the
host, each call on its own with time.perf_counter_ns (never a batch divided by its size):

  backtest-shm       engine.backtest(p): one combo (L = --length) through the segment
  backtest-uds       client.backtest(p) over the socket (opcode 3 on the server's preloaded series,
                     adopted once with opcode 5): no series crosses either way
  echo-shm           engine.echo(p): the transport alone, from Python
  echo-uds           the socket's echo_params(p)
  echo-cpp           the C++ client's ECHO on the same engine from the same cpu (ShmClient::call,
                     what ipcfloor::Client::echo and ipcfloor_echo run), timed with the TSC by the
                     `ipcfloor bench python` that runs this script (--peer stdio); absent when
                     the script runs alone
  call-floor-py      Python's own share of engine.backtest: the extension's every step (argument
                     check, the C call, the result tuple) on a null handle the library refuses at
                     once (Engine._call_floor). No transport, no compute: no call can cost less.
                     This process has one thread here, so the GIL stays with the call.
  call-floor-py-threads  the same with a second Python thread alive (blocked on an Event): every
                     wait then hands the GIL over and back
  harness-py         the timing loop alone around callable(p), a C builtin that does nothing: what
                     every row above includes besides its call

Sweep. Then a second engine on the default series (150,000 bars, seed 42) and the --grid combos:
each round sweeps once from Python through the segment (engine.sweep, one C call through
ipcfloor_sweep_on), once with the command line (`ipcfloor sweep --name`, the whole process timed
from here: start, attach, sweep, rows) and once from Python over the socket (one sweep_loaded
frame), each timed on its own. All four paths must give the same bits before anything is timed.

Percentiles are nearest ranks, the one definition of every `ipcfloor bench` suite
(bench/percentile.hpp); under `ipcfloor bench python` the C++ peer says where they sit.

`ipcfloor bench python` creates a venv, pip-installs the package into it and runs this with the
venv's python; standalone (the package importable):
    python_bench.py --ipcfloor PATH/bin/ipcfloor [--json]
"""

import argparse
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time

try:
    import numpy as np
except ImportError:
    print("python_bench: numpy is missing: apt-get install python3-numpy, and run this from a venv made with "
          "python3 -m venv --system-site-packages", file=sys.stderr)
    sys.exit(3)

try:
    import ipcfloor
    from ipcfloor.socket import SocketClient
except ImportError as error:
    print(f"python_bench: cannot import the ipcfloor package ({error}): pip install --no-build-isolation "
          "PREFIX/share/ipcfloor/python into this python's venv (`ipcfloor bench python` does that itself)",
          file=sys.stderr)
    sys.exit(3)

SWEEP_BARS = 150_000


LEVELS = {"p50": 50.0, "p90": 90.0, "p99": 99.0, "p99.9": 99.9}


def nearest_rank_index(count, percent):
    """The sorted position of the p-th percentile of `count` samples: the nearest rank, the one
    definition of bench/percentile.hpp. Only a standalone run uses this copy; under `ipcfloor bench
    python` the positions come from that header through the C++ peer."""
    if not percent > 0:
        return 0
    if percent >= 100:
        return count - 1
    rank = math.ceil(math.nextafter(percent, 0.0) * count / 100.0)
    return min(count, max(rank, 1)) - 1


def percentiles(samples, peer=None):
    ordered = sorted(samples)
    n = len(ordered)
    levels = list(LEVELS.values())
    indices = peer.percentile_indices(n, levels) if peer else [nearest_rank_index(n, p) for p in levels]
    row = {"samples": n}
    row.update({key: ordered[i] for key, i in zip(LEVELS, indices)})
    row.update(max=ordered[-1], min=ordered[0])
    return row


def time_calls(call, argument, count, clock=time.perf_counter_ns):
    samples = [0] * count
    for i in range(count):
        start = clock()
        call(argument)
        samples[i] = clock() - start
    return samples


class AnotherThread:
    """A second Python thread, blocked on an Event, for as long as the block runs."""

    def __enter__(self):
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._done.wait, name="python_bench-idle")
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()


class CppPeer:
    """The `ipcfloor bench python` that started this script: asked on stdout, it answers on stdin
    with the RTT samples (ns) of the C++ client's ECHOs on engine `name` from `cpu`."""

    def echo(self, name, combo, samples, warmup, cpu):
        request = {"echo_cpp": {"engine": name, "params": list(combo), "samples": samples, "warmup": warmup,
                                "cpu": cpu}}
        answer = self._ask(request)
        if "samples" not in answer:
            raise SystemExit(f"python_bench: the C++ echo failed: {answer.get('error', 'no answer')}")
        return answer["samples"]

    def percentile_indices(self, count, levels):
        answer = self._ask({"percentile_index": {"count": count, "at": levels}})
        if "indices" not in answer:
            raise SystemExit(f"python_bench: the C++ peer gave no percentiles: {answer.get('error', 'no answer')}")
        return answer["indices"]

    @staticmethod
    def _ask(request):
        sys.stdout.write(json.dumps(request) + "\n")
        sys.stdout.flush()
        return json.loads(sys.stdin.readline() or "{}")


def start_engine(binary, name, bars, server_cpu, socket_path, lanes):
    argv = [binary, "serve", "--name", name, "--bars", str(bars), "--seed", "42", "--socket", socket_path,
            "--wait", "spin", "--lanes", str(lanes), "--cpu", str(server_cpu), "--quiet"]
    # serve prints its `ready {...}` line on stdout, which carries this script's answers: keep it out.
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL)


def stop_engine(server):
    server.send_signal(signal.SIGINT)
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def attach_when_up(server, name, limit=10.0):
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


def same_bits(a, b):
    def bits(x):
        return np.asarray(x, dtype=np.float64).view(np.int64)
    return np.array_equal(bits(a), bits(b))


def latency_phase(args, tmp, peer, client_cpu, server_cpu):
    """Every per-call path in interleaved rounds: {path: samples}, {path: [p50 per round]}, facts."""
    name = f"ipcfloor-pybench-{os.getpid()}"
    socket_path = os.path.join(tmp, "latency.sock")
    server = start_engine(args.ipcfloor, name, args.bars, server_cpu, socket_path, lanes=3)
    try:
        engine = attach_when_up(server, name)
        sock = SocketClient.unix(socket_path, timeout=30.0)
        served = sock.use_preloaded()
        if served.checksum != engine.checksum:
            raise SystemExit("python_bench: the socket serves another series than the segment")
        combo = ipcfloor.combo_from_length(args.length)
        shm_answer, uds_answer = engine.backtest(combo), sock.backtest(combo)
        if shm_answer != uds_answer or engine.echo(combo) != combo or sock.echo_params(combo) != combo:
            raise SystemExit(f"python_bench: segment {shm_answer} and socket {uds_answer} disagree")
        paths = {
            "backtest-shm": lambda n: time_calls(engine.backtest, combo, n),
            "backtest-uds": lambda n: time_calls(sock.backtest, combo, n),
            "echo-shm": lambda n: time_calls(engine.echo, combo, n),
            "echo-uds": lambda n: time_calls(sock.echo_params, combo, n),
            "call-floor-py": lambda n: time_calls(engine._call_floor, combo, n),
            "harness-py": lambda n: time_calls(callable, combo, n),
        }
        if peer is not None:
            paths["echo-cpp"] = lambda n: peer.echo(name, combo, n, args.warmup, client_cpu)

        def threaded(n):
            with AnotherThread():
                time_calls(engine._call_floor, combo, args.warmup)
                return time_calls(engine._call_floor, combo, n)
        paths["call-floor-py-threads"] = threaded

        per_round = -(-args.samples // args.rounds)
        samples = {key: [] for key in paths}
        round_p50 = {key: [] for key in paths}
        for _ in range(args.rounds):
            for key, run in paths.items():
                if key != "echo-cpp":
                    run(args.warmup)
                timed = run(per_round)
                samples[key] += timed
                round_p50[key].append(percentiles(timed, peer)["p50"])
        facts = {"lane": engine.lane, "wait": engine.wait, "series": served.name, "checksum": f"{served.checksum:016x}",
                 "params": list(combo), "backtest": list(shm_answer)}
        sock.close()
        engine.close()
        return samples, round_p50, facts
    finally:
        stop_engine(server)


def sweep_phase(args, tmp, grid):
    """Each round: one sweep from Python through the segment, one `ipcfloor sweep --name`, one from
    Python over the socket; seconds of each, and the parity that held first."""
    name = f"ipcfloor-pybench-sweep-{os.getpid()}"
    socket_path = os.path.join(tmp, "sweep.sock")
    server = start_engine(args.ipcfloor, name, SWEEP_BARS, args.server_cpu_chosen, socket_path, lanes=2)
    cli = [args.ipcfloor, "sweep", "--name", name, "--grid", args.grid, "--json", "--quiet"]
    try:
        engine = attach_when_up(server, name)
        sock = SocketClient.unix(socket_path, timeout=60.0)
        sock.use_preloaded()
        swept = engine.sweep(grid)
        pnl, trades = sock.sweep_loaded(grid)
        rows = [json.loads(line) for line in subprocess.run(cli, capture_output=True, text=True,
                                                            check=True).stdout.splitlines()]
        cli_params = np.array([row["params"] for row in rows], dtype=np.int64).reshape(-1, 6)
        if swept.refused or not (same_bits(swept.pnl, pnl) and np.array_equal(swept.trades, trades) and
                                 np.array_equal(cli_params, grid) and
                                 same_bits(swept.pnl, [row["pnl"] for row in rows]) and
                                 swept.trades.tolist() == [row["trades"] for row in rows]):
            raise SystemExit("python_bench: the sweeps of the segment, the socket and the command line disagree")
        seconds = {"shm": [], "cli": [], "uds": []}
        for _ in range(args.sweeps):
            start = time.perf_counter_ns()
            engine.sweep(grid)
            seconds["shm"].append((time.perf_counter_ns() - start) / 1e9)
            start = time.perf_counter_ns()
            subprocess.run(cli, stdout=subprocess.DEVNULL, check=True)
            seconds["cli"].append((time.perf_counter_ns() - start) / 1e9)
            start = time.perf_counter_ns()
            sock.sweep_loaded(grid)
            seconds["uds"].append((time.perf_counter_ns() - start) / 1e9)
        sock.close()
        engine.close()
        return seconds, {"combos": len(grid), "bars": SWEEP_BARS, "command": " ".join(cli[1:])}
    finally:
        stop_engine(server)


def report_of(args, samples, round_p50, facts, seconds, sweep_facts, client_cpu, server_cpu, peer):
    results = []
    for key in samples:
        row = percentiles(samples[key], peer)
        row.update(name=key, kind="rtt", round_p50=round_p50[key])
        results.append(row)
    p50 = {row["name"]: row["p50"] for row in results}
    sweeps = {key: percentiles([v * 1e3 for v in values], peer) for key, values in seconds.items()}  # ms
    median = {key: sweeps[key]["p50"] for key in sweeps}
    goals = [{"what": "call-floor-py p50, ns", "target": 100, "measured": p50["call-floor-py"],
              "met": p50["call-floor-py"] <= 100}]
    if "echo-cpp" in p50:
        goals.append({"what": "echo-shm p50 - echo-cpp p50, ns", "target": 150,
                      "measured": p50["echo-shm"] - p50["echo-cpp"], "met": p50["echo-shm"] - p50["echo-cpp"] <= 150})
    goals.append({"what": "sweep from Python / ipcfloor sweep --name, p50", "target": 1.03,
                  "measured": median["shm"] / median["cli"], "met": median["shm"] / median["cli"] <= 1.03})
    return {
        "suite": "python",
        "config": {"bars": args.bars, "length": args.length, "params": facts["params"], "samples": args.samples,
                   "rounds": args.rounds, "warmup": args.warmup, "grid": args.grid, "combos": sweep_facts["combos"],
                   "sweep_bars": sweep_facts["bars"], "sweeps": args.sweeps, "client_cpu": client_cpu,
                   "server_cpu": server_cpu, "engine": "ipcfloor serve --wait spin --socket", "shm_lane": facts["lane"],
                   "shm_wait": facts["wait"], "series": facts["series"], "checksum": facts["checksum"],
                   "cli": sweep_facts["command"]},
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "numpy": np.__version__,
        "package": os.path.dirname(ipcfloor.__file__),
        "clock": "time.perf_counter_ns per call (echo-cpp: the TSC per call, in the C++ process)",
        "results": results,
        "ratios": {
            "backtest uds/shm p50": p50["backtest-uds"] / p50["backtest-shm"],
            "echo uds/shm p50": p50["echo-uds"] / p50["echo-shm"],
            "backtest uds/shm per round p50": [u / s for u, s in zip(round_p50["backtest-uds"],
                                                                     round_p50["backtest-shm"])],
            "echo uds/shm per round p50": [u / s for u, s in zip(round_p50["echo-uds"], round_p50["echo-shm"])],
        },
        # Milliseconds per sweep, each timed on its own: shm (Python, segment), cli (`ipcfloor sweep
        # --name`, the whole process), uds (Python, socket).
        "sweep": {"unit": "ms", "shm": sweeps["shm"], "cli": sweeps["cli"], "uds": sweeps["uds"],
                  "shm/cli p50": median["shm"] / median["cli"], "uds/shm p50": median["uds"] / median["shm"],
                  "shm/cli per round": [a / b for a, b in zip(seconds["shm"], seconds["cli"])]},
        "parity": {"backtest": facts["backtest"], "sweep_combos": sweep_facts["combos"], "holds": True},
        "goals": goals,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ipcfloor", required=True, help="the ipcfloor executable that serves")
    ap.add_argument("--bars", type=int, default=1000, help="the latency engine's series")
    ap.add_argument("--length", type=int, default=6, help="the combo's user-facing length L")
    ap.add_argument("--samples", type=int, default=100_000, help="timed calls per path, over all rounds")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2_000, help="untimed calls per path and round")
    ap.add_argument("--grid", default="6:200:80", help="FIRST:LAST:COUNT, as `ipcfloor sweep --grid`")
    ap.add_argument("--sweeps", type=int, default=30, help="timed sweeps per path")
    ap.add_argument("--client-cpu", type=int, help="core of this process (default: the first allowed)")
    ap.add_argument("--server-cpu", type=int, help="core of the engine's serving thread (default: the last allowed)")
    ap.add_argument("--peer", choices=["none", "stdio"], default="none",
                    help="stdio: the parent (ipcfloor bench python) times the C++ echo; the report goes out as "
                         "one {\"report\": ...} line")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    args = ap.parse_args()
    if args.samples < args.rounds or args.rounds < 1 or args.bars < 2 or args.length < 1 or args.sweeps < 1:
        ap.error("need --rounds >= 1, --samples >= --rounds, --bars >= 2, --length >= 1, --sweeps >= 1")

    allowed = sorted(os.sched_getaffinity(0))
    client_cpu = args.client_cpu if args.client_cpu is not None else allowed[0]
    server_cpu = args.server_cpu if args.server_cpu is not None else allowed[-1]
    args.server_cpu_chosen = server_cpu
    os.sched_setaffinity(0, {client_cpu})

    first, last, count = (float(x) for x in args.grid.split(":"))
    grid = ipcfloor.grid([int(round(v)) for v in np.linspace(first, last, int(count))])
    peer = CppPeer() if args.peer == "stdio" else None
    with tempfile.TemporaryDirectory(prefix="ipcfloor-pybench-") as tmp:
        samples, round_p50, facts = latency_phase(args, tmp, peer, client_cpu, server_cpu)
        seconds, sweep_facts = sweep_phase(args, tmp, grid)
    report = report_of(args, samples, round_p50, facts, seconds, sweep_facts, client_cpu, server_cpu, peer)
    if args.peer == "stdio":
        print(json.dumps({"report": report}))
    elif args.json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0


def print_report(report):
    config = report["config"]
    print(f"python: one combo {config['params']} on {config['bars']} bars, from Python {report['python']}, "
          f"RTT ns ({report['clock']})")
    print(f"  {'path':<22} {'p50':>9} {'p90':>9} {'p99':>9} {'p99.9':>9} {'max':>11}")
    for row in report["results"]:
        print(f"  {row['name']:<22} {row['p50']:>9} {row['p90']:>9} {row['p99']:>9} {row['p99.9']:>9} {row['max']:>11}")
    ratios = report["ratios"]
    print(f"  socket / segment p50: backtest {ratios['backtest uds/shm p50']:.1f}x, echo {ratios['echo uds/shm p50']:.1f}x")
    sweep = report["sweep"]
    print(f"  {config['combos']} combos on {config['sweep_bars']} bars, p50 ms: Python through the segment "
          f"{sweep['shm']['p50']:.2f}, `ipcfloor {config['cli']}` {sweep['cli']['p50']:.2f} "
          f"({sweep['shm/cli p50']:.3f}x), Python over the socket {sweep['uds']['p50']:.2f}")
    for goal in report["goals"]:
        print(f"  goal {goal['what']} <= {goal['target']}: {goal['measured']:.3f} ({'met' if goal['met'] else 'NOT met'})")


if __name__ == "__main__":
    sys.exit(main())
