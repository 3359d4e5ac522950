// The C ABI of include/ipcfloor/ipcfloor.h over AttachedEngine. Every entry point is noexcept:
// an exception would have to cross into C, so each one that can meet one catches it here.

#include <bit>
#include <chrono>
#include <algorithm>
#include <climits>
#include <limits>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <new>
#include <span>
#include <string>

#include "clients/attached_engine.hpp"
#include "common/combo.hpp"
#include "shm/socket_dir.hpp"
#include "ipcfloor/ipcfloor.h"

// ipcfloor_signal is C's view of the engine's SignalSlot, without the ring's stamp; it is filled
// field by field, so only its own layout is fixed here.
static_assert(sizeof(ipcfloor_signal) == 64, "ipcfloor_signal is 64 bytes: the Python binding mirrors it");
static_assert(offsetof(ipcfloor_signal, value) == 16 && offsetof(ipcfloor_signal, tick) == 48 &&
                  offsetof(ipcfloor_signal, cross) == 56 && offsetof(ipcfloor_signal, flags) == 58,
              "ipcfloor_signal offsets as documented in ipcfloor.h");
static_assert(offsetof(ipcfloor_signal, missed) == 60, "missed fills the 4 bytes that were padding");
static_assert(IPCFLOOR_SIGNAL_GAP == ipcfloor::kSignalGap && IPCFLOOR_SIGNAL_SNAPSHOT == ipcfloor::kSignalSnapshot &&
                  IPCFLOOR_SIGNAL_RESTART == ipcfloor::kSignalRestart,
              "the C flags are the engine's and the client's");
static_assert(sizeof(ipcfloor_options) == 32 && offsetof(ipcfloor_options, reconnect_limit_ns) == 24,
              "ipcfloor_options grows only at its end: an older caller's smaller size still works");

struct ipcfloor_client {
  std::unique_ptr<ipcfloor::AttachedEngine> engine;
};

namespace {

#define IPCFLOOR_STRINGIFY2(x) #x
#define IPCFLOOR_STRINGIFY(x) IPCFLOOR_STRINGIFY2(x)

// The calling thread's last attach failure. A fixed array: no destructor runs at thread exit.
thread_local char t_attach_error[ipcfloor::AttachedEngine::kMessageBytes] = {};

void set_attach_error(const char* text) noexcept {
  const std::size_t n = strnlen(text, sizeof t_attach_error - 1);
  std::memcpy(t_attach_error, text, n);
  t_attach_error[n] = '\0';
}

ipcfloor_client* attach_failed(int code, const char* text, int* err) noexcept {
  set_attach_error(text);
  if (err != nullptr) *err = code;
  return nullptr;
}

}  // namespace

extern "C" {

const char* ipcfloor_strerror(int err) {
  switch (err) {
    case IPCFLOOR_OK: return "ok";
    case IPCFLOOR_E_INVALID: return "invalid argument";
    case IPCFLOOR_E_NO_ENGINE: return "no engine serves that name";
    case IPCFLOOR_E_BUSY: return "engine busy: no free lane, or too many connections";
    case IPCFLOOR_E_PERMISSION: return "permission denied";
    case IPCFLOOR_E_VERSION: return "segment layout version mismatch";
    case IPCFLOOR_E_BAD_SEGMENT: return "not a valid ipcfloor segment";
    case IPCFLOOR_E_ENGINE_GONE: return "engine gone";
    case IPCFLOOR_E_ENGINE_HUNG: return "engine hung";
    case IPCFLOOR_E_TIMEOUT: return "timed out";
    case IPCFLOOR_E_CORRUPT: return "corrupt lane";
    case IPCFLOOR_E_WINDOW: return "window out of range";
    case IPCFLOOR_E_REJECTED: return "request rejected by the engine";
    case IPCFLOOR_E_IO: return "operating system error";
    case IPCFLOOR_E_RESOURCE: return "out of memory or resources";
    case IPCFLOOR_E_INTERNAL: return "internal error";
    case IPCFLOOR_E_NOT_LIVE: return "engine not live";
    case IPCFLOOR_E_CAPACITY_FULL: return "series at capacity";
    case IPCFLOOR_E_BAD_PRICE: return "bad price";
    case IPCFLOOR_E_NOT_WRITER: return "not the series' writer";
    case IPCFLOOR_E_NO_ROOM: return "no room for another subscription";
    case IPCFLOOR_E_NO_SUCH_SERIES: return "no such series";
    case IPCFLOOR_E_FORKED: return "client used in a forked child";
    case IPCFLOOR_E_INTERRUPTED: return "interrupted";
    case IPCFLOOR_E_NO_SUCH_STRATEGY: return "no such strategy";
    case IPCFLOOR_E_NO_LIVE_STEP: return "strategy has no live step";
    case IPCFLOOR_E_SIGNALS_FULL: return "signal ring full: drain it first";
    case IPCFLOOR_E_NO_TRADE_REPORT: return "the strategy reports no trades (strategy ABI version 1)";
    case IPCFLOOR_E_MISSING_COLUMN: return "the series lacks a column the strategy needs";
    case IPCFLOOR_E_BAD_RANGE: return "bar range outside the series";
    case IPCFLOOR_E_ENGINE_RESTARTED: return "engine restarted: the call was not answered, not retried";
    case IPCFLOOR_E_JOURNAL_FULL: return "journal full: the bar was not added";
    case IPCFLOOR_E_JOURNAL_FAILED: return "journal failed: the bar was not added";
    case IPCFLOOR_E_SUBSCRIBERS_BEHIND: return "a subscriber's signal ring has no room for this bar: nothing appended";
    case IPCFLOOR_NO_SIGNAL: return "no signal yet";
    default: return "unknown error";
  }
}

uint32_t ipcfloor_version(void) { return IPCFLOOR_VERSION; }

const char* ipcfloor_version_string(void) {
  return IPCFLOOR_STRINGIFY(IPCFLOOR_VERSION_MAJOR) "." IPCFLOOR_STRINGIFY(IPCFLOOR_VERSION_MINOR) "." IPCFLOOR_STRINGIFY(
      IPCFLOOR_VERSION_PATCH);
}

void ipcfloor_options_init(ipcfloor_options* options) {
  if (options == nullptr) return;
  std::memset(options, 0, sizeof *options);
  options->size = sizeof *options;
  options->wait = IPCFLOOR_WAIT_ENGINE;
  options->timeout_ns = 0;
}

ipcfloor_client* ipcfloor_attach(const char* name, int* err) { return ipcfloor_attach_with(name, nullptr, err); }

ipcfloor_client* ipcfloor_attach_with(const char* name, const ipcfloor_options* options, int* err) {
  if (name == nullptr) return attach_failed(IPCFLOOR_E_INVALID, "ipcfloor_attach: the engine name is NULL", err);
  ipcfloor_options chosen;
  ipcfloor_options_init(&chosen);
  if (options != nullptr) {
    // A caller built against a smaller (older) struct gets defaults for the fields it lacks.
    if (options->size < offsetof(ipcfloor_options, timeout_ns) + sizeof options->timeout_ns ||
        options->size > sizeof chosen)
      return attach_failed(IPCFLOOR_E_INVALID,
                           "ipcfloor_attach_with: options.size is not sizeof(ipcfloor_options) of any known version; "
                           "fill the struct with ipcfloor_options_init first",
                           err);
    std::memcpy(&chosen, options, options->size);
  }
  try {
    int code = IPCFLOOR_E_INTERNAL;
    std::string message;
    auto engine = ipcfloor::AttachedEngine::attach(name, chosen, code, message);
    if (!engine) return attach_failed(code, message.c_str(), err);
    auto* client = new ipcfloor_client{std::move(engine)};
    t_attach_error[0] = '\0';
    if (err != nullptr) *err = IPCFLOOR_OK;
    return client;
  } catch (const std::bad_alloc&) {
    return attach_failed(IPCFLOOR_E_RESOURCE, "ipcfloor_attach: out of memory", err);
  } catch (const std::exception& error) {
    return attach_failed(IPCFLOOR_E_INTERNAL, error.what(), err);
  } catch (...) {
    return attach_failed(IPCFLOOR_E_INTERNAL, "ipcfloor_attach: an unknown exception", err);
  }
}

void ipcfloor_detach(ipcfloor_client* c) { delete c; }

// One rule for what a series call returns: the bars a BACKTEST on that series runs on now. For
// series 0 of a live engine those are the published ones (preloaded, then appended); for every
// other series, and on an engine that is not live, the preloaded ones.
size_t ipcfloor_series(const ipcfloor_client* c, const double** close) { return ipcfloor_series_at(c, 0, close); }

uint64_t ipcfloor_bars(const ipcfloor_client* c) { return c == nullptr ? 0 : c->engine->published_series().size(); }
double ipcfloor_fee(const ipcfloor_client* c) { return c == nullptr ? std::nan("") : c->engine->fee(); }
const char* ipcfloor_series_name(const ipcfloor_client* c) { return c == nullptr ? "" : c->engine->series_name().c_str(); }
uint64_t ipcfloor_series_checksum(const ipcfloor_client* c) { return c == nullptr ? 0 : c->engine->checksum(); }
const char* ipcfloor_engine_name(const ipcfloor_client* c) { return c == nullptr ? "" : c->engine->engine_name().c_str(); }
int32_t ipcfloor_engine_pid(const ipcfloor_client* c) { return c == nullptr ? 0 : c->engine->engine_pid(); }
uint32_t ipcfloor_lane(const ipcfloor_client* c) { return c == nullptr ? 0 : c->engine->lane(); }
uint32_t ipcfloor_ring_capacity(const ipcfloor_client* c) { return c == nullptr ? 0 : c->engine->ring_capacity(); }
int32_t ipcfloor_wait_mode(const ipcfloor_client* c) { return c == nullptr ? 0 : c->engine->wait_mode(); }
int ipcfloor_is_live(const ipcfloor_client* c) { return c != nullptr && c->engine->live() ? 1 : 0; }
uint64_t ipcfloor_capacity(const ipcfloor_client* c) { return c == nullptr ? 0 : c->engine->capacity_bars(); }
uint64_t ipcfloor_signals_dropped(const ipcfloor_client* c) { return c == nullptr ? 0 : c->engine->signals_dropped(); }
uint64_t ipcfloor_restarts(const ipcfloor_client* c) { return c == nullptr ? 0 : c->engine->restarts(); }
int32_t ipcfloor_serving_cpu(const ipcfloor_client* c) { return c == nullptr ? -1 : c->engine->serving_cpu(); }

size_t ipcfloor_near_cpus(const ipcfloor_client* c, int32_t* cpus, size_t capacity) {
  if (c == nullptr) return 0;
  const std::vector<int>& near = c->engine->near_cpus();
  for (std::size_t i = 0; cpus != nullptr && i < near.size() && i < capacity; ++i) cpus[i] = near[i];
  return near.size();
}

int ipcfloor_pin_near_engine(ipcfloor_client* c, int32_t* cpu) {
  if (c == nullptr) return IPCFLOOR_E_INVALID;
  int chosen = -1;
  const int code = c->engine->pin_near(chosen);
  if (code == IPCFLOOR_OK && cpu != nullptr) *cpu = chosen;
  return code;
}

uint32_t ipcfloor_series_count(const ipcfloor_client* c) { return c == nullptr ? 0 : c->engine->series_count(); }
const char* ipcfloor_series_key(const ipcfloor_client* c, uint32_t index) {
  return c == nullptr ? nullptr : c->engine->series_key(index);
}

size_t ipcfloor_series_at(const ipcfloor_client* c, uint32_t index, const double** close) {
  const auto series = c == nullptr  ? std::span<const double>{}
                      : index == 0 ? c->engine->published_series()
                                   : c->engine->series_at(index);
  if (close != nullptr) *close = series.empty() ? nullptr : series.data();
  return series.size();
}

uint32_t ipcfloor_series_columns(const ipcfloor_client* c, uint32_t index) {
  return c == nullptr || index >= c->engine->series_count() ? 0 : c->engine->bars_at(index).columns();
}

size_t ipcfloor_series_column(const ipcfloor_client* c, uint32_t index, uint32_t column, const double** values) {
  if (values != nullptr) *values = nullptr;
  if (c == nullptr || column == 0 || (column & (column - 1)) != 0 || column > IPCFLOOR_COLUMN_VOLUME) return 0;
  const ipcfloor::Bars bars = c->engine->bars_at(index);
  const double* first = bars.column(static_cast<ipcfloor::Column>(std::countr_zero(column)));
  if (first == nullptr || bars.empty()) return 0;
  if (values != nullptr) *values = first;
  return bars.size();
}

size_t ipcfloor_published_series(const ipcfloor_client* c, const double** close) {
  if (c == nullptr) {
    if (close != nullptr) *close = nullptr;
    return 0;
  }
  const auto series = c->engine->published_series();
  if (close != nullptr) *close = series.data();
  return series.size();
}

int ipcfloor_backtest(ipcfloor_client* c, const int64_t params[6], double* pnl, int64_t* trades) {
  return ipcfloor_backtest_on(c, 0, params, pnl, trades);
}

int ipcfloor_backtest_on(ipcfloor_client* c, uint32_t series, const int64_t params[6], double* pnl, int64_t* trades) {
  return ipcfloor_backtest_with(c, 0, series, params, pnl, trades);
}

int ipcfloor_backtest_with(ipcfloor_client* c, uint32_t strategy, uint32_t series, const int64_t params[6], double* pnl,
                           int64_t* trades) {
  if (c == nullptr || params == nullptr || pnl == nullptr || trades == nullptr) return IPCFLOOR_E_INVALID;
  return c->engine->backtest(params, *pnl, *trades, series, strategy);
}

int ipcfloor_sweep(ipcfloor_client* c, const int64_t (*params)[6], size_t n, double* pnl, int64_t* trades,
                   int* status) {
  return ipcfloor_sweep_on(c, 0, params, n, pnl, trades, status);
}

int ipcfloor_sweep_on(ipcfloor_client* c, uint32_t series, const int64_t (*params)[6], size_t n, double* pnl,
                      int64_t* trades, int* status) {
  return ipcfloor_sweep_with(c, 0, series, params, n, pnl, trades, status);
}

void ipcfloor_request_init(ipcfloor_request* request) {
  if (request == nullptr) return;
  *request = ipcfloor_request{};
  request->fee = std::numeric_limits<double>::quiet_NaN();
}

namespace {
// NULL: every default.
ipcfloor_request request_or_default(const ipcfloor_request* request) noexcept {
  if (request != nullptr) return *request;
  ipcfloor_request defaults;
  ipcfloor_request_init(&defaults);
  return defaults;
}
}  // namespace

int ipcfloor_backtest_request(ipcfloor_client* c, const ipcfloor_request* request, const int64_t params[6], double* pnl,
                              int64_t* trades) {
  if (c == nullptr || params == nullptr || pnl == nullptr || trades == nullptr) return IPCFLOOR_E_INVALID;
  return c->engine->backtest(request_or_default(request), params, *pnl, *trades);
}

int ipcfloor_backtest_stats(ipcfloor_client* c, const ipcfloor_request* request, const int64_t params[6],
                            ipcfloor_stats* out) {
  if (c == nullptr || params == nullptr || out == nullptr) return IPCFLOOR_E_INVALID;
  return c->engine->stats(request_or_default(request), params, *out);
}

namespace {
int sweep_request(ipcfloor_client* c, const ipcfloor_request* request, const int64_t (*params)[6], size_t n,
                  const ipcfloor::SweepOutput& out) noexcept {
  if (n > static_cast<size_t>(INT_MAX) || (n != 0 && params == nullptr)) return IPCFLOOR_E_INVALID;
  return c->engine->sweep(request_or_default(request), params, n, out);
}
}  // namespace

int ipcfloor_sweep_request(ipcfloor_client* c, const ipcfloor_request* request, const int64_t (*params)[6], size_t n,
                           double* pnl, int64_t* trades, int* status, char (*reasons)[IPCFLOOR_REASON_BYTES]) {
  if (c == nullptr || (n != 0 && (pnl == nullptr || trades == nullptr))) return IPCFLOOR_E_INVALID;
  ipcfloor::SweepOutput out;
  out.pnl = pnl;
  out.trades = trades;
  out.status = status;
  out.reasons = reasons;
  return sweep_request(c, request, params, n, out);
}

int ipcfloor_sweep_stats(ipcfloor_client* c, const ipcfloor_request* request, const int64_t (*params)[6], size_t n,
                         ipcfloor_stats* out_stats, int* status, char (*reasons)[IPCFLOOR_REASON_BYTES]) {
  if (c == nullptr || (n != 0 && out_stats == nullptr)) return IPCFLOOR_E_INVALID;
  ipcfloor::SweepOutput out;
  out.stats = out_stats;
  out.status = status;
  out.reasons = reasons;
  return sweep_request(c, request, params, n, out);
}

int ipcfloor_trades(ipcfloor_client* c, const ipcfloor_request* request, const int64_t params[6],
                    struct ipcfloor_trade* trades, size_t capacity, size_t* count, ipcfloor_stats* stats, double* equity) {
  if (c == nullptr || params == nullptr || count == nullptr || (capacity != 0 && trades == nullptr))
    return IPCFLOOR_E_INVALID;
  return c->engine->trades(request_or_default(request), params, trades, capacity, *count, stats, equity);
}

uint64_t ipcfloor_trades_bars(const ipcfloor_client* c, const ipcfloor_request* request) {
  if (c == nullptr) return 0;
  return c->engine->request_bars(request_or_default(request)).size();
}

int ipcfloor_sweep_with(ipcfloor_client* c, uint32_t strategy, uint32_t series, const int64_t (*params)[6], size_t n,
                        double* pnl, int64_t* trades, int* status) {
  if (c == nullptr) return IPCFLOOR_E_INVALID;
  if (n == 0) {  // IPCFLOOR_OK (0 combos refused), or no such series or strategy
    const int held = c->engine->check_series(series);
    return held != IPCFLOOR_OK ? held : c->engine->check_strategy(strategy);
  }
  if (params == nullptr || pnl == nullptr || trades == nullptr || n > static_cast<size_t>(INT_MAX))
    return IPCFLOOR_E_INVALID;
  ipcfloor::SweepOutput out;
  out.pnl = pnl;
  out.trades = trades;
  out.status = status;
  return c->engine->sweep(params, n, out, series, strategy);
}

uint32_t ipcfloor_strategy_count(const ipcfloor_client* c) { return c == nullptr ? 0 : c->engine->strategy_count(); }

int ipcfloor_strategy_find(ipcfloor_client* c, const char* name) {
  if (c == nullptr || name == nullptr) return IPCFLOOR_E_INVALID;
  return c->engine->find_strategy(name);
}

const char* ipcfloor_strategy_name(const ipcfloor_client* c, uint32_t index) {
  const ipcfloor::StrategyEntry* entry = c == nullptr ? nullptr : c->engine->strategy_at(index);
  return entry == nullptr ? nullptr : entry->name;
}

uint32_t ipcfloor_strategy_param_count(const ipcfloor_client* c, uint32_t index) {
  const ipcfloor::StrategyEntry* entry = c == nullptr ? nullptr : c->engine->strategy_at(index);
  return entry == nullptr ? 0 : entry->param_count;
}

const char* ipcfloor_strategy_param_name(const ipcfloor_client* c, uint32_t index, uint32_t k) {
  const ipcfloor::StrategyEntry* entry = c == nullptr ? nullptr : c->engine->strategy_at(index);
  return entry == nullptr || k >= entry->param_count ? nullptr : entry->param_names[k];
}

const char* ipcfloor_strategy_value_name(const ipcfloor_client* c, uint32_t index, uint32_t k) {
  const ipcfloor::StrategyEntry* entry = c == nullptr ? nullptr : c->engine->strategy_at(index);
  return entry == nullptr || entry->live == 0 || k >= 2 ? nullptr : entry->value_names[k];
}

int ipcfloor_strategy_is_live(const ipcfloor_client* c, uint32_t index) {
  const ipcfloor::StrategyEntry* entry = c == nullptr ? nullptr : c->engine->strategy_at(index);
  return entry != nullptr && entry->live != 0 ? 1 : 0;
}

int ipcfloor_echo(ipcfloor_client* c, const int64_t in[6], int64_t out[6]) {
  if (c == nullptr || in == nullptr || out == nullptr) return IPCFLOOR_E_INVALID;
  return c->engine->echo(in, out);
}

int ipcfloor_append(ipcfloor_client* c, double close, uint64_t tick, uint64_t* bars) {
  if (c == nullptr) return IPCFLOOR_E_INVALID;
  uint64_t now = 0;
  const int code = c->engine->append(close, tick, now);
  if (code == IPCFLOOR_OK && bars != nullptr) *bars = now;
  return code;
}

int ipcfloor_append_paced(ipcfloor_client* c, double close, uint64_t tick, uint64_t* bars) {
  if (c == nullptr) return IPCFLOOR_E_INVALID;
  uint64_t now = 0;
  const int code = c->engine->append(close, tick, now, /*paced=*/true);
  if (code == IPCFLOOR_OK && bars != nullptr) *bars = now;
  return code;
}

int ipcfloor_subscribe(ipcfloor_client* c, const int64_t params[6], uint32_t* id, ipcfloor_signal* state) {
  return ipcfloor_subscribe_with(c, 0, params, id, state);
}

int ipcfloor_subscribe_with(ipcfloor_client* c, uint32_t strategy, const int64_t params[6], uint32_t* id,
                            ipcfloor_signal* state) {
  if (c == nullptr || params == nullptr || id == nullptr) return IPCFLOOR_E_INVALID;
  return c->engine->subscribe(params, *id, state, strategy);
}

int ipcfloor_snapshot(ipcfloor_client* c) { return c == nullptr ? IPCFLOOR_E_INVALID : c->engine->snapshot(); }

int ipcfloor_poll_signal(ipcfloor_client* c, ipcfloor_signal* out) {
  if (c == nullptr || out == nullptr) return IPCFLOOR_E_INVALID;
  return c->engine->poll_signal(*out);
}

int ipcfloor_wait_signal(ipcfloor_client* c, ipcfloor_signal* out) {
  if (c == nullptr || out == nullptr) return IPCFLOOR_E_INVALID;
  return c->engine->wait_signal(*out);
}

int ipcfloor_set_interrupt(ipcfloor_client* c, ipcfloor_interrupt_fn check, void* context, int64_t interval_ns) {
  constexpr int64_t kShortest = 1'000'000, kLongest = 1'000'000'000;  // 1 ms, 1 s
  if (c == nullptr || (check != nullptr && (interval_ns < kShortest || interval_ns > kLongest)))
    return IPCFLOOR_E_INVALID;
  ipcfloor::InterruptCheck interrupt;
  interrupt.check = check;
  interrupt.context = context;
  interrupt.every = std::chrono::nanoseconds(check != nullptr ? interval_ns : 0);
  c->engine->set_interrupt(interrupt);
  return IPCFLOOR_OK;
}

int ipcfloor_combo_from_length(int64_t length, int64_t params[6]) {
  if (params == nullptr || length < 1) return IPCFLOOR_E_INVALID;
  const ipcfloor::Combo combo = ipcfloor::combo_from_length(length);
  std::memcpy(params, &combo, sizeof combo);
  return IPCFLOOR_OK;
}

size_t ipcfloor_default_socket_dir(char* buf, size_t size) {
  try {
    const std::string dir = ipcfloor::default_socket_dir();
    if (buf != nullptr && size > 0) {
      const std::size_t copied = std::min(dir.size(), size - 1);
      std::memcpy(buf, dir.data(), copied);
      buf[copied] = '\0';
    }
    return dir.size();
  } catch (...) {  // out of memory: nothing to say, nothing written
    if (buf != nullptr && size > 0) buf[0] = '\0';
    return 0;
  }
}

const char* ipcfloor_last_error(const ipcfloor_client* c) {
  return c == nullptr ? t_attach_error : c->engine->last_error();
}

}  // extern "C"
