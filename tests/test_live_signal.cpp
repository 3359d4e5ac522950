// The per-bar signal against the batch kernel: same crossings, so the same trades and pnl.

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
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
  KernelWorkspace workspace(hma_workspace_bytes(close.size()));
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

TEST_CASE("LiveBacktest over caller storage matches the batch kernel bit for bit after every prefix, on every "
          "kernel path's numbers") {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> step(0.0, 0.01);
  std::vector<double> close{100.0};
  for (int i = 1; i < 3000; ++i) close.push_back(close.back() * std::exp(step(rng)));
  const double fee = 0.09;
  for (const std::int64_t length : {6, 9, 31, 100}) {
    const Combo combo = combo_from_length(length);
    CAPTURE(length);
    std::vector<double> storage(LiveSignal::storage_doubles(combo), -1.0);  // garbage: must not matter
    LiveBacktest live(combo, fee, storage);
    CHECK(live.last().trades == 0);
    KernelWorkspace workspace(hma_workspace_bytes(close.size()));
    for (std::size_t i = 0; i < close.size(); ++i) {
      const LiveBar bar = live.on_bar(std::span<const double>(close.data(), i + 1));
      // Spot-check prefixes (the batch kernel needs at least two bars).
      if (i >= 1 && (i % 397 == 0 || i + 1 == close.size())) {
        BacktestResult batch;
        REQUIRE(run_backtest(std::span<const double>(close.data(), i + 1), combo, fee, workspace, batch) ==
                KernelStatus::ok);
        CHECK(bar.trades == batch.trades);
        CHECK(std::memcmp(&bar.pnl, &batch.pnl, sizeof(double)) == 0);
      }
    }
  }
}
