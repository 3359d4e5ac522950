#include "kernel/kernel.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "kernel/path.hpp"

namespace ipcfloor {

void weighted_moving_average(std::span<const double> x, std::size_t n,
                             std::span<double> out) noexcept {
  kernel_path::active_path().wma(x.data(), x.size(), n, out.data());
}

BacktestResult run_hma(std::span<const double> close, const Combo& combo, double fee, void* workspace,
                       const ipcfloor_trade_sink* sink) noexcept {
  const std::size_t n = close.size();
  // Five series, each starting on its own cache line (hma_workspace_bytes).
  const std::size_t stride = (n * sizeof(double) + 63) / 64 * 64 / sizeof(double);
  double* const base = static_cast<double*>(workspace);
  const std::span<double> a{base, n};
  const std::span<double> b{base + stride, n};
  const std::span<double> c{base + 2 * stride, n};
  const std::span<double> hma{base + 3 * stride, n};
  const std::span<double> hma3{base + 4 * stride, n};

  const auto window = [](std::int64_t w) { return static_cast<std::size_t>(w); };

  // One path for the whole backtest: a path chosen between two of its calls could not change
  // a result (every path gives the same bits), only mix instruction sets.
  const kernel_path::Path& path = kernel_path::active_path();
  const auto wma = [&](std::span<const double> x, std::int64_t w, std::span<double> into) {
    path.wma(x.data(), n, window(w), into.data());
  };

  // hma = WMA(2*WMA(close,h) - WMA(close,L), s)
  wma(close, combo.h, c);
  wma(close, combo.L, b);
  path.hma_input(c.data(), b.data(), n, a.data());
  wma(a, combo.s, hma);

  // hma3 = WMA(3*WMA(close,p3) - WMA(close,p2) - WMA(close,p), p). Clients build p == h, so
  // WMA(close,h) still in `c` is WMA(close,p): the same numbers, one pass fewer.
  if (combo.p != combo.h) wma(close, combo.p, c);
  wma(close, combo.p3, a);
  wma(close, combo.p2, b);
  path.hma3_input(a.data(), b.data(), c.data(), n, a.data());
  wma(a, combo.p, hma3);

  // Stop-and-reverse on crossings; every comparison with NaN is false, as in the reference.
  return path.stop_and_reverse(close.data(), hma.data(), hma3.data(), n, fee, sink);
}

KernelStatus run_backtest(std::span<const double> close, const Combo& combo, double fee, KernelWorkspace& workspace,
                          BacktestResult& out) noexcept {
  const Strategy hma(builtin_strategy(), 0);
  if (close.size() < 2) return KernelStatus::too_few_bars;
  if (!hma.accepts(combo, close.size())) return KernelStatus::window_out_of_range;
  switch (hma.run(close, combo, fee, workspace, out)) {
    case StrategyRun::ok: return KernelStatus::ok;
    case StrategyRun::workspace_too_small: return KernelStatus::workspace_too_small;
    case StrategyRun::too_few_bars: return KernelStatus::too_few_bars;
    case StrategyRun::failed:
    case StrategyRun::no_trade_report:
    case StrategyRun::bad_trades:
    case StrategyRun::missing_column: break;
  }
  return KernelStatus::failed;
}

namespace {

// Admits every combo once, then runs run_one(i, workspace) -> StrategyRun for each on `threads`
// threads (0: one per online core), the dearest first, each thread with a workspace of
// `workspace_bytes`. The error names a column the strategy requires and `bars` lacks (its run()
// would read a null column), the first refused combo, or the first the strategy failed.
template <class RunOne>
Expected<void> sweep_each(const Strategy& strategy, const Bars& bars, std::span<const Combo> combos, double fee,
                          unsigned threads, std::uint64_t workspace_bytes, RunOne&& run_one) {
  const std::size_t n_bars = bars.size();
  if (n_bars < 2)
    return fail(ErrorCode::invalid_argument, "the series has {} bars; a backtest needs at least 2", n_bars);
  if ((strategy.required_columns() & ~bars.columns()) != 0)
    return fail(ErrorCode::invalid_argument, "missing_column: strategy {} needs the {} column, which the series does "
                "not have", strategy.name(), kColumnNames[static_cast<std::size_t>(
                                                 first_missing(strategy.required_columns(), bars.columns()))]);
  if (!std::isfinite(fee))
    return fail(ErrorCode::invalid_argument, "fee {} is not a finite number", fee);
  std::vector<std::uint64_t> costs(combos.size());
  for (std::size_t i = 0; i < combos.size(); ++i) {
    char why[IPCFLOOR_STRATEGY_WHY_BYTES];
    if (!strategy.accepts(combos[i], n_bars, why)) {
      const auto w = combos[i].as_array();
      return fail(ErrorCode::invalid_argument, "combo {} [{}, {}, {}, {}, {}, {}]: {}", i, w[0], w[1], w[2], w[3],
                  w[4], w[5], std::string_view(why));
    }
    costs[i] = strategy.cost(combos[i], n_bars);
  }
  std::vector<StrategyRun> outcomes(combos.size(), StrategyRun::ok);
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, std::max<std::size_t>(1, combos.size())));

  // Workers take combos in descending cost order (the grid's long windows first), so the
  // last combo to finish is a cheap one and the threads end together.
  std::vector<std::size_t> order(combos.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return costs[x] > costs[y]; });

  std::atomic<std::size_t> next{0};
  const auto worker = [&] {
    KernelWorkspace workspace(workspace_bytes);
    // relaxed: the counter only hands out distinct indices; results are published by join().
    for (std::size_t k = next.fetch_add(1, std::memory_order_relaxed); k < order.size();
         k = next.fetch_add(1, std::memory_order_relaxed)) {
      const std::size_t i = order[k];
      outcomes[i] = run_one(i, workspace);  // admitted above
    }
  };
  if (threads == 1) {
    worker();
  } else {
    std::vector<std::jthread> pool;
    pool.reserve(threads - 1);
    for (unsigned t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
  }
  for (std::size_t i = 0; i < combos.size(); ++i) {
    if (outcomes[i] == StrategyRun::ok) continue;
    if (outcomes[i] == StrategyRun::no_trade_report)
      return fail(ErrorCode::strategy, "strategy {} is built against version 1 of the strategy ABI: it reports no "
                  "trades, so it has no statistics (rebuild it against this ipcfloor's strategy.h)", strategy.name());
    if (outcomes[i] == StrategyRun::bad_trades)
      return fail(ErrorCode::strategy, "strategy {} reported trades on combo {} that break the rules of strategy.h "
                  "(they must be in order, within the bars, and sum to its pnl)", strategy.name(), i);
    return fail(ErrorCode::strategy, "strategy {} failed on combo {}: it answered no finite pnl with trades >= 0",
                strategy.name(), i);
  }
  return {};
}

}  // namespace

Expected<std::vector<BacktestResult>> run_sweep(const Strategy& strategy, const Bars& bars,
                                                std::span<const Combo> combos, double fee, unsigned threads) {
  std::vector<BacktestResult> results(combos.size());
  auto ran = sweep_each(strategy, bars, combos, fee, threads, strategy.workspace_bytes(bars.size()),
                        [&](std::size_t i, KernelWorkspace& workspace) {
                          return strategy.run(bars, combos[i], fee, workspace, results[i]);
                        });
  if (!ran) return std::unexpected(std::move(ran.error()));
  return results;
}

Expected<std::vector<TradeStats>> run_sweep_stats(const Strategy& strategy, const Bars& bars,
                                                  std::span<const Combo> combos, double fee, double bars_per_year,
                                                  unsigned threads) {
  if (!(bars_per_year > 0.0) || !std::isfinite(bars_per_year))
    return fail(ErrorCode::invalid_argument, "bars per year {} is not a finite number > 0", bars_per_year);
  std::vector<TradeStats> results(combos.size());
  auto ran = sweep_each(strategy, bars, combos, fee, threads, strategy.stats_workspace_bytes(bars.size()),
                        [&](std::size_t i, KernelWorkspace& workspace) {
                          return strategy.run_stats(bars, combos[i], fee, bars_per_year, workspace, results[i]);
                        });
  if (!ran) return std::unexpected(std::move(ran.error()));
  return results;
}

std::vector<std::int64_t> grid_lengths(double first, double last, std::size_t count) {
  std::vector<std::int64_t> lengths;
  lengths.reserve(count);
  if (count == 1) {
    lengths.push_back(static_cast<std::int64_t>(std::nearbyint(first)));
    return lengths;
  }
  // numpy.linspace: start + i*step, with the last point set exactly to `last`.
  const double step = (last - first) / static_cast<double>(count - 1);
  for (std::size_t i = 0; i < count; ++i) {
    const double value = i + 1 == count ? last : first + static_cast<double>(i) * step;
    lengths.push_back(static_cast<std::int64_t>(std::nearbyint(value)));
  }
  return lengths;
}

const char* to_string(KernelStatus status) noexcept {
  switch (status) {
    case KernelStatus::ok: return "ok";
    case KernelStatus::window_out_of_range: return "window out of range";
    case KernelStatus::too_few_bars: return "too few bars";
    case KernelStatus::workspace_too_small: return "workspace too small";
    case KernelStatus::failed: return "strategy failed";
  }
  return "unknown kernel status";
}

}  // namespace ipcfloor
