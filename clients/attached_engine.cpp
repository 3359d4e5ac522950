#include "clients/attached_engine.hpp"

#include "clients/client_codes.hpp"
#include "clients/pipelined_sweep.hpp"
#include "common/affinity.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <limits>
#include <thread>
#include <utility>

#include <pthread.h>
#include <unistd.h>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

// The forks this process has made so far (as seen in the child: a pthread_atfork child handler
// counts them). A client remembers the count at attach; a child sees another one.
// relaxed: only compared for equality; the handler runs in the child before fork() returns there,
// on the one thread the child has, so every later call of that thread sees its store.
std::atomic<std::uint64_t> g_forks{0};

void count_fork() noexcept { g_forks.fetch_add(1, std::memory_order_relaxed); }

// The count now; the first call registers the handler (once per process; a child inherits it).
std::uint64_t forks_now() noexcept {
  static const bool registered = pthread_atfork(nullptr, nullptr, count_fork) == 0;
  (void)registered;
  return g_forks.load(std::memory_order_relaxed);  // relaxed: see g_forks
}
void copy_signal(const SignalSlot& slot, std::uint64_t missed, ipcfloor_signal& out) noexcept {
  out.bar = slot.bar;
  out.subscription = slot.subscription;
  out.dropped = slot.dropped;
  out.value[0] = slot.value[0];
  out.value[1] = slot.value[1];
  out.pnl = slot.pnl;
  out.trades = slot.trades;
  out.tick = slot.tick;
  out.cross = slot.cross;
  out.position = slot.position;
  out.flags = slot.flags;
  out.missed = static_cast<std::uint32_t>(std::min<std::uint64_t>(missed, UINT32_MAX));
}

// The reconnect options of `options`, checked. Empty message: valid.
ReconnectPolicy reconnect_policy(std::string_view name, const ipcfloor_options& options, std::string& message) {
  ReconnectPolicy policy;
  if (options.reconnect != 0 && options.reconnect != 1) {
    message = fmt::format("attach {}: reconnect is {}: give 1 (re-attach by itself) or 0 (the default)", name,
                          options.reconnect);
    return policy;
  }
  const std::int64_t limit = options.reconnect_limit_ns;
  if (limit != 0 && (limit < kMinReconnectLimit.count() || limit > IPCFLOOR_RECONNECT_LIMIT_MAX_NS)) {
    message = fmt::format("attach {}: reconnect_limit_ns {} is outside its range: 0 (the default, 30 s) or {} ns (1 "
                          "ms) to {} ns (IPCFLOOR_RECONNECT_LIMIT_MAX_NS, one day)", name, limit,
                          kMinReconnectLimit.count(), IPCFLOOR_RECONNECT_LIMIT_MAX_NS);
    return policy;
  }
  policy.enabled = options.reconnect == 1;
  if (limit != 0) policy.limit = std::chrono::nanoseconds(limit);
  return policy;
}

}  // namespace

std::unique_ptr<AttachedEngine> AttachedEngine::attach(std::string_view name, const ipcfloor_options& options,
                                                       int& code, std::string& message) {
  ShmClientOptions client_options;
  if (options.timeout_ns < 0 || options.timeout_ns > IPCFLOOR_TIMEOUT_MAX_NS) {
    code = IPCFLOOR_E_INVALID;
    message = fmt::format("attach {}: timeout {} ns is outside its range: 0 (the default, 5 s) or 1 ns to {} ns "
                          "(IPCFLOOR_TIMEOUT_MAX_NS, one day)", name, options.timeout_ns, IPCFLOOR_TIMEOUT_MAX_NS);
    return nullptr;
  }
  if (options.timeout_ns > 0) client_options.timeout = std::chrono::nanoseconds(options.timeout_ns);
  switch (options.wait) {
    case IPCFLOOR_WAIT_ENGINE: break;
    case IPCFLOOR_WAIT_SPIN: client_options.wait = WaitMode::spin; break;
    case IPCFLOOR_WAIT_BACKOFF: client_options.wait = WaitMode::backoff; break;
    case IPCFLOOR_WAIT_BLOCK: client_options.wait = WaitMode::block; break;
    default:
      code = IPCFLOOR_E_INVALID;
      message = fmt::format("attach {}: wait mode {} is not one of IPCFLOOR_WAIT_ENGINE (0), SPIN (1), BACKOFF (2), "
                            "BLOCK (3)", name, options.wait);
      return nullptr;
  }
  const ReconnectPolicy policy = reconnect_policy(name, options, message);
  if (!message.empty()) {
    code = IPCFLOOR_E_INVALID;
    return nullptr;
  }
  auto client = ShmClient::connect(name, client_options);
  if (!client) {
    code = code_for(client.error().code);
    message = client.error().message;
    return nullptr;
  }
  std::unique_ptr<AttachedEngine> engine(
      new AttachedEngine(std::move(*client), Reconnect(std::string(name), client_options, policy)));
  engine->timeout_ = client_options.timeout;
  code = IPCFLOOR_OK;
  return engine;
}

AttachedEngine::AttachedEngine(ShmClient client, Reconnect reconnect)
    : client_(std::move(client)),
      reconnect_(std::move(reconnect)),
      forks_at_attach_(forks_now()),
      attached_by_(static_cast<std::int32_t>(getpid())) {
  take_metadata();
}

void AttachedEngine::take_metadata() {
  // Copied once per engine: the header lives in memory the engine (or any attacher) could rewrite later.
  const auto& header = client_.segment().header();
  fee_ = header.fee;
  checksum_ = header.series_checksum;
  capacity_bars_ = header.capacity_bars;  // checked at attach: within the mapping, >= the bars
  engine_pid_ = header.engine_pid;
  serving_cpu_ = header.serving_cpu;
  near_cpus_ = near_cpus_of(header);
  series_name_.assign(header.series_name, strnlen(header.series_name, sizeof header.series_name));
  // The table as attach checked it (1..kMaxSeries entries, each within the mapping).
  const Attachment& segment = client_.segment();
  series_count_ = std::clamp<std::uint32_t>(segment.series_count(), 1, kMaxSeries);
  static_assert(kMaxSeries - 1 <= kSeriesIndexMask, "every series index fits a request's series byte");
  for (std::uint32_t i = 0; i < series_count_; ++i) {
    table_[i] = i == 0 ? segment.series() : segment.series_at(i);
    keys_[i] = std::string(segment.series_key(i));
  }
  // The strategy table: names NUL-terminated within their fields (written so by the engine; cut
  // here whatever it holds), at least the built-in one.
  strategy_count_ = std::clamp<std::uint32_t>(header.strategy_count, 1, kMaxStrategies);
  for (std::uint32_t i = 0; i < strategy_count_; ++i) {
    strategies_[i] = header.strategy_table[i];
    StrategyEntry& entry = strategies_[i];
    entry.name[kStrategyNameBytes - 1] = '\0';
    for (auto& param : entry.param_names) param[kStrategyNameBytes - 1] = '\0';
    for (auto& value : entry.value_names) value[kStrategyNameBytes - 1] = '\0';
    entry.param_count = std::min<std::uint32_t>(entry.param_count, IPCFLOOR_STRATEGY_MAX_PARAMS);
  }
}

int AttachedEngine::find_strategy(std::string_view name) noexcept {
  for (std::uint32_t i = 0; i < strategy_count_; ++i)
    if (name == strategies_[i].name) return static_cast<int>(i);
  std::string known;
  for (std::uint32_t i = 0; i < strategy_count_; ++i) known += fmt::format("{}{}", i == 0 ? "" : ", ", strategies_[i].name);
  write_message_to(message_, "engine {} (pid {}) serves no strategy named '{}'; it serves: {} (serve --strategy FILE.so "
                   "loads one)", engine_name(), engine_pid_, name, known);
  return IPCFLOOR_E_NO_SUCH_STRATEGY;
}

int AttachedEngine::check_strategy(std::uint32_t index) noexcept {
  if (index < strategy_count_) return IPCFLOOR_OK;
  write_message_to(message_, "engine {} (pid {}) serves no strategy {} (lane {}): it serves {}, indices 0 to {}",
                   engine_name(), engine_pid_, index, client_.lane(), strategy_count_, strategy_count_ - 1);
  return IPCFLOOR_E_NO_SUCH_STRATEGY;
}

template <std::size_t N>
void AttachedEngine::describe_refusal(char (&out)[N], const std::int64_t params[6], const ResponseSlot& answer,
                                      std::uint32_t strategy, const AnswerRecord* record) const noexcept {
  const StrategyEntry* entry = strategy_at(strategy);
  const char* name = entry != nullptr ? entry->name : "?";
  const auto k = static_cast<std::uint64_t>(answer.extra[0]);
  if (record != nullptr && answer.extra[2] == kRecordWhy) {
    // The strategy's own words, as `sweep --inproc` prints them.
    const std::string_view why(record->why, strnlen(record->why, sizeof record->why));
    write_message_to(out, "strategy {} refuses it for a series of {} bars: {}", name, answer.extra[1], why);
  } else if (k >= 1 && k <= IPCFLOOR_STRATEGY_MAX_PARAMS) {
    const char* param = entry != nullptr && k <= entry->param_count ? entry->param_names[k - 1] : "";
    write_message_to(out, "parameter {} (position {}) is {}, refused by strategy {} for a series of {} bars", param,
                     k - 1, params[k - 1], name, answer.extra[1]);
  } else {
    write_message_to(out, "strategy {} refuses these parameters for a series of {} bars", name, answer.extra[1]);
  }
}

AttachedEngine::~AttachedEngine() {
  if (forked()) client_.abandon();  // the parent still holds the lane: no ReleaseNotice from here
}

bool AttachedEngine::forked() const noexcept { return forks_now() != forks_at_attach_; }

int AttachedEngine::refuse_if_forked() noexcept {
  if (!forked()) return IPCFLOOR_OK;
  write_message_to(message_,
                   "lane {} of engine {} was attached by process {}, and this process ({}) is a child it forked: a "
                   "child may not use its parent's lane (the parent keeps it, untouched); attach again in this process",
                   client_.lane(), engine_name(), attached_by_, static_cast<std::int32_t>(getpid()));
  return IPCFLOOR_E_FORKED;
}

int AttachedEngine::check_series(std::uint32_t index) noexcept {
  if (index < series_count_) return IPCFLOOR_OK;
  write_message_to(message_,
                   "engine {} (pid {}) holds no series {} (lane {}): it holds {} series, indices 0 to {} (serve "
                   "--data FILE preloads one per file)",
                   engine_name(), engine_pid_, index, client_.lane(), series_count_, series_count_ - 1);
  return IPCFLOOR_E_NO_SUCH_SERIES;
}

int AttachedEngine::pin_near(int& cpu) noexcept {
  if (near_cpus_.empty()) {
    write_message_to(message_, "engine {} (pid {}) publishes no cpu near its serving thread (cpu {}): it may use no "
                     "other cpu", engine_name(), engine_pid_, serving_cpu_);
    return IPCFLOOR_E_RESOURCE;
  }
  try {
    auto pinned = pin_current_thread_to_first(near_cpus_);
    if (pinned) {
      cpu = *pinned;
      return IPCFLOOR_OK;
    }
    write_message_to(message_, "engine {} (pid {}) serves on cpu {}; of the cpus nearest it: {}", engine_name(),
                     engine_pid_, serving_cpu_, pinned.error().message);
  } catch (const std::bad_alloc&) {
    write_message_to(message_, "out of memory while pinning near engine {}", engine_name());
  }
  return IPCFLOOR_E_RESOURCE;
}

int AttachedEngine::wait_mode() const noexcept {
  switch (client_.wait_mode()) {
    case WaitMode::spin: return IPCFLOOR_WAIT_SPIN;
    case WaitMode::backoff: return IPCFLOOR_WAIT_BACKOFF;
    case WaitMode::block: return IPCFLOOR_WAIT_BLOCK;
  }
  return IPCFLOOR_WAIT_ENGINE;
}

int AttachedEngine::engine_went_away() noexcept {
  CallStatus recovered = CallStatus::engine_gone;
  try {
    recovered = reconnect_.recover(client_, interrupt_);
    if (recovered == CallStatus::engine_restarted) {
      take_metadata();
      client_.set_interrupt(interrupt_);
    }
  } catch (const std::bad_alloc&) {
    write_message_to(message_, "engine {} went away, and re-attaching ran out of memory", engine_name());
    return IPCFLOOR_E_ENGINE_GONE;
  }
  switch (recovered) {
    case CallStatus::engine_restarted:
      write_message_to(message_, "{}; the call in flight was not answered and is not retried (an append may or may "
                       "not have been journaled: ipcfloor_bars gives the engine's bars now)", reconnect_.note());
      return IPCFLOOR_E_ENGINE_RESTARTED;
    case CallStatus::interrupted:
      write_message_to(message_, "{}", reconnect_.note());
      return IPCFLOOR_E_INTERRUPTED;
    default:
      write_message_to(message_, "{}", reconnect_.note());
      return IPCFLOOR_E_ENGINE_GONE;
  }
}

int AttachedEngine::lane_failure(CallStatus status) noexcept {
  if (status == CallStatus::engine_gone && reconnect_.enabled()) return engine_went_away();
  try {
    const std::string text = client_.describe(status);
    const std::size_t n = std::min(text.size(), sizeof message_ - 1);
    std::memcpy(message_, text.data(), n);
    message_[n] = '\0';
  } catch (...) {
    write_message_to(message_, "lane {} of engine {}: {}", client_.lane(), engine_name(), to_string(status));
  }
  return code_for(status);
}

int AttachedEngine::combo_refused(const std::int64_t params[6], const ResponseSlot& answer, std::size_t index,
                                  std::size_t of, std::uint32_t series, std::uint32_t strategy,
                                  const AnswerRecord* record) noexcept {
  const std::uint16_t status = answer.status;
  const int code = code_for(status);
  char which[64 + kSeriesKeyBytes] = "the combo";
  const char* key = series_key(series);
  if (key == nullptr) key = "not in its table";
  if (of > 1 && series != 0) {
    write_message_to(which, "combo {} of {} on series {} ({})", index, of, series, key);
  } else if (of > 1) {
    write_message_to(which, "combo {} of {}", index, of);
  } else if (series != 0) {
    write_message_to(which, "the combo on series {} ({})", series, key);
  }
  if (code == IPCFLOOR_E_WINDOW) {
    char why[256];
    describe_refusal(why, params, answer, strategy, record);
    write_message_to(message_, "engine {} (pid {}) refused {} [{}, {}, {}, {}, {}, {}] on lane {}: {}", engine_name(),
                     engine_pid_, which, params[0], params[1], params[2], params[3], params[4], params[5],
                     client_.lane(), why);
  } else if (code == IPCFLOOR_E_MISSING_COLUMN || code == IPCFLOOR_E_NO_TRADE_REPORT || code == IPCFLOOR_E_BAD_RANGE) {
    char why[IPCFLOOR_REASON_BYTES];
    reason_for(why, answer, record != nullptr ? *record : AnswerRecord{}, strategy);
    write_message_to(message_, "engine {} (pid {}) refused {} [{}, {}, {}, {}, {}, {}] on lane {}: {}", engine_name(),
                     engine_pid_, which, params[0], params[1], params[2], params[3], params[4], params[5],
                     client_.lane(), why);
  } else if (code == IPCFLOOR_E_NO_SUCH_SERIES) {
    // Checked before sending, so only an engine that disagrees with its own table says this.
    write_message_to(message_, "engine {} (pid {}) refused {} [{}, {}, {}, {}, {}, {}] on lane {}: it holds no series {} "
                     "(status no_such_series; its table lists {})",
                     engine_name(), engine_pid_, which, params[0], params[1], params[2], params[3], params[4],
                     params[5], client_.lane(), series, series_count_);
  } else {
    write_message_to(message_, "engine {} (pid {}) refused {} [{}, {}, {}, {}, {}, {}] on lane {}: {} (status {})",
                     engine_name(), engine_pid_, which, params[0], params[1], params[2], params[3], params[4],
                     params[5], client_.lane(), to_string(static_cast<Status>(status)), status);
  }
  return code;
}

int AttachedEngine::drain() noexcept {
  while (client_.outstanding() != 0) {
    ResponseSlot stale{};
    if (const CallStatus got = client_.wait_response(stale); got != CallStatus::ok) return lane_failure(got);
  }
  return IPCFLOOR_OK;
}

int AttachedEngine::backtest(const std::int64_t params[6], double& pnl, std::int64_t& trades, std::uint32_t series,
                             std::uint32_t strategy) noexcept {
  if (const int forked = refuse_if_forked(); forked != IPCFLOOR_OK) return forked;
  if (const int held = check_series(series); held != IPCFLOOR_OK) return held;
  if (const int known = check_strategy(strategy); known != IPCFLOOR_OK) return known;
  if (const int settled = settle(); settled != IPCFLOOR_OK) return settled;
  // Packed once, straight from the caller's array into the exchange line; answered in that line.
  if (const CallStatus got = client_.call(Opcode::backtest, request_flags(series, strategy), payload_of(params));
      got != CallStatus::ok)
    return lane_failure(got);
  const ResponseSlot& answer = client_.answer();
  if (answer.status != static_cast<std::uint16_t>(Status::ok))
    return combo_refused(params, answer, 0, 1, series, strategy);
  pnl = answer.pnl;
  trades = answer.trades;
  return IPCFLOOR_OK;
}

int AttachedEngine::sweep(const std::int64_t (*params)[6], std::size_t n, const SweepOutput& out, std::uint32_t series,
                          std::uint32_t strategy) noexcept {
  constexpr double kNoAnswer = std::numeric_limits<double>::quiet_NaN();
  int held = refuse_if_forked();
  if (held == IPCFLOOR_OK) held = check_series(series);
  if (held == IPCFLOOR_OK) held = check_strategy(strategy);
  if (held == IPCFLOOR_OK) held = settle();
  if (held != IPCFLOOR_OK) {
    for (std::size_t i = 0; i < n; ++i) out.set(i, kNoAnswer, 0, held);
    return held;
  }
  int refused = 0;
  const auto request = [&](std::size_t i) noexcept {
    return SweepRequest{Opcode::backtest, request_flags(series, strategy), payload_of(params[i])};
  };
  const auto take = [&](std::size_t i, const ResponseSlot& answer) noexcept {
    if (answer.status == static_cast<std::uint16_t>(Status::ok)) {
      out.set(i, answer.pnl, answer.trades, IPCFLOOR_OK);
      return;
    }
    // Only the first refusal is put into words: formatting every one would cost a bad grid time.
    const int code =
        refused == 0 ? combo_refused(params[i], answer, i, n, series, strategy) : code_for(answer.status);
    ++refused;
    out.set(i, kNoAnswer, 0, code);
  };
  const SweepEnd end = pipelined_sweep(client_, n, request, take);
  if (end.status == CallStatus::ok) return refused;
  const int code = lane_failure(end.status);
  for (std::size_t i = end.answered; i < n; ++i) out.set(i, kNoAnswer, 0, code);
  return code;
}

int AttachedEngine::echo(const std::int64_t in[6], std::int64_t out[6]) noexcept {
  if (const int forked = refuse_if_forked(); forked != IPCFLOOR_OK) return forked;
  if (const int settled = settle(); settled != IPCFLOOR_OK) return settled;
  if (const CallStatus got = client_.call(Opcode::echo, 0, payload_of(in)); got != CallStatus::ok)
    return lane_failure(got);
  const ResponseSlot& answer = client_.answer();
  if (answer.status != static_cast<std::uint16_t>(Status::ok)) return combo_refused(in, answer, 0, 1, 0, 0);
  // The answer's 48 bytes from pnl on are the request's, verbatim.
  static_assert(sizeof(ResponseSlot) - offsetof(ResponseSlot, pnl) == 6 * sizeof(std::int64_t));
  std::memcpy(out, &answer.pnl, 6 * sizeof(std::int64_t));
  return IPCFLOOR_OK;
}

int AttachedEngine::not_live(const char* call) noexcept {
  write_message_to(message_,
                   "engine {} (pid {}) is not live, so lane {} cannot {}: start it with `ipcfloor serve --name {} "
                   "--live` (and --capacity N for room to append)",
                   engine_name(), engine_pid_, client_.lane(), call, engine_name());
  return IPCFLOOR_E_NOT_LIVE;
}

int AttachedEngine::append_refused(double close, const ResponseSlot& answer) noexcept {
  const std::uint16_t status = answer.status;
  const int code = code_for(status);
  switch (static_cast<Status>(status)) {
    case Status::subscribers_behind:
      write_message_to(message_,
                       "engine {} (pid {}) did not take close {} within the client's timeout ({} ms): lane {}'s "
                       "subscriber has {} signals unread and its {} subscriptions need room for one each (a paced "
                       "append never outruns a subscriber); nothing was appended: call again once it reads",
                       engine_name(), engine_pid_, close,
                       std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count(), answer.extra[0],
                       answer.extra[1], answer.extra[2]);
      break;
    case Status::capacity_full:
      write_message_to(message_,
                       "engine {} (pid {}) refused to append close {} on lane {}: the series is full at its {} bars "
                       "(serve --capacity); nothing was overwritten",
                       engine_name(), engine_pid_, close, client_.lane(), capacity_bars_);
      break;
    case Status::bad_price:
      write_message_to(message_,
                       "engine {} (pid {}) refused to append close {} on lane {}: a close must be a finite number > 0",
                       engine_name(), engine_pid_, close, client_.lane());
      break;
    case Status::not_the_writer:
      write_message_to(message_,
                       "engine {} (pid {}) refused to append close {} on lane {}: another client is the series' "
                       "writer (the first client to append keeps the series until it detaches)",
                       engine_name(), engine_pid_, close, client_.lane());
      break;
    case Status::not_live: return not_live("append bars");
    case Status::missing_column:
      write_message_to(message_,
                       "engine {} (pid {}) refused to append close {} on lane {}: the series has columns besides "
                       "close (open, high, low or volume: ipcfloor_series_columns) and an APPEND carries a close "
                       "alone, so the series never grows (serve --live from a close-only file to append)",
                       engine_name(), engine_pid_, close, client_.lane());
      break;
    default:
      write_message_to(message_, "engine {} (pid {}) refused to append close {} on lane {}: {} (status {})",
                       engine_name(), engine_pid_, close, client_.lane(), to_string(static_cast<Status>(status)),
                       status);
  }
  return code;
}

int AttachedEngine::subscription_refused(const std::int64_t params[6], const ResponseSlot& answer,
                                         std::uint32_t strategy) noexcept {
  const std::uint16_t status = answer.status;
  if (status == static_cast<std::uint16_t>(Status::not_live)) return not_live("subscribe combos");
  char subject[256];
  write_message_to(subject, "engine {} (pid {}) refused to subscribe [{}, {}, {}, {}, {}, {}] on lane {}", engine_name(),
                   engine_pid_, params[0], params[1], params[2], params[3], params[4], params[5], client_.lane());
  const char* who = subject;
  switch (static_cast<Status>(status)) {
    case Status::window_out_of_range: {
      char why[256];
      describe_refusal(why, params, answer, strategy);
      write_message_to(message_, "{}: {} (the capacity of its live series, serve --capacity)", who, why);
      break;
    }
    case Status::no_live_step:
      write_message_to(message_,
                       "{}: strategy {} has no per-bar step, so it cannot stream signals (its shared object sets no "
                       "live part; status no_live_step)",
                       who, strategy_at(strategy) != nullptr ? strategy_at(strategy)->name : "?");
      break;
    case Status::too_costly:
      write_message_to(message_,
                       "{}: replaying the {} bars so far would cost more than the engine's bound per frame, or "
                       "every bar would cost its subscriptions more than its bound per bar (serve --max-frame-cost, "
                       "--max-bar-cost; status too_costly)",
                       who, client_.segment().published_series().size());
      break;
    case Status::no_room:
      write_message_to(message_,
                       "{}: the lane already holds {} subscriptions, as many as the engine allows or its memory for "
                       "them takes (serve --subscriptions)",
                       who, subscriptions_);
      break;
    default:
      write_message_to(message_, "{}: {} (status {})", who, to_string(static_cast<Status>(status)), status);
  }
  return code_for(status);
}

int AttachedEngine::append(double close, std::uint64_t tick, std::uint64_t& bars, bool paced) noexcept {
  if (const int forked = refuse_if_forked(); forked != IPCFLOOR_OK) return forked;
  if (const int settled = settle(); settled != IPCFLOOR_OK) return settled;
  ResponseSlot response{};
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  auto pause = std::chrono::microseconds(20);
  for (;;) {
    const CallStatus got = client_.append(close, tick, response, paced ? kAppendPaced : std::uint16_t{0});
    if (got != CallStatus::ok) return lane_failure(got);
    if (response.status != static_cast<std::uint16_t>(Status::subscribers_behind)) break;
    if (client_.interrupt_due()) return lane_failure(CallStatus::interrupted);
    if (std::chrono::steady_clock::now() >= deadline) return append_refused(close, response);
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(1000));
  }
  if (response.status != static_cast<std::uint16_t>(Status::ok)) return append_refused(close, response);
  bars = static_cast<std::uint64_t>(response.trades);
  return IPCFLOOR_OK;
}

int AttachedEngine::subscribe(const std::int64_t params[6], std::uint32_t& id, ipcfloor_signal* state,
                              std::uint32_t strategy) noexcept {
  if (const int forked = refuse_if_forked(); forked != IPCFLOOR_OK) return forked;
  if (const int known = check_strategy(strategy); known != IPCFLOOR_OK) return known;
  if (const int settled = settle(); settled != IPCFLOOR_OK) return settled;
  if (const CallStatus got = client_.call(Opcode::subscribe, request_flags(0, strategy), payload_of(params));
      got != CallStatus::ok)
    return lane_failure(got);
  const ResponseSlot& response = client_.answer();
  if (response.status != static_cast<std::uint16_t>(Status::ok)) return subscription_refused(params, response, strategy);
  ++subscriptions_;
  id = static_cast<std::uint32_t>(response.extra[0]);
  try {
    Combo combo;
    std::memcpy(&combo, params, sizeof combo);
    reconnect_.subscribed(combo, strategy, response);
  } catch (const std::bad_alloc&) {
    write_message_to(message_, "subscribed combo {} on lane {}, but out of memory to remember it for a re-attach", id,
                     client_.lane());
    return IPCFLOOR_E_RESOURCE;
  }
  if (state != nullptr) {
    constexpr double kNotCarried = std::numeric_limits<double>::quiet_NaN();
    *state = ipcfloor_signal{};
    state->bar = response.extra[1] > 0 ? static_cast<std::uint64_t>(response.extra[1] - 1) : 0;
    state->subscription = id;
    state->value[0] = kNotCarried;
    state->value[1] = kNotCarried;
    state->pnl = response.pnl;
    state->trades = response.trades;
    state->position = static_cast<std::int8_t>(response.extra[2]);
    state->flags = IPCFLOOR_SIGNAL_SNAPSHOT;
  }
  return IPCFLOOR_OK;
}

int AttachedEngine::snapshot() noexcept {
  if (const int forked = refuse_if_forked(); forked != IPCFLOOR_OK) return forked;
  if (const int settled = settle(); settled != IPCFLOOR_OK) return settled;
  ResponseSlot response{};
  if (const CallStatus got = client_.snapshot(response); got != CallStatus::ok) return lane_failure(got);
  if (response.status == static_cast<std::uint16_t>(Status::not_live)) return not_live("ask for a snapshot");
  if (response.status == static_cast<std::uint16_t>(Status::signals_full)) {
    write_message_to(message_, "engine {} (pid {}) refused a snapshot on lane {}: its signal ring has no room for one "
                     "frame per subscription; read the signals waiting there (ipcfloor_poll_signal) and ask again",
                     engine_name(), engine_pid_, client_.lane());
    return IPCFLOOR_E_SIGNALS_FULL;
  }
  if (response.status != static_cast<std::uint16_t>(Status::ok)) {
    write_message_to(message_, "engine {} (pid {}) refused a snapshot on lane {}: {} (status {})", engine_name(),
                     engine_pid_, client_.lane(), to_string(static_cast<Status>(response.status)), response.status);
    return code_for(response.status);
  }
  return static_cast<int>(std::min<std::int64_t>(response.trades, std::numeric_limits<int>::max()));
}

int AttachedEngine::poll_signal(ipcfloor_signal& out) noexcept {
  if (const int forked = refuse_if_forked(); forked != IPCFLOOR_OK) return forked;
  if (!client_.live()) return not_live("read signals");
  SignalSlot slot;
  switch (const CallStatus got = client_.poll_signal(slot)) {
    case CallStatus::ok: {
      const std::uint64_t missed = reconnect_.on_signal(slot);
      copy_signal(slot, missed, out);
      return IPCFLOOR_OK;
    }
    case CallStatus::empty: return IPCFLOOR_NO_SIGNAL;
    default: return lane_failure(got);
  }
}

int AttachedEngine::wait_signal(ipcfloor_signal& out) noexcept {
  if (const int forked = refuse_if_forked(); forked != IPCFLOOR_OK) return forked;
  if (!client_.live()) return not_live("wait for signals");
  SignalSlot slot;
  CallStatus got = client_.wait_signal(slot);
  if (got == CallStatus::engine_gone && reconnect_.enabled()) {
    // Not a request in flight: the wait goes on with the engine that came back, whose snapshot
    // frames are the next signals.
    if (const int code = engine_went_away(); code != IPCFLOOR_E_ENGINE_RESTARTED) return code;
    got = client_.wait_signal(slot);
  }
  if (got == CallStatus::ok) {
    const std::uint64_t missed = reconnect_.on_signal(slot);
    copy_signal(slot, missed, out);
    return IPCFLOOR_OK;
  }
  if (got == CallStatus::timeout) {
    write_message_to(message_,
                     "no signal reached lane {} of engine {} (pid {}) within {} ms; the engine is alive (no bar was "
                     "appended, or this client subscribed nothing)",
                     client_.lane(), engine_name(), engine_pid_,
                     std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count());
    return IPCFLOOR_E_TIMEOUT;
  }
  return lane_failure(got);
}

}  // namespace ipcfloor
