#include "kernel/kernel.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>

#include "kernel/path.hpp"

namespace ipcfloor {

KernelStatus validate_combo(const Combo& combo, std::size_t n_bars) noexcept {
  const auto limit = static_cast<std::int64_t>(n_bars);
  for (const std::int64_t window : combo.as_array())
    if (window < 1 || window > limit) return KernelStatus::window_out_of_range;
  return KernelStatus::ok;
}

KernelWorkspace::KernelWorkspace(std::size_t n_bars)
    : capacity_(n_bars), a_(n_bars), b_(n_bars), c_(n_bars), hma_(n_bars), hma3_(n_bars) {}

void weighted_moving_average(std::span<const double> x, std::size_t n,
                             std::span<double> out) noexcept {
  kernel_path::active_path().wma(x.data(), x.size(), n, out.data());
}

KernelStatus run_backtest(std::span<const double> close, const Combo& combo, double fee,
                          KernelWorkspace& workspace, BacktestResult& out) noexcept {
  const std::size_t n = close.size();
  if (n < 2) return KernelStatus::too_few_bars;
  if (workspace.capacity_ < n) return KernelStatus::workspace_too_small;
  if (const auto status = validate_combo(combo, n); status != KernelStatus::ok) return status;

  const auto window = [](std::int64_t w) { return static_cast<std::size_t>(w); };
  const std::span<double> a{workspace.a_.data(), n};
  const std::span<double> b{workspace.b_.data(), n};
  const std::span<double> c{workspace.c_.data(), n};
  const std::span<double> hma{workspace.hma_.data(), n};
  const std::span<double> hma3{workspace.hma3_.data(), n};

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
  out = path.stop_and_reverse(close.data(), hma.data(), hma3.data(), n, fee);
  return KernelStatus::ok;
}

Expected<std::vector<BacktestResult>> run_sweep(std::span<const double> close,
                                                std::span<const Combo> combos, double fee,
                                                unsigned threads) {
  if (close.size() < 2)
    return fail(ErrorCode::invalid_argument, "the series has {} bars; a backtest needs at least 2",
                close.size());
  if (!std::isfinite(fee))
    return fail(ErrorCode::invalid_argument, "fee {} is not a finite number", fee);
  for (std::size_t i = 0; i < combos.size(); ++i) {
    if (validate_combo(combos[i], close.size()) != KernelStatus::ok) {
      const auto w = combos[i].as_array();
      return fail(ErrorCode::invalid_argument,
                  "combo {} has windows [{}, {}, {}, {}, {}, {}]; each must be in [1, {}] "
                  "(the number of bars)",
                  i, w[0], w[1], w[2], w[3], w[4], w[5], close.size());
    }
  }
  std::vector<BacktestResult> results(combos.size());
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<std::size_t>(threads, std::max<std::size_t>(1, combos.size())));

  // Workers take combos in descending cost order (the grid's long windows first), so the
  // last combo to finish is a cheap one and the threads end together.
  std::vector<std::size_t> order(combos.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  const auto cost = [](const Combo& c) { return c.h + c.L + c.s + c.p3 + c.p2 + 2 * c.p; };
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) {
    return cost(combos[x]) > cost(combos[y]);
  });

  std::atomic<std::size_t> next{0};
  const auto worker = [&] {
    KernelWorkspace workspace(close.size());
    // relaxed: the counter only hands out distinct indices; results are published by join().
    for (std::size_t k = next.fetch_add(1, std::memory_order_relaxed); k < order.size();
         k = next.fetch_add(1, std::memory_order_relaxed)) {
      const std::size_t i = order[k];
      (void)run_backtest(close, combos[i], fee, workspace, results[i]);  // validated above
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
  }
  return "unknown kernel status";
}

}  // namespace ipcfloor
