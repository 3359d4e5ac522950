// ipcfloor::Client (include/ipcfloor/client.hpp) over AttachedEngine: the same lane, codes and
// sentences as the C ABI, with exceptions instead of return codes.

#include "ipcfloor/client.hpp"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "clients/attached_engine.hpp"
#include "common/combo.hpp"

namespace ipcfloor {

static_assert(sizeof(Params) == 6 * sizeof(std::int64_t), "a span of Params is a C array of int64_t[6]");

struct Client::Impl {
  std::unique_ptr<AttachedEngine> engine;
};

Params params_from_length(std::int64_t length) {
  if (length < 1) throw ClientError(IPCFLOOR_E_INVALID, "length " + std::to_string(length) + " is not a whole number >= 1");
  const Combo combo = combo_from_length(length);
  return combo.as_array();
}

Client Client::attach(std::string_view name, const ClientOptions& options) {
  ipcfloor_options c_options{};
  c_options.size = sizeof c_options;
  c_options.wait = static_cast<std::int32_t>(options.wait);
  c_options.timeout_ns = options.timeout.count();
  c_options.reconnect = options.reconnect ? 1 : 0;
  c_options.reconnect_limit_ns = options.reconnect_limit.count();
  if (c_options.timeout_ns == 0)
    throw ClientError(IPCFLOOR_E_INVALID, "attach " + std::string(name) + ": a timeout of 0 ns would fail every wait");
  int code = IPCFLOOR_E_INTERNAL;
  std::string message;
  auto engine = AttachedEngine::attach(name, c_options, code, message);
  if (!engine) throw ClientError(code, message);
  return Client(std::make_unique<Impl>(Impl{std::move(engine)}));
}

Client::Client(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}
Client::Client(Client&& other) noexcept = default;
Client& Client::operator=(Client&& other) noexcept = default;
Client::~Client() = default;

void Client::fail(int code) const { throw ClientError(code, impl_->engine->last_error()); }

// series(), bars() and series_at(0): the bars a BACKTEST on the main series runs on now (the
// published ones), the same rule as the C ABI's.
std::span<const double> Client::series() const noexcept { return impl_->engine->published_series(); }
std::uint64_t Client::bars() const noexcept { return impl_->engine->published_series().size(); }
double Client::fee() const noexcept { return impl_->engine->fee(); }
std::string_view Client::series_name() const noexcept { return impl_->engine->series_name(); }
std::uint64_t Client::series_checksum() const noexcept { return impl_->engine->checksum(); }
std::string_view Client::engine_name() const noexcept { return impl_->engine->engine_name(); }
std::int32_t Client::engine_pid() const noexcept { return impl_->engine->engine_pid(); }
std::uint32_t Client::lane() const noexcept { return impl_->engine->lane(); }
std::uint32_t Client::ring_capacity() const noexcept { return impl_->engine->ring_capacity(); }
bool Client::live() const noexcept { return impl_->engine->live(); }
std::uint64_t Client::capacity() const noexcept { return impl_->engine->capacity_bars(); }
std::span<const double> Client::published_series() const noexcept { return impl_->engine->published_series(); }
std::uint64_t Client::signals_dropped() const noexcept { return impl_->engine->signals_dropped(); }
std::uint64_t Client::restarts() const noexcept { return impl_->engine->restarts(); }
std::uint32_t Client::series_count() const noexcept { return impl_->engine->series_count(); }
std::int32_t Client::serving_cpu() const noexcept { return impl_->engine->serving_cpu(); }

std::vector<std::int32_t> Client::near_cpus() const {
  const std::vector<int>& near = impl_->engine->near_cpus();
  return {near.begin(), near.end()};
}

std::int32_t Client::pin_near() {
  int cpu = -1;
  if (const int code = impl_->engine->pin_near(cpu); code != IPCFLOOR_OK) fail(code);
  return cpu;
}
std::span<const double> Client::series_at(std::uint32_t index) const noexcept {
  return index == 0 ? impl_->engine->published_series() : impl_->engine->series_at(index);
}

std::uint32_t Client::series_columns(std::uint32_t index) const noexcept {
  return index < impl_->engine->series_count() ? impl_->engine->bars_at(index).columns() : 0;
}

std::span<const double> Client::series_column(std::uint32_t index, std::uint32_t column) const noexcept {
  if (column == 0 || (column & (column - 1)) != 0 || column > IPCFLOOR_COLUMN_VOLUME) return {};
  const Bars bars = impl_->engine->bars_at(index);
  const double* values = bars.column(static_cast<Column>(std::countr_zero(column)));
  return values == nullptr ? std::span<const double>{} : std::span<const double>(values, bars.size());
}

std::string_view Client::series_key(std::uint32_t index) const noexcept {
  const char* key = impl_->engine->series_key(index);
  return key == nullptr ? std::string_view() : std::string_view(key);
}

Result Client::backtest(const Params& params) { return backtest(params, 0); }

Result Client::backtest(const Params& params, std::uint32_t series) { return backtest(params, series, 0); }

Result Client::backtest(const Params& params, std::uint32_t series, std::uint32_t strategy) {
  Result result;
  if (const int code = impl_->engine->backtest(params.data(), result.pnl, result.trades, series, strategy);
      code != IPCFLOOR_OK)
    fail(code);
  return result;
}

std::uint32_t Client::strategy_count() const noexcept { return impl_->engine->strategy_count(); }

std::uint32_t Client::strategy(std::string_view name) {
  const int index = impl_->engine->find_strategy(name);
  if (index < 0) fail(index);
  return static_cast<std::uint32_t>(index);
}

std::string_view Client::strategy_name(std::uint32_t index) const noexcept {
  const StrategyEntry* entry = impl_->engine->strategy_at(index);
  return entry == nullptr ? std::string_view() : std::string_view(entry->name);
}

std::uint32_t Client::strategy_param_count(std::uint32_t index) const noexcept {
  const StrategyEntry* entry = impl_->engine->strategy_at(index);
  return entry == nullptr ? 0 : entry->param_count;
}

std::string_view Client::strategy_param_name(std::uint32_t index, std::uint32_t k) const noexcept {
  const StrategyEntry* entry = impl_->engine->strategy_at(index);
  return entry == nullptr || k >= entry->param_count ? std::string_view() : std::string_view(entry->param_names[k]);
}

bool Client::strategy_live(std::uint32_t index) const noexcept {
  const StrategyEntry* entry = impl_->engine->strategy_at(index);
  return entry != nullptr && entry->live != 0;
}

std::size_t Client::sweep(std::span<const Params> params, std::span<Result> out) { return sweep(params, out, 0, 0); }

std::size_t Client::sweep(std::span<const Params> params, std::span<Result> out, std::uint32_t series) {
  return sweep(params, out, series, 0);
}

std::size_t Client::sweep(std::span<const Params> params, std::span<Result> out, std::uint32_t series,
                          std::uint32_t strategy) {
  if (out.size() != params.size())
    throw ClientError(IPCFLOOR_E_INVALID, "sweep: " + std::to_string(out.size()) + " results for " +
                                        std::to_string(params.size()) + " combos; give one Result per combo");
  if (const int held = impl_->engine->check_series(series); held != IPCFLOOR_OK) fail(held);
  if (const int known = impl_->engine->check_strategy(strategy); known != IPCFLOOR_OK) fail(known);
  if (params.empty()) return 0;
  SweepOutput output;
  output.pnl = &out[0].pnl;
  output.trades = &out[0].trades;
  output.status = &out[0].status;
  output.pnl_stride = output.trades_stride = output.status_stride = sizeof(Result);
  const int refused = impl_->engine->sweep(reinterpret_cast<const std::int64_t(*)[6]>(params.data()), params.size(),
                                           output, series, strategy);
  if (refused < 0) fail(refused);
  return static_cast<std::size_t>(refused);
}

namespace {

// Every field of the C struct from the Request (whose defaults are ipcfloor_request_init's).
ipcfloor_request c_request(const Request& request) noexcept {
  ipcfloor_request out{};
  out.strategy = request.strategy;
  out.series = request.series;
  out.from_bar = request.from_bar;
  out.to_bar = request.to_bar;
  out.fee = request.fee;
  out.bars_per_year = request.bars_per_year;
  return out;
}

// The spans a sweep fills hold one entry per combo (an optional one may be empty).
void check_sizes(const char* call, std::size_t combos, std::initializer_list<std::pair<const char*, std::size_t>> spans,
                 bool optional_empty) {
  for (const auto& [what, size] : spans) {
    if (size == combos || (optional_empty && size == 0 && std::string_view(what) != "results")) continue;
    throw ClientError(IPCFLOOR_E_INVALID, std::string(call) + ": " + std::to_string(size) + " " + what + " for " +
                                              std::to_string(combos) + " combos; give one per combo");
  }
}

}  // namespace

Result Client::backtest(const Params& params, const Request& request) {
  Result result;
  if (const int code = impl_->engine->backtest(c_request(request), params.data(), result.pnl, result.trades);
      code != IPCFLOOR_OK)
    fail(code);
  return result;
}

std::size_t Client::sweep(std::span<const Params> params, std::span<Result> out, const Request& request) {
  check_sizes("sweep", params.size(), {{"results", out.size()}}, false);
  SweepOutput output;
  if (!out.empty()) {
    output.pnl = &out[0].pnl;
    output.trades = &out[0].trades;
    output.status = &out[0].status;
  }
  output.pnl_stride = output.trades_stride = output.status_stride = sizeof(Result);
  const int refused = impl_->engine->sweep(c_request(request), reinterpret_cast<const std::int64_t(*)[6]>(params.data()),
                                           params.size(), output);
  if (refused < 0) fail(refused);
  return static_cast<std::size_t>(refused);
}

Stats Client::stats(const Params& params, const Request& request) {
  Stats out{};
  if (const int code = impl_->engine->stats(c_request(request), params.data(), out); code != IPCFLOOR_OK) fail(code);
  return out;
}

std::size_t Client::sweep(std::span<const Params> params, std::span<Stats> out, const Request& request,
                          std::span<int> status, std::span<Reason> reasons) {
  check_sizes("sweep", params.size(), {{"results", out.size()}, {"statuses", status.size()}, {"reasons", reasons.size()}},
              true);
  static_assert(sizeof(Reason) == IPCFLOOR_REASON_BYTES, "a span of Reason is a C array of char[REASON_BYTES]");
  SweepOutput output;
  output.stats = out.data();
  output.status = status.empty() ? nullptr : status.data();
  output.reasons = reasons.empty() ? nullptr : reinterpret_cast<char(*)[IPCFLOOR_REASON_BYTES]>(reasons.data());
  const int refused = impl_->engine->sweep(c_request(request), reinterpret_cast<const std::int64_t(*)[6]>(params.data()),
                                           params.size(), output);
  if (refused < 0) fail(refused);
  return static_cast<std::size_t>(refused);
}

TradeList Client::trades(const Params& params, const Request& request) {
  const ipcfloor_request c = c_request(request);
  TradeList list;
  list.equity.resize(impl_->engine->request_bars(c).size());
  // Non-overlapping trades of at least one bar each fit one per bar; a strategy whose trades
  // open and close on one bar may need more: asked again with room for them.
  list.trades.resize(std::max<std::size_t>(16, list.equity.size()));
  for (;;) {
    std::size_t count = 0;
    const int code = impl_->engine->trades(c, params.data(), list.trades.data(), list.trades.size(), count, &list.stats,
                                           list.equity.empty() ? nullptr : list.equity.data());
    if (code == IPCFLOOR_OK) {
      list.trades.resize(count);
      return list;
    }
    if (code != IPCFLOOR_E_RESOURCE || count <= list.trades.size()) fail(code);
    list.trades.resize(count);
  }
}

Params Client::echo(const Params& params) {
  Params back{};
  if (const int code = impl_->engine->echo(params.data(), back.data()); code != IPCFLOOR_OK) fail(code);
  return back;
}

std::uint64_t Client::append(double close, std::uint64_t tick) {
  std::uint64_t bars = 0;
  if (const int code = impl_->engine->append(close, tick, bars); code != IPCFLOOR_OK) fail(code);
  return bars;
}

std::uint64_t Client::append_paced(double close, std::uint64_t tick) {
  std::uint64_t bars = 0;
  if (const int code = impl_->engine->append(close, tick, bars, /*paced=*/true); code != IPCFLOOR_OK) fail(code);
  return bars;
}

Subscription Client::subscribe(const Params& params) { return subscribe(params, 0); }

Subscription Client::subscribe(const Params& params, std::uint32_t strategy) {
  Subscription subscription;
  if (const int code = impl_->engine->subscribe(params.data(), subscription.id, &subscription.state, strategy);
      code != IPCFLOOR_OK)
    fail(code);
  return subscription;
}

std::uint32_t Client::snapshot() {
  const int subscriptions = impl_->engine->snapshot();
  if (subscriptions < 0) fail(subscriptions);
  return static_cast<std::uint32_t>(subscriptions);
}

std::optional<Signal> Client::poll_signal() {
  Signal signal{};
  const int code = impl_->engine->poll_signal(signal);
  if (code == IPCFLOOR_NO_SIGNAL) return std::nullopt;
  if (code != IPCFLOOR_OK) fail(code);
  return signal;
}

Signal Client::wait_signal() {
  Signal signal{};
  if (const int code = impl_->engine->wait_signal(signal); code != IPCFLOOR_OK) fail(code);
  return signal;
}

}  // namespace ipcfloor
