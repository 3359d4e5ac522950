#pragma once
// The engine's workers against the alternatives, in one run (a section of `ipcfloor bench
// throughput`):
//  - scaling: one row per worker count N, a grid (default 6:400:240 on the default 150,000-bar
//    series) swept three ways, interleaved sweep by sweep: in process (run_sweep on N threads, what
//    `sweep --inproc --threads N` runs), through the segment (an engine with N workers, one lane,
//    pipelined_sweep, what `sweep --name` runs) and over the Unix socket (the same engine process
//    with --sweep-threads N, sweep on its preloaded series, what `sweep --socket` runs). Each sweep
//    is timed on its own; rows give percentiles over sweeps and the ratios of medians.
//  - interference: a blocking ECHO's RTT on one lane, idle and while another lane streams the
//    grid, in alternating rounds; per-sample percentiles and the p50 ratio.
//  - pickup: a client that attaches while another lane streams: attach-to-first-answer and the
//    first call's own RTT, against the same on an idle engine.
// Every grid answer is checked against the in-process sweep, bit for bit: a wrong one is an error.
//
// With a strategy (ScalingOptions::strategy, `bench throughput --strategy FILE.so`) the scaling
// rows run that strategy instead of the built-in one: the engine child is started with
// --strategy FILE.so, the segment's requests and the socket connection name it, and the in-process
// way runs run_sweep on it as loaded here. Its combos are strategy_grid's. Interference and pickup
// stay on the built-in grid.
// Setup path: allocates; the engine runs as a child process, as users run it.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/combo.hpp"
#include "common/error.hpp"

namespace ipcfloor {

struct ScalingOptions {
  std::vector<std::uint32_t> workers;  // one row per count; empty: 0, 1, and each power of two up to the most this host allows
  std::string grid = "6:400:240";         // with a strategy, only its combo count is used (strategy_grid)
  std::size_t bars = 150'000;
  std::uint64_t seed = 42;
  std::size_t repeats = 3;                // sweeps per way per row
  std::size_t echo_samples = 20'000;      // interference: ECHOs per state (idle, streaming)
  std::size_t pickups = 20;               // pickup: attaches per state
  std::string binary;                     // empty: this executable
  std::string strategy;                   // empty: the built-in strategy on `grid`; else a FILE.so the rows run
};

class Strategy;

// The combos a strategy's scaling rows sweep: its example() params, with its first two params
// (the first alone when it has one) each taking `side` values spread geometrically from half to
// twice the example's value (side = ceil(sqrt(count)) with two params, count with one), rounded to
// the nearest whole number, repeats dropped; an example value of 0 spreads as 0, 1, ..., side-1.
// Every pairing is checked with Strategy::accepts for `bars` bars and refused ones are skipped, so
// there are at most about `count`. An error when the strategy accepts none. Allocates.
[[nodiscard]] Expected<std::vector<Combo>> strategy_grid(const Strategy& strategy, std::size_t count, std::size_t bars);

// The options' errors run_scaling would meet before it measures anything (a strategy file that
// does not load included), so a caller can refuse them before its own sections run. Loads and
// unloads the strategy.
[[nodiscard]] Expected<void> check_scaling(const ScalingOptions& options);
[[nodiscard]] Expected<nlohmann::json> run_scaling(const ScalingOptions& options);
void print_scaling(const nlohmann::json& report);

}  // namespace ipcfloor
