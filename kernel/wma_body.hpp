#pragma once
// The body every path of the weighted moving average shares, as a template over the vector width
// (doubles per register) and the number of registers summed side by side. Included only by the
// kernel/wma_*.cpp translation units, each compiled for its own instruction set, so that the
// vector type never crosses a function boundary between units compiled differently.
//
// Speed comes from evaluating kLanes * kVectors outputs at once: each output's sum is a serial
// chain of adds (one per window bar), and kVectors independent chains keep the adder busy while
// each add's latency runs. No sum is reassociated: every lane of every register sums its own
// output in the reference order.

#include <cstddef>
#include <cstring>
#include <limits>

namespace ipcfloor::wma {
namespace {

// A typedef, not an alias-declaration: GCC drops a dependent vector_size attribute on `using`.
template <std::size_t kLanes>
struct VectorOf {
  typedef double type __attribute__((vector_size(kLanes * sizeof(double))));
};

// One output in reference order: the tail that does not fill a block.
inline double one_output(const double* window, std::size_t n, double denom) noexcept {
  double sum = 0.0;
  for (std::size_t k = 0; k < n; ++k) sum += static_cast<double>(k + 1) * window[k];
  return sum / denom;
}

template <std::size_t kLanes, std::size_t kVectors>
inline void body(const double* x, std::size_t len, std::size_t n, double* out) noexcept {
  using Vec = typename VectorOf<kLanes>::type;
  static_assert(sizeof(Vec) == kLanes * sizeof(double), "Vec holds kLanes doubles");
  constexpr std::size_t kBlock = kLanes * kVectors;
  // Python's n*(n+1)/2.0: an exact integer product, then a float divide.
  const double denom = static_cast<double>(n * (n + 1)) / 2.0;
  const std::size_t first = n - 1;
  for (std::size_t i = 0; i < first; ++i) out[i] = std::numeric_limits<double>::quiet_NaN();
  std::size_t i = first;
  for (; i + kBlock <= len; i += kBlock) {
    const double* base = x + (i + 1 - n);  // output i's window starts at x[i - n + 1]
    Vec acc[kVectors] = {};
    for (std::size_t k = 0; k < n; ++k) {
      const double weight = static_cast<double>(k + 1);
      const double* row = base + k;
      for (std::size_t v = 0; v < kVectors; ++v) {
        Vec load;
        std::memcpy(&load, row + v * kLanes, sizeof load);  // unaligned load
        acc[v] += weight * load;
      }
    }
    for (std::size_t v = 0; v < kVectors; ++v) {
      const Vec result = acc[v] / denom;
      std::memcpy(out + i + v * kLanes, &result, sizeof result);
    }
  }
  for (; i < len; ++i) out[i] = one_output(x + (i + 1 - n), n, denom);
}

}  // namespace
}  // namespace ipcfloor::wma
