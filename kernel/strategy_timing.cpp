#include "kernel/strategy_timing.hpp"

#include <algorithm>
#include <chrono>
#include <limits>


namespace ipcfloor {
namespace {

// Runs of each side; the fastest counts (a run the host preempted only looks slower).
constexpr int kTimingRuns = 3;

// The fastest of kTimingRuns runs of `s` on the bars `close` with `params`, in ns (0 when a run fails).
double fastest_run_ns(const Strategy& s, const Bars& close, const Combo& params) {
  KernelWorkspace workspace(s.workspace_bytes(close.size()));
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < kTimingRuns; ++i) {
    BacktestResult result;
    const auto start = std::chrono::steady_clock::now();
    if (s.run(close, params, kDefaultFee, workspace, result) != StrategyRun::ok) return 0;
    best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

StrategyTiming time_strategy(const StrategyTable& table, const Bars& close) {
  StrategyTiming timing;
  if (close.size() < 2) return timing;
  const Strategy s(table, 0);
  const Combo example = s.example();
  const std::uint64_t cost = s.cost(example, close.size());
  const Combo reference = builtin().example();
  const std::uint64_t reference_cost = builtin().cost(reference, close.size());
  if (cost == 0 || reference_cost == 0) return timing;
  const double ns = fastest_run_ns(s, close, example);
  const double reference_ns = fastest_run_ns(builtin(), close, reference);
  if (ns <= 0 || reference_ns <= 0) return timing;
  timing.slowdown = (ns / static_cast<double>(cost)) / (reference_ns / static_cast<double>(reference_cost));
  timing.workers_only = timing.slowdown > kWorkersOnlyFactor;
  return timing;
}

}  // namespace ipcfloor
