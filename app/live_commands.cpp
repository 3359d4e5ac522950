#include "app/live_commands.hpp"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <iostream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli_common.hpp"
#include "clients/reconnect.hpp"
#include "clients/shm_client.hpp"
#include "common/exit_codes.hpp"
#include "data/combo_io.hpp"
#include "data/grid.hpp"
#include "data/series_io.hpp"
#include "kernel/kernel.hpp"
#include "data/series_source.hpp"
#include "shm/liveness.hpp"

namespace ipcfloor {
namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_interrupt_signal{0};

void on_interrupt(int signal_number) {  // seq_cst: a signal handler's flags
  g_interrupt_signal.store(signal_number);
  g_interrupted.store(true);
}

// Waits until `due` unless SIGINT or SIGTERM comes first (false then). The handler's interruption
// ends a sleep at once; a signal that lands just before a sleep begins is seen within one slice.
bool pause_until(std::chrono::steady_clock::time_point due) {
  constexpr auto kSlice = std::chrono::milliseconds(20);
  while (!g_interrupted.load()) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= due) return true;
    const auto nap = std::chrono::duration_cast<std::chrono::nanoseconds>(std::min<std::chrono::steady_clock::duration>(due - now, kSlice));
    const timespec pause{static_cast<time_t>(nap.count() / 1'000'000'000), static_cast<long>(nap.count() % 1'000'000'000)};
    ::nanosleep(&pause, nullptr);  // EINTR when the handler ran: the loop looks at the flag
  }
  return false;
}

// The exit code of a command a signal stopped: 128 + its number, as a shell reports it.
int interrupted_exit() { return 128 + g_interrupt_signal.load(); }

void catch_interrupts() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

// How the live commands' clients attach (and re-attach, with --reconnect).
ShmClientOptions live_options(const std::string& socket_dir, std::chrono::milliseconds timeout) {
  ShmClientOptions options;
  options.timeout = timeout;
  options.socket_dir = socket_dir;
  options.wait = WaitMode::backoff;  // a CLI process must not burn a core waiting for bars
  return options;
}

ReconnectPolicy reconnect_policy(bool reconnect, double limit_s) {
  return {reconnect, std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(limit_s))};
}

// What a re-attach asks between its tries: whether Ctrl-C (or SIGTERM) came.
InterruptCheck cli_interrupt() {
  return {[](void*) noexcept { return g_interrupted.load() ? 1 : 0; }, nullptr, std::chrono::milliseconds(20)};
}

Expected<ShmClient> connect_live(const std::string& name, const std::string& socket_dir,
                                 std::chrono::milliseconds timeout) {
  auto client = ShmClient::connect(name, live_options(socket_dir, timeout));
  if (!client) return client;
  if (!client->live())
    return fail(ErrorCode::invalid_argument, "engine {} is not live: start it with `ipcfloor serve --name {} --live`",
                name, name);
  return client;
}

int engine_failure(const char* command, const ShmClient& client, CallStatus status) {
  fmt::print(stderr, "ipcfloor {}: {}\n", command, client.describe(status));
  return status == CallStatus::engine_gone || status == CallStatus::engine_hung ? kExitEngineGone : kExitFailure;
}

// A close on stdin is one short line: anything longer is refused, so an endless line (stdin from
// /dev/zero) is not read into memory.
constexpr std::size_t kMaxCloseLine = 256;

enum class LineRead : std::uint8_t { line, end, too_long };

LineRead read_line(std::istream& in, std::string& line) {
  line.clear();
  for (int c; (c = in.get()) != std::char_traits<char>::eof();) {
    if (c == '\n') return LineRead::line;
    if (line.size() == kMaxCloseLine) return LineRead::too_long;
    line.push_back(static_cast<char>(c));
  }
  return line.empty() ? LineRead::end : LineRead::line;
}

// The file's closes, whole.
Expected<std::vector<double>> closes_from_file(const FeedOptions& options) {
  SeriesSource source;
  source.data_path = options.data;
  source.column = options.column;
  auto loaded = load_series_source(source);
  if (!loaded) return std::unexpected(loaded.error());
  return std::move(loaded->close);
}

// Where in the file the append starts. --from says it; without it, after the bars the engine
// already holds when the file starts with exactly them (a replay of the preloaded file, or a
// feed that stopped and runs again). A file that starts otherwise is refused: appending it whole
// could put the preloaded bars in the series a second time, and a live series is never rewritten.
struct FeedStart {
  std::size_t index = 0;  // the file's first bar to append
  std::string refusal;    // set: nothing is appended; the message, with exit code `code`
  int code = kExitUsage;
  std::string note;       // set: said on stderr before appending
};

FeedStart feed_start(const FeedOptions& options, std::span<const double> file, std::span<const double> held) {
  if (options.from) {
    if (*options.from > file.size())
      return {0, fmt::format("--from {} is past the {} bars of {}", *options.from, file.size(), options.data),
              kExitInput, {}};
    return {*options.from, {}, kExitUsage, {}};
  }
  const std::size_t common = std::min(file.size(), held.size());
  const auto [at_file, at_held] = std::mismatch(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(common),
                                                held.begin(), [](double a, double b) {
                                                  return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b);
                                                });
  const auto differ = static_cast<std::size_t>(at_file - file.begin());
  if (differ < common)
    return {0,
            fmt::format("{} does not continue the series of engine {}: its bar {} is {} where the engine's is {} "
                        "(the engine holds {} bars, {} has {}); say --from N to append it from its bar N (--from 0: "
                        "all of it)",
                        options.data, options.name, differ, *at_file, *at_held, held.size(), options.data, file.size()),
            kExitUsage, {}};
  if (file.size() <= held.size())
    return {file.size(), {}, kExitUsage,
            fmt::format("all {} bars of {} are already the first bars of engine {}'s series ({} bars): nothing to "
                        "append",
                        file.size(), options.data, options.name, held.size())};
  return {held.size(), {}, kExitUsage,
          fmt::format("the first {} bars of {} are the bars engine {} holds; appending from its bar {}", held.size(),
                      options.data, options.name, held.size())};
}

// What a refusal in the middle of a feed adds: what was appended before it, and what the
// series holds now (the appended bars stay: a live series is never rewritten).
std::string appended_before(std::uint64_t appended, const ShmClient& client) {
  return fmt::format("{} bar{} appended before it; the series now holds {} bars", appended, appended == 1 ? "" : "s",
                     client.segment().published_series().size());
}

// --reconnect and --reconnect-limit-s, the same for feed and signals.
void add_reconnect_options(CLI::App& command, bool& reconnect, double& limit_s, const std::string& what) {
  auto* on = command.add_flag("--reconnect", reconnect, what);
  command.add_option("--reconnect-limit-s", limit_s, "with --reconnect: how long one outage may last before giving up")
      ->check(in_range(0.001, 86'400.0))
      ->capture_default_str()
      ->needs(on);
}

}  // namespace

CLI::App* add_feed_subcommand(CLI::App& app, FeedOptions& o) {
  auto* feed = app.add_subcommand("feed", "Append closes to a live engine's series (serve --live): from a file, "
                                          "replayed at a rate, or from stdin");
  feed->add_option("--name", o.name, "the live engine")->check(engine_name())->capture_default_str();
  feed->add_option("--data", o.data, "closes to append: .csv, .npy or .f64 (default: stdin, a CSV read line by "
                                     "line: a close per line, or a header and rows)")
      ->check(file_path());
  feed->add_option("--replay", o.data, "the same as --data; with --rate, a paced replay")->check(file_path());
  add_column_option(*feed, o.column);
  feed->add_option("--from", o.from,
                   "append the file from its bar N (default: after the bars the engine holds, when the file starts "
                   "with exactly them; otherwise the file is refused)")
      ->check(in_range<std::size_t>(0, 1'000'000'000));
  feed->add_option("--count", o.count, "append at most N bars")->check(in_range<std::size_t>(0, 1'000'000'000));
  feed->add_option("--rate", o.rate, "bars per second (0: as fast as the engine takes them)")
      ->check(in_range(0.0, 1e9))
      ->capture_default_str();
  feed->add_flag("--pace-to-subscribers", o.pace_to_subscribers,
                 "never outrun a subscriber: each bar waits until every subscription's signal fits its subscriber's "
                 "signal ring, so a replay loses no signal (a subscriber that stops reading stops the feed)");
  feed->add_flag("--quiet", o.quiet, "print nothing but errors");
  add_reconnect_options(*feed, o.reconnect, o.reconnect_limit_s,
                        "when the engine goes away, attach again to the engine that comes back and go on from the bar "
                        "after its last (a bar in flight is sent again only if it did not get in)");
  o.socket_dir = socket_dir_default();
  add_socket_dir_option(*feed, o.socket_dir);
  return feed;
}

namespace {

// Why the engine refused one append, in words.
std::string refusal_reason(Status judged, double close, const ShmClient& client) {
  switch (judged) {
    case Status::capacity_full:
      return fmt::format("the series is full at its {} bars (serve --capacity); nothing was overwritten",
                         client.segment().header().capacity_bars);
    case Status::not_the_writer: return "another client is the series' writer";
    case Status::bad_price: return fmt::format("close {} is not a finite number > 0", close);
    case Status::missing_column:
      return "the series has columns besides close (open, high, low or volume; `ipcfloor status` lists them) and an "
             "APPEND carries a close alone, so the series never grows: serve --live from a close-only file to append";
    case Status::journal_full:
      return "the engine's journal has no room on its disk for the bar's record, so the bar was not added (free space "
             "there, then feed again: it goes on from the engine's last bar)";
    case Status::journal_failed:
      return "the engine's journal could not write the bar's record, so the bar was not added (`ipcfloor status` says "
             "why)";
    default: return std::string(to_string(judged));
  }
}

// The next close: the file's, or stdin's next bar (header and blank lines skipped). nullopt at
// the end; an error names the line (the caller adds what was appended).
Expected<std::optional<double>> next_close(const std::vector<double>& closes, std::size_t& at, CsvBarStream* in) {
  if (in == nullptr) return at < closes.size() ? std::optional<double>(closes[at++]) : std::nullopt;
  std::string line;
  for (;;) {
    const LineRead got = read_line(std::cin, line);
    // A line cut short by Ctrl-C is not a close.
    if (got == LineRead::end || g_interrupted.load()) return std::optional<double>();
    if (got == LineRead::too_long)
      return fail(ErrorCode::bad_data, "standard input: line {} is longer than {} bytes: not a close price",
                  in->line() + 1, kMaxCloseLine);
    auto bar = in->take(line);
    if (!bar) return std::unexpected(std::move(bar.error()));
    if (*bar) return std::optional<double>((*bar)->close);
  }
}

// signals: each wait for a signal (between them it checks the drop counter and --idle-exit-s), and
// each SUBSCRIBE, which replays the bars so far (within the engine's cost bound per frame).
constexpr std::chrono::milliseconds kSignalWait{200};
constexpr std::chrono::seconds kSubscribeTimeout{60};

// A paced bar's pauses while its subscribers drain: doubling from the first to the last, so a
// subscriber a moment behind costs the feed microseconds and one that stopped costs no cpu.
constexpr std::chrono::microseconds kPaceFirstPause{20};
constexpr std::chrono::microseconds kPaceLastPause{1000};
constexpr std::chrono::seconds kPaceNoteEvery{5};

// One bar's APPEND. Paced (--pace-to-subscribers), it is asked again while the engine answers
// subscribers_behind, until the engine takes it, refuses it otherwise, or Ctrl-C; a note on
// stderr every kPaceNoteEvery names the lane that holds the replay back. `waited` adds the time
// spent waiting for subscribers.
CallStatus append_bar(ShmClient& client, const FeedOptions& options, double close, ResponseSlot& answer,
                      std::chrono::steady_clock::duration& waited) {
  const std::uint16_t flags = options.pace_to_subscribers ? kAppendPaced : 0;
  auto pause = kPaceFirstPause;
  std::optional<std::chrono::steady_clock::time_point> since;
  auto next_note = std::chrono::steady_clock::time_point::max();
  for (;;) {
    const CallStatus status = client.append(close, monotonic_ns(), answer, flags);
    if (status != CallStatus::ok || answer.status != static_cast<std::uint16_t>(Status::subscribers_behind) ||
        g_interrupted.load()) {
      if (since) waited += std::chrono::steady_clock::now() - *since;
      return status;
    }
    const auto now = std::chrono::steady_clock::now();
    if (!since) {
      since = now;
      next_note = now + kPaceNoteEvery;
    } else if (now >= next_note && !options.quiet) {
      const auto lane = static_cast<std::uint32_t>(answer.extra[0]);
      const int holder = lane < client.segment().lane_count() ? client.segment().lane_status(lane).owner_pid : 0;
      fmt::print(stderr, "ipcfloor feed: bar {} has waited {:.0f} s for lane {}'s subscriber (pid {}): {} of its "
                 "signals are unread and its {} subscriptions need room for one each; a paced feed never outruns its "
                 "subscribers (Ctrl-C stops it)\n",
                 answer.trades, std::chrono::duration<double>(now - *since).count(), lane, holder,
                 answer.extra[1], answer.extra[2]);
      next_note = now + kPaceNoteEvery;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, kPaceLastPause);
  }
}

}  // namespace

// Where a feed stands: the file's next bar (file mode), how the file's bars map onto the series,
// and what it appended.
struct FeedState {
  std::size_t next = 0;              // the file's next bar to append (file mode)
  std::int64_t offset = 0;           // a file bar's index in the series less its index in the file
  std::uint64_t held_at_start = 0;   // the bars the engine held when the feed attached
  std::uint64_t bars_now = 0;        // the bars the engine holds, as the feed last heard
  std::uint64_t appended = 0;        // bars this feed put into the series
  std::optional<double> resend;      // stdin: the bar in flight at a restart that did not get in
};

// The engine went away while the bar `close` (bar state.bars_now of the series) was in flight:
// re-attaches and decides where the feed goes on: from the bar after the engine's last, so that
// no bar is skipped or appended twice. -1 to go on, else the exit code (the error is printed).
int resume_feed(const FeedOptions& options, Reconnect& reconnect, ShmClient& client, std::span<const double> closes,
                bool from_stdin, double close, FeedState& state) {
  const CallStatus recovered = reconnect.recover(client, cli_interrupt());
  if (recovered == CallStatus::interrupted) return interrupted_exit();
  if (recovered != CallStatus::engine_restarted) {
    fmt::print(stderr, "ipcfloor feed: {}; {}\n", reconnect.note(), appended_before(state.appended, client));
    return kExitEngineGone;
  }
  if (!options.quiet) fmt::print(stderr, "ipcfloor feed: {}\n", reconnect.note());
  const std::span<const double> series = client.segment().published_series();
  const std::uint64_t bars = series.size();
  const std::uint64_t in_flight = state.bars_now;
  const auto same = [](double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); };
  if (from_stdin) {
    // Standard input cannot be read again: only the bar in flight can be sent once more.
    if (bars == in_flight + 1 && same(series[in_flight], close)) {
      ++state.appended;
    } else if (bars == in_flight) {
      state.resend = close;
    } else {
      fmt::print(stderr, "ipcfloor feed: engine {} came back with {} bars, but the bar in flight was bar {}: standard "
                 "input cannot be rewound to go on from there; {}\n", options.name, bars, in_flight,
                 appended_before(state.appended, client));
      return kExitFailure;
    }
    state.bars_now = bars;
    return -1;
  }
  const auto at = static_cast<std::int64_t>(bars) - state.offset;  // the file's bar that comes next
  if (at < 0 || static_cast<std::uint64_t>(at) > closes.size() ||
      (bars > 0 && at > 0 && !same(series[bars - 1], closes[static_cast<std::size_t>(at - 1)]))) {
    fmt::print(stderr, "ipcfloor feed: engine {} came back with {} bars, which {} does not continue to; {}\n",
               options.name, bars, options.data, appended_before(state.appended, client));
    return kExitFailure;
  }
  state.next = static_cast<std::size_t>(at);
  state.bars_now = bars;
  state.appended = bars > state.held_at_start ? bars - state.held_at_start : 0;
  return -1;
}

int run_feed_command(const FeedOptions& options) {
  std::vector<double> closes;
  if (!options.data.empty()) {
    auto loaded = closes_from_file(options);
    if (!loaded) return report_error("feed", loaded.error());
    closes = std::move(*loaded);
  }
  // An APPEND waits for its journal record to be durable: on a busy disk an fdatasync can take
  // seconds, and a live engine that is slow to sync is not a failure (a dead one is seen at once).
  constexpr auto kAppendPatience = std::chrono::seconds(30);
  const ShmClientOptions client_options = live_options(options.socket_dir, kAppendPatience);
  auto client = connect_live(options.name, options.socket_dir, kAppendPatience);
  if (!client) return report_error("feed", client.error());
  Reconnect reconnect(options.name, client_options, reconnect_policy(options.reconnect, options.reconnect_limit_s));
  FeedState state;
  state.held_at_start = state.bars_now = client->segment().published_series().size();
  if (!options.data.empty()) {
    const FeedStart start = feed_start(options, closes, client->segment().published_series());
    if (!start.refusal.empty())
      return start.code == kExitUsage ? usage_error("feed", start.refusal)
                                      : report_error("feed", Error{ErrorCode::invalid_argument, start.refusal});
    if (!start.note.empty() && !options.quiet) fmt::print(stderr, "ipcfloor feed: {}\n", start.note);
    state.next = start.index;
    state.offset = static_cast<std::int64_t>(state.held_at_start) - static_cast<std::int64_t>(start.index);
  }
  std::optional<CsvBarStream> stdin_rows;
  if (options.data.empty()) stdin_rows.emplace(options.column, "standard input");
  catch_interrupts();
  const std::uint64_t limit = options.count.value_or(~std::uint64_t{0});
  const auto began = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration waited{};  // paced: waiting for subscribers
  std::uint64_t sent = 0;  // appends answered ok, for the pace and --count
  while (state.appended < limit && !g_interrupted.load()) {
    const std::size_t index = state.next;
    double close = 0.0;
    if (state.resend) {
      close = *std::exchange(state.resend, std::nullopt);
    } else {
      auto got = next_close(closes, state.next, stdin_rows ? &*stdin_rows : nullptr);
      if (!got) {
        fmt::print(stderr, "ipcfloor feed: {}; {}\n", got.error().message, appended_before(state.appended, *client));
        return exit_code_for(got.error().code);
      }
      if (!*got) break;
      close = **got;
    }
    if (options.rate > 0 &&
        !pause_until(began + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                 std::chrono::duration<double>(static_cast<double>(sent) / options.rate))))
      break;  // a signal came during the pause: nothing more is appended
    ResponseSlot answer{};
    const CallStatus status = append_bar(*client, options, close, answer, waited);
    if (status == CallStatus::engine_gone && reconnect.enabled()) {
      if (const int code = resume_feed(options, reconnect, *client, closes, stdin_rows.has_value(), close, state);
          code >= 0)
        return code;
      continue;
    }
    if (status != CallStatus::ok) return engine_failure("feed", *client, status);
    const auto judged = static_cast<Status>(answer.status);
    if (judged == Status::subscribers_behind) break;  // Ctrl-C while the bar waited: not appended
    if (judged != Status::ok) {
      const std::string where = stdin_rows ? fmt::format("standard input line {}", stdin_rows->line())
                                           : fmt::format("bar {} of {}", index, options.data);
      fmt::print(stderr, "ipcfloor feed: engine {} refused {} ({}): {}; {}\n", options.name, where, to_string(judged),
                 refusal_reason(judged, close, *client), appended_before(state.appended, *client));
      return judged == Status::bad_price ? kExitInput : kExitFailure;
    }
    state.bars_now = static_cast<std::uint64_t>(answer.trades);
    ++state.appended;
    ++sent;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
  if (!options.quiet)
    fmt::print("appended {} bars in {:.3f} s ({:.0f} bars/s); the series now holds {} bars{}{}{}\n", state.appended,
               seconds, seconds > 0 ? static_cast<double>(state.appended) / seconds : 0.0, state.bars_now,
               reconnect.restarts() == 0 ? "" : fmt::format("; the engine restarted {} times", reconnect.restarts()),
               options.pace_to_subscribers
                   ? fmt::format("; paced to its subscribers, it waited {:.3f} s for them",
                                 std::chrono::duration<double>(waited).count())
                   : std::string(),
               g_interrupted.load() ? " (interrupted)" : "");
  return g_interrupted.load() ? interrupted_exit() : 0;
}

CLI::App* add_signals_subcommand(CLI::App& app, SignalsOptions& o) {
  auto* signals = app.add_subcommand("signals", "Subscribe combos on a live engine and print their per-bar signals");
  signals->add_option("--name", o.name, "the live engine")->check(engine_name())->capture_default_str();
  signals->add_option("--strategy", o.strategy, "a strategy the engine serves, by name (default: the built-in hma)")
      ->check(strategy_name());
  auto* lengths = signals->add_option("--lengths", o.lengths, "comma-separated lengths, e.g. 6,8 (the built-in strategy)")
      ->check(length_list());
  signals->add_option("--combos", o.combos,
                      "combos file, '-' for stdin: CSV whose header names the strategy's parameters (the built-in's: "
                      "h,L,s,p3,p2,p), or JSON lines")
      ->check(file_path())
      ->excludes(lengths);
  signals->add_flag("--json", o.json, "one JSON object per signal");
  signals->add_flag("--crossings-only", o.crossings_only, "print only bars where a combo crosses");
  signals->add_option("--count", o.count, "stop after this many signals")
      ->check(in_range<std::uint64_t>(1, ~std::uint64_t{0}));
  signals->add_option("--idle-exit-s", o.idle_exit_s, "stop after this long without a signal (0: never)")
      ->check(in_range(0.0, 31'536'000.0))
      ->capture_default_str();
  add_reconnect_options(*signals, o.reconnect, o.reconnect_limit_s,
                        "when the engine goes away, attach again to the engine that comes back, subscribe the combos "
                        "again and print its snapshot (each combo's first signal then says how many bars it missed)");
  o.socket_dir = socket_dir_default();
  add_socket_dir_option(*signals, o.socket_dir);
  return signals;
}

namespace {

// The columns a combo file names for strategy `entry` of the engine's table.
ComboColumns columns_of(const StrategyEntry& entry) noexcept {
  ComboColumns columns;
  columns.count = entry.param_count;
  for (std::size_t c = 0; c < columns.count; ++c) columns.names[c] = entry.param_names[c];
  return columns;
}

// The combos to subscribe on strategy `strategy`: a combo file's rows (every one must parse: a
// subscription is not a sweep, where a bad row is reported in place) or, on the built-in
// strategy, the lengths' combos.
// `input` is --combos as read before connecting (empty without --combos).
Expected<std::vector<Combo>> combos_to_subscribe(const SignalsOptions& options, std::optional<ComboInput>& input,
                                                 const StrategyEntry& entry, std::uint32_t strategy) {
  std::vector<Combo> combos;
  if (!options.lengths.empty() && strategy != 0)
    return fail(ErrorCode::invalid_argument, "--lengths builds combos of the built-in strategy; give strategy {}'s "
                "combos with --combos FILE", entry.name);
  if (input) {
    // The text moves into the parsed rows, which keep it (a bad row is read again from it).
    auto loaded = parse_combos(std::move(input->text), input->source, columns_of(entry), sizeof(Combo));
    if (!loaded) return std::unexpected(loaded.error());
    combos.reserve(loaded->size());
    for (std::size_t i = 0; i < loaded->size(); ++i) {
      const ComboLine line = (*loaded)[i];
      if (!line.error.empty())
        return fail(ErrorCode::bad_data, "{}: the row '{}' does not parse ({}); nothing was subscribed",
                    options.combos == "-" ? std::string("standard input") : options.combos, line.raw, line.error);
      combos.push_back(line.combo);
    }
  } else if (!options.lengths.empty()) {
    auto lengths = parse_lengths(options.lengths);
    if (!lengths) return std::unexpected(lengths.error());
    for (const std::int64_t length : *lengths) combos.push_back(combo_from_length(length));
  } else {
    return fail(ErrorCode::invalid_argument, "say which combos: --lengths 6,8 or --combos FILE");
  }
  return combos;
}

// Subscribes every combo on `strategy`; -1 when all were taken, else the exit code (the error is
// printed).
int subscribe_all(const SignalsOptions& options, ShmClient& client, const std::vector<Combo>& combos,
                  std::uint32_t strategy, Reconnect& reconnect) {
  for (std::size_t i = 0; i < combos.size(); ++i) {
    ResponseSlot answer{};
    const CallStatus status = client.subscribe(combos[i], answer, strategy);
    if (status != CallStatus::ok) return engine_failure("signals", client, status);
    const auto judged = static_cast<Status>(answer.status);
    if (judged != Status::ok) {
      fmt::print(stderr, "ipcfloor signals: engine {} refused combo {} [{}]: {}{}\n", options.name, i,
                 fmt::join(combos[i].as_array(), ","), to_string(judged),
                 judged == Status::no_live_step ? " (this strategy has no per-bar step: it cannot stream signals)" : "");
      return judged == Status::window_out_of_range || judged == Status::no_live_step ? kExitInput : kExitFailure;
    }
    reconnect.subscribed(combos[i], strategy, answer);
    // The answer counts the bars published (extra[1]); the state is the one after the last of
    // them, named like every bar: by its 0-based index, as the signals and the C ABI name it.
    const std::int64_t last_bar = answer.extra[1] - 1;
    if (!options.json)
      fmt::print(stderr, "subscribed combo {} [{}] as {} after bar {}: position {}, pnl {:.6f}, trades {}\n", i,
                 fmt::join(combos[i].as_array(), ","), answer.extra[0], last_bar, answer.extra[2], answer.pnl,
                 answer.trades);
  }
  std::fflush(stderr);
  return -1;
}

// Prints one signal; its two values are named as the strategy names them (`entry`).
// `missed`: with kSignalRestart, the bars the combo did not see as they happened.
void print_signal(const SignalsOptions& options, const StrategyEntry& entry, const Combo& combo,
                  const SignalSlot& signal, std::uint64_t missed) {
  const std::uint64_t now = monotonic_ns();
  const double tick_to_signal_us =
      signal.tick != 0 && now >= signal.tick ? static_cast<double>(now - signal.tick) / 1000.0 : 0.0;
  const auto value = [&signal](int k) {
    return std::isfinite(signal.value[k]) ? nlohmann::json(signal.value[k]) : nlohmann::json(nullptr);
  };
  if (options.json) {
    nlohmann::json line{{"bar", signal.bar},
                        {"combo", combo.as_array()},
                        {"subscription", signal.subscription},
                        {entry.value_names[0], value(0)},
                        {entry.value_names[1], value(1)},
                        {"cross", signal.cross},
                        {"position", signal.position},
                        {"pnl", signal.pnl},
                        {"trades", signal.trades},
                        {"gap", (signal.flags & kSignalGap) != 0},
                        {"snapshot", (signal.flags & kSignalSnapshot) != 0},
                        {"restart", (signal.flags & kSignalRestart) != 0},
                        {"missed", missed},
                        {"tick_to_signal_us", tick_to_signal_us}};
    fmt::print("{}\n", line.dump());
  } else {
    const char* cross = signal.cross > 0 ? "crosses up  " : signal.cross < 0 ? "crosses down" : "            ";
    const char* position = signal.position > 0 ? "long " : signal.position < 0 ? "short" : "flat ";
    fmt::print("bar {:>8} [{}] {} {} pnl {:>12.6f} trades {:>6}  {} {:.6f} {} {:.6f}  tick-to-signal {:.1f} us{}{}\n",
               signal.bar, fmt::join(std::span(param_data(combo), entry.param_count), ","), cross, position,
               signal.pnl, signal.trades, entry.value_names[0], signal.value[0], entry.value_names[1], signal.value[1],
               tick_to_signal_us, (signal.flags & kSignalSnapshot) != 0 ? "  (snapshot)" : "",
               (signal.flags & kSignalRestart) != 0 ? fmt::format("  (engine restarted: {} bars missed)", missed) : "");
  }
  std::fflush(stdout);
}

// The engine went away (status engine_gone): with --reconnect, re-attaches (the subscriptions
// renewed, a snapshot asked for) and says so. -1 to go on, else the exit code.
int engine_away(const SignalsOptions& options, ShmClient& client, Reconnect& reconnect, CallStatus status) {
  if (status != CallStatus::engine_gone || !reconnect.enabled()) return engine_failure("signals", client, status);
  const CallStatus recovered = reconnect.recover(client, cli_interrupt());
  if (recovered == CallStatus::interrupted) return interrupted_exit();
  if (recovered != CallStatus::engine_restarted) {
    fmt::print(stderr, "ipcfloor signals: {}\n", reconnect.note());
    return kExitEngineGone;
  }
  client.set_timeout(kSignalWait);  // the re-attach waited kSubscribeTimeout for its subscriptions
  if (!options.json) fmt::print(stderr, "ipcfloor signals: {}\n", reconnect.note());
  return -1;
}

// Asks for a snapshot after signals were dropped; -1 when it went out, else the exit code.
int resynchronise(const SignalsOptions& options, ShmClient& client, Reconnect& reconnect) {
  ResponseSlot answer{};
  if (const CallStatus asked = client.snapshot(answer); asked != CallStatus::ok)
    return engine_away(options, client, reconnect, asked);
  return -1;
}

// Prints signals until --count, --idle-exit-s or Ctrl-C; the last state of each combo goes to
// `latest`. -1 when it stopped as asked, else the exit code.
int print_signals(const SignalsOptions& options, ShmClient& client, const StrategyEntry& entry,
                  const std::vector<Combo>& combos, std::vector<std::optional<SignalSlot>>& latest,
                  Reconnect& reconnect) {
  std::uint64_t drops_known = client.signals_dropped();
  std::uint64_t printed = 0;
  auto last_signal = std::chrono::steady_clock::now();
  SignalSlot signal{};
  while (!g_interrupted.load() && (!options.count || printed < *options.count)) {
    const CallStatus status = client.wait_signal(signal);
    if (status == CallStatus::timeout) {
      // Frames lost at the end of a burst flag nothing (no later frame carries the gap): the
      // lane's counter tells.
      if (const std::uint64_t drops = client.signals_dropped(); drops > drops_known) {
        fmt::print(stderr, "ipcfloor signals: {} signals were dropped (this process fell behind); asking for a "
                   "snapshot\n", drops - drops_known);
        drops_known = drops;
        if (const int code = resynchronise(options, client, reconnect); code >= 0) return code;
        continue;
      }
      if (options.idle_exit_s > 0 &&
          std::chrono::steady_clock::now() - last_signal > std::chrono::duration<double>(options.idle_exit_s))
        break;
      continue;
    }
    if (status != CallStatus::ok) {
      if (const int code = engine_away(options, client, reconnect, status); code >= 0) return code;
      drops_known = client.signals_dropped();  // the new engine's lane: its own count
      continue;
    }
    last_signal = std::chrono::steady_clock::now();
    const std::uint64_t missed = reconnect.on_signal(signal);
    if ((signal.flags & kSignalGap) != 0) {
      // The lane's counter already holds these drops (the engine counts a drop when it happens).
      drops_known = std::max(drops_known, client.signals_dropped());
      fmt::print(stderr, "ipcfloor signals: {} signals were dropped before bar {} (this process fell behind); "
                 "asking for a snapshot\n", signal.dropped, signal.bar);
      if (const int code = resynchronise(options, client, reconnect); code >= 0) return code;
    }
    if (signal.subscription < latest.size()) latest[signal.subscription] = signal;
    if (options.crossings_only && signal.cross == 0 && (signal.flags & kSignalSnapshot) == 0) continue;
    print_signal(options, entry, combos[signal.subscription < combos.size() ? signal.subscription : 0], signal, missed);
    ++printed;
  }
  return -1;
}

}  // namespace

int run_signals_command(const SignalsOptions& options) {
  // A bad --combos path is bad input whether or not the engine is up: read it first.
  std::optional<ComboInput> input;
  if (!options.combos.empty()) {
    auto read = read_combo_input(options.combos);
    if (!read) return report_error("signals", read.error());
    input = std::move(*read);
  }
  // The attach and the subscriptions wait long; the signal loop waits short (kSignalWait).
  auto client = connect_live(options.name, options.socket_dir, kSubscribeTimeout);
  if (!client) return report_error("signals", client.error());
  const Attachment& segment = client->segment();
  const std::optional<std::uint32_t> strategy =
      options.strategy.empty() ? std::optional<std::uint32_t>(0) : segment.find_strategy(options.strategy);
  if (!strategy) return report_error("signals", unknown_strategy(options.name, options.strategy, segment));
  const StrategyEntry& entry = segment.strategy_at(*strategy);
  auto combos = combos_to_subscribe(options, input, entry, *strategy);
  if (!combos) return report_error("signals", combos.error());
  // A re-attach renews every subscription (each replays the bars so far): it waits as long as the
  // first ones did, and engine_away sets the signal loop's short wait again after it.
  Reconnect reconnect(options.name, live_options(options.socket_dir, kSubscribeTimeout),
                      reconnect_policy(options.reconnect, options.reconnect_limit_s));
  // A SUBSCRIBE replays the bars published so far, which on a long series takes longer than a
  // signal wait: a stopped engine is still told by its heartbeat (engine_hung), not by this bound.
  if (const int code = subscribe_all(options, *client, *combos, *strategy, reconnect); code >= 0) return code;
  client->set_timeout(kSignalWait);
  catch_interrupts();
  std::vector<std::optional<SignalSlot>> latest(combos->size());  // each combo's state as last heard
  if (const int code = print_signals(options, *client, entry, *combos, latest, reconnect); code >= 0) return code;
  if (!options.json) {
    for (std::size_t i = 0; i < combos->size(); ++i) {
      if (!latest[i]) continue;
      const SignalSlot& last = *latest[i];
      const Combo& combo = (*combos)[i];
      fmt::print("after bar {}: [{}] {} pnl {:.13f} trades {}\n", last.bar,
                 fmt::join(std::span(param_data(combo), entry.param_count), ","),
                 last.position > 0 ? "long" : last.position < 0 ? "short" : "flat", last.pnl, last.trades);
    }
  }
  return g_interrupted.load() ? interrupted_exit() : 0;
}

}  // namespace ipcfloor
