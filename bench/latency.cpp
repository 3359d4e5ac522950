#include "bench/latency.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <numeric>
#include <thread>

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
  return s;
}

nlohmann::json to_json(const LatencySummary& s) {
  return nlohmann::json{{"name", s.name}, {"kind", s.kind}, {"unit", "ns"}, {"samples", s.samples},
                        {"min", s.min},   {"p50", s.p50},   {"p90", s.p90},   {"p99", s.p99},
                        {"p999", s.p999}, {"p9999", s.p9999}, {"max", s.max}, {"mean", s.mean},
                        {"p50_interp", s.p50_interp}, {"clock_step_ns", s.step_ns}};
}

}  // namespace ipcfloor
