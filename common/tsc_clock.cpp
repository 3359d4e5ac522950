#include "common/tsc_clock.hpp"

#include <algorithm>
#include <map>
#include <numeric>
#include <thread>

namespace ipcfloor {
namespace {

// The counter's step in ticks: read it back to back and look at how far it moved. A fine counter
// moves by the cost of a read, a spread of values whose common divisor is 1; a coarse one only by
// whole steps (and the odd tick some hosts add to keep reads increasing), so the common divisor
// of its frequent moves is the step. Coarse when that divisor is large and nearly every move sits
// on its grid.
std::uint64_t counter_step_ticks() {
  constexpr int kReads = 20'000;
  std::map<std::uint64_t, int> moves;
  std::uint64_t previous = TscClock::now();
  for (int i = 0; i < kReads; ++i) {
    const std::uint64_t now = TscClock::now();
    if (now - previous > 2) ++moves[now - previous];
    previous = now;
  }
  int total = 0;
  for (const auto& [move, count] : moves) total += count;
  std::uint64_t divisor = 0;
  for (const auto& [move, count] : moves)
    if (count * 200 >= total) divisor = std::gcd(divisor, move);
  if (divisor < 8) return 1;
  int on_grid = 0;
  for (const auto& [move, count] : moves) {
    const std::uint64_t rest = move % divisor;
    if (rest <= 1 || rest >= divisor - 1) on_grid += count;
  }
  return on_grid * 100 >= total * 98 ? divisor : 1;
}

}  // namespace

TscClock TscClock::calibrate(unsigned window_ms) {
  const auto wall0 = std::chrono::steady_clock::now();
  const std::uint64_t tsc0 = now();
  std::this_thread::sleep_for(std::chrono::milliseconds(window_ms));
  const std::uint64_t tsc1 = now();
  const auto wall1 = std::chrono::steady_clock::now();
  const double ns = std::chrono::duration<double, std::nano>(wall1 - wall0).count();
  const double ns_per_tick = ns / static_cast<double>(tsc1 - tsc0);
  const std::uint64_t step = counter_step_ticks();
  return TscClock(ns_per_tick, step > 1 ? static_cast<double>(step) * ns_per_tick : 0.0);
}

}  // namespace ipcfloor
