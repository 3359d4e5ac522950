#pragma once
// The kernel's instruction-set paths: the loops of a backtest, once per instruction set
// (kernel/isa.hpp chooses one). Internal to the kernel: each path is compiled in its own
// translation unit for its own target (kernel/path_<isa>.cpp, bodies in kernel/path_body.hpp),
// so no vector type crosses between units built differently, and only kernel.cpp calls them,
// through active_path(), after isa.cpp made sure the CPU can run the one it picked.
//
// The contract every path keeps, bit for bit the same on each (none allocates, none throws):
//   wma               out[i] = NaN for i < n - 1; otherwise the sum over k = 1..n of
//                     k * x[i - n + k], summed in that order with one rounding per multiply and
//                     per add, then divided by n(n+1)/2. Requires 1 <= n <= len.
//   hma_input         out[i] = 2 * fast[i] - slow[i]
//   hma3_input        out[i] = (3 * a[i] - b[i]) - c[i]; out may be a
//   stop_and_reverse  the reference's trading loop over bars 1..len-1: long on an up-cross of
//                     hma3 over hma, short on a down-cross, each reversal closing the open trade
//                     at that bar's close, net of `fee`; comparisons with NaN are false. Each
//                     closed trade goes to `sink` (when not null) with the value added to pnl.

#include <cstddef>

#include "common/backtest_result.hpp"
#include "ipcfloor/strategy.h"

namespace ipcfloor::kernel_path {

struct Path {
  void (*wma)(const double* x, std::size_t len, std::size_t n, double* out) noexcept;
  void (*hma_input)(const double* fast, const double* slow, std::size_t len, double* out) noexcept;
  void (*hma3_input)(const double* a, const double* b, const double* c, std::size_t len, double* out) noexcept;
  BacktestResult (*stop_and_reverse)(const double* close, const double* hma, const double* hma3, std::size_t len,
                                     double fee, const ipcfloor_trade_sink* sink) noexcept;
};

extern const Path kScalar;  // x86-64 baseline (SSE2): kernel/path_scalar.cpp
extern const Path kAvx2;    // kernel/path_avx2.cpp
extern const Path kAvx512;  // kernel/path_avx512.cpp

// The path the kernel runs now. Noexcept, one relaxed load: safe on the hot path. Defined in
// kernel/isa.cpp, which also decides it.
[[nodiscard]] const Path& active_path() noexcept;

}  // namespace ipcfloor::kernel_path
