#pragma once
// The reports of `ipcfloor bench` in Google Benchmark's JSON shape (what its `--benchmark_format=
// json` writes), so that its compare.py (Debian's libbenchmark-tools) compares two runs:
//   {"context": {date, host_name, executable, num_cpus, mhz_per_cpu, cpu_scaling_enabled, caches,
//                load_avg, library_build_type, and ipcfloor's own: ipcfloor_version, git_commit,
//                cpu, kernel, kernel_isa, percentile},
//    "benchmarks": [...]}
// Every timed row of every suite becomes one run named SUITE/ROW, ROW being where it sits in the
// report: each level's key (lists of rows skipped) or, in a list, the element's name or what
// identifies it ("memfd_4k/prefault=true"): ladder/physical-floor, throughput/shm-call/rtt,
// compute/avx512/single_thread, echo/uds (opcode 1 echo)/bytes=1024. Each run has one
// "aggregate" entry per figure: SUITE/ROW_p50, _p90, _p99, _p99.9, _p99.99, _min, _max, _mean,
// _stddev, _median (each where the row has it), aggregate_unit "time", iterations = the row's
// samples. A row with a p50 per round (the ladder, python) also gets one "iteration" entry per
// round, repetition_index the round, so compare.py's U test (-u) has repetitions to compare (the
// ladder's per-round figure is its p50~, the median interpolated within the clock step, as its
// ratios use). Rates, counts and ratios are not times and stay out.
//
// ipcfloor measures wall-clock time only: cpu_time repeats real_time. Percentiles are nearest
// ranks (bench/percentile.hpp), "median" of a whole-run repeat (compute's median_s) too.
//
// Pure: formats what the JSON holds and nothing else; allocates the result; any thread.

#include <nlohmann/json.hpp>

namespace ipcfloor {

// `combined` is the document `ipcfloor bench --json` prints: {"context":{...}, "host":{...},
// "suites":{name: suite report}}. The result's keys are in Google Benchmark's order.
[[nodiscard]] nlohmann::ordered_json google_benchmark_report(const nlohmann::json& combined);

}  // namespace ipcfloor
