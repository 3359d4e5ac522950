#pragma once
// What the workload suites set up the same way: where they run (client and server cpus, the
// engine binary), the 80-combo default grid, and the check that a way's results are the
// in-process ones. Setup path: allocates.

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/backtest_result.hpp"
#include "common/combo.hpp"
#include "common/error.hpp"

namespace ipcfloor {

struct SuitePlacement {
  int client_cpu = -1;  // the measuring thread
  int server_cpu = -1;  // the engine's serving thread (and what computes beside it)
  std::string binary;   // the ipcfloor executable the engines are started from
};

// -1 cpus become the first and last cpu this process may use; an empty binary, this executable.
[[nodiscard]] SuitePlacement place_suite(int client_cpu, int server_cpu, const std::string& binary);

// The default grid of docs/SPEC.md §1: one combo per length of linspace(6, 200, 80).
[[nodiscard]] std::vector<Combo> default_grid_combos();

// Fails with bad_data naming `way` and the first combo whose pnl or trades differ from
// `expected` (bit for bit), or the counts when they differ.
[[nodiscard]] Expected<void> same_results(std::string_view way, std::span<const BacktestResult> got,
                                          std::span<const BacktestResult> expected);

}  // namespace ipcfloor
