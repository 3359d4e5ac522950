#pragma once
// `ipcfloor bench python`: what a Python caller gets from the engine, in one run: per-call RTT of
// a backtest and an echo through the segment (the ipcfloor package) and over the Unix socket
// (ipcfloor.socket), the C++ client's echo on the same engine from the same cpu, Python's own
// share of a call, and the 80-combo sweep from Python against `ipcfloor sweep --name`.
//
// The package is measured as a user gets it: a venv (`python -m venv --system-site-packages`,
// numpy from Debian) into which `pip install --no-build-isolation` builds the package's
// project from the helpers' folder (share/ipcfloor/python), offline. The work is
// bench/python_bench.py, run with the venv's python; this process answers its requests for the
// C++ echo (ShmClient::call, timed with the TSC) on its stdin and stdout.
//
// Setup path throughout: spawns processes, allocates. The calling thread is pinned to the
// client cpu while it times the C++ echo, and its mask restored after.

#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ipcfloor {

struct PythonBenchOptions {
  std::string python = "/usr/bin/python3";  // Debian's, with python3-numpy, python3-venv, python3-dev
  std::size_t samples = 100'000;            // timed calls per path, over all rounds
  std::size_t rounds = 5;                   // interleaved rounds
  std::size_t warmup = 2'000;               // untimed calls per path and round
  std::size_t sweeps = 30;                  // timed sweeps per path
  std::size_t bars = 1'000;                 // the latency engine's series
  int client_cpu = -1;                      // -1: the first allowed cpu
  int server_cpu = -1;                      // -1: the last allowed cpu
};

// Builds the venv, runs the script and returns its report with the host's facts added. Errors
// name the missing helper, interpreter or package, or the step that failed with its output.
[[nodiscard]] Expected<nlohmann::json> run_python_bench(const PythonBenchOptions& options);

// The report as a table for people.
void print_python_bench(const nlohmann::json& report);

}  // namespace ipcfloor
