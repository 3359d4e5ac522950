#include "kernel/cost_rate.hpp"

#include <algorithm>

#include "kernel/strategy.hpp"

namespace ipcfloor {
namespace {
// The calibration combo costs about this many units: long enough to time, short enough for startup.
constexpr std::uint64_t kCalibrationCost = 20'000'000;
constexpr int kMinRuns = 3;
constexpr int kMaxRuns = 1000;
}  // namespace

double measure_cost_rate(std::span<const double> close, std::chrono::milliseconds budget) {
  if (close.size() < 2) return 0.0;
  // The length whose combo costs about kCalibrationCost on this many bars (cost ~ 3.2 L n).
  const auto length = static_cast<std::int64_t>(std::clamp(
      static_cast<double>(kCalibrationCost) / (3.2 * static_cast<double>(close.size())), 6.0,
      static_cast<double>(close.size())));
  // The built-in strategy, through the strategy interface as the engine runs it.
  const Strategy builtin(builtin_strategy(), 0);
  Combo combo = combo_from_length(length);
  if (!builtin.accepts(combo, close.size())) combo = combo_from_length(1);
  const std::uint64_t cost = builtin.cost(combo, close.size());
  KernelWorkspace workspace(builtin.workspace_bytes(close.size()));
  double best = 0.0;
  const auto until = std::chrono::steady_clock::now() + budget;
  for (int run = 0; run < kMinRuns || std::chrono::steady_clock::now() < until; ++run) {
    BacktestResult result;
    const auto t0 = std::chrono::steady_clock::now();
    (void)builtin.run(close, combo, 0.0, workspace, result);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (us > 0) best = std::max(best, static_cast<double>(cost) / us);
    if (run > kMaxRuns) break;
  }
  return best;
}

std::uint64_t max_cost_for(double units_per_us, std::chrono::milliseconds frame_time) noexcept {
  if (units_per_us <= 0.0 || frame_time.count() <= 0) return 0;
  return static_cast<std::uint64_t>(units_per_us * 1000.0 * static_cast<double>(frame_time.count()));
}

}  // namespace ipcfloor
