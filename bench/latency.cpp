#include "bench/latency.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "bench/percentile.hpp"

namespace ipcfloor {

double interpolated_median(const std::vector<double>& sorted_ns, double step_ns) noexcept {
  if (sorted_ns.empty() || step_ns <= 0) return sorted_percentile(sorted_ns, 50);
  const double half = static_cast<double>(sorted_ns.size()) / 2.0;
  const auto bin_of = [step_ns](double v) { return std::llround(v / step_ns); };
  std::size_t below = 0;  // samples in bins before the current one
  std::size_t i = 0;
  while (i < sorted_ns.size()) {
    const long long bin = bin_of(sorted_ns[i]);
    std::size_t j = i;
    while (j < sorted_ns.size() && bin_of(sorted_ns[j]) == bin) ++j;
    const std::size_t in_bin = j - i;
    if (static_cast<double>(below + in_bin) >= half) {
      const double fraction = (half - static_cast<double>(below)) / static_cast<double>(in_bin);
      return (static_cast<double>(bin) - 0.5 + fraction) * step_ns;
    }
    below += in_bin;
    i = j;
  }
  return sorted_ns.back();
}

LatencySummary summarize(std::string name, std::string kind, std::vector<double>& ns, double step_ns) {
  LatencySummary s;
  s.name = std::move(name);
  s.kind = std::move(kind);
  s.samples = ns.size();
  if (ns.empty()) return s;
  std::sort(ns.begin(), ns.end());
  s.min = ns.front();
  s.p50 = sorted_percentile(ns, 50);
  s.p90 = sorted_percentile(ns, 90);
  s.p99 = sorted_percentile(ns, 99);
  s.p999 = sorted_percentile(ns, 99.9);
  s.p9999 = sorted_percentile(ns, 99.99);
  s.max = ns.back();
  s.mean = std::accumulate(ns.begin(), ns.end(), 0.0) / static_cast<double>(ns.size());
  s.step_ns = step_ns;
  s.p50_interp = step_ns > 0 ? interpolated_median(ns, step_ns) : s.p50;
  double squares = 0.0;
  for (const double v : ns) squares += (v - s.mean) * (v - s.mean);
  s.stddev = std::sqrt(squares / static_cast<double>(ns.size()));
  s.distribution = percentile_distribution(ns);
  return s;
}

std::vector<PercentileRow> percentile_distribution(const std::vector<double>& sorted_ns, int ticks_per_half_distance) {
  std::vector<PercentileRow> rows;
  if (sorted_ns.empty()) return rows;
  const std::size_t n = sorted_ns.size();
  // HdrHistogram's percentile iterator: a row at each level while the level's value is below the
  // maximum, one at the first level that reaches it, then the 100% row. Within each halving of
  // the distance to 100%, `ticks` equal steps (log(x)/log(2), truncated, as HdrHistogram has it).
  double level = 0.0;
  for (;;) {
    const std::size_t at = percentile_index(n, level);
    const double value = sorted_ns[at];
    const auto count = static_cast<std::size_t>(std::upper_bound(sorted_ns.begin() + static_cast<std::ptrdiff_t>(at),
                                                                 sorted_ns.end(), value) -
                                                sorted_ns.begin());
    rows.push_back({level / 100.0, value, count});
    if (count == n) break;
    const auto halvings = static_cast<long long>(std::log(100.0 / (100.0 - level)) / std::log(2.0)) + 1;
    level += 100.0 / (static_cast<double>(ticks_per_half_distance) * std::pow(2.0, static_cast<double>(halvings)));
  }
  rows.push_back({1.0, sorted_ns.back(), n});
  return rows;
}

namespace {

// The buckets of an HdrHistogram with 3 significant digits (2048 sub-buckets) tracking 1 ns to
// `max_ns`: each bucket doubles the range the first one covers.
int hdr_bucket_count(double max_ns) {
  constexpr long long kSubBuckets = 2048;
  const auto highest = std::max(2.0, std::ceil(max_ns));
  int buckets = 1;
  for (double untrackable = kSubBuckets; untrackable <= highest; untrackable *= 2) ++buckets;
  return buckets;
}

}  // namespace

std::string hgrm_text(const nlohmann::json& summary) {
  std::string out = fmt::format("{:>12} {:>14} {:>10} {:>14}\n\n", "Value", "Percentile", "TotalCount",
                                "1/(1-Percentile)");
  for (const auto& row : summary.value("distribution", nlohmann::json::array())) {
    const double fraction = row[0].get<double>();
    const double us = row[1].get<double>() / 1e3;
    const auto count = row[2].get<std::size_t>();
    if (fraction < 1.0)
      out += fmt::format("{:12.3f} {:2.12f} {:10} {:14.2f}\n", us, fraction, count, 1.0 / (1.0 - fraction));
    else
      out += fmt::format("{:12.3f} {:2.12f} {:10}\n", us, fraction, count);
  }
  const double max_ns = summary.value("max", 0.0);
  out += fmt::format("#[Mean    = {:12.3f}, StdDeviation   = {:12.3f}]\n", summary.value("mean", 0.0) / 1e3,
                     summary.value("stddev", 0.0) / 1e3);
  out += fmt::format("#[Max     = {:12.3f}, Total count    = {:12}]\n", max_ns / 1e3,
                     summary.value("samples", std::size_t{0}));
  out += fmt::format("#[Buckets = {:12}, SubBuckets     = {:12}]\n", hdr_bucket_count(max_ns), 2048);
  return out;
}

namespace {

// [[fraction, value ns, count], ...]: compact, in the order of the .hgrm rows.
nlohmann::json distribution_json(const std::vector<PercentileRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const PercentileRow& row : rows) out.push_back({row.fraction, row.value, row.count});
  return out;
}

}  // namespace

nlohmann::json to_json(const LatencySummary& s) {
  return nlohmann::json{{"name", s.name}, {"kind", s.kind}, {"unit", "ns"}, {"samples", s.samples},
                        {"min", s.min},   {"p50", s.p50},   {"p90", s.p90},   {"p99", s.p99},
                        {"p999", s.p999}, {"p9999", s.p9999}, {"max", s.max}, {"mean", s.mean},
                        {"p50_interp", s.p50_interp}, {"clock_step_ns", s.step_ns}, {"stddev", s.stddev},
                        {"distribution", distribution_json(s.distribution)}};
}

}  // namespace ipcfloor
