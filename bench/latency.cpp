#include "bench/latency.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>

namespace ipcfloor {

TscClock TscClock::calibrate(unsigned window_ms) {
  const auto wall0 = std::chrono::steady_clock::now();
  const std::uint64_t tsc0 = now();
  std::this_thread::sleep_for(std::chrono::milliseconds(window_ms));
  const std::uint64_t tsc1 = now();
  const auto wall1 = std::chrono::steady_clock::now();
  const double ns = std::chrono::duration<double, std::nano>(wall1 - wall0).count();
  return TscClock(ns / static_cast<double>(tsc1 - tsc0));
}

LatencySummary summarize(std::string name, std::string kind, std::vector<double>& ns) {
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
  return s;
}

nlohmann::json to_json(const LatencySummary& s) {
  return nlohmann::json{{"name", s.name}, {"kind", s.kind}, {"unit", "ns"}, {"samples", s.samples},
                        {"min", s.min},   {"p50", s.p50},   {"p90", s.p90},   {"p99", s.p99},
                        {"p999", s.p999}, {"p9999", s.p9999}, {"max", s.max}, {"mean", s.mean}};
}

}  // namespace ipcfloor
