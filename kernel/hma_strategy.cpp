// The built-in strategy, HMA/HMA3 stop-and-reverse (docs/SPEC.md §1), as a strategy table like
// any loaded one: the engine reaches the kernel (kernel/kernel.hpp), its cost (kernel/cost.hpp)
// and its per-bar form (kernel/live_signal.hpp) only through these functions.

#include <algorithm>
#include <cstring>
#include <new>

#include <fmt/format.h>

#include "kernel/cost.hpp"
#include "kernel/kernel.hpp"
#include "kernel/live_signal.hpp"
#include "kernel/strategy.hpp"

namespace ipcfloor {
namespace {

constexpr const char* kWindowNames[] = {"h", "L", "s", "p3", "p2", "p"};

Combo combo_of(const std::int64_t* params) noexcept {
  Combo combo;
  std::memcpy(&combo, params, sizeof combo);
  return combo;
}

int hma_validate(const std::int64_t* params, std::uint64_t n_bars, char* why, std::size_t why_bytes) {
  for (std::size_t k = 0; k < 6; ++k) {
    if (params[k] >= 1 && static_cast<std::uint64_t>(params[k]) <= n_bars) continue;
    if (why != nullptr && why_bytes != 0) {
      const auto end = fmt::format_to_n(why, why_bytes - 1, "window {} (position {}) is {}, outside [1, {}] (the bars of the series)",
                                        kWindowNames[k], k, params[k], n_bars);
      *std::min(end.out, why + why_bytes - 1) = '\0';
    }
    return static_cast<int>(k) + 1;
  }
  return 0;
}

std::uint64_t hma_cost(const std::int64_t* params, std::uint64_t n_bars) {
  return backtest_cost(combo_of(params), static_cast<std::size_t>(n_bars));
}

std::uint64_t hma_workspace(std::uint64_t n_bars) { return hma_workspace_bytes(static_cast<std::size_t>(n_bars)); }

int hma_run(const ipcfloor_columns* bars, const std::int64_t* params, double fee, void* workspace,
            const ipcfloor_trade_sink* sink, ipcfloor_strategy_result* out) {
  const BacktestResult result = run_hma(std::span<const double>(bars->close, bars->n_bars),
                                        *reinterpret_cast<const Combo*>(params), fee, workspace, sink);
  out->pnl = result.pnl;
  out->trades = result.trades;
  return 0;
}

// A subscription's state: the LiveBacktest, then its two histories (s and p doubles).
constexpr std::uint64_t kHeaderBytes = (sizeof(LiveBacktest) + 63) / 64 * 64;

std::uint64_t hma_state_bytes(const std::int64_t* params) {
  return kHeaderBytes + sizeof(double) * LiveSignal::storage_doubles(combo_of(params));
}

void hma_init(void* state, const std::int64_t* params, double fee) {
  const Combo combo = combo_of(params);
  auto* histories = reinterpret_cast<double*>(static_cast<std::byte*>(state) + kHeaderBytes);
  new (state) LiveBacktest(combo, fee, std::span<double>(histories, LiveSignal::storage_doubles(combo)));
}

void hma_step(void* state, const ipcfloor_columns* bars, ipcfloor_strategy_bar* out) {
  const LiveBar bar = static_cast<LiveBacktest*>(state)->on_bar(std::span<const double>(bars->close, bars->n_bars));
  out->value[0] = bar.signal.hma;
  out->value[1] = bar.signal.hma3;
  out->pnl = bar.pnl;
  out->trades = bar.trades;
  out->signal = bar.signal.cross;
  out->position = bar.position;
}

std::uint64_t hma_step_cost(const std::int64_t* params) { return backtest_cost(combo_of(params), 1); }

constexpr ipcfloor_strategy kHma = {
    .abi_version = IPCFLOOR_STRATEGY_ABI_VERSION,
    .struct_size = sizeof(ipcfloor_strategy),
    .name = "hma",
    .param_count = 6,
    .required_columns = 0,
    .param_names = {"h", "L", "s", "p3", "p2", "p"},
    .example_params = {3, 6, 2, 1, 2, 3},
    .validate = hma_validate,
    .cost = hma_cost,
    .workspace_bytes = hma_workspace,
    .run = hma_run,
    .value_names = {"hma", "hma3"},
    .state_bytes = hma_state_bytes,
    .init = hma_init,
    .step = hma_step,
    .step_cost = hma_step_cost,
};

}  // namespace

const ipcfloor_strategy& builtin_strategy() noexcept { return kHma; }

}  // namespace ipcfloor
