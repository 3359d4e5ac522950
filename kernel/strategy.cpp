#include "kernel/strategy.hpp"

#include <algorithm>
#include <iterator>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

// Writes a sentence into `why` (NUL-terminated, cut to fit) without allocating.
template <class... Args>
void say(std::span<char> why, fmt::format_string<Args...> format, Args&&... args) noexcept {
  if (why.empty()) return;
  try {
    const auto end = fmt::format_to_n(why.data(), why.size() - 1, format, std::forward<Args>(args)...);
    *std::min(end.out, why.data() + why.size() - 1) = '\0';
  } catch (...) {
    why[0] = '\0';
  }
}

// Where a statistics run's equity curve starts in the workspace: after the strategy's own bytes,
// on a line of its own.
std::uint64_t equity_offset(std::uint64_t strategy_bytes) noexcept { return (strategy_bytes + 63) / 64 * 64; }

}  // namespace

StrategyTable StrategyTable::of(const ipcfloor_strategy& t) noexcept {
  StrategyTable out;
  out.abi_version = t.abi_version;
  out.name = t.name;
  out.param_count = t.param_count;
  out.required_columns = t.required_columns;
  std::copy(std::begin(t.param_names), std::end(t.param_names), std::begin(out.param_names));
  std::copy(std::begin(t.example_params), std::end(t.example_params), std::begin(out.example_params));
  out.validate = t.validate;
  out.cost = t.cost;
  out.workspace_bytes = t.workspace_bytes;
  out.run = t.run;
  std::copy(std::begin(t.value_names), std::end(t.value_names), std::begin(out.value_names));
  out.state_bytes = t.state_bytes;
  out.init = t.init;
  out.step = t.step;
  out.step_cost = t.step_cost;
  return out;
}

StrategyTable StrategyTable::of(const ipcfloor_strategy_v1& t) noexcept {
  StrategyTable out;
  out.abi_version = t.abi_version;
  out.name = t.name;
  out.param_count = t.param_count;
  std::copy(std::begin(t.param_names), std::end(t.param_names), std::begin(out.param_names));
  std::copy(std::begin(t.example_params), std::end(t.example_params), std::begin(out.example_params));
  out.validate = t.validate;
  out.cost = t.cost;
  out.workspace_bytes = t.workspace_bytes;
  out.run_v1 = t.run;
  std::copy(std::begin(t.value_names), std::end(t.value_names), std::begin(out.value_names));
  out.state_bytes = t.state_bytes;
  out.init = t.init;
  out.step_v1 = t.step;
  out.step_cost = t.step_cost;
  return out;
}

Combo Strategy::example() const noexcept {
  Combo combo{};
  std::memcpy(&combo, table_.example_params, sizeof combo);
  return combo;
}

std::uint32_t Strategy::refusal(const Combo& params, std::size_t n_bars, std::span<char> why) const noexcept {
  const std::int64_t* values = param_data(params);
  for (std::uint32_t k = table_.param_count; k < IPCFLOOR_STRATEGY_MAX_PARAMS; ++k) {
    if (values[k] == 0) continue;
    say(why, "{} takes {} parameter{}; parameter {} is {}, and unused ones must be 0", name(),
        table_.param_count, table_.param_count == 1 ? "" : "s", k, values[k]);
    return k + 1;
  }
  char local[IPCFLOOR_STRATEGY_WHY_BYTES] = {};
  const int said = table_.validate(values, n_bars, why.empty() ? nullptr : local, why.empty() ? 0 : sizeof local);
  if (said == 0) return 0;
  if (!why.empty()) {
    local[sizeof local - 1] = '\0';
    say(why, "{}", std::string_view(local));
  }
  return said >= 1 && static_cast<std::uint32_t>(said) <= table_.param_count ? static_cast<std::uint32_t>(said)
                                                                              : kRefusedSomeParam;
}

std::uint64_t Strategy::stats_workspace_bytes(std::size_t n_bars) const noexcept {
  return equity_offset(workspace_bytes(n_bars)) + std::uint64_t{n_bars} * sizeof(double);
}

StrategyRun Strategy::run(const Bars& bars, const Combo& params, double fee, KernelWorkspace& workspace,
                          BacktestResult& out, const ipcfloor_trade_sink* sink) const noexcept {
  const std::size_t n = bars.size();
  if (n < 2) return StrategyRun::too_few_bars;
  // Admission refuses such a request first; this keeps every other caller (a socket server, an
  // MPI rank, a tool) from handing a strategy a NULL column.
  if ((table_.required_columns & ~bars.columns()) != 0) return StrategyRun::missing_column;
  if (workspace.bytes() < table_.workspace_bytes(n)) return StrategyRun::workspace_too_small;
  ipcfloor_strategy_result result{};
  int failed = 0;
  if (table_.run != nullptr) {
    const ipcfloor_columns view = bars.abi();
    failed = table_.run(&view, param_data(params), fee, workspace.data(), sink, &result);
  } else {
    failed = table_.run_v1(bars.close.data(), n, param_data(params), fee, workspace.data(), &result);
  }
  // The engine's promise whatever the strategy does: a number that cannot be right is an error.
  if (failed != 0 || !std::isfinite(result.pnl) || result.trades < 0) return StrategyRun::failed;
  out.pnl = result.pnl;
  out.trades = result.trades;
  return StrategyRun::ok;
}

StrategyRun Strategy::run_stats(const Bars& bars, const Combo& params, double fee, double bars_per_year,
                                KernelWorkspace& workspace, TradeStats& out, StatsRun& extras) const noexcept {
  if (!reports_trades()) return StrategyRun::no_trade_report;
  const std::size_t n = bars.size();
  if (n < 2) return StrategyRun::too_few_bars;
  if (workspace.bytes() < stats_workspace_bytes(n)) return StrategyRun::workspace_too_small;
  std::span<double> equity = extras.equity;
  if (equity.empty()) {
    auto* area = static_cast<std::byte*>(workspace.data()) + equity_offset(table_.workspace_bytes(n));
    equity = std::span<double>(reinterpret_cast<double*>(area), n);
  }
  TradeRecorder recorder(bars.close, equity, extras.keep, extras.first_kept);
  BacktestResult result;
  const StrategyRun ran = run(bars, params, fee, workspace, result, recorder.sink());
  extras.kept = recorder.kept();
  if (ran != StrategyRun::ok) return ran;
  if (recorder.finish(result.pnl, result.trades, bars_per_year, out) != TradeCheck::ok) return StrategyRun::bad_trades;
  return StrategyRun::ok;
}

const Strategy& builtin() noexcept {
  static const Strategy view(builtin_strategy(), 0);
  return view;
}

StrategySet::StrategySet() {
  strategies_.reserve(kMaxStrategies);  // add() hands out pointers into it
  strategies_.emplace_back(builtin_strategy(), 0);
}

Expected<const Strategy*> StrategySet::add(const StrategyTable& table, StrategyTiming timing) {
  const std::string_view name = table.name;
  if (find(name) != nullptr)
    return fail(ErrorCode::invalid_argument, "a strategy named '{}' is already loaded (names must be unique)", name);
  if (strategies_.size() >= kMaxStrategies)
    return fail(ErrorCode::invalid_argument, "at most {} strategies (the built-in one included) may be loaded",
                kMaxStrategies);
  strategies_.emplace_back(table, static_cast<std::uint8_t>(strategies_.size()), timing);
  return &strategies_.back();
}

const Strategy* StrategySet::find(std::string_view name) const noexcept {
  for (const Strategy& strategy : strategies_)
    if (strategy.name() == name) return &strategy;
  return nullptr;
}

std::uint64_t StrategySet::workspace_bytes(std::size_t n_bars) const noexcept {
  std::uint64_t most = 0;
  for (const Strategy& strategy : strategies_) most = std::max(most, strategy.stats_workspace_bytes(n_bars));
  return most;
}

}  // namespace ipcfloor
