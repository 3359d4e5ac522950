#pragma once
// Per-sample latency measurement: percentile summaries of samples timed with TscClock.
// Every figure a benchmark reports is a percentile over individually timed samples, never a
// batch time divided by a count.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/tsc_clock.hpp"

namespace ipcfloor {

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
  double stddev = 0;
  // The whole distribution at HdrHistogram's percentile ticks (five per halving of the distance
  // to 100%, then the maximum): pairs of (fraction of samples at or below, value in ns). Enough to
  // redraw the percentile curve or write a .hgrm file without the samples.
  std::vector<std::pair<double, double>> distribution;
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

// The percentile ticks of sorted samples, as LatencySummary::distribution. Pure; allocates the
// result only.
[[nodiscard]] std::vector<std::pair<double, double>> percentile_distribution(const std::vector<double>& sorted_ns,
                                                                             int ticks_per_half_distance = 5);

// The HdrHistogram percentile-distribution text (.hgrm) of a summary's JSON (to_json), values in
// microseconds as HdrHistogram's own tools print them. Pure.
[[nodiscard]] std::string hgrm_text(const nlohmann::json& summary);

}  // namespace ipcfloor
