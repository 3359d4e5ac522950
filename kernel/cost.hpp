#pragma once
// What one backtest costs, before running it: the engine refuses a frame whose work would hold
// its one serving thread for longer than it promised (serve --max-frame-ms), because every other
// lane waits behind that frame and shutdown waits for it.

#include <cstddef>
#include <cstdint>

#include "common/combo.hpp"

namespace ipcfloor {

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
