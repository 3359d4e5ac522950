#include "bench/percentile.hpp"

#include <algorithm>
#include <cmath>

namespace ipcfloor {

std::size_t percentile_index(std::size_t count, double percent) noexcept {
  if (count == 0 || !(percent > 0.0)) return 0;  // NaN and p <= 0: the minimum
  if (percent >= 100.0) return count - 1;
  // One ulp below the level, as HdrHistogram does: a decimal level has no exact binary value,
  // and 99.9% of 1000 samples must be rank 999 even where 99.9 is stored a hair above itself.
  const double rank = std::ceil(std::nextafter(percent, 0.0) * static_cast<double>(count) / 100.0);
  const auto r = static_cast<std::size_t>(rank);
  return std::min(count, std::max<std::size_t>(r, 1)) - 1;
}

double sorted_percentile(std::span<const double> sorted, double percent) noexcept {
  return sorted.empty() ? 0.0 : sorted[percentile_index(sorted.size(), percent)];
}

double percentile(std::vector<double> samples, double percent) {
  std::sort(samples.begin(), samples.end());
  return sorted_percentile(samples, percent);
}

}  // namespace ipcfloor
