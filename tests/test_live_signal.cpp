// The per-bar signal against the batch kernel: same crossings, so the same trades and pnl.

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernel/kernel.hpp"
#include "kernel/live_signal.hpp"

using namespace ipcfloor;

namespace {

// The docs/SPEC.md §1 event loop driven by per-bar signals.
BacktestResult replay(const std::vector<double>& close, const Combo& combo, double fee) {
  LiveSignal live(combo);
  BacktestResult r;
  int pos = 0;
  double entry = 0.0;
  for (std::size_t i = 0; i < close.size(); ++i) {
    const BarSignal signal = live.on_bar(std::span<const double>(close.data(), i + 1));
    if (i == 0) continue;
    if (signal.cross > 0) {
      if (pos == -1) { r.pnl += (entry / close[i] - 1.0) * 100.0 - fee; ++r.trades; }
      if (pos != 1) { pos = 1; entry = close[i]; }
    } else if (signal.cross < 0) {
      if (pos == 1) { r.pnl += (close[i] / entry - 1.0) * 100.0 - fee; ++r.trades; }
      if (pos != -1) { pos = -1; entry = close[i]; }
    }
  }
  return r;
}

}  // namespace

TEST_CASE("bar-by-bar signals reproduce the batch kernel's trades and pnl exactly") {
  std::mt19937_64 rng(3);
  std::normal_distribution<double> step(0.0, 0.3);
  std::vector<double> close(3'000);
  double level = 100.0;
  for (double& v : close) v = (level += step(rng)) > 1.0 ? level : (level = 1.0);
  KernelWorkspace workspace(close.size());
  for (std::int64_t length : {6, 13, 40, 101}) {
    CAPTURE(length);
    const Combo combo = combo_from_length(length);
    BacktestResult batch;
    REQUIRE(run_backtest(close, combo, kDefaultFee, workspace, batch) == KernelStatus::ok);
    const BacktestResult live = replay(close, combo, kDefaultFee);
    REQUIRE(batch.trades > 0);
    CHECK(live.trades == batch.trades);
    CHECK(live.pnl == batch.pnl);
  }
}

TEST_CASE("a bar before the windows fill has no signal") {
  LiveSignal live(combo_from_length(10));
  const std::vector<double> close{100, 101, 102};
  const BarSignal signal = live.on_bar(close);
  CHECK(std::isnan(signal.hma));
  CHECK(signal.cross == 0);
}
