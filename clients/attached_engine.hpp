#pragma once
// One attached engine as the C ABI (clients/c_api.cpp) and the C++ facade (clients/client.cpp)
// hand it out: a ShmClient with the series' metadata copied at attach, and a fixed buffer for
// the sentence behind the last failure. Results are the IPCFLOOR_* codes of
// include/ipcfloor/ipcfloor.h, so both front ends report the same thing the same way.
//
// Built only on ShmClient's public API (connect, submit, wait_response, the live calls append,
// subscribe, snapshot, poll_signal and wait_signal, segment().series(), published_series(),
// series_count(), series_at() and series_key(), and the header's series fields), so the
// segment's internals can change underneath.
//
// Several series: an engine started with `serve --data a --data b ...` holds a table of them
// (index 0 is the main one, the one live mode appends to). backtest and sweep take the index of
// the series to run on; an index past the table is IPCFLOOR_E_NO_SUCH_SERIES without a request.
//
// Reconnect (ipcfloor_options.reconnect): a request that finds the engine gone re-attaches
// (clients/reconnect.hpp) and returns IPCFLOOR_E_ENGINE_RESTARTED; the metadata is then the new
// engine's, and the old engine's series stays mapped until detach, so pointers into it stay valid.
//
// Threads: requests (backtest, sweep, echo, and live: append, subscribe, snapshot, reading
// signals) from one thread at a time; the accessors from any (but across a re-attach, which
// changes them: read them from the requests' thread then).
// Memory: attach allocates; requests never allocate on success (a lane failure formats its
// message through ShmClient::describe, which does), never throw and never abort. poll_signal
// makes no system call.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "clients/reconnect.hpp"
#include "clients/shm_client.hpp"
#include "ipcfloor/ipcfloor.h"

namespace ipcfloor {

// Where a sweep writes its answers: three arrays (C), or the fields of an array of structs (C++),
// `stride` bytes apart in either case; or, for a sweep with statistics, an array of
// ipcfloor_stats. status and reasons may be null.
struct SweepOutput {
  double* pnl = nullptr;
  std::int64_t* trades = nullptr;
  int* status = nullptr;
  std::size_t pnl_stride = sizeof(double);
  std::size_t trades_stride = sizeof(std::int64_t);
  std::size_t status_stride = sizeof(int);
  ipcfloor_stats* stats = nullptr;  // set: the sweep asks for statistics (STATS), pnl and trades unused
  char (*reasons)[IPCFLOOR_REASON_BYTES] = nullptr;  // a refused combo's sentence; "" for the others

  void set(std::size_t i, double p, std::int64_t t, int s) const noexcept {
    if (stats != nullptr) {
      stats[i] = no_stats(p, t);
    } else {
      *reinterpret_cast<double*>(reinterpret_cast<char*>(pnl) + i * pnl_stride) = p;
      *reinterpret_cast<std::int64_t*>(reinterpret_cast<char*>(trades) + i * trades_stride) = t;
    }
    if (status != nullptr) *reinterpret_cast<int*>(reinterpret_cast<char*>(status) + i * status_stride) = s;
    if (reasons != nullptr) reasons[i][0] = '\0';
  }
  // A combo with no figures (refused, or never answered): NaN everywhere but pnl and trades.
  [[nodiscard]] static ipcfloor_stats no_stats(double pnl, std::int64_t trades) noexcept;
};

// Over 22 members (about 40): the C ABI's whole client behind one handle. Splitting it (engine
// facts, refusal sentences, live calls, re-attach) is pending; the request packing already moved to
// attached_requests.cpp and the refusal codes to client_codes.
class AttachedEngine {
 public:
  // Room for one error sentence, NUL included; longer sentences are cut.
  static constexpr std::size_t kMessageBytes = 512;

  // Attaches to NAME and claims a lane. On failure returns nullptr and sets `code` (an
  // IPCFLOOR_E_* value) and `message`. Allocates; may throw std::bad_alloc.
  [[nodiscard]] static std::unique_ptr<AttachedEngine> attach(std::string_view name, const ipcfloor_options& options,
                                                              int& code, std::string& message);

  AttachedEngine(const AttachedEngine&) = delete;
  AttachedEngine& operator=(const AttachedEngine&) = delete;
  // Hands the lane back; in a process forked after the attach, only unmaps it (the lane is the
  // parent's).
  ~AttachedEngine();

  // Fork: every request below first checks that this process is the one that attached (a
  // counter a pthread_atfork handler increments; no system call). In a forked child it returns
  // IPCFLOOR_E_FORKED, with a sentence saying to attach again, before it touches the lane.

  // The ipcfloor_backtest_with / ipcfloor_sweep_with / ipcfloor_echo contracts
  // (include/ipcfloor/ipcfloor.h); series 0 on strategy 0 is ipcfloor_backtest / ipcfloor_sweep.
  // A sweep on a series or strategy the engine does not hold marks every combo with
  // IPCFLOOR_E_NO_SUCH_SERIES / IPCFLOOR_E_NO_SUCH_STRATEGY and returns it, sending nothing.
  [[nodiscard]] int backtest(const std::int64_t params[6], double& pnl, std::int64_t& trades,
                             std::uint32_t series = 0, std::uint32_t strategy = 0) noexcept;
  [[nodiscard]] int sweep(const std::int64_t (*params)[6], std::size_t n, const SweepOutput& out,
                          std::uint32_t series = 0, std::uint32_t strategy = 0) noexcept;
  [[nodiscard]] int echo(const std::int64_t in[6], std::int64_t out[6]) noexcept;

  // Requests with options (clients/attached_requests.cpp): the ipcfloor_backtest_request,
  // _backtest_stats, _sweep_request, _sweep_stats and _trades contracts. A sweep asks for
  // statistics when out.stats is set. The request's strategy, series, range, fee and bars per year
  // are checked here first (a bad one costs no round trip), then by the engine.
  [[nodiscard]] int backtest(const ipcfloor_request& request, const std::int64_t params[6], double& pnl,
                             std::int64_t& trades) noexcept;
  [[nodiscard]] int stats(const ipcfloor_request& request, const std::int64_t params[6], ipcfloor_stats& out) noexcept;
  [[nodiscard]] int sweep(const ipcfloor_request& request, const std::int64_t (*params)[6], std::size_t n,
                          const SweepOutput& out) noexcept;
  [[nodiscard]] int trades(const ipcfloor_request& request, const std::int64_t params[6], ipcfloor_trade* out,
                           std::size_t capacity, std::size_t& count, ipcfloor_stats* stats, double* equity) noexcept;
  // The bars `request` runs on (its range, else its series as published), or empty when the
  // engine holds no such series or the range does not fit it. Zero-copy.
  [[nodiscard]] std::span<const double> request_bars(const ipcfloor_request& request) const noexcept;

  // Live mode: the ipcfloor_append / _subscribe / _snapshot / _poll_signal / _wait_signal
  // contracts. `state` may be null. snapshot returns the subscriptions (>= 0) or a code.
  // poll_signal returns IPCFLOOR_NO_SIGNAL, without touching the last error, when none is there.
  // `paced`: the ipcfloor_append_paced contract (asked again, pausing 20 us doubling to 1 ms,
  // while the engine answers subscribers_behind, until the client's timeout).
  [[nodiscard]] int append(double close, std::uint64_t tick, std::uint64_t& bars, bool paced = false) noexcept;
  [[nodiscard]] int subscribe(const std::int64_t params[6], std::uint32_t& id, ipcfloor_signal* state,
                              std::uint32_t strategy = 0) noexcept;
  [[nodiscard]] int snapshot() noexcept;
  [[nodiscard]] int poll_signal(ipcfloor_signal& out) noexcept;
  [[nodiscard]] int wait_signal(ipcfloor_signal& out) noexcept;

  // The ipcfloor_set_interrupt contract: every wait, and a sweep between answers, asks `check`;
  // a call it stops returns IPCFLOOR_E_INTERRUPTED.
  void set_interrupt(const InterruptCheck& check) noexcept {
    interrupt_ = check;
    client_.set_interrupt(check);
  }
  // Engines this client re-attached to (reconnect).
  [[nodiscard]] std::uint64_t restarts() const noexcept { return reconnect_.restarts(); }

  [[nodiscard]] std::span<const double> series() const noexcept { return client_.segment().series(); }
  // The series table, copied at attach: how many series (1..kMaxSeries), series `index`'s
  // preloaded bars (zero-copy; empty past the table) and its name (nullptr past the table).
  [[nodiscard]] std::uint32_t series_count() const noexcept { return series_count_; }
  [[nodiscard]] std::span<const double> series_at(std::uint32_t index) const noexcept {
    return index < series_count_ ? table_[index] : std::span<const double>{};
  }
  [[nodiscard]] const char* series_key(std::uint32_t index) const noexcept {
    return index < series_count_ ? keys_[index].c_str() : nullptr;
  }
  // Series `index` with every column it has (zero-copy, read-only): index 0 as published now,
  // any other as preloaded; empty past the table. Its columns() say which it has.
  [[nodiscard]] Bars bars_at(std::uint32_t index) const noexcept {
    if (index >= series_count_) return {};
    return index == 0 ? client_.segment().published_bars() : client_.segment().bars_at(index);
  }
  // IPCFLOOR_OK when the engine holds series `index`; else IPCFLOOR_E_NO_SUCH_SERIES with its sentence.
  [[nodiscard]] int check_series(std::uint32_t index) noexcept;
  // The strategy table, copied at attach: how many (1..kMaxStrategies; index 0 the built-in one),
  // and strategy `index`'s entry (nullptr past the table).
  [[nodiscard]] std::uint32_t strategy_count() const noexcept { return strategy_count_; }
  [[nodiscard]] const StrategyEntry* strategy_at(std::uint32_t index) const noexcept {
    return index < strategy_count_ ? &strategies_[index] : nullptr;
  }
  // The index of the strategy named `name`, or IPCFLOOR_E_NO_SUCH_STRATEGY with a sentence that
  // lists the engine's strategies.
  [[nodiscard]] int find_strategy(std::string_view name) noexcept;
  // IPCFLOOR_OK when the engine holds strategy `index`; else IPCFLOOR_E_NO_SUCH_STRATEGY.
  [[nodiscard]] int check_strategy(std::uint32_t index) noexcept;
  [[nodiscard]] double fee() const noexcept { return fee_; }
  [[nodiscard]] std::uint64_t checksum() const noexcept { return checksum_; }
  [[nodiscard]] const std::string& series_name() const noexcept { return series_name_; }
  [[nodiscard]] const std::string& engine_name() const noexcept { return client_.segment().name(); }
  [[nodiscard]] std::int32_t engine_pid() const noexcept { return engine_pid_; }
  [[nodiscard]] std::uint32_t lane() const noexcept { return client_.lane(); }
  [[nodiscard]] std::uint32_t ring_capacity() const noexcept { return client_.capacity(); }
  [[nodiscard]] int wait_mode() const noexcept;
  [[nodiscard]] bool live() const noexcept { return client_.live(); }
  [[nodiscard]] std::uint64_t capacity_bars() const noexcept { return capacity_bars_; }
  [[nodiscard]] std::span<const double> published_series() const noexcept { return client_.segment().published_series(); }
  [[nodiscard]] std::uint64_t signals_dropped() const noexcept { return client_.signals_dropped(); }

  // The placement block, copied at attach: the serving thread's cpu (-1: not said) and the cpus
  // nearest it, nearest first.
  [[nodiscard]] std::int32_t serving_cpu() const noexcept { return serving_cpu_; }
  [[nodiscard]] const std::vector<int>& near_cpus() const noexcept { return near_cpus_; }
  // The ipcfloor_pin_near_engine contract: pins the calling thread to the first near cpu the
  // kernel lets it use and stores it in `cpu`. IPCFLOOR_E_RESOURCE (none usable, or none
  // published), with its sentence in last_error(): the requests' thread, as for a request.
  // Allocates; a system call per cpu tried.
  [[nodiscard]] int pin_near(int& cpu) noexcept;

  // The sentence behind the last failed request on this client; "" when there was none.
  [[nodiscard]] const char* last_error() const noexcept { return message_; }

 private:
  AttachedEngine(ShmClient client, Reconnect reconnect);
  // Copies what it hands out from the attached engine's header: at attach, and after a re-attach.
  void take_metadata();
  // A lane failure once the engine is gone: re-attaches when reconnect is on (restarted, or why
  // not). The code and its sentence.
  [[nodiscard]] int engine_went_away() noexcept;

  // Reads and discards answers a failed call left in flight, so the next answer is this call's.
  [[nodiscard]] int drain() noexcept;
  // The request's checks before anything is sent, and its options line: IPCFLOOR_OK and
  // `with_options` set when it has any, else the code with its sentence.
  [[nodiscard]] int prepare(const ipcfloor_request& request, RequestOptions& options, bool& with_options) noexcept;
  // One BACKTEST, STATS or TRADES through the exchange line; a refusal is put into words.
  [[nodiscard]] int call_one(Opcode opcode, const ipcfloor_request& request, const std::int64_t params[6],
                             const RequestOptions* options) noexcept;
  [[nodiscard]] int lane_failure(CallStatus status) noexcept;
  // A refused BACKTEST: `answer` carries the status, and for window_out_of_range the parameter
  // refused and the bars it was judged against.
  [[nodiscard]] int combo_refused(const std::int64_t params[6], const ResponseSlot& answer, std::size_t index,
                                  std::size_t of, std::uint32_t series, std::uint32_t strategy,
                                  const AnswerRecord* record = nullptr) noexcept;
  // A refused combo's reason in a few words (the strategy's own when it gave them), into `out`.
  void reason_for(char (&out)[IPCFLOOR_REASON_BYTES], const ResponseSlot& answer, const AnswerRecord& record,
                  std::uint32_t strategy) const noexcept;
  // A refused SUBSCRIBE: its parameters are judged against the capacity, its cost against the bound.
  [[nodiscard]] int subscription_refused(const std::int64_t params[6], const ResponseSlot& answer,
                                         std::uint32_t strategy) noexcept;
  // "parameter L (position 1) is 341, refused by strategy hma for a series of 340 bars" into `out`.
  template <std::size_t N>
  void describe_refusal(char (&out)[N], const std::int64_t params[6], const ResponseSlot& answer,
                        std::uint32_t strategy, const AnswerRecord* record = nullptr) const noexcept;
  [[nodiscard]] int append_refused(double close, const ResponseSlot& answer) noexcept;
  // The message for a live call on an engine that is not live; returns IPCFLOOR_E_NOT_LIVE.
  [[nodiscard]] int not_live(const char* call) noexcept;
  // Reads and discards answers a failed ring request left in flight (the live calls use the
  // exchange line, which settles its own).
  [[nodiscard]] int settle() noexcept { return client_.outstanding() != 0 ? drain() : IPCFLOOR_OK; }
  // True in a process forked after the attach (its fork count moved).
  [[nodiscard]] bool forked() const noexcept;
  // IPCFLOOR_OK in the process that attached; in a forked child IPCFLOOR_E_FORKED and its sentence.
  [[nodiscard]] int refuse_if_forked() noexcept;

  ShmClient client_;
  Reconnect reconnect_;
  InterruptCheck interrupt_;           // kept for the client that replaces this one after a re-attach
  std::uint64_t forks_at_attach_ = 0;  // this process's fork count when it attached
  std::int32_t attached_by_ = 0;       // the pid that attached
  double fee_ = 0.0;
  std::uint64_t checksum_ = 0;
  std::uint64_t capacity_bars_ = 0;
  std::uint32_t subscriptions_ = 0;  // accepted on this lane; they last as long as the client
  std::chrono::nanoseconds timeout_{};
  std::int32_t engine_pid_ = 0;
  std::int32_t serving_cpu_ = -1;
  std::vector<int> near_cpus_;
  std::string series_name_;
  std::uint32_t series_count_ = 1;
  std::array<std::span<const double>, kMaxSeries> table_{};
  std::array<std::string, kMaxSeries> keys_{};
  std::uint32_t strategy_count_ = 1;
  std::array<StrategyEntry, kMaxStrategies> strategies_{};
  char message_[kMessageBytes] = {};
};

}  // namespace ipcfloor
