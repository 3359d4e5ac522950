#pragma once
// `ipcfloor bench compute`: the 80-combo sweep in-process against the numba @njit
// single-thread reference, on the same machine in the same run, with the parity gate.

#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ipcfloor {

struct ComputeBenchOptions {
  std::size_t bars = 150'000;
  std::uint64_t seed = 42;
  std::string grid = "6:200:80";
  double fee = 0.09;
  unsigned repeats = 7;            // timed in-process sweeps, each one a sample
  unsigned reference_repeats = 3;  // timed numba sweeps (about 6 s each here)
  unsigned threads = 0;            // 0 = one worker per online core
  std::string python = "/usr/bin/python3";
  std::string reference_script;    // empty = tools/reference/bench_numba.py among the helpers (helper_files.hpp)
};

// Runs the benchmark and returns its report (host, timings, ratio, parity). The error says
// which step failed: the reference could not run, or the parity gate did not hold.
[[nodiscard]] Expected<nlohmann::json> run_compute_bench(const ComputeBenchOptions& options);

// Prints the report's headline as a short table for people.
void print_compute_report(const nlohmann::json& report);

}  // namespace ipcfloor
