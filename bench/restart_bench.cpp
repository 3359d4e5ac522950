#include "bench/restart_bench.hpp"

#include <signal.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "bench/latency.hpp"
#include "bench/suite_common.hpp"
#include "bench/transports.hpp"
#include "clients/pipelined_sweep.hpp"
#include "clients/reconnect.hpp"
#include "clients/shm_client.hpp"
#include "common/affinity.hpp"
#include "common/checksum.hpp"
#include "common/tsc_clock.hpp"
#include "engine/bar_journal.hpp"
#include "engine/journal_writer.hpp"
#include "data/gbm.hpp"
#include "data/series_io.hpp"

namespace ipcfloor {
namespace {

using Clock = std::chrono::steady_clock;

// The crash runs' preload: small, so that a restart is mostly its journal's replay.
constexpr std::size_t kCrashPreload = 10'000;
// Bars a crash run may append in all (its source and the room it gives the engine).
constexpr std::size_t kCrashSource = 1'500'000;

double ns_between(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::nano>(to - from).count();
}

std::vector<double> gbm(std::size_t bars, std::uint64_t seed) {
  GbmParams params;
  params.bars = bars;
  params.seed = seed;
  return generate_gbm(params).value_or(std::vector<double>{});
}

bool same_bars(std::span<const double> a, std::span<const double> b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](double x, double y) {
           return std::bit_cast<std::uint64_t>(x) == std::bit_cast<std::uint64_t>(y);
         });
}

// The file system type of the mount that holds `path` (/proc/mounts, the longest prefix).
std::string filesystem_of(const std::string& path) {
  std::ifstream mounts("/proc/mounts");
  std::string device, point, type, rest, best_type = "unknown";
  std::size_t best = 0;
  const std::string full = std::filesystem::weakly_canonical(path).string();
  while (mounts >> device >> point >> type && std::getline(mounts, rest)) {
    if (full.rfind(point, 0) == 0 && point.size() >= best) {
      best = point.size();
      best_type = type + " (" + device + ")";
    }
  }
  return best_type;
}

// The engine's bars at its start as an observer sees them: the preloaded and the replayed ones.
Expected<std::vector<double>> published_now(const std::string& name) {
  AttachOptions observer;
  observer.role = HandoffRole::observer;
  auto segment = Attachment::attach(name, observer);
  if (!segment) return std::unexpected(segment.error());
  const auto bars = segment->published_series();
  return std::vector<double>(bars.begin(), bars.end());
}

// ---- append ------------------------------------------------------------------------------

Expected<nlohmann::json> append_run(const RestartBenchOptions& options, const SuitePlacement& where,
                                    const TscClock& clock, const std::string& policy, const std::string& dir) {
  constexpr std::size_t kPreload = 20'000;
  const std::size_t timed = options.append_warmup + options.append_samples;
  const std::vector<double> close = gbm(timed + options.pipelined_bars + 1, 9);
  std::vector<std::string> args{"--bars", std::to_string(kPreload), "--live", "--capacity",
                                std::to_string(kPreload + close.size()), "--wait", "spin", "--workers", "0", "--cpu",
                                std::to_string(where.server_cpu), "--hugepages", "off", "--ring-capacity", "64"};
  if (!policy.empty()) args.insert(args.end(), {"--journal", dir, "--fsync", policy});
  unpin_current_thread();  // the engine inherits this mask
  EngineChild engine(where.binary, unique_segment_name("bench-restart-append"), args);
  if (!engine.up()) return fail(ErrorCode::io, "the live engine ({}) did not come up", policy.empty() ? "no journal" : policy);
  if (auto pinned = pin_current_thread(where.client_cpu); !pinned) return std::unexpected(pinned.error());
  ShmClientOptions client_options;
  client_options.wait = WaitMode::spin;
  client_options.timeout = std::chrono::seconds(30);
  auto writer = ShmClient::connect(engine.name(), client_options);
  if (!writer) return std::unexpected(writer.error());
  std::vector<double> ns;
  ns.reserve(options.append_samples);
  for (std::size_t i = 0; i < timed; ++i) {
    ResponseSlot answer{};
    const std::uint64_t t0 = TscClock::now();
    const CallStatus status = writer->append(close[i], t0, answer);
    const std::uint64_t t1 = TscClock::now();
    if (status != CallStatus::ok) return fail(ErrorCode::io, "append: {}", writer->describe(status));
    if (answer.status != 0 || answer.trades != static_cast<std::int64_t>(kPreload + i + 1))
      return fail(ErrorCode::io, "append {} answered {} with {} bars", i, to_string(static_cast<Status>(answer.status)),
                  answer.trades);
    if (i >= options.append_warmup) ns.push_back(clock.to_ns(t1 - t0));
  }
  // Back to back through the ring (64 slots): a journal's writer takes what is in flight in one
  // write and one fdatasync.
  Combo payload{};
  Status refused = Status::ok;
  const std::uint64_t start = TscClock::now();
  const SweepEnd end = pipelined_sweep(
      *writer, options.pipelined_bars,
      [&](std::size_t i) {
        payload = LiveAppend{close[timed + i], 0, {}}.as_params();
        return SweepRequest{Opcode::append, 0, payload_of(payload)};
      },
      [&](std::size_t, const ResponseSlot& answer) {
        if (refused == Status::ok) refused = static_cast<Status>(answer.status);
      });
  const double seconds = clock.to_ns(TscClock::now() - start) / 1e9;
  if (end.status != CallStatus::ok) return fail(ErrorCode::io, "append: {}", writer->describe(end.status));
  if (refused != Status::ok) return fail(ErrorCode::io, "append refused: {}", to_string(refused));
  const std::string label = policy.empty() ? "no-journal" : policy;
  return nlohmann::json{{"policy", label},
                        {"rtt", to_json(summarize("append-" + label, "rtt", ns, clock.step_ns()))},
                        {"pipelined", {{"bars", options.pipelined_bars},
                                       {"seconds", seconds},
                                       {"bars_per_s", static_cast<double>(options.pipelined_bars) / seconds},
                                       {"ring_capacity", 64}}}};
}

// ---- restart gap -------------------------------------------------------------------------

// A journal of `bars` bars after `base`, written as an engine's writer writes it.
Expected<void> write_journal(const std::string& dir, std::span<const double> base, std::size_t bars, std::size_t room) {
  const JournalBase journal_base{base.size(), fnv1a64(std::as_bytes(base)), "default", "gbm"};
  auto journal = BarJournal::open({dir, journal_base, room});
  if (!journal) return std::unexpected(journal.error());
  DataHeader header{};
  JournalWriterConfig config;
  config.sync = {FsyncPolicy::none, {}};
  config.wait = WaitMode::backoff;
  auto writer = JournalWriter::start(std::move(*journal), config, header);
  if (!writer) return std::unexpected(writer.error());
  const std::vector<double> close = gbm(bars, 43);
  std::size_t sent = 0, back = 0;
  JournalOutcome outcome{};
  while (back < bars) {
    while (sent < bars && (*writer)->has_room()) {
      (*writer)->submit(base.size() + sent, close[sent], 0);
      ++sent;
    }
    while ((*writer)->take_finished(outcome)) {
      if (outcome != JournalOutcome::durable) return fail(ErrorCode::io, "writing the journal failed at bar {}", back);
      ++back;
    }
    std::this_thread::yield();
  }
  (*writer)->stop();
  return {};
}

// The subscriber whose wait is cut by each SIGKILL: it waits for signals (none come), finds its
// engine gone within a heartbeat, re-attaches and asks again; each first answer after a kill is
// stamped for the main thread.
struct GapClient {
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> answered_ns{0};  // steady clock of the last first-answer-after-restart
  std::atomic<int> restarts{0};
  std::string error;  // set by the client thread before it ends
};

void gap_client(const std::string& name, GapClient& shared) {
  ShmClientOptions options;
  options.wait = WaitMode::backoff;
  options.timeout = std::chrono::seconds(60);
  auto client = ShmClient::connect(name, options);
  if (!client) {
    shared.error = client.error().message;
    return;
  }
  Reconnect reconnect(name, options, {true, std::chrono::seconds(60)});
  const Combo nothing{};
  // relaxed: a plain flag.
  while (!shared.stop.load(std::memory_order_relaxed)) {
    SignalSlot signal{};
    const CallStatus waited = client->wait_signal(signal);
    if (waited == CallStatus::timeout || waited == CallStatus::ok) continue;
    if (waited != CallStatus::engine_gone || reconnect.recover(*client) != CallStatus::engine_restarted) {
      shared.error = fmt::format("{}: {}", client->describe(waited), reconnect.note());
      return;
    }
    if (client->call(Opcode::echo, 0, payload_of(nothing)) != CallStatus::ok) {
      shared.error = "the engine that came back did not answer an ECHO";
      return;
    }
    // release: pairs with the acquire load in restart_gap_run.
    shared.answered_ns.store(Clock::now().time_since_epoch().count(), std::memory_order_release);
    shared.restarts.fetch_add(1, std::memory_order_release);
  }
}

Expected<nlohmann::json> restart_gap_run(const RestartBenchOptions& options, const SuitePlacement& where,
                                         const std::string& dir) {
  const std::vector<double> base = gbm(options.preload_bars, 42);
  const std::size_t capacity = options.preload_bars + options.journal_bars + 1'000;
  if (auto written = write_journal(dir, base, options.journal_bars, capacity - base.size()); !written)
    return std::unexpected(written.error());
  const std::vector<std::string> args{"--bars", std::to_string(options.preload_bars), "--seed", "42", "--live",
                                      "--capacity", std::to_string(capacity), "--journal", dir, "--wait", "backoff",
                                      "--workers", "0", "--hugepages", "off", "--heartbeat-ms", "10", "--cpu",
                                      std::to_string(where.server_cpu)};
  const std::string name = unique_segment_name("bench-restart-gap");
  unpin_current_thread();
  auto engine = std::make_unique<EngineChild>(where.binary, name, args, std::chrono::seconds(60));
  if (!engine->up()) return fail(ErrorCode::io, "the engine with a {}-bar journal did not come up", options.journal_bars);
  GapClient shared;
  std::thread client([&] {
    (void)pin_current_thread(where.client_cpu);
    gap_client(name, shared);
  });
  std::vector<double> gap_ns, up_ns;
  std::string failure;
  for (std::size_t r = 0; r < options.restarts && failure.empty(); ++r) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the client waits in wait_signal
    const int before = shared.restarts.load(std::memory_order_acquire);  // acquire: as below
    const auto killed = Clock::now();
    (void)engine->stop(SIGKILL);
    engine = std::make_unique<EngineChild>(where.binary, name, args, std::chrono::seconds(60));
    const auto up = Clock::now();
    if (!engine->up()) {
      failure = fmt::format("restart {}: the engine did not come up", r);
      break;
    }
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    // acquire: pairs with the client thread's release stores.
    while (shared.restarts.load(std::memory_order_acquire) == before && shared.error.empty() && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    if (shared.restarts.load(std::memory_order_acquire) == before) {
      failure = fmt::format("restart {}: the client did not come back: {}", r, shared.error);
      break;
    }
    const Clock::time_point answered{Clock::duration(shared.answered_ns.load(std::memory_order_acquire))};
    gap_ns.push_back(ns_between(killed, answered));
    up_ns.push_back(ns_between(killed, up));
    if (r == 0) {
      auto bars = published_now(name);
      if (!bars || bars->size() != options.preload_bars + options.journal_bars)
        failure = "the engine that came back does not hold the preload and the whole journal";
    }
  }
  shared.stop.store(true, std::memory_order_relaxed);  // relaxed: a plain flag
  client.join();
  if (!failure.empty()) return fail(ErrorCode::io, "{}", failure);
  return nlohmann::json{{"restarts", gap_ns.size()},
                        {"preload_bars", options.preload_bars},
                        {"journal_bars", options.journal_bars},
                        {"journal_bytes", std::filesystem::file_size(dir + "/" + kJournalFileName)},
                        {"gap", to_json(summarize("restart-gap", "gap", gap_ns))},
                        {"engine_up", to_json(summarize("engine-up", "gap", up_ns))}};
}

// ---- crash -------------------------------------------------------------------------------

// The writer of a crash run: appends the source's bars as fast as the engine takes them, and after
// each restart goes on from the bar after the engine's last, as `feed --reconnect` does.
struct CrashFeeder {
  std::span<const double> source;
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> acknowledged{-1};  // the last bar answered ok (its index)
  std::string error;
};

void crash_feed(const std::string& name, CrashFeeder& feed) {
  ShmClientOptions options;
  options.wait = WaitMode::backoff;
  options.timeout = std::chrono::seconds(30);
  auto client = ShmClient::connect(name, options);
  if (!client) {
    feed.error = client.error().message;
    return;
  }
  Reconnect reconnect(name, options, {true, std::chrono::seconds(60)});
  std::size_t next = client->segment().published_series().size();
  // relaxed: a plain flag.
  while (!feed.stop.load(std::memory_order_relaxed) && next < feed.source.size()) {
    ResponseSlot answer{};
    const CallStatus status = client->append(feed.source[next], 0, answer);
    if (status == CallStatus::ok && answer.status == 0 && answer.trades == static_cast<std::int64_t>(next + 1)) {
      // release: pairs with the acquire load in crash_run.
      feed.acknowledged.store(static_cast<std::int64_t>(next), std::memory_order_release);
      ++next;
      continue;
    }
    if (status != CallStatus::engine_gone) {
      feed.error = status == CallStatus::ok ? fmt::format("bar {} answered {} with {} bars", next,
                                                          to_string(static_cast<Status>(answer.status)), answer.trades)
                                            : client->describe(status);
      return;
    }
    if (reconnect.recover(*client) != CallStatus::engine_restarted) {
      feed.error = reconnect.note();
      return;
    }
    next = client->segment().published_series().size();  // the bar after the engine's last
  }
}

// One restart of a crash run: the bars the new engine holds at its start must be the source's, and
// every bar acknowledged before the kill among them. Returns the acknowledged bars it lacks.
Expected<std::uint64_t> check_restart(const std::string& name, std::span<const double> source,
                                      std::int64_t acknowledged) {
  auto bars = published_now(name);
  if (!bars) return std::unexpected(bars.error());
  if (bars->size() > source.size() || !same_bars(*bars, source.first(bars->size())))
    return fail(ErrorCode::bad_data, "the engine came back with {} bars that are not the source's first ones (a bar "
                "doubled, lost in the middle or changed)", bars->size());
  const auto needed = static_cast<std::uint64_t>(acknowledged + 1);
  return needed > bars->size() ? needed - bars->size() : 0;
}

Expected<nlohmann::json> crash_run(const RestartBenchOptions& options, const SuitePlacement& where,
                                   const std::string& policy, const std::string& dir) {
  const std::vector<double> source = gbm(kCrashPreload + kCrashSource, 44);
  const std::string preload = dir + "/preload.f64";
  std::filesystem::create_directories(dir);
  if (auto saved = save_series(preload, std::span(source).first(kCrashPreload)); !saved)
    return std::unexpected(saved.error());
  const std::vector<std::string> args{"--data", preload, "--live", "--capacity", std::to_string(source.size()),
                                      "--journal", dir + "/journal", "--fsync", policy, "--wait", "backoff",
                                      "--workers", "0", "--hugepages", "off", "--heartbeat-ms", "10", "--cpu",
                                      std::to_string(where.server_cpu)};
  const std::string name = unique_segment_name("bench-restart-crash");
  unpin_current_thread();
  auto engine = std::make_unique<EngineChild>(where.binary, name, args, std::chrono::seconds(60));
  if (!engine->up()) return fail(ErrorCode::io, "the crash run's engine ({}) did not come up", policy);
  CrashFeeder feed;
  feed.source = source;
  std::thread feeder([&] {
    (void)pin_current_thread(where.client_cpu);
    crash_feed(name, feed);
  });
  std::mt19937_64 rng(0x5eed + options.kills);
  std::uniform_int_distribution<int> pause_ms(5, 95);
  std::uint64_t lost = 0, kills_with_loss = 0, lost_max = 0;
  std::vector<double> restart_ns;
  std::string failure;
  for (std::size_t k = 0; k < options.kills && failure.empty() && feed.error.empty(); ++k) {
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms(rng)));
    const auto killed = Clock::now();
    (void)engine->stop(SIGKILL);
    // acquire: every answer the engine gave before it died is counted (it gives none after).
    const std::int64_t acknowledged = feed.acknowledged.load(std::memory_order_acquire);
    engine = std::make_unique<EngineChild>(where.binary, name, args, std::chrono::seconds(60));
    if (!engine->up()) {
      failure = fmt::format("kill {}: the engine did not come back", k);
      break;
    }
    restart_ns.push_back(ns_between(killed, Clock::now()));
    auto missing = check_restart(name, source, acknowledged);
    if (!missing) {
      failure = fmt::format("kill {}: {}", k, missing.error().message);
      break;
    }
    lost += *missing;
    lost_max = std::max(lost_max, *missing);
    if (*missing != 0) ++kills_with_loss;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  feed.stop.store(true, std::memory_order_relaxed);  // relaxed: a plain flag
  feeder.join();
  if (!failure.empty()) return fail(ErrorCode::bad_data, "fsync {}: {}", policy, failure);
  if (!feed.error.empty()) return fail(ErrorCode::io, "fsync {}: the writer stopped: {}", policy, feed.error);
  auto final_bars = published_now(name);
  if (!final_bars) return std::unexpected(final_bars.error());
  const std::int64_t acknowledged = feed.acknowledged.load(std::memory_order_acquire);  // acquire: as above
  const bool matches = same_bars(*final_bars, std::span(source).first(final_bars->size())) &&
                       final_bars->size() >= static_cast<std::size_t>(acknowledged + 1);
  return nlohmann::json{{"policy", policy},
                        {"kills", restart_ns.size()},
                        {"bars_appended", final_bars->size() - kCrashPreload},
                        {"acknowledged", acknowledged + 1 - static_cast<std::int64_t>(kCrashPreload)},
                        {"acknowledged_lost", lost},
                        {"kills_with_loss", kills_with_loss},
                        {"lost_at_one_kill_max", lost_max},
                        {"series_is_the_source", matches},
                        {"restart", to_json(summarize("crash-restart-" + policy, "gap", restart_ns))}};
}

std::string journal_root(const std::string& given) {
  if (!given.empty()) {
    std::filesystem::create_directories(given);
    return given;
  }
  char folder[] = "/var/tmp/ipcfloor-restart-XXXXXX";
  return ::mkdtemp(folder) != nullptr ? std::string(folder) : std::string();
}

}  // namespace

Expected<nlohmann::json> run_restart_bench(const RestartBenchOptions& options) {
  const SuitePlacement where = place_suite(options.client_cpu, options.server_cpu, options.binary);
  const TscClock clock = TscClock::calibrate();
  const std::string root = journal_root(options.journal_dir);
  if (root.empty()) return fail(ErrorCode::io, "cannot make a folder for the journals under /var/tmp");
  struct Cleanup {
    std::string root;
    bool made;
    ~Cleanup() {
      if (made) std::filesystem::remove_all(root);
    }
  } cleanup{root, options.journal_dir.empty()};
  nlohmann::json report{{"journal_dir", root}, {"filesystem", filesystem_of(root)},
                        {"client_cpu", where.client_cpu}, {"server_cpu", where.server_cpu}};
  nlohmann::json appends = nlohmann::json::array();
  std::vector<std::string> policies{""};
  policies.insert(policies.end(), options.policies.begin(), options.policies.end());
  for (std::size_t i = 0; i < policies.size(); ++i) {
    auto run = append_run(options, where, clock, policies[i], fmt::format("{}/append-{}", root, i));
    if (!run) return std::unexpected(run.error());
    appends.push_back(std::move(*run));
  }
  report["append"] = std::move(appends);
  auto gap = restart_gap_run(options, where, root + "/gap");
  if (!gap) return std::unexpected(gap.error());
  report["restart_gap"] = std::move(*gap);
  nlohmann::json crashes = nlohmann::json::array();
  for (std::size_t i = 0; i < options.policies.size(); ++i) {
    auto run = crash_run(options, where, options.policies[i], fmt::format("{}/crash-{}", root, i));
    if (!run) return std::unexpected(run.error());
    crashes.push_back(std::move(*run));
  }
  report["crash"] = std::move(crashes);
  unpin_current_thread();
  return report;
}

void print_restart_bench(const nlohmann::json& report) {
  fmt::print("restart: journals in {} ({}); client cpu {}, serving cpu {}\n",
             report["journal_dir"].get<std::string>(), report["filesystem"].get<std::string>(),
             report["client_cpu"].get<int>(), report["server_cpu"].get<int>());
  fmt::print("  APPEND RTT (blocking, ns) and back-to-back rate (ring of 64)\n");
  fmt::print("  {:<14} {:>10} {:>10} {:>10} {:>10} {:>14}\n", "fsync", "p50", "p90", "p99", "p99.9", "bars/s");
  for (const auto& run : report["append"]) {
    const auto& rtt = run["rtt"];
    fmt::print("  {:<14} {:>10.0f} {:>10.0f} {:>10.0f} {:>10.0f} {:>14.0f}\n", run["policy"].get<std::string>(),
               rtt["p50"].get<double>(), rtt["p90"].get<double>(), rtt["p99"].get<double>(),
               rtt["p999"].get<double>(), run["pipelined"]["bars_per_s"].get<double>());
  }
  const auto& gap = report["restart_gap"];
  fmt::print("  restart gap, SIGKILL -> a re-attached client's first answer ({} restarts; {} preloaded bars, a "
             "journal of {} bars): p50 {:.1f} ms, p99 {:.1f} ms, max {:.1f} ms; engine up p50 {:.1f} ms\n",
             gap["restarts"].get<std::size_t>(), gap["preload_bars"].get<std::size_t>(),
             gap["journal_bars"].get<std::size_t>(), gap["gap"]["p50"].get<double>() / 1e6,
             gap["gap"]["p99"].get<double>() / 1e6, gap["gap"]["max"].get<double>() / 1e6,
             gap["engine_up"]["p50"].get<double>() / 1e6);
  for (const auto& run : report["crash"])
    fmt::print("  crash, fsync {:<12}: {} SIGKILLs while appending; {} bars appended, {} acknowledged; acknowledged "
               "bars lost {} (at most {} at one kill); series is the source, no gap or duplicate: {}\n",
               run["policy"].get<std::string>(), run["kills"].get<std::size_t>(),
               run["bars_appended"].get<std::size_t>(), run["acknowledged"].get<std::int64_t>(),
               run["acknowledged_lost"].get<std::uint64_t>(), run["lost_at_one_kill_max"].get<std::uint64_t>(),
               run["series_is_the_source"].get<bool>() ? "yes" : "NO");
}

}  // namespace ipcfloor
