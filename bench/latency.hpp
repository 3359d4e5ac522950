#pragma once
// Per-sample latency measurement: a calibrated TSC clock and percentile summaries.
// Every figure a benchmark reports is a percentile over individually timed samples, never a
// batch time divided by a count.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

struct LatencySummary {
  std::string name;
  std::string kind;  // "rtt" or "one-way"
  std::size_t samples = 0;
  double min = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, p9999 = 0, max = 0, mean = 0;
  // The median read between the clock's steps: with a coarse counter, nearest-rank p50 can only
  // land on a multiple of the step, which hides differences smaller than one step. This is the
  // grouped-data median (linear within the step that holds the middle sample), the same as p50
  // when the counter moves a tick at a time. Ratios between rungs use it.
  double p50_interp = 0;
  double step_ns = 0;  // the clock step the samples were taken with (0: one tick)
};

// Sorts `ns` in place and takes nearest-rank percentiles, and the interpolated median for a clock
// that moves in steps of `step_ns` (0: fine-grained). Allocates nothing beyond the sort.
[[nodiscard]] LatencySummary summarize(std::string name, std::string kind, std::vector<double>& ns,
                                       double step_ns = 0.0);

// The grouped-data median of sorted samples taken with a clock of step `step_ns` (> 0): samples
// are counted in bins of one step centred on its multiples, and the middle rank is located
// linearly inside its bin. Pure.
[[nodiscard]] double interpolated_median(const std::vector<double>& sorted_ns, double step_ns) noexcept;

[[nodiscard]] nlohmann::json to_json(const LatencySummary& summary);

}  // namespace ipcfloor
