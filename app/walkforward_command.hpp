#pragma once
// `ipcfloor walkforward`: the research loop around a sweep. Fold k trains on the bars
// [s, s + train) (--anchored: [0, s + train)), s = k * step, sweeping every combo with its
// statistics and choosing the best by one figure (ties and NaN: the earlier combo in the plan
// wins, as `sweep --sort-by` ranks), then runs that combo on the test bars [s + train, s + train +
// test). Folds continue while the test range fits the series. A row per fold gives the ranges, the
// chosen params, and the in-sample and out-of-sample figures; a last line gives the stitched
// out-of-sample result: the test ranges' bars laid end to end, each fold's trades moved into those
// coordinates, and the figures of docs/STATISTICS.md over them (a trade never spans two folds, so
// the curve stays flat across each seam).
//
// Threads: the command's thread. Setup path: allocates, does I/O.

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "app/sweep_command.hpp"

namespace ipcfloor {

struct WalkForwardOptions {
  SweepOptions sweep;        // the target, series, strategy, combos, fee, bars per year
  std::uint64_t train = 0;   // bars
  std::uint64_t test = 0;    // bars
  std::uint64_t step = 0;    // bars; 0: test
  bool anchored = false;
  std::string by = "sharpe";  // METRIC[:asc|:desc], as sweep --sort-by
};

CLI::App* add_walkforward_subcommand(CLI::App& app, WalkForwardOptions& options);

// Returns the exit code; errors go to stderr.
[[nodiscard]] int run_walkforward_command(WalkForwardOptions& options);

}  // namespace ipcfloor
