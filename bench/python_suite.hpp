#pragma once
// `ipcfloor bench python`: what a Python caller gets through the segment (the ipcfloor package,
// ctypes over libipcfloor.so) against the Unix socket (ipcfloor.socket), in one run: per-call
// RTT of one backtest and of an echo, and sweep throughput. The work is bench/python_bench.py,
// found among the helpers (bench/helper_files.hpp) and run with this executable as the engine.

#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ipcfloor {

struct PythonBenchOptions {
  std::string python = "/usr/bin/python3";  // with numpy
  std::size_t samples = 100'000;            // timed calls per path, over all rounds
  std::size_t rounds = 5;                   // interleaved rounds
  std::size_t warmup = 2'000;               // untimed calls per path and round
  std::size_t sweeps = 30;                  // timed sweeps per path
  std::size_t bars = 1'000;                 // the engine's series
  int client_cpu = -1;                      // -1: the first allowed cpu
  int server_cpu = -1;                      // -1: the last allowed cpu
};

// Runs the script and returns its report with the host's facts added. Errors name the missing
// helper or interpreter, or the script's failure.
[[nodiscard]] Expected<nlohmann::json> run_python_bench(const PythonBenchOptions& options);

// The report as a table for people.
void print_python_bench(const nlohmann::json& report);

}  // namespace ipcfloor
