#include "kernel/strategy.hpp"

#include <algorithm>
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

}  // namespace

Combo Strategy::example() const noexcept {
  Combo combo{};
  std::memcpy(&combo, table_->example_params, sizeof combo);
  return combo;
}

std::uint32_t Strategy::refusal(const Combo& params, std::size_t n_bars, std::span<char> why) const noexcept {
  const std::int64_t* values = param_data(params);
  for (std::uint32_t k = table_->param_count; k < IPCFLOOR_STRATEGY_MAX_PARAMS; ++k) {
    if (values[k] == 0) continue;
    say(why, "{} takes {} parameter{}; parameter {} is {}, and unused ones must be 0", name(),
        table_->param_count, table_->param_count == 1 ? "" : "s", k, values[k]);
    return k + 1;
  }
  char local[IPCFLOOR_STRATEGY_WHY_BYTES] = {};
  const int said = table_->validate(values, n_bars, why.empty() ? nullptr : local, why.empty() ? 0 : sizeof local);
  if (said == 0) return 0;
  if (!why.empty()) {
    local[sizeof local - 1] = '\0';
    say(why, "{}", std::string_view(local));
  }
  return said >= 1 && static_cast<std::uint32_t>(said) <= table_->param_count ? static_cast<std::uint32_t>(said)
                                                                               : kRefusedSomeParam;
}

StrategyRun Strategy::run(std::span<const double> close, const Combo& params, double fee, KernelWorkspace& workspace,
                          BacktestResult& out) const noexcept {
  if (close.size() < 2) return StrategyRun::too_few_bars;
  if (workspace.bytes() < table_->workspace_bytes(close.size())) return StrategyRun::workspace_too_small;
  ipcfloor_strategy_result result{};
  if (table_->run(close.data(), close.size(), param_data(params), fee, workspace.data(), &result) != 0)
    return StrategyRun::failed;
  // The engine's promise whatever the strategy does: a number that cannot be right is an error.
  if (!std::isfinite(result.pnl) || result.trades < 0) return StrategyRun::failed;
  out.pnl = result.pnl;
  out.trades = result.trades;
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

Expected<const Strategy*> StrategySet::add(const ipcfloor_strategy& table, StrategyTiming timing) {
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
  for (const Strategy& strategy : strategies_) most = std::max(most, strategy.workspace_bytes(n_bars));
  return most;
}

}  // namespace ipcfloor
