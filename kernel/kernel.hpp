#pragma once
// The built-in strategy's kernel, the HMA/HMA3 stop-and-reverse backtest of docs/SPEC.md §1: one
// combo of six windows in, the closed-trade PnL (percentage points) and trade count out. The
// engine reaches it through the strategy table (kernel/hma_strategy.cpp, kernel/strategy.hpp).
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
#include "kernel/strategy.hpp"
#include "kernel/workspace.hpp"

namespace ipcfloor {

enum class KernelStatus : std::uint8_t {
  ok,
  window_out_of_range,  // the strategy refused the combo for this series
  too_few_bars,         // the series holds fewer than 2 bars
  workspace_too_small,  // the workspace was sized for a shorter series
  failed,               // the strategy failed, or answered a non-finite pnl or negative trades
};

// The bytes of workspace run_hma needs for `n_bars` bars: five series, each on its own cache
// lines. Pure: for memory budgets checked before any workspace exists.
[[nodiscard]] constexpr std::uint64_t hma_workspace_bytes(std::size_t n_bars) noexcept {
  return 5 * ((std::uint64_t{n_bars} * sizeof(double) + 63) / 64 * 64);
}

// The built-in strategy's backtest of an admitted combo (every window in [1, close.size()],
// close.size() >= 2) over `close`, in `workspace` (hma_workspace_bytes(close.size()) bytes,
// 64-byte aligned). Checks nothing: the caller admitted the combo (Strategy::accepts). Hot path:
// noexcept, no allocation, no syscall, no lock.
// Reports each closed trade to `sink` when it is not null.
[[nodiscard]] BacktestResult run_hma(std::span<const double> close, const Combo& combo, double fee, void* workspace,
                                     const ipcfloor_trade_sink* sink = nullptr) noexcept;

// A checked backtest on the built-in strategy for in-process callers with no admission of their
// own (tests, benchmarks): the strategy's own check, then run_hma. Returns ok and fills `out`, or
// what was wrong (then `out` is untouched).
[[nodiscard]] KernelStatus run_backtest(std::span<const double> close, const Combo& combo, double fee,
                                        KernelWorkspace& workspace, BacktestResult& out) noexcept;

// Weighted moving average of docs/SPEC.md §1 into `out` (same length as `x`): NaN for i < n-1 and
// wherever the window holds a NaN. Exposed for tests. Requires 1 <= n <= x.size().
void weighted_moving_average(std::span<const double> x, std::size_t n,
                             std::span<double> out) noexcept;

// Runs every combo on `strategy`, spreading them over `threads` workers (0 = one per online
// core). Each combo is admitted once, here, before anything runs. Setup path: allocates one
// workspace per worker; the error names the first refused combo and why.
[[nodiscard]] Expected<std::vector<BacktestResult>> run_sweep(const Strategy& strategy, const Bars& bars,
                                                              std::span<const Combo> combos, double fee,
                                                              unsigned threads = 0);
// The same with each combo's statistics (docs/STATISTICS.md), B = `bars_per_year`. Errors also a
// version-1 strategy (it reports no trades) and trade reports that break the rules.
[[nodiscard]] Expected<std::vector<TradeStats>> run_sweep_stats(const Strategy& strategy, const Bars& bars,
                                                                std::span<const Combo> combos, double fee,
                                                                double bars_per_year, unsigned threads = 0);

// The default grid of docs/SPEC.md §1: round-half-even(linspace(first, last, count)).
[[nodiscard]] std::vector<std::int64_t> grid_lengths(double first, double last, std::size_t count);

[[nodiscard]] const char* to_string(KernelStatus status) noexcept;

}  // namespace ipcfloor
