#pragma once
// The HMA/HMA3 stop-and-reverse backtest of docs/SPEC.md §1: one combo of six windows in, the
// closed-trade PnL (percentage points) and trade count out.
//
// Numerical contract: every weighted moving average is summed in the reference order
// (k = 1..n, newest bar weighted n, one rounding per multiply and per add, then one divide),
// so results are bit-identical to the naive reference in tools/reference/ on any data. Speed
// comes from evaluating many outputs at once (SIMD across i), never from reassociating a sum:
// a reassociated or running sum moves a crossing by a bar now and then and breaks parity.

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "common/backtest_result.hpp"
#include "common/combo.hpp"
#include "common/error.hpp"

namespace ipcfloor {

enum class KernelStatus : std::uint8_t {
  ok,
  window_out_of_range,  // a window is < 1 or > n_bars
  too_few_bars,         // the workspace or series holds fewer than 2 bars
  workspace_too_small,  // the workspace was sized for a shorter series
};

// Checks the six windows against [1, n_bars]. Pure, noexcept, no allocation.
[[nodiscard]] KernelStatus validate_combo(const Combo& combo, std::size_t n_bars) noexcept;

// Scratch series for one backtest at a time. Allocates only in the constructor, so a thread
// that owns one can run any number of backtests without touching the heap. Not shareable
// between threads while in use.
class KernelWorkspace {
 public:
  explicit KernelWorkspace(std::size_t n_bars);
  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  // The bytes a workspace for `n_bars` bars allocates, every one of them touched (the series
  // start zeroed). Pure: for memory budgets checked before any workspace exists.
  [[nodiscard]] static constexpr std::uint64_t bytes_for(std::size_t n_bars) noexcept {
    return std::uint64_t{kSeriesCount} * sizeof(double) * n_bars;
  }

 private:
  friend KernelStatus run_backtest(std::span<const double>, const Combo&, double,
                                   KernelWorkspace&, BacktestResult&) noexcept;
  static constexpr unsigned kSeriesCount = 5;  // the vectors below
  std::size_t capacity_;
  std::vector<double> a_, b_, c_, hma_, hma3_;
};

// Runs one combo over `close`. Hot-path safe: noexcept, no allocation, no syscall, no lock.
// Returns ok and fills `out`, or a status naming what was wrong (then `out` is untouched).
[[nodiscard]] KernelStatus run_backtest(std::span<const double> close, const Combo& combo,
                                        double fee, KernelWorkspace& workspace,
                                        BacktestResult& out) noexcept;

// Weighted moving average of docs/SPEC.md §1 into `out` (same length as `x`): NaN for i < n-1 and
// wherever the window holds a NaN. Exposed for tests. Requires 1 <= n <= x.size().
void weighted_moving_average(std::span<const double> x, std::size_t n,
                             std::span<double> out) noexcept;

// Runs every combo, spreading them over `threads` workers (0 = one per online core).
// Setup path: allocates one workspace per worker; the error names the first bad combo.
[[nodiscard]] Expected<std::vector<BacktestResult>> run_sweep(std::span<const double> close,
                                                              std::span<const Combo> combos,
                                                              double fee, unsigned threads = 0);

// The default grid of docs/SPEC.md §1: round-half-even(linspace(first, last, count)).
[[nodiscard]] std::vector<std::int64_t> grid_lengths(double first, double last, std::size_t count);

[[nodiscard]] const char* to_string(KernelStatus status) noexcept;

}  // namespace ipcfloor
