#pragma once
// `ipcfloor bench granularity` (docs/SPEC.md §7.4): the full 80-combo default sweep run six ways —
// in-process; one batch over the socket; chatty per-combo calls that re-ship the series; a
// process spawned per sweep; stateful over the socket (series loaded once, params only); and
// stateful over the shm ring — plus the break-even table G = compute per call / transport
// floor at sweep, combo and bar granularity, every figure measured in this run.

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ipcfloor {

struct GranularityOptions {
  std::size_t repeats = 5;           // whole sweeps per way, each a sample
  std::size_t floor_samples = 20'000;  // ECHO round trips per transport for the floors
  int client_cpu = -1;
  int server_cpu = -1;
  std::string binary;  // empty: this executable
};

// Every way's results are checked against the in-process sweep (trades and pnl bit-equal).
[[nodiscard]] Expected<nlohmann::json> run_granularity(const GranularityOptions& options);
void print_granularity(const nlohmann::json& report);

}  // namespace ipcfloor
