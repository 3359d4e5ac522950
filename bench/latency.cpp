#include "bench/latency.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <thread>

#include <fmt/format.h>

namespace ipcfloor {

double interpolated_median(const std::vector<double>& sorted_ns, double step_ns) noexcept {
  if (sorted_ns.empty() || step_ns <= 0) return sorted_ns.empty() ? 0.0 : sorted_ns[(sorted_ns.size() - 1) / 2];
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
  // Nearest rank: the smallest sample with at least q of all samples at or below it.
  const auto rank = [&](double q) {
    const auto r = static_cast<std::size_t>(std::ceil(q * static_cast<double>(ns.size())));
    return ns[std::min(ns.size() - 1, r == 0 ? 0 : r - 1)];
  };
  s.min = ns.front();
  s.p50 = rank(0.50);
  s.p90 = rank(0.90);
  s.p99 = rank(0.99);
  s.p999 = rank(0.999);
  s.p9999 = rank(0.9999);
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

std::vector<std::pair<double, double>> percentile_distribution(const std::vector<double>& sorted_ns,
                                                               int ticks_per_half_distance) {
  std::vector<std::pair<double, double>> points;
  if (sorted_ns.empty()) return points;
  const double n = static_cast<double>(sorted_ns.size());
  const auto at = [&](double fraction) {
    const auto r = static_cast<std::size_t>(std::ceil(fraction * n));
    return sorted_ns[std::min(sorted_ns.size() - 1, r == 0 ? 0 : r - 1)];
  };
  // HdrHistogram's iteration: within each halving of the distance to 100%, `ticks` equal steps.
  // Stop once a step would resolve less than one sample.
  double percentile = 0.0;
  for (;;) {
    points.emplace_back(percentile / 100.0, at(percentile / 100.0));
    const double halvings = std::floor(std::log2(100.0 / (100.0 - percentile))) + 1.0;
    const double step = 100.0 / (static_cast<double>(ticks_per_half_distance) * std::pow(2.0, halvings));
    percentile += step;
    if (percentile >= 100.0 || (100.0 - percentile) / 100.0 * n < 1.0) break;
  }
  points.emplace_back(1.0, sorted_ns.back());
  return points;
}

std::string hgrm_text(const nlohmann::json& summary) {
  std::string out = fmt::format("{:>12} {:>14} {:>10} {:>14}\n\n", "Value", "Percentile", "TotalCount",
                                "1/(1-Percentile)");
  const auto samples = summary.value("samples", std::size_t{0});
  for (const auto& point : summary.value("distribution", nlohmann::json::array())) {
    const double fraction = point[0].get<double>();
    const double us = point[1].get<double>() / 1e3;
    const auto count = static_cast<std::size_t>(std::ceil(fraction * static_cast<double>(samples)));
    if (fraction < 1.0)
      out += fmt::format("{:>12.3f} {:>14.12f} {:>10} {:>14.2f}\n", us, fraction, count, 1.0 / (1.0 - fraction));
    else
      out += fmt::format("{:>12.3f} {:>14.12f} {:>10}\n", us, fraction, count);
  }
  out += fmt::format("#[Mean    = {:>12.3f}, StdDeviation   = {:>12.3f}]\n", summary.value("mean", 0.0) / 1e3,
                     summary.value("stddev", 0.0) / 1e3);
  out += fmt::format("#[Max     = {:>12.3f}, Total count    = {:>12}]\n", summary.value("max", 0.0) / 1e3, samples);
  out += fmt::format("#[Unit    = microseconds, {} of {}]\n", summary.value("kind", std::string("rtt")),
                     summary.value("name", std::string("?")));
  return out;
}

nlohmann::json to_json(const LatencySummary& s) {
  return nlohmann::json{{"name", s.name}, {"kind", s.kind}, {"unit", "ns"}, {"samples", s.samples},
                        {"min", s.min},   {"p50", s.p50},   {"p90", s.p90},   {"p99", s.p99},
                        {"p999", s.p999}, {"p9999", s.p9999}, {"max", s.max}, {"mean", s.mean},
                        {"p50_interp", s.p50_interp}, {"clock_step_ns", s.step_ns}, {"stddev", s.stddev},
                        {"distribution", s.distribution}};
}

}  // namespace ipcfloor
