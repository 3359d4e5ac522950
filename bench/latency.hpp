#pragma once
// Per-sample latency measurement: percentile summaries of samples timed with TscClock.
// Every figure a benchmark reports is a percentile over individually timed samples, never a
// batch time divided by a count, and every percentile is the nearest rank of bench/percentile.hpp.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/tsc_clock.hpp"

namespace ipcfloor {

// One row of HdrHistogram's percentile distribution: at percentile level `fraction` (0..1), the
// nearest-rank value, and how many samples are at or below that value.
struct PercentileRow {
  double fraction = 0;
  double value = 0;  // ns
  std::size_t count = 0;
};

struct LatencySummary {
  std::string name;
  std::string kind;  // "rtt" or "one-way"
  std::size_t samples = 0;
  double min = 0, p50 = 0, p90 = 0, p99 = 0, p999 = 0, p9999 = 0, max = 0, mean = 0;
  // Not a percentile: the median read between the clock's steps ("p50~" in tables). With a coarse
  // counter, nearest-rank p50 can only land on a multiple of the step, which hides differences
  // smaller than one step. This is the grouped-data median (linear within the step that holds the
  // middle sample), the same as p50 when the counter moves a tick at a time. Ratios between rungs
  // use it; it is always shown under its own name.
  double p50_interp = 0;
  double step_ns = 0;  // the clock step the samples were taken with (0: one tick)
  double stddev = 0;
  // The whole distribution as HdrHistogram's percentile iterator walks it (five levels per halving
  // of the distance to 100% until the maximum is reached, then 100%): the rows of its .hgrm
  // output. Enough to redraw the percentile curve or write the .hgrm file without the samples.
  std::vector<PercentileRow> distribution;
};

// Sorts `ns` in place and takes nearest-rank percentiles, and the interpolated median for a clock
// that moves in steps of `step_ns` (0: fine-grained). Allocates nothing beyond the sort.
[[nodiscard]] LatencySummary summarize(std::string name, std::string kind, std::vector<double>& ns,
                                       double step_ns = 0.0);

// The grouped-data median of sorted samples taken with a clock of step `step_ns` (> 0): samples
// are counted in bins of one step centred on its multiples, and the middle rank is located
// linearly inside its bin; with step_ns <= 0, the nearest-rank p50. Pure.
[[nodiscard]] double interpolated_median(const std::vector<double>& sorted_ns, double step_ns) noexcept;

[[nodiscard]] nlohmann::json to_json(const LatencySummary& summary);

// The percentile rows of sorted samples, as LatencySummary::distribution. Pure; allocates the
// result only.
[[nodiscard]] std::vector<PercentileRow> percentile_distribution(const std::vector<double>& sorted_ns,
                                                                 int ticks_per_half_distance = 5);

// HdrHistogram's percentile-distribution text (what outputPercentileDistribution prints and its
// plotter loads, the .hgrm format) of a summary's JSON (to_json), values in microseconds as
// HdrHistogram's own tools print them with 3 significant digits:
//   a header line and a blank line; one row per distribution entry ("%12.3f %2.12f %10d %14.2f":
//   value, percentile level, total count at or below, 1/(1-level)), the 100% row without the last
//   column; then "#[Mean = ..., StdDeviation = ...]", "#[Max = ..., Total count = ...]" and
//   "#[Buckets = ..., SubBuckets = ...]". The rows hold the exact samples (a summary keeps them, so
//   no value is rounded to a bucket); the last line gives the layout an HdrHistogram of 3
//   significant digits from 1 ns to the maximum would have. Pure.
[[nodiscard]] std::string hgrm_text(const nlohmann::json& summary);

}  // namespace ipcfloor
