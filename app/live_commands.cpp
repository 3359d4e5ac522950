#include "app/live_commands.hpp"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "app/cli_common.hpp"
#include "clients/shm_client.hpp"
#include "common/exit_codes.hpp"
#include "kernel/combo_io.hpp"
#include "kernel/grid.hpp"
#include "kernel/kernel.hpp"
#include "kernel/series_source.hpp"
#include "shm/liveness.hpp"

namespace ipcfloor {
namespace {

std::atomic<bool> g_interrupted{false};

void on_interrupt(int) { g_interrupted.store(true); }  // seq_cst: a signal handler's flag

void catch_interrupts() {
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
}

Expected<ShmClient> connect_live(const std::string& name, const std::string& socket_dir,
                                 std::chrono::milliseconds timeout) {
  ShmClientOptions options;
  options.timeout = timeout;
  options.socket_dir = socket_dir;
  options.wait = WaitMode::backoff;  // a CLI process must not burn a core waiting for bars
  auto client = ShmClient::connect(name, options);
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

// The closes to append: the file's from `from` on, or stdin's lines.
Expected<std::vector<double>> closes_from_file(const FeedOptions& options) {
  SeriesSource source;
  source.data_path = options.data;
  auto loaded = load_series_source(source);
  if (!loaded) return std::unexpected(loaded.error());
  if (options.from > loaded->close.size())
    return fail(ErrorCode::invalid_argument, "--from {} is past the {} bars of {}", options.from, loaded->close.size(),
                options.data);
  return std::vector<double>(loaded->close.begin() + static_cast<std::ptrdiff_t>(options.from), loaded->close.end());
}

}  // namespace

CLI::App* add_feed_subcommand(CLI::App& app, FeedOptions& o) {
  auto* feed = app.add_subcommand("feed", "Append closes to a live engine's series (serve --live): from a file, "
                                          "replayed at a rate, or from stdin");
  feed->add_option("--name", o.name, "the live engine")->check(engine_name())->capture_default_str();
  feed->add_option("--data", o.data, "closes to append: .csv with a close column, .npy or .f64 (default: stdin, "
                                     "one close per line)")
      ->check(file_path());
  feed->add_option("--replay", o.data, "the same as --data; with --rate, a paced replay")->check(file_path());
  feed->add_option("--from", o.from, "skip the file's first N bars (those the engine preloaded)")
      ->check(in_range<std::size_t>(0, 1'000'000'000))
      ->capture_default_str();
  feed->add_option("--count", o.count, "append at most N bars")->check(in_range<std::size_t>(0, 1'000'000'000));
  feed->add_option("--rate", o.rate, "bars per second (0: as fast as the engine takes them)")
      ->check(in_range(0.0, 1e9))
      ->capture_default_str();
  feed->add_flag("--quiet", o.quiet, "print nothing but errors");
  o.socket_dir = socket_dir_default();
  add_socket_dir_option(*feed, o.socket_dir);
  return feed;
}

int run_feed_command(const FeedOptions& options) {
  std::vector<double> closes;
  if (!options.data.empty()) {
    auto loaded = closes_from_file(options);
    if (!loaded) return report_error("feed", loaded.error());
    closes = std::move(*loaded);
  }
  auto client = connect_live(options.name, options.socket_dir, std::chrono::milliseconds(2000));
  if (!client) return report_error("feed", client.error());
  catch_interrupts();
  const bool from_stdin = options.data.empty();
  const std::uint64_t limit = options.count.value_or(~std::uint64_t{0});
  const auto start = std::chrono::steady_clock::now();
  std::uint64_t appended = 0;
  std::uint64_t bars_now = 0;
  std::string line;
  std::size_t line_number = 0;
  while (appended < limit && !g_interrupted.load()) {
    double close = 0.0;
    if (from_stdin) {
      const LineRead got = read_line(std::cin, line);
      if (got == LineRead::end) break;
      ++line_number;
      if (got == LineRead::too_long)
        return report_error("feed", Error{ErrorCode::bad_data,
                                          fmt::format("stdin line {} is longer than {} bytes: not a close price",
                                                      line_number, kMaxCloseLine)});
      if (line.empty() || line[0] == '#') continue;
      try {
        std::size_t used = 0;
        close = std::stod(line, &used);
        if (line.find_first_not_of(" \t\r", used) != std::string::npos) throw std::invalid_argument(line);
      } catch (const std::exception&) {
        return report_error("feed", Error{ErrorCode::bad_data,
                                          fmt::format("stdin line {}: '{}' is not a close price", line_number, line)});
      }
    } else {
      if (appended >= closes.size()) break;
      close = closes[appended];
    }
    if (options.rate > 0) {
      std::this_thread::sleep_until(start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                std::chrono::duration<double>(static_cast<double>(appended) / options.rate)));
    }
    ResponseSlot answer{};
    const CallStatus status = client->append(close, monotonic_ns(), answer);
    if (status != CallStatus::ok) return engine_failure("feed", *client, status);
    const auto judged = static_cast<Status>(answer.status);
    if (judged != Status::ok) {
      const std::string where = from_stdin ? fmt::format("stdin line {}", line_number)
                                           : fmt::format("bar {} of {}", options.from + appended, options.data);
      const std::string why =
          judged == Status::capacity_full
              ? fmt::format("the series is full at its {} bars (serve --capacity); nothing was overwritten",
                            client->segment().header().capacity_bars)
          : judged == Status::not_the_writer ? std::string("another client is the series' writer")
          : judged == Status::bad_price      ? fmt::format("close {} is not a finite number > 0", close)
                                             : std::string(to_string(judged));
      fmt::print(stderr, "ipcfloor feed: engine {} refused {} ({}): {}; {} bars appended before it\n", options.name,
                 where, to_string(judged), why, appended);
      return judged == Status::bad_price ? kExitInput : kExitFailure;
    }
    bars_now = static_cast<std::uint64_t>(answer.trades);
    ++appended;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!options.quiet)
    fmt::print("appended {} bars in {:.3f} s ({:.0f} bars/s); the series now holds {} bars\n", appended, seconds,
               seconds > 0 ? static_cast<double>(appended) / seconds : 0.0, bars_now);
  return 0;
}

CLI::App* add_signals_subcommand(CLI::App& app, SignalsOptions& o) {
  auto* signals = app.add_subcommand("signals", "Subscribe combos on a live engine and print their per-bar signals");
  signals->add_option("--name", o.name, "the live engine")->check(engine_name())->capture_default_str();
  auto* lengths = signals->add_option("--lengths", o.lengths, "comma-separated lengths, e.g. 6,8")->check(length_list());
  signals->add_option("--combos", o.combos, "combos file, '-' for stdin: CSV with header h,L,s,p3,p2,p, or JSON lines")
      ->check(file_path())
      ->excludes(lengths);
  signals->add_flag("--json", o.json, "one JSON object per signal");
  signals->add_flag("--crossings-only", o.crossings_only, "print only bars where a combo crosses");
  signals->add_option("--count", o.count, "stop after this many signals")
      ->check(in_range<std::uint64_t>(1, ~std::uint64_t{0}));
  signals->add_option("--idle-exit-s", o.idle_exit_s, "stop after this long without a signal (0: never)")
      ->check(in_range(0.0, 31'536'000.0))
      ->capture_default_str();
  o.socket_dir = socket_dir_default();
  add_socket_dir_option(*signals, o.socket_dir);
  return signals;
}

namespace {

// The combos to subscribe: a combo file's rows (every one must parse: a subscription is not a
// sweep, where a bad row is reported in place) or the lengths' combos.
Expected<std::vector<Combo>> combos_to_subscribe(const SignalsOptions& options) {
  std::vector<Combo> combos;
  if (!options.combos.empty()) {
    auto loaded = load_combos(options.combos);
    if (!loaded) return std::unexpected(loaded.error());
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

// Subscribes every combo; -1 when all were taken, else the exit code (the error is printed).
int subscribe_all(const SignalsOptions& options, ShmClient& client, const std::vector<Combo>& combos) {
  for (std::size_t i = 0; i < combos.size(); ++i) {
    ResponseSlot answer{};
    const CallStatus status = client.subscribe(combos[i], answer);
    if (status != CallStatus::ok) return engine_failure("signals", client, status);
    const auto judged = static_cast<Status>(answer.status);
    if (judged != Status::ok) {
      fmt::print(stderr, "ipcfloor signals: engine {} refused combo {} [{}]: {}\n", options.name, i,
                 fmt::join(combos[i].as_array(), ","), to_string(judged));
      return judged == Status::window_out_of_range ? kExitInput : kExitFailure;
    }
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

void print_signal(const SignalsOptions& options, const Combo& combo, const SignalSlot& signal) {
  const std::uint64_t now = monotonic_ns();
  const double tick_to_signal_us =
      signal.tick != 0 && now >= signal.tick ? static_cast<double>(now - signal.tick) / 1000.0 : 0.0;
  if (options.json) {
    nlohmann::json line{{"bar", signal.bar},
                        {"combo", combo.as_array()},
                        {"subscription", signal.subscription},
                        {"hma", std::isfinite(signal.hma) ? nlohmann::json(signal.hma) : nlohmann::json(nullptr)},
                        {"hma3", std::isfinite(signal.hma3) ? nlohmann::json(signal.hma3) : nlohmann::json(nullptr)},
                        {"cross", signal.cross},
                        {"position", signal.position},
                        {"pnl", signal.pnl},
                        {"trades", signal.trades},
                        {"gap", (signal.flags & kSignalGap) != 0},
                        {"snapshot", (signal.flags & kSignalSnapshot) != 0},
                        {"tick_to_signal_us", tick_to_signal_us}};
    fmt::print("{}\n", line.dump());
  } else {
    const char* cross = signal.cross > 0 ? "crosses up  " : signal.cross < 0 ? "crosses down" : "            ";
    const char* position = signal.position > 0 ? "long " : signal.position < 0 ? "short" : "flat ";
    fmt::print("bar {:>8} L={:<4} {} {} pnl {:>12.6f} trades {:>6}  hma {:.6f} hma3 {:.6f}  tick-to-signal {:.1f} us{}\n",
               signal.bar, combo.L, cross, position, signal.pnl, signal.trades, signal.hma, signal.hma3,
               tick_to_signal_us, (signal.flags & kSignalSnapshot) != 0 ? "  (snapshot)" : "");
  }
  std::fflush(stdout);
}

// Asks for a snapshot after signals were dropped; -1 when it went out, else the exit code.
int resynchronise(ShmClient& client) {
  ResponseSlot answer{};
  if (const CallStatus asked = client.snapshot(answer); asked != CallStatus::ok)
    return engine_failure("signals", client, asked);
  return -1;
}

// Prints signals until --count, --idle-exit-s or Ctrl-C; the last state of each combo goes to
// `latest`. -1 when it stopped as asked, else the exit code.
int print_signals(const SignalsOptions& options, ShmClient& client, const std::vector<Combo>& combos,
                  std::vector<std::optional<SignalSlot>>& latest) {
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
        if (const int code = resynchronise(client); code >= 0) return code;
        continue;
      }
      if (options.idle_exit_s > 0 &&
          std::chrono::steady_clock::now() - last_signal > std::chrono::duration<double>(options.idle_exit_s))
        break;
      continue;
    }
    if (status != CallStatus::ok) return engine_failure("signals", client, status);
    last_signal = std::chrono::steady_clock::now();
    if ((signal.flags & kSignalGap) != 0) {
      // The lane's counter already holds these drops (the engine counts a drop when it happens).
      drops_known = std::max(drops_known, client.signals_dropped());
      fmt::print(stderr, "ipcfloor signals: {} signals were dropped before bar {} (this process fell behind); "
                 "asking for a snapshot\n", signal.dropped, signal.bar);
      if (const int code = resynchronise(client); code >= 0) return code;
    }
    if (signal.subscription < latest.size()) latest[signal.subscription] = signal;
    if (options.crossings_only && signal.cross == 0 && (signal.flags & kSignalSnapshot) == 0) continue;
    print_signal(options, combos[signal.subscription < combos.size() ? signal.subscription : 0], signal);
    ++printed;
  }
  return -1;
}

}  // namespace

int run_signals_command(const SignalsOptions& options) {
  auto combos = combos_to_subscribe(options);
  if (!combos) return report_error("signals", combos.error());
  // Short waits: the loop looks at the lane's drop counter and the idle limit between them.
  auto client = connect_live(options.name, options.socket_dir, std::chrono::milliseconds(200));
  if (!client) return report_error("signals", client.error());
  if (const int code = subscribe_all(options, *client, *combos); code >= 0) return code;
  catch_interrupts();
  std::vector<std::optional<SignalSlot>> latest(combos->size());  // each combo's state as last heard
  if (const int code = print_signals(options, *client, *combos, latest); code >= 0) return code;
  if (!options.json) {
    for (std::size_t i = 0; i < combos->size(); ++i) {
      if (!latest[i]) continue;
      const SignalSlot& last = *latest[i];
      const Combo& combo = (*combos)[i];
      fmt::print("after bar {}: L={} [{}] {} pnl {:.13f} trades {}\n", last.bar, combo.L, fmt::join(combo.as_array(), ","),
                 last.position > 0 ? "long" : last.position < 0 ? "short" : "flat", last.pnl, last.trades);
    }
  }
  return 0;
}

}  // namespace ipcfloor
