#include "kernel/strategy_loader.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>
#include <limits>

#include <fmt/format.h>

#include "common/bars.hpp"
#include "common/trade_stats.hpp"
#include "common/unique_fd.hpp"
#include "kernel/strategy_file_checks.hpp"
#include "kernel/strategy_timing.hpp"

namespace ipcfloor {
namespace {

constexpr std::uint64_t kMaxCheckBytes = std::uint64_t{1} << 30;  // workspace or state at load: 1 GiB

template <class... Args>
std::unexpected<Error> refuse(const std::string& origin, fmt::format_string<Args...> format, Args&&... args) {
  return std::unexpected(Error{ErrorCode::strategy,
                               fmt::format("strategy {}: {}", origin, fmt::format(format, std::forward<Args>(args)...))});
}

bool valid_name(const char* name) noexcept {
  if (name == nullptr) return false;
  const std::size_t length = std::strlen(name);
  if (length == 0 || length > IPCFLOOR_STRATEGY_NAME_MAX) return false;
  for (std::size_t i = 0; i < length; ++i) {
    const char c = name[i];
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  }
  return true;
}

Expected<void> check_fields(const StrategyTable& t, const std::string& origin) {
  if (!valid_name(t.name)) return refuse(origin, "its name must be 1-{} characters of a-z, 0-9, _ and -", IPCFLOOR_STRATEGY_NAME_MAX);
  if (t.param_count < 1 || t.param_count > IPCFLOOR_STRATEGY_MAX_PARAMS)
    return refuse(origin, "param_count is {}; it must be 1..{}", t.param_count, IPCFLOOR_STRATEGY_MAX_PARAMS);
  for (std::uint32_t k = 0; k < t.param_count; ++k)
    if (!valid_name(t.param_names[k])) return refuse(origin, "parameter {} has no valid name (1-{} characters of a-z, 0-9, _ and -)", k, IPCFLOOR_STRATEGY_NAME_MAX);
  for (std::uint32_t k = t.param_count; k < IPCFLOOR_STRATEGY_MAX_PARAMS; ++k)
    if (t.example_params[k] != 0) return refuse(origin, "example_params[{}] is {}; unused parameters must be 0", k, t.example_params[k]);
  if ((t.required_columns & ~IPCFLOOR_COLUMNS_ALL) != 0)
    return refuse(origin, "required_columns is {:#x}; only the IPCFLOOR_COLUMN_* bits ({:#x}) are defined",
                  t.required_columns, IPCFLOOR_COLUMNS_ALL);
  if (t.validate == nullptr || t.cost == nullptr || t.workspace_bytes == nullptr || (t.run == nullptr && t.run_v1 == nullptr))
    return refuse(origin, "validate, cost, workspace_bytes and run must all be set");
  const bool step = t.step != nullptr || t.step_v1 != nullptr;
  const int live_parts = (t.state_bytes != nullptr) + (t.init != nullptr) + step + (t.step_cost != nullptr);
  if (live_parts != 0 && live_parts != 4)
    return refuse(origin, "its live part is incomplete: state_bytes, init, step and step_cost must all be set or all be NULL");
  if (live_parts == 4 && (!valid_name(t.value_names[0]) || !valid_name(t.value_names[1])))
    return refuse(origin, "a strategy with a live step names its two values (value_names)");
  return {};
}

// Runs the strategy's live step over every bar and compares its end with run()'s.
Expected<void> check_live(const Strategy& s, const Bars& bars, const Combo& example, double fee,
                          const BacktestResult& batch, const std::string& origin) {
  const std::uint64_t bytes = s.state_bytes(example);
  if (bytes == 0 || bytes > kMaxCheckBytes) return refuse(origin, "state_bytes(example_params) is {}", bytes);
  KernelWorkspace state(bytes);
  s.init(state.data(), example, fee);
  ipcfloor_strategy_bar bar{};
  for (std::size_t i = 0; i < bars.size(); ++i) s.step(state.data(), bars.first(i + 1), bar);
  if (std::memcmp(&bar.pnl, &batch.pnl, sizeof batch.pnl) != 0 || bar.trades != batch.trades)
    return refuse(origin, "its live step ends on pnl {} and {} trades after {} bars, but run() gives pnl {} and {} "
                  "trades: the step must be bit-identical to the batch run", bar.pnl, bar.trades, bars.size(),
                  batch.pnl, batch.trades);
  if (s.step_cost(example) == std::numeric_limits<std::uint64_t>::max())
    return refuse(origin, "step_cost(example_params) is not a finite number of units");
  return {};
}

// The self-check's bars: GBM closes, and every other column made from them, so that a strategy
// that requires any column can run. Open is the previous close, high and low straddle both,
// volume cycles through [1000, 2000).
struct CheckSeries {
  std::vector<double> close, open, high, low, volume;
  [[nodiscard]] Bars bars() const noexcept {
    Bars b(close);
    b.open = open.data();
    b.high = high.data();
    b.low = low.data();
    b.volume = volume.data();
    return b;
  }
};

CheckSeries check_series(std::span<const double> close) {
  CheckSeries s;
  s.close.assign(close.begin(), close.end());
  const std::size_t n = s.close.size();
  s.open.resize(n);
  s.high.resize(n);
  s.low.resize(n);
  s.volume.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    s.open[i] = i == 0 ? s.close[0] : s.close[i - 1];
    s.high[i] = std::max(s.open[i], s.close[i]) * 1.001;
    s.low[i] = std::min(s.open[i], s.close[i]) * 0.999;
    s.volume[i] = 1000.0 + static_cast<double>((i * 7919) % 1000);
  }
  return s;
}

// A version-2 strategy's trade reports on the example: well formed, as many as it counts, summing
// to its pnl bit for bit (docs/STATISTICS.md, "Inputs").
Expected<void> check_trade_reports(const Strategy& s, const Bars& bars, const Combo& example, double fee,
                                   KernelWorkspace& workspace, const std::string& origin) {
  std::vector<double> equity(bars.size());
  TradeRecorder recorder(bars.close, equity);
  BacktestResult result;
  if (s.run(bars, example, fee, workspace, result, recorder.sink()) != StrategyRun::ok)
    return refuse(origin, "run(example_params) failed when its trades were asked for");
  TradeStats stats;
  if (const TradeCheck check = recorder.finish(result.pnl, result.trades, kDefaultBarsPerYear, stats);
      check != TradeCheck::ok)
    return refuse(origin, "its trade reports on {} generated bars break the rules of strategy.h: {} ({} reported, "
                  "{} counted)", bars.size(), to_string(check), recorder.reported(), result.trades);
  return {};
}

Expected<void> self_check(const StrategyTable& table, const std::string& origin, std::span<const double> close) {
  const Strategy s(table, 0);
  const CheckSeries series = check_series(close);
  const Bars bars = series.bars();
  const std::size_t check_bars = bars.size();
  const Combo example = s.example();
  char why[IPCFLOOR_STRATEGY_WHY_BYTES] = {};
  if (!s.accepts(example, check_bars, why))
    return refuse(origin, "it refuses its own example_params on {} bars: {}", check_bars, why);
  if (auto bounded = check_parameter_bounds(s, example, check_bars, origin); !bounded) return bounded;
  const std::uint64_t cost = s.cost(example, check_bars);
  if (cost == 0 || cost == std::numeric_limits<std::uint64_t>::max())
    return refuse(origin, "cost(example_params, {}) is {}: it must be a finite number of work units above 0", check_bars,
                  cost);
  const std::uint64_t bytes = s.workspace_bytes(check_bars);
  if (bytes > kMaxCheckBytes)
    return refuse(origin, "workspace_bytes({}) is {}: more than 1 GiB for {} bars", check_bars, bytes, check_bars);
  KernelWorkspace workspace(bytes);
  BacktestResult first;
  BacktestResult second;
  const double fee = kDefaultFee;
  if (s.run(bars, example, fee, workspace, first) != StrategyRun::ok)
    return refuse(origin, "run(example_params) on {} generated bars failed or answered a pnl that is not finite "
                  "(or negative trades)", check_bars);
  if (s.run(bars, example, fee, workspace, second) != StrategyRun::ok ||
      std::memcmp(&first.pnl, &second.pnl, sizeof first.pnl) != 0 || first.trades != second.trades)
    return refuse(origin, "run(example_params) answered differently twice on the same bars: it must be deterministic");
  if (s.reports_trades()) {
    if (auto ok = check_trade_reports(s, bars, example, fee, workspace, origin); !ok) return ok;
  }
  if (s.live()) return check_live(s, bars, example, fee, first, origin);
  return {};
}

}  // namespace

Expected<void> check_strategy(const ipcfloor_strategy& table, const std::string& origin,
                              std::span<const double> check_close) {
  if (check_close.size() < 2)
    return fail(ErrorCode::invalid_argument, "strategy {}: the self-check needs a series of at least 2 bars, not {}",
                origin, check_close.size());
  if (table.abi_version != IPCFLOOR_STRATEGY_ABI_VERSION)
    return refuse(origin, "its {} table says strategy ABI version {}; this engine speaks versions 1 and {} (rebuild "
                  "it against this ipcfloor's strategy.h)", IPCFLOOR_STRATEGY_ENTRY, table.abi_version,
                  IPCFLOOR_STRATEGY_ABI_VERSION);
  if (table.struct_size != sizeof(ipcfloor_strategy))
    return refuse(origin, "its table is {} bytes; this engine's ipcfloor_strategy is {} (rebuild it against this "
                  "ipcfloor's strategy.h)", table.struct_size, sizeof(ipcfloor_strategy));
  const StrategyTable normalised = StrategyTable::of(table);
  if (auto ok = check_fields(normalised, origin); !ok) return ok;
  return self_check(normalised, origin, check_close);
}

Expected<void> check_strategy(const ipcfloor_strategy_v1& table, const std::string& origin,
                              std::span<const double> check_close) {
  if (check_close.size() < 2)
    return fail(ErrorCode::invalid_argument, "strategy {}: the self-check needs a series of at least 2 bars, not {}",
                origin, check_close.size());
  if (table.abi_version != 1)
    return refuse(origin, "its {} table says strategy ABI version {}; that entry point is version 1's (rebuild it "
                  "against this ipcfloor's strategy.h)", IPCFLOOR_STRATEGY_ENTRY_V1, table.abi_version);
  if (table.struct_size != sizeof(ipcfloor_strategy_v1))
    return refuse(origin, "its table is {} bytes; a version-1 ipcfloor_strategy is {} (rebuild it against this "
                  "ipcfloor's strategy.h)", table.struct_size, sizeof(ipcfloor_strategy_v1));
  const StrategyTable normalised = StrategyTable::of(table);
  if (auto ok = check_fields(normalised, origin); !ok) return ok;
  return self_check(normalised, origin, check_close);
}

StrategyCatalog::~StrategyCatalog() {
  for (Library& library : libraries_) (void)::dlclose(library.handle);
}

template <class Table>
Expected<const Strategy*> StrategyCatalog::add_checked(const Table& table, const std::string& origin,
                                                       std::span<const double> check_close) {
  if (auto ok = check_strategy(table, origin, check_close); !ok) return std::unexpected(ok.error());
  const StrategyTable normalised = StrategyTable::of(table);
  const CheckSeries series = check_series(check_close);
  auto added = set_.add(normalised, time_strategy(normalised, series.bars()));
  if (!added) return refuse(origin, "{}", added.error().message);
  origins_.push_back(origin);
  digests_.push_back(Sha256{});
  return added;
}

Expected<const Strategy*> StrategyCatalog::add(const ipcfloor_strategy& table, const std::string& origin,
                                               std::span<const double> check_close) {
  return add_checked(table, origin, check_close);
}

Expected<const Strategy*> StrategyCatalog::add(const ipcfloor_strategy_v1& table, const std::string& origin,
                                               std::span<const double> check_close) {
  return add_checked(table, origin, check_close);
}

Expected<const Strategy*> StrategyCatalog::add_entry(void* handle, const std::string& path,
                                                     std::span<const double> check_close) {
  // Version 2 first; a file built against the first header exports only the version-1 symbol.
  if (const auto entry = reinterpret_cast<ipcfloor_strategy_entry>(::dlsym(handle, IPCFLOOR_STRATEGY_ENTRY))) {
    const ipcfloor_strategy* table = entry();
    if (table == nullptr) return refuse(path, "its {} returned NULL", IPCFLOOR_STRATEGY_ENTRY);
    return add(*table, path, check_close);
  }
  if (const auto entry = reinterpret_cast<ipcfloor_strategy_entry_v1>(::dlsym(handle, IPCFLOOR_STRATEGY_ENTRY_V1))) {
    const ipcfloor_strategy_v1* table = entry();
    if (table == nullptr) return refuse(path, "its {} returned NULL", IPCFLOOR_STRATEGY_ENTRY_V1);
    return add(*table, path, check_close);
  }
  return refuse(path, "it exports no {} (or version 1's {}) symbol (see include/ipcfloor/strategy.h)",
                IPCFLOOR_STRATEGY_ENTRY, IPCFLOOR_STRATEGY_ENTRY_V1);
}

Expected<const Strategy*> StrategyCatalog::load(const std::string& path, std::span<const double> check_close) {
  auto fd = open_strategy_file(path, path);
  if (!fd) return std::unexpected(fd.error());
  // Before dlopen runs any constructor of the file: it must export the entry.
  constexpr std::string_view kEntries[] = {IPCFLOOR_STRATEGY_ENTRY, IPCFLOOR_STRATEGY_ENTRY_V1};
  if (auto entry = find_exported_entry(fd->get(), kEntries, path); !entry) return std::unexpected(entry.error());
  const std::string through = fmt::format("/proc/self/fd/{}", fd->get());
  void* handle = ::dlopen(through.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = ::dlerror();
    return refuse(path, "the dynamic loader refused it: {}", error != nullptr ? error : "unknown error");
  }
  auto digest = sha256_of_fd(fd->get(), path);  // the bytes loaded, through the descriptor loaded from
  if (!digest) {
    (void)::dlclose(handle);
    return std::unexpected(digest.error());
  }
  auto added = add_entry(handle, path, check_close);
  if (!added) {
    (void)::dlclose(handle);
    return added;
  }
  digests_.back() = *digest;
  libraries_.push_back({handle, std::move(*fd)});
  return added;
}

}  // namespace ipcfloor
