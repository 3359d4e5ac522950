#pragma once
// A strategy as the engine uses it: a typed view over the C table of include/ipcfloor/strategy.h
// (version 2, or a version-1 table, which still loads), and the set of strategies one process
// serves (index 0 is the built-in HMA/HMA3). Admission (Strategy::refusal, of which accepts is the
// yes-or-no form, and Strategy::cost), the
// kernel call (Strategy::run, Strategy::run_stats) and live mode's per-bar step all go through
// here, for the built-in strategy as for a loaded one.
//
// Threads: a Strategy and a StrategySet are immutable once made; every const call may run on any
// thread. accepts(), cost(), run() and the live calls are noexcept and allocation-free (a
// strategy's own functions promise the same; see strategy.h).

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/backtest_result.hpp"
#include "common/bars.hpp"
#include "common/trade_stats.hpp"
#include "common/combo.hpp"
#include "common/error.hpp"
#include "ipcfloor/strategy.h"
#include "kernel/workspace.hpp"

namespace ipcfloor {

// The request's six int64 as the strategy ABI's parameter array. Combo is six int64 with no
// padding (pinned below), so its first member's address is the array's: no copy on the way to a
// strategy.
[[nodiscard]] inline const std::int64_t* param_data(const Combo& params) noexcept { return &params.h; }
static_assert(offsetof(Combo, L) == 8 && offsetof(Combo, s) == 16 && offsetof(Combo, p3) == 24 &&
                  offsetof(Combo, p2) == 32 && offsetof(Combo, p) == 40,
              "Combo is six adjacent int64: the strategy ABI reads it as int64_t[6]");

// How a backtest through a strategy ended.
enum class StrategyRun : std::uint8_t {
  ok,
  failed,  // run() returned nonzero, or answered a non-finite pnl or negative trades
  workspace_too_small,
  too_few_bars,
  no_trade_report,  // statistics asked of a version-1 strategy, which reports no trades
  bad_trades,       // its trade reports broke the rules of strategy.h (common/trade_stats.hpp says which)
  missing_column,   // the bars lack a column it requires: it never runs on a NULL column
};

// A strategy table of either ABI version, as one shape: the members both versions share, and the
// version's own run() and step(). Copied once when the Strategy is made.
struct StrategyTable {
  std::uint32_t abi_version = IPCFLOOR_STRATEGY_ABI_VERSION;
  const char* name = nullptr;
  std::uint32_t param_count = 0;
  std::uint32_t required_columns = 0;  // version 1: none
  const char* param_names[IPCFLOOR_STRATEGY_MAX_PARAMS] = {};
  std::int64_t example_params[IPCFLOOR_STRATEGY_MAX_PARAMS] = {};
  int (*validate)(const std::int64_t*, std::uint64_t, char*, std::size_t) = nullptr;
  std::uint64_t (*cost)(const std::int64_t*, std::uint64_t) = nullptr;
  std::uint64_t (*workspace_bytes)(std::uint64_t) = nullptr;
  decltype(ipcfloor_strategy::run) run = nullptr;        // version 2
  decltype(ipcfloor_strategy_v1::run) run_v1 = nullptr;  // version 1
  const char* value_names[2] = {};
  std::uint64_t (*state_bytes)(const std::int64_t*) = nullptr;
  void (*init)(void*, const std::int64_t*, double) = nullptr;
  decltype(ipcfloor_strategy::step) step = nullptr;        // version 2
  decltype(ipcfloor_strategy_v1::step) step_v1 = nullptr;  // version 1
  std::uint64_t (*step_cost)(const std::int64_t*) = nullptr;

  [[nodiscard]] static StrategyTable of(const ipcfloor_strategy& table) noexcept;
  [[nodiscard]] static StrategyTable of(const ipcfloor_strategy_v1& table) noexcept;
};

// What timing a loaded strategy's run() against its cost() at load found (kernel/strategy_timing.hpp).
struct StrategyTiming {
  double slowdown = 1.0;      // its time per work unit over the built-in's; 1 when not timed
  bool workers_only = false;  // far slower than its cost says: never computed on the serving thread
};

class Strategy {
 public:
  // The tables' functions and strings must outlive the view (a static table, or one in a shared
  // object kept loaded).
  Strategy(const ipcfloor_strategy& table, std::uint8_t index) noexcept : Strategy(StrategyTable::of(table), index) {}
  Strategy(const StrategyTable& table, std::uint8_t index, StrategyTiming timing = {}) noexcept
      : table_(table), index_(index), timing_(timing) {}

  [[nodiscard]] std::string_view name() const noexcept { return table_.name; }
  // Its index in the serving set: the high byte of a request's flags.
  [[nodiscard]] std::uint8_t index() const noexcept { return index_; }
  [[nodiscard]] std::uint32_t param_count() const noexcept { return table_.param_count; }
  [[nodiscard]] std::string_view param_name(std::uint32_t k) const noexcept { return table_.param_names[k]; }
  [[nodiscard]] Combo example() const noexcept;
  [[nodiscard]] std::uint32_t abi_version() const noexcept { return table_.abi_version; }
  // Whether run() reports its trades (version 2): only then can it answer statistics.
  [[nodiscard]] bool reports_trades() const noexcept { return table_.run != nullptr; }
  // IPCFLOOR_COLUMN_* bits of the columns it needs besides close.
  [[nodiscard]] std::uint32_t required_columns() const noexcept { return table_.required_columns; }

  // The one admission check of a combo: the parameters the strategy does not use are 0, and the
  // strategy's validate() accepts the rest for a series of `n_bars`. Returns 0 when it may run,
  // else 1 + the index of the parameter refused (kRefusedSomeParam when the strategy did not say
  // which), and, when `why` is not empty, a NUL-terminated sentence naming it (cut to fit). Pure.
  [[nodiscard]] std::uint32_t refusal(const Combo& params, std::size_t n_bars, std::span<char> why = {}) const noexcept;
  [[nodiscard]] bool accepts(const Combo& params, std::size_t n_bars, std::span<char> why = {}) const noexcept {
    return refusal(params, n_bars, why) == 0;
  }
  static constexpr std::uint32_t kRefusedSomeParam = IPCFLOOR_STRATEGY_MAX_PARAMS + 1;
  // run()'s work in units, for accepted params (saturating). Pure.
  [[nodiscard]] std::uint64_t cost(const Combo& params, std::size_t n_bars) const noexcept {
    return table_.cost(param_data(params), n_bars);
  }
  // What run() needs for n_bars (the strategy's workspace_bytes).
  [[nodiscard]] std::uint64_t workspace_bytes(std::size_t n_bars) const noexcept {
    return table_.workspace_bytes(n_bars);
  }
  // What a backtest with statistics needs: run()'s workspace, then the equity curve.
  [[nodiscard]] std::uint64_t stats_workspace_bytes(std::size_t n_bars) const noexcept;

  // Backtests accepted params over `bars` (no check is repeated here: the caller admitted the
  // request, its columns included). Reports trades to `sink` when it is not null (version 2;
  // version 1 reports none). Hot path: noexcept, no allocation, no syscall. A non-finite pnl or
  // negative trades is `failed`, never ok.
  [[nodiscard]] StrategyRun run(const Bars& bars, const Combo& params, double fee, KernelWorkspace& workspace,
                                BacktestResult& out, const ipcfloor_trade_sink* sink = nullptr) const noexcept;
  // The same backtest with its statistics (docs/STATISTICS.md), B = `bars_per_year`: the trades
  // go to a TradeRecorder over the workspace's equity area (stats_workspace_bytes) and, when
  // `keep` is not empty, keep.size() of them from trade `first_kept` on into `keep` (`kept` says
  // how many); `equity`, when not empty (bars.size() doubles), receives the equity curve.
  // `no_trade_report` for a version-1 strategy, `bad_trades` when its reports break the rules.
  // Hot path, as run().
  struct StatsRun {
    std::span<ipcfloor_trade> keep = {};
    std::uint64_t first_kept = 0;
    std::span<double> equity = {};
    std::uint64_t kept = 0;  // out
  };
  [[nodiscard]] StrategyRun run_stats(const Bars& bars, const Combo& params, double fee, double bars_per_year,
                                      KernelWorkspace& workspace, TradeStats& out, StatsRun& extras) const noexcept;
  [[nodiscard]] StrategyRun run_stats(const Bars& bars, const Combo& params, double fee, double bars_per_year,
                                      KernelWorkspace& workspace, TradeStats& out) const noexcept {
    StatsRun none;
    return run_stats(bars, params, fee, bars_per_year, workspace, out, none);
  }

  // Live mode: present when the strategy has a per-bar step.
  [[nodiscard]] bool live() const noexcept { return table_.step != nullptr || table_.step_v1 != nullptr; }
  [[nodiscard]] std::string_view value_name(int k) const noexcept {
    return table_.value_names[k] != nullptr ? table_.value_names[k] : "";
  }
  [[nodiscard]] std::uint64_t state_bytes(const Combo& params) const noexcept {
    return table_.state_bytes(param_data(params));
  }
  [[nodiscard]] std::uint64_t step_cost(const Combo& params) const noexcept {
    return table_.step_cost(param_data(params));
  }
  void init(void* state, const Combo& params, double fee) const noexcept { table_.init(state, param_data(params), fee); }
  // The newest bar of `history` (the whole series so far).
  void step(void* state, const Bars& history, ipcfloor_strategy_bar& out) const noexcept {
    if (table_.step != nullptr) {
      const ipcfloor_columns bars = history.abi();
      table_.step(state, &bars, &out);
    } else {
      table_.step_v1(state, history.close.data(), history.size(), &out);
    }
  }

  [[nodiscard]] const StrategyTable& table() const noexcept { return table_; }
  // Decided once at load: a strategy far slower per unit than its cost says runs at a worker only.
  [[nodiscard]] const StrategyTiming& timing() const noexcept { return timing_; }
  [[nodiscard]] bool workers_only() const noexcept { return timing_.workers_only; }

 private:
  StrategyTable table_;
  std::uint8_t index_;
  StrategyTiming timing_;
};

// The built-in strategy, HMA/HMA3 stop-and-reverse (docs/SPEC.md §1): always index 0. Its table,
// and a view of it for in-process callers (tests, benchmarks, sweeps without an engine).
[[nodiscard]] const ipcfloor_strategy& builtin_strategy() noexcept;
[[nodiscard]] const Strategy& builtin() noexcept;

// The strategies one process serves, by index (a request's flags' high byte) and by name.
// Index 0 is the built-in; loaded ones follow in load order.
class StrategySet {
 public:
  StrategySet();  // the built-in alone
  // At most this many in all (the segment lists every one; a request's byte could name 256).
  static constexpr std::size_t kMaxStrategies = IPCFLOOR_MAX_STRATEGIES;

  // Adds a table (its owner keeps its functions and strings alive), with what timing it at load
  // found. Errors: a duplicate name, or the set is full.
  [[nodiscard]] Expected<const Strategy*> add(const StrategyTable& table, StrategyTiming timing = {});

  [[nodiscard]] std::size_t size() const noexcept { return strategies_.size(); }
  // Null for an index the set does not hold.
  [[nodiscard]] const Strategy* at(std::uint32_t index) const noexcept {
    return index < strategies_.size() ? &strategies_[index] : nullptr;
  }
  [[nodiscard]] const Strategy* find(std::string_view name) const noexcept;
  [[nodiscard]] std::span<const Strategy> all() const noexcept { return strategies_; }
  // The largest workspace any strategy of the set needs for `n_bars`, statistics included: what
  // each kernel thread allocates.
  [[nodiscard]] std::uint64_t workspace_bytes(std::size_t n_bars) const noexcept;

 private:
  std::vector<Strategy> strategies_;
};

}  // namespace ipcfloor
