#pragma once
// The time-stamp counter as a clock: for per-sample timing in the benchmarks and for the
// engine's service-time histogram. Reading it is one instruction, no syscall.

#include <chrono>
#include <cstdint>

namespace ipcfloor {

// Reads the time-stamp counter with loads and stores ordered around it. The TSC is invariant on
// every host we target (constant_tsc, nonstop_tsc); calibrate() checks it against steady_clock.
class TscClock {
 public:
  // Measures ticks per nanosecond over `window_ms` of steady_clock. Setup path (sleeps).
  [[nodiscard]] static TscClock calibrate(unsigned window_ms = 50);

  // Hot path: one ordered rdtsc, no syscall.
  [[nodiscard]] static std::uint64_t now() noexcept {
#if defined(__x86_64__)
    unsigned lo = 0, hi = 0;
    __asm__ __volatile__("lfence\n\trdtsc\n\tlfence" : "=a"(lo), "=d"(hi) : : "memory");
    return (static_cast<std::uint64_t>(hi) << 32) | lo;
#else
    return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
  }

  [[nodiscard]] double to_ns(std::uint64_t ticks) const noexcept { return static_cast<double>(ticks) * ns_per_tick_; }
  [[nodiscard]] double ns_per_tick() const noexcept { return ns_per_tick_; }
  [[nodiscard]] double ghz() const noexcept { return 1.0 / ns_per_tick_; }
  // How far the counter moves at once, in ns. Some hosts derive the TSC from a slower reference
  // clock (AMD Zen: 100 MHz, so steps of 10 ns however fast the core runs); every sample is then a
  // multiple of the step, give or take a tick. 0 when the counter moves a tick at a time.
  [[nodiscard]] double step_ns() const noexcept { return step_ns_; }

 private:
  TscClock(double ns_per_tick, double step_ns) : ns_per_tick_(ns_per_tick), step_ns_(step_ns) {}
  double ns_per_tick_;
  double step_ns_;
};

}  // namespace ipcfloor
