#!/usr/bin/python3
"""Google Benchmark's own compare.py (Debian's libbenchmark-tools) on two runs of
`ipcfloor bench ladder --gbench-json FILE`: it succeeds and prints a row per figure of each rung,
and the files have Google Benchmark's context and benchmarks shape.

Usage: /usr/bin/python3 test_gbench_compare.py PATH/bin/ipcfloor [PATH/compare.py]
"""

import json
import os
import subprocess
import sys
import tempfile

from test_python_support import check, finish

COMPARE = "/usr/share/benchmark/compare.py"
RUNGS = ("physical-floor", "inproc-call")
CONTEXT_KEYS = ("date", "host_name", "executable", "num_cpus", "mhz_per_cpu", "cpu_scaling_enabled", "caches",
                "load_avg", "library_build_type")
ENTRY_KEYS = ("name", "family_index", "per_family_instance_index", "run_name", "run_type", "repetitions", "threads",
              "iterations", "real_time", "cpu_time", "time_unit")


def bench_once(ipcfloor, path):
    done = subprocess.run([ipcfloor, "bench", "ladder", "--transports", ",".join(RUNGS), "--samples", "2100",
                           "--warmup", "200", "--rounds", "3", "--gbench-json", path],
                          capture_output=True, text=True, timeout=120)
    check(done.returncode == 0, f"bench ladder --gbench-json exits 0: {done.stderr}")
    return json.load(open(path)) if os.path.exists(path) else {}


def check_shape(report):
    check(list(report) == ["context", "benchmarks"], f"the file holds context then benchmarks: {list(report)}")
    context = report.get("context", {})
    check(all(key in context for key in CONTEXT_KEYS), f"the context has Google Benchmark's keys: {sorted(context)}")
    entries = report.get("benchmarks", [])
    check(all(all(key in e for key in ENTRY_KEYS) for e in entries), "every entry has Google Benchmark's keys")
    for rung in RUNGS:
        rounds = [e for e in entries if e["name"] == f"ladder/{rung}" and e["run_type"] == "iteration"]
        check([e["repetition_index"] for e in rounds] == [0, 1, 2], f"{rung}: one iteration entry per round")
        p50 = [e for e in entries if e["name"] == f"ladder/{rung}_p50"]
        check(len(p50) == 1 and p50[0]["run_type"] == "aggregate" and p50[0]["aggregate_name"] == "p50" and
              p50[0]["time_unit"] == "ns" and p50[0]["iterations"] == 2100 and
              p50[0]["real_time"] == p50[0]["cpu_time"] > 0, f"{rung}: its p50 is an aggregate in ns: {p50}")


def main():
    ipcfloor = sys.argv[1]
    compare = sys.argv[2] if len(sys.argv) > 2 else COMPARE
    check(os.path.exists(compare), f"{compare} exists (apt-get install libbenchmark-tools python3-scipy; "
                                   "tools/setup does)")
    with tempfile.TemporaryDirectory(prefix="ipcfloor-gbench-") as tmp:
        runs = [os.path.join(tmp, name) for name in ("old.json", "new.json")]
        for path in runs:
            check_shape(bench_once(ipcfloor, path))
        done = subprocess.run([sys.executable, compare, "--no-color", "benchmarks", *runs], capture_output=True,
                              text=True, timeout=120)
        check(done.returncode == 0, f"compare.py exits 0: {done.stderr}")
        lines = done.stdout.splitlines()
        for rung in RUNGS:
            for stat in ("p50", "p90", "p99", "p99.9", "p99.99", "min", "max", "mean"):
                row = [line for line in lines if line.split() and line.split()[0] == f"ladder/{rung}_{stat}"]
                check(len(row) == 1 and len(row[0].split()) == 7,
                      f"compare.py prints ladder/{rung}_{stat} with its change and old and new times: {row}")
            check(any(line.startswith(f"ladder/{rung}_pvalue") for line in lines),
                  f"compare.py runs its U test over the rounds of {rung}")
    return finish("compare.py compares two `bench ladder --gbench-json` runs figure by figure")


if __name__ == "__main__":
    sys.exit(main())
