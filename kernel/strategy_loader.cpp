#include "kernel/strategy_loader.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

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

Expected<void> check_fields(const ipcfloor_strategy& t, const std::string& origin) {
  if (!valid_name(t.name)) return refuse(origin, "its name must be 1-{} characters of a-z, 0-9, _ and -", IPCFLOOR_STRATEGY_NAME_MAX);
  if (t.param_count < 1 || t.param_count > IPCFLOOR_STRATEGY_MAX_PARAMS)
    return refuse(origin, "param_count is {}; it must be 1..{}", t.param_count, IPCFLOOR_STRATEGY_MAX_PARAMS);
  for (std::uint32_t k = 0; k < t.param_count; ++k)
    if (!valid_name(t.param_names[k])) return refuse(origin, "parameter {} has no valid name (1-{} characters of a-z, 0-9, _ and -)", k, IPCFLOOR_STRATEGY_NAME_MAX);
  for (std::uint32_t k = t.param_count; k < IPCFLOOR_STRATEGY_MAX_PARAMS; ++k)
    if (t.example_params[k] != 0) return refuse(origin, "example_params[{}] is {}; unused parameters must be 0", k, t.example_params[k]);
  if (t.validate == nullptr || t.cost == nullptr || t.workspace_bytes == nullptr || t.run == nullptr)
    return refuse(origin, "validate, cost, workspace_bytes and run must all be set");
  const int live_parts = (t.state_bytes != nullptr) + (t.init != nullptr) + (t.step != nullptr) + (t.step_cost != nullptr);
  if (live_parts != 0 && live_parts != 4)
    return refuse(origin, "its live part is incomplete: state_bytes, init, step and step_cost must all be set or all be NULL");
  if (live_parts == 4 && (!valid_name(t.value_names[0]) || !valid_name(t.value_names[1])))
    return refuse(origin, "a strategy with a live step names its two values (value_names)");
  return {};
}

// Runs the strategy's live step over every bar and compares its end with run()'s.
Expected<void> check_live(const Strategy& s, std::span<const double> close, const Combo& example, double fee,
                          const BacktestResult& batch, const std::string& origin) {
  const std::uint64_t bytes = s.state_bytes(example);
  if (bytes == 0 || bytes > kMaxCheckBytes) return refuse(origin, "state_bytes(example_params) is {}", bytes);
  KernelWorkspace state(bytes);
  s.init(state.data(), example, fee);
  ipcfloor_strategy_bar bar{};
  for (std::size_t i = 0; i < close.size(); ++i) s.step(state.data(), close.first(i + 1), bar);
  if (std::memcmp(&bar.pnl, &batch.pnl, sizeof batch.pnl) != 0 || bar.trades != batch.trades)
    return refuse(origin, "its live step ends on pnl {} and {} trades after {} bars, but run() gives pnl {} and {} "
                  "trades: the step must be bit-identical to the batch run", bar.pnl, bar.trades, close.size(),
                  batch.pnl, batch.trades);
  if (s.step_cost(example) == std::numeric_limits<std::uint64_t>::max())
    return refuse(origin, "step_cost(example_params) is not a finite number of units");
  return {};
}

Expected<void> self_check(const ipcfloor_strategy& table, const std::string& origin,
                          std::span<const double> close) {
  const Strategy s(table, 0);
  const std::size_t bars = close.size();
  const Combo example = s.example();
  char why[IPCFLOOR_STRATEGY_WHY_BYTES] = {};
  if (!s.accepts(example, bars, why))
    return refuse(origin, "it refuses its own example_params on {} bars: {}", bars, why);
  if (auto bounded = check_parameter_bounds(s, example, bars, origin); !bounded) return bounded;
  const std::uint64_t cost = s.cost(example, bars);
  if (cost == 0 || cost == std::numeric_limits<std::uint64_t>::max())
    return refuse(origin, "cost(example_params, {}) is {}: it must be a finite number of work units above 0", bars, cost);
  const std::uint64_t bytes = s.workspace_bytes(bars);
  if (bytes > kMaxCheckBytes) return refuse(origin, "workspace_bytes({}) is {}: more than 1 GiB for {} bars", bars, bytes, bars);
  KernelWorkspace workspace(bytes);
  BacktestResult first;
  BacktestResult second;
  const double fee = kDefaultFee;
  if (s.run(close, example, fee, workspace, first) != StrategyRun::ok)
    return refuse(origin, "run(example_params) on {} generated bars failed or answered a pnl that is not finite "
                  "(or negative trades)", bars);
  if (s.run(close, example, fee, workspace, second) != StrategyRun::ok ||
      std::memcmp(&first.pnl, &second.pnl, sizeof first.pnl) != 0 || first.trades != second.trades)
    return refuse(origin, "run(example_params) answered differently twice on the same bars: it must be deterministic");
  if (s.live()) return check_live(s, close, example, fee, first, origin);
  return {};
}

}  // namespace

Expected<void> check_strategy(const ipcfloor_strategy& table, const std::string& origin,
                              std::span<const double> check_close) {
  if (check_close.size() < 2)
    return fail(ErrorCode::invalid_argument, "strategy {}: the self-check needs a series of at least 2 bars, not {}",
                origin, check_close.size());
  if (table.abi_version != IPCFLOOR_STRATEGY_ABI_VERSION)
    return refuse(origin, "it was built for strategy ABI version {}; this engine speaks version {} (rebuild it "
                  "against this ipcfloor's strategy.h)", table.abi_version, IPCFLOOR_STRATEGY_ABI_VERSION);
  if (table.struct_size != sizeof(ipcfloor_strategy))
    return refuse(origin, "its table is {} bytes; this engine's ipcfloor_strategy is {} (rebuild it against this "
                  "ipcfloor's strategy.h)", table.struct_size, sizeof(ipcfloor_strategy));
  if (auto ok = check_fields(table, origin); !ok) return ok;
  return self_check(table, origin, check_close);
}

StrategyCatalog::~StrategyCatalog() {
  for (Library& library : libraries_) (void)::dlclose(library.handle);
}

Expected<const Strategy*> StrategyCatalog::add(const ipcfloor_strategy& table, const std::string& origin,
                                               std::span<const double> check_close) {
  if (auto ok = check_strategy(table, origin, check_close); !ok) return std::unexpected(ok.error());
  auto added = set_.add(table, time_strategy(table, check_close));
  if (!added) return refuse(origin, "{}", added.error().message);
  origins_.push_back(origin);
  return added;
}

Expected<const Strategy*> StrategyCatalog::load(const std::string& path, std::span<const double> check_close) {
  auto fd = open_strategy_file(path, path);
  if (!fd) return std::unexpected(fd.error());
  // Before dlopen runs any constructor of the file: it must export the entry.
  constexpr std::string_view kEntries[] = {IPCFLOOR_STRATEGY_ENTRY};
  if (auto entry = find_exported_entry(fd->get(), kEntries, path); !entry) return std::unexpected(entry.error());
  const std::string through = fmt::format("/proc/self/fd/{}", fd->get());
  void* handle = ::dlopen(through.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* error = ::dlerror();
    return refuse(path, "the dynamic loader refused it: {}", error != nullptr ? error : "unknown error");
  }
  const auto entry = reinterpret_cast<ipcfloor_strategy_entry>(::dlsym(handle, IPCFLOOR_STRATEGY_ENTRY));
  const ipcfloor_strategy* table = entry != nullptr ? entry() : nullptr;
  if (table == nullptr) {
    (void)::dlclose(handle);
    if (entry == nullptr) return refuse(path, "it exports no {} symbol (see include/ipcfloor/strategy.h)", IPCFLOOR_STRATEGY_ENTRY);
    return refuse(path, "its {} returned NULL", IPCFLOOR_STRATEGY_ENTRY);
  }
  auto added = add(*table, path, check_close);
  if (!added) {
    (void)::dlclose(handle);
    return added;
  }
  libraries_.push_back({handle, std::move(*fd)});
  return added;
}

}  // namespace ipcfloor
