#pragma once
// What one backtest costs, before running it, in work units (multiply-adds): the engine and the
// socket server refuse a frame whose work exceeds their bound (serve --max-frame-cost), because
// the frame holds a worker (or, without workers, every other lane) and shutdown waits for it.
// Counting work instead of timing it makes the verdict the same on every host.

#include <cstddef>
#include <cstdint>

#include "common/combo.hpp"

namespace ipcfloor {

// The default bound on one frame's work: every combo of the default grid on the default data,
// and of `--grid 6:2000:200` on 1,000,000 bars (the largest, L = 2000, costs 5,878,000,000), fits.
inline constexpr std::uint64_t kDefaultMaxFrameCost = 8'000'000'000ULL;
// The default bound on what one new bar costs every live subscription together (an APPEND's work
// on the serving thread): 2,000,000 units, a few thousand subscriptions of L = 200.
inline constexpr std::uint64_t kDefaultMaxBarCost = 2'000'000ULL;
// A BACKTEST cheaper than this is answered by the serving thread itself; dearer ones go to the
// workers. Below it, handing the combo over and back costs more than computing it
// (docs/RESULTS.md, "Workers").
inline constexpr std::uint64_t kDefaultInlineCost = 65'536ULL;

// Multiply-adds of the seven weighted-moving-average passes: each costs about n_bars x its window
// (HMA3's full window p is summed twice, once in the difference and once as the smoothing pass).
// Saturates instead of wrapping, so a hostile window cannot make a huge cost look small.
// Pure, noexcept; windows below 1 count as 0 (validation rejects them separately).
[[nodiscard]] constexpr std::uint64_t backtest_cost(const Combo& combo, std::size_t n_bars) noexcept {
  constexpr std::uint64_t kMax = ~std::uint64_t{0};
  const std::int64_t windows[] = {combo.h, combo.L, combo.s, combo.p3, combo.p2, combo.p, combo.p};
  std::uint64_t sum = 0;
  for (const std::int64_t w : windows) {
    const std::uint64_t window = w < 1 ? 0 : static_cast<std::uint64_t>(w);
    if (window > kMax - sum) return kMax;
    sum += window;
  }
  const auto bars = static_cast<std::uint64_t>(n_bars);
  if (bars != 0 && sum > kMax / bars) return kMax;
  return sum * bars;
}

}  // namespace ipcfloor
