#pragma once
// ipcfloor::Client: a C++20 client of a running ipcfloor engine, over its shared-memory segment.
//
//   auto engine = ipcfloor::Client::attach("ipcfloor");          // throws ipcfloor::ClientError
//   std::span<const double> close = engine.series();             // zero-copy, read-only
//   ipcfloor::Result r = engine.backtest({3, 6, 2, 1, 2, 3});    // h, L, s, p3, p2, p
//   engine.sweep(grid, results);                                 // pipelined through the ring
//
// Several series (`ipcfloor serve --data ES.f64 --data NQ.csv`): series_count(), series_key(i)
// ("ES", "NQ"), series_at(i) (zero-copy), and backtest / sweep with a series index (0: the main one):
//
//   for (std::uint32_t i = 0; i < engine.series_count(); ++i)
//     std::printf("%s: %zu bars\n", engine.series_key(i).data(), engine.series_at(i).size());
//   ipcfloor::Result on_nq = engine.backtest({3, 6, 2, 1, 2, 3}, 1); // IPCFLOOR_E_NO_SUCH_SERIES past the table
//
// Strategies: the built-in HMA/HMA3 is index 0; an engine started with `serve --strategy FILE.so`
// serves more. Look one up by name once, then name its index in backtest / sweep / subscribe:
//
//   const std::uint32_t sma = engine.strategy("sma_cross");       // IPCFLOOR_E_NO_SUCH_STRATEGY if absent
//   ipcfloor::Result r = engine.backtest({10, 40, 0, 0, 0, 0}, 0, sma);  // unused parameters are 0
//
// Statistics (docs/STATISTICS.md), bar ranges, fees and trade lists: a Request names the strategy,
// the series, the bars [from_bar, to_bar) of it, the fee and the bars per year (each default the
// engine's):
//
//   ipcfloor::Request request{.strategy = sma, .from_bar = 1000, .to_bar = 5000, .fee = 0.05};
//   ipcfloor::Stats s = engine.stats({10, 40, 0, 0, 0, 0}, request);     // s.sharpe, s.max_drawdown, ...
//   engine.sweep(grid, stats, request, status, reasons);                 // one Stats per combo
//   ipcfloor::TradeList full = engine.trades({10, 40, 0, 0, 0, 0}, request);  // trades, equity, stats
//
// Link ipcfloor::client (CMake: find_package(ipcfloor CONFIG)). The class owns one lane of the
// engine; it is move-only and belongs to one thread at a time for requests. series() and the
// metadata accessors never change after attach and may be read from any thread.
//
// Errors: attach and every request throw ipcfloor::ClientError, whose code() is one of the
// IPCFLOOR_E_* values of ipcfloor/ipcfloor.h and whose what() names the engine, its pid and the
// lane. sweep() is the exception to the rule for refused combos: it reports them per combo and
// throws only when the lane itself fails. Requests allocate nothing unless they fail.
//
// Live mode (an engine started with `ipcfloor serve --live`): one client appends closes, others
// subscribe combos and read one Signal per subscribed combo per new bar:
//
//   writer.append(101.25, tick);                                 // -> bars in the series now
//   auto sub = reader.subscribe(ipcfloor::params_from_length(6)); // sub.id, sub.state
//   if (auto signal = reader.poll_signal()) ...                  // never waits
//   ipcfloor::Signal next = reader.wait_signal();                // bounded by the timeout

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ipcfloor/ipcfloor.h"

#if defined(__GNUC__) || defined(__clang__)
#define IPCFLOOR_CXX_API __attribute__((visibility("default")))
#else
#define IPCFLOOR_CXX_API
#endif

namespace ipcfloor {

// One combo's six int64 parameters: for the built-in strategy the windows h, L, s, p3, p2, p,
// each in [1, bars]; for another strategy its own, the unused ones 0.
using Params = std::array<std::int64_t, 6>;

// The six windows for one user-facing length L (the engine's own mapping; L >= 1).
[[nodiscard]] IPCFLOOR_CXX_API Params params_from_length(std::int64_t length);

// How the client waits for answers (ipcfloor/ipcfloor.h, IPCFLOOR_WAIT_*).
enum class Wait : std::int32_t {
  engine = IPCFLOOR_WAIT_ENGINE,  // the engine's own mode
  spin = IPCFLOOR_WAIT_SPIN,
  backoff = IPCFLOOR_WAIT_BACKOFF,
  block = IPCFLOOR_WAIT_BLOCK,
};

struct ClientOptions {
  std::chrono::nanoseconds timeout = std::chrono::seconds(5);  // bound on any one wait
  Wait wait = Wait::engine;
  // Re-attach by itself when the engine goes away (ipcfloor_options.reconnect): the request in
  // flight throws ClientError IPCFLOOR_E_ENGINE_RESTARTED (never retried), the client attaches to
  // the engine that comes back, renews its subscriptions and asks for a snapshot; wait_signal
  // waits across it, and the first Signal of each subscription after it carries
  // IPCFLOOR_SIGNAL_RESTART and `missed`. false: IPCFLOOR_E_ENGINE_GONE.
  bool reconnect = false;
  // How long one outage may last before the client gives up: 1 ms to one day; 0: 30 s.
  std::chrono::nanoseconds reconnect_limit{0};
};

struct Result {
  double pnl = 0.0;         // percentage points, net of fees
  std::int64_t trades = 0;  // closed round trips
  int status = IPCFLOOR_OK; // sweep: IPCFLOOR_OK or why the engine refused this combo
};

// One subscribed combo's state after one bar, as its strategy's batch run has it after that bar:
// the C struct of ipcfloor/ipcfloor.h (bar, subscription, dropped, value[2], pnl, trades, tick,
// cross, position, flags with IPCFLOOR_SIGNAL_GAP, IPCFLOOR_SIGNAL_SNAPSHOT and
// IPCFLOOR_SIGNAL_RESTART, missed).
using Signal = ::ipcfloor_signal;

// What subscribe answers: the combo's id on this client, and its state after the bars so far
// (flags IPCFLOOR_SIGNAL_SNAPSHOT; value[0] and value[1] NaN, the answer does not carry them).
struct Subscription {
  std::uint32_t id = 0;
  Signal state{};
};


// What one request runs on besides its combo (ipcfloor_request): the strategy and series by
// index, the bars [from_bar, to_bar) of the series (at least 2; to_bar 0: the whole series, and
// from_bar 0 with it), the fee in percentage points per round trip ([0, 100]; NaN: the engine's)
// and the bars per year sharpe, sortino and calmar use (> 0; 0: the engine's). The defaults are
// the engine's own.
struct Request {
  std::uint32_t strategy = 0;
  std::uint32_t series = 0;
  std::uint64_t from_bar = 0;
  std::uint64_t to_bar = 0;
  double fee = std::numeric_limits<double>::quiet_NaN();
  double bars_per_year = 0.0;
};

// One backtest's statistics, computed by the engine from the trades its strategy reported (the C
// struct: pnl, trades, wins, win_rate, profit_factor, expectancy, best_trade, worst_trade, avg_win,
// avg_loss, avg_trade_bars, exposure, max_drawdown, max_drawdown_bars, sharpe, sortino, calmar,
// bars; docs/STATISTICS.md defines each, NaN where a figure has nothing to measure).
using Stats = ::ipcfloor_stats;
// One closed trade: entry_bar, exit_bar (counted from the request's from_bar), entry_price,
// exit_price, pnl (percentage points, net of fees), side (+1 long, -1 short).
using Trade = ::ipcfloor_trade;
// Why the engine refused one combo of a sweep, NUL-terminated ("" for a combo answered).
using Reason = std::array<char, IPCFLOOR_REASON_BYTES>;

// One combo in full: its closed trades in order (their pnl, summed in order, is stats.pnl), its
// bar-by-bar marked-to-market equity over the bars it ran on, and its statistics.
struct TradeList {
  std::vector<Trade> trades;
  std::vector<double> equity;
  Stats stats{};
};

class IPCFLOOR_CXX_API ClientError : public std::runtime_error {
 public:
  ClientError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  [[nodiscard]] int code() const noexcept { return code_; }  // an IPCFLOOR_E_* value

 private:
  int code_;
};

// The public facade: one member per thing a C++ program can ask an engine (44 of them, as the C
// ABI's calls), each a thin wrapper; the work lives in the client stack below it.
class IPCFLOOR_CXX_API Client {
 public:
  // Attaches to engine NAME (`ipcfloor serve --name NAME`) and claims a free lane. Allocates.
  [[nodiscard]] static Client attach(std::string_view name, const ClientOptions& options = {});

  Client(Client&& other) noexcept;
  Client& operator=(Client&& other) noexcept;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();  // hands the lane back; series() views die with the client
  // A moved-from Client may only be destroyed or assigned to.

  // The main series as a BACKTEST sees it now, zero-copy and read-only (it may be mapped
  // read-only): on a live engine every bar published so far (the same as published_series(); it
  // only grows, call again for newer bars), otherwise the preloaded bars. bars() is its size. The
  // rule of the C ABI's ipcfloor_series; bars are named by their 0-based index everywhere.
  [[nodiscard]] std::span<const double> series() const noexcept;
  [[nodiscard]] std::uint64_t bars() const noexcept;
  [[nodiscard]] double fee() const noexcept;                  // per round trip, percentage points
  [[nodiscard]] std::string_view series_name() const noexcept;
  [[nodiscard]] std::uint64_t series_checksum() const noexcept;  // FNV-1a 64 of the series bytes
  [[nodiscard]] std::string_view engine_name() const noexcept;
  [[nodiscard]] std::int32_t engine_pid() const noexcept;
  [[nodiscard]] std::uint32_t lane() const noexcept;
  [[nodiscard]] std::uint32_t ring_capacity() const noexcept;  // requests a sweep keeps in flight
  [[nodiscard]] bool live() const noexcept;                    // serve --live: appends and signals
  [[nodiscard]] std::uint64_t capacity() const noexcept;       // room for bars in all (serve --capacity)
  // The bars published so far (preloaded, then appended), zero-copy and read-only: every bar it
  // covers is complete; call again for the newer ones. Any thread.
  [[nodiscard]] std::span<const double> published_series() const noexcept;
  // Signals this lane lost to a full signal ring since the engine started. Any thread.
  [[nodiscard]] std::uint64_t signals_dropped() const noexcept;
  // Engines this client re-attached to (ClientOptions::reconnect). The requests' thread.
  [[nodiscard]] std::uint64_t restarts() const noexcept;

  // Where the engine runs (ipcfloor_serving_cpu, ipcfloor_near_cpus): its serving thread's cpu
  // (-1: not said) and the cpus nearest it, nearest first. Any thread.
  [[nodiscard]] std::int32_t serving_cpu() const noexcept;
  [[nodiscard]] std::vector<std::int32_t> near_cpus() const;
  // Pins the calling thread to the first near cpu this process may use and returns it
  // (ipcfloor_pin_near_engine). Throws ClientError IPCFLOOR_E_RESOURCE when none can be used.
  std::int32_t pin_near();

  // The engine's series table (`serve --data a --data b ...`: one per file, up to 16), fixed at
  // attach; any thread. Index 0 is the main series, the one series() shows.
  [[nodiscard]] std::uint32_t series_count() const noexcept;
  // Series `index`'s name: its file's name without the extension, or "default" for a generated
  // series (NUL-terminated; "" past the table). series_name() is the main series' description.
  [[nodiscard]] std::string_view series_key(std::uint32_t index) const noexcept;
  // Series `index`'s closes, zero-copy and read-only: index 0 is series(), any other its
  // preloaded bars; empty past the table.
  [[nodiscard]] std::span<const double> series_at(std::uint32_t index) const noexcept;
  // Which columns series `index` has (IPCFLOOR_COLUMN_* bits, close always; 0 past the table),
  // and column `column` (one of those bits) of it, zero-copy and read-only, as long as its closes;
  // empty where the series lacks it. The ipcfloor_series_columns / ipcfloor_series_column contract.
  [[nodiscard]] std::uint32_t series_columns(std::uint32_t index) const noexcept;
  [[nodiscard]] std::span<const double> series_column(std::uint32_t index, std::uint32_t column) const noexcept;

  // One backtest. Throws ClientError when the engine refuses the combo (IPCFLOOR_E_WINDOW, ...) or the
  // lane fails (IPCFLOOR_E_ENGINE_GONE, _TIMEOUT, ...). No allocation on success.
  [[nodiscard]] Result backtest(const Params& params);
  // The same on series `series` of the table (windows judged against its bars); ClientError
  // IPCFLOOR_E_NO_SUCH_SERIES, naming the index and how many series the engine holds, past it.
  [[nodiscard]] Result backtest(const Params& params, std::uint32_t series);

  // The same on strategy `strategy` (an index from strategy(); 0: the built-in one); ClientError
  // IPCFLOOR_E_NO_SUCH_STRATEGY (nothing sent) past the table.
  [[nodiscard]] Result backtest(const Params& params, std::uint32_t series, std::uint32_t strategy);

  // The strategies the engine serves, fixed at attach; any thread. strategy(name) is the index of
  // the one named so (ClientError IPCFLOOR_E_NO_SUCH_STRATEGY, listing them, if none is).
  [[nodiscard]] std::uint32_t strategy_count() const noexcept;
  [[nodiscard]] std::uint32_t strategy(std::string_view name);
  [[nodiscard]] std::string_view strategy_name(std::uint32_t index) const noexcept;
  [[nodiscard]] std::uint32_t strategy_param_count(std::uint32_t index) const noexcept;
  [[nodiscard]] std::string_view strategy_param_name(std::uint32_t index, std::uint32_t k) const noexcept;
  [[nodiscard]] bool strategy_live(std::uint32_t index) const noexcept;

  // params.size() backtests, pipelined; out[i] answers params[i] (out.size() == params.size(),
  // else ClientError IPCFLOOR_E_INVALID). A refused combo gets its code in out[i].status, pnl NaN.
  // Returns how many combos were refused; throws ClientError when the lane fails.
  std::size_t sweep(std::span<const Params> params, std::span<Result> out);
  // The same on series `series`; ClientError IPCFLOOR_E_NO_SUCH_SERIES (nothing sent) past the table.
  std::size_t sweep(std::span<const Params> params, std::span<Result> out, std::uint32_t series);
  // The same on strategy `strategy`; ClientError IPCFLOOR_E_NO_SUCH_STRATEGY (nothing sent) past the table.
  std::size_t sweep(std::span<const Params> params, std::span<Result> out, std::uint32_t series, std::uint32_t strategy);

  // ---- Requests with options (a Request): the contracts of ipcfloor_backtest_request,
  // ipcfloor_sweep_request, ipcfloor_backtest_stats, ipcfloor_sweep_stats and ipcfloor_trades. A
  // strategy, series, range, fee or bars per year out of its range throws ClientError
  // (IPCFLOOR_E_NO_SUCH_STRATEGY, _NO_SUCH_SERIES, _BAD_RANGE, _INVALID) before anything is sent.

  // One backtest as `request` says. Throws as backtest(params) does.
  [[nodiscard]] Result backtest(const Params& params, const Request& request);
  // A sweep as `request` says; out[i] answers params[i] as sweep(params, out) does.
  std::size_t sweep(std::span<const Params> params, std::span<Result> out, const Request& request);
  // One combo's statistics. Throws ClientError when the engine refuses it (IPCFLOOR_E_WINDOW,
  // _NO_TRADE_REPORT for a version-1 strategy, _MISSING_COLUMN, ...) or the lane fails. No
  // allocation on success.
  [[nodiscard]] Stats stats(const Params& params, const Request& request = {});
  // params.size() combos with statistics, pipelined: out[i] answers params[i]; status[i] and
  // reasons[i], where given (empty spans: not wanted), say whether and why the engine refused it
  // (its figures NaN, trades 0). Every span given holds params.size() entries, else ClientError
  // IPCFLOOR_E_INVALID. Returns how many combos were refused; throws ClientError when the lane
  // fails. No allocation on success.
  std::size_t sweep(std::span<const Params> params, std::span<Stats> out, const Request& request,
                    std::span<int> status = {}, std::span<Reason> reasons = {});
  // One combo in full (the engine sends the list a page at a time through the lane's bulk
  // region). Allocates the lists. Throws as stats() does, and IPCFLOOR_E_RESOURCE when the engine
  // runs with --bulk-bytes 0.
  [[nodiscard]] TradeList trades(const Params& params, const Request& request = {});

  // The 48 bytes travel to the engine and back untouched: the transport alone.
  [[nodiscard]] Params echo(const Params& params);

  // ---- Live mode: the contracts of ipcfloor_append ... ipcfloor_wait_signal, with ClientError
  // for every code but IPCFLOOR_OK (and poll_signal's IPCFLOOR_NO_SIGNAL). No allocation on success.

  // Appends one close (the first client to append becomes the series' one writer); `tick` is any
  // clock reading the subscribers share, carried back in this bar's signals. Returns the bars in
  // the series now. Throws IPCFLOOR_E_CAPACITY_FULL, _BAD_PRICE, _NOT_WRITER, _NOT_LIVE, or a lane failure.
  std::uint64_t append(double close, std::uint64_t tick = 0);
  // The same, paced for a replay that loses no signal (ipcfloor_append_paced): the engine takes
  // the bar once every subscription's signal fits its ring, waiting up to the timeout. Throws
  // IPCFLOOR_E_SUBSCRIBERS_BEHIND (nothing appended) when a subscriber stayed behind that long.
  std::uint64_t append_paced(double close, std::uint64_t tick = 0);
  // Subscribes a combo (windows in [1, capacity()]) on this lane until the client goes. Throws
  // IPCFLOOR_E_WINDOW, _NO_ROOM, _REJECTED (too costly to replay), _NOT_LIVE, or a lane failure.
  Subscription subscribe(const Params& params);
  // The same on strategy `strategy`; IPCFLOOR_E_NO_LIVE_STEP when it cannot stream signals.
  Subscription subscribe(const Params& params, std::uint32_t strategy);
  // One Signal per subscription, state now, flagged IPCFLOOR_SIGNAL_SNAPSHOT. Returns the subscriptions.
  std::uint32_t snapshot();
  // The next Signal, or nothing when none is waiting: never waits, no system call.
  [[nodiscard]] std::optional<Signal> poll_signal();
  // The next Signal, waiting up to the timeout; IPCFLOOR_E_TIMEOUT when none came.
  [[nodiscard]] Signal wait_signal();

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl) noexcept;
  [[noreturn]] void fail(int code) const;

  std::unique_ptr<Impl> impl_;
};

}  // namespace ipcfloor
