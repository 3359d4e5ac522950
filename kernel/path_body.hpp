#pragma once
// The bodies every kernel path shares (kernel/path.hpp has their contract), as templates over
// the vector width. Included only by the kernel/path_*.cpp translation units, each compiled for
// its own instruction set, so that the vector type never crosses a function boundary between
// units compiled differently. Everything here has internal linkage, so no unit's copy of a
// function built for a wider instruction set can stand in for another unit's.
//
// wma: speed comes from evaluating kLanes * kVectors outputs at once: each output's sum is a
// serial chain of adds (one per window bar), and kVectors independent chains keep the adder busy
// while each add's latency runs. No sum is reassociated: every lane of every register sums its
// own output in the reference order.
//
// stop_and_reverse: the reference tests every bar for a crossing with two compares and a branch
// that a short window's frequent crossings make unpredictable. Here each path's CrossMasks
// compares kLanes bars at once into two bit masks (up, down), and the loop visits only the bars
// whose bit is set, in bar order, running the reference's position logic on each: the same
// compares, the same arithmetic in the same order, so pnl and trades are bit-identical.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/backtest_result.hpp"
#include "ipcfloor/strategy.h"
#include "kernel/path.hpp"

namespace ipcfloor::kernel_path {
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

// Element-wise, so each output is computed alone in the source's order (the build never
// contracts a multiply and an add): the compiler vectorises them at the unit's width.
inline void hma_input(const double* fast, const double* slow, std::size_t len, double* out) noexcept {
  for (std::size_t i = 0; i < len; ++i) out[i] = 2.0 * fast[i] - slow[i];
}

inline void hma3_input(const double* a, const double* b, const double* c, std::size_t len, double* out) noexcept {
  for (std::size_t i = 0; i < len; ++i) out[i] = 3.0 * a[i] - b[i] - c[i];
}

// The reference's position logic, one crossing at a time. Each closed trade is reported to the
// sink, when there is one, with the very value added to the pnl.
class StopAndReverse {
 public:
  StopAndReverse(double fee, const ipcfloor_trade_sink* sink) noexcept : fee_(fee), sink_(sink) {}

  void up_cross(double price, std::size_t bar) noexcept {
    if (position_ == -1) close_trade((entry_ / price - 1.0) * 100.0 - fee_, price, bar);
    if (position_ != 1) open_trade(1, price, bar);
  }
  void down_cross(double price, std::size_t bar) noexcept {
    if (position_ == 1) close_trade((price / entry_ - 1.0) * 100.0 - fee_, price, bar);
    if (position_ != -1) open_trade(-1, price, bar);
  }
  [[nodiscard]] BacktestResult result() const noexcept { return BacktestResult{pnl_, trades_}; }

 private:
  void close_trade(double trade_pnl, double price, std::size_t bar) noexcept {
    pnl_ += trade_pnl;
    ++trades_;
    ipcfloor_report_trade(sink_, entry_bar_, bar, position_, entry_, price, trade_pnl);
  }
  void open_trade(int side, double price, std::size_t bar) noexcept {
    position_ = side;
    entry_ = price;
    entry_bar_ = bar;
  }

  double fee_;
  const ipcfloor_trade_sink* sink_;
  int position_ = 0;
  double entry_ = 0.0;
  std::size_t entry_bar_ = 0;
  double pnl_ = 0.0;
  std::int64_t trades_ = 0;
};

// Bit j of `up`: bar i + j crossed upwards (hma3[i+j-1] <= hma[i+j-1] and hma3[i+j] > hma[i+j]);
// of `down`: downwards (>= then <). Never both: a bar cannot end both above and below.
struct CrossBits {
  unsigned up;
  unsigned down;
};

// CrossMasks: kLanes, and at(hma, hma3, i) -> CrossBits for bars i .. i + kLanes - 1 (i >= 1),
// with ordered compares (false on NaN), as C's <, <=, >, >= are.
template <class CrossMasks>
inline BacktestResult stop_and_reverse(const double* close, const double* hma, const double* hma3, std::size_t len,
                                       double fee, const ipcfloor_trade_sink* sink) noexcept {
  StopAndReverse book(fee, sink);
  std::size_t i = 1;
  for (; i + CrossMasks::kLanes <= len; i += CrossMasks::kLanes) {
    const CrossBits bits = CrossMasks::at(hma, hma3, i);
    for (unsigned crossed = bits.up | bits.down; crossed != 0; crossed &= crossed - 1) {
      const auto j = static_cast<unsigned>(std::countr_zero(crossed));
      if (((bits.up >> j) & 1U) != 0) {
        book.up_cross(close[i + j], i + j);
      } else {
        book.down_cross(close[i + j], i + j);
      }
    }
  }
  for (; i < len; ++i) {
    if (hma3[i - 1] <= hma[i - 1] && hma3[i] > hma[i]) {
      book.up_cross(close[i], i);
    } else if (hma3[i - 1] >= hma[i - 1] && hma3[i] < hma[i]) {
      book.down_cross(close[i], i);
    }
  }
  return book.result();
}

// The Path of one instruction set: kLanes doubles per register, kVectors registers summed side by
// side in the WMA, CrossMasks comparing kLanes bars at once. Each path_<isa>.cpp defines its
// CrossMasks with its own intrinsics and takes its Path from here.
template <std::size_t kLanes, std::size_t kVectors, class CrossMasks>
struct PathOf {
  static_assert(CrossMasks::kLanes == kLanes, "the crossing masks cover one register of bars");
  static void wma(const double* x, std::size_t len, std::size_t n, double* out) noexcept {
    body<kLanes, kVectors>(x, len, n, out);
  }
  static BacktestResult trade(const double* close, const double* hma, const double* hma3, std::size_t len,
                              double fee, const ipcfloor_trade_sink* sink) noexcept {
    return stop_and_reverse<CrossMasks>(close, hma, hma3, len, fee, sink);
  }
  static constexpr Path kPath{&wma, &hma_input, &hma3_input, &trade};
};

}  // namespace
}  // namespace ipcfloor::kernel_path
