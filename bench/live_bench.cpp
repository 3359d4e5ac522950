#include "bench/live_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <span>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "bench/latency.hpp"
#include "bench/suite_common.hpp"
#include "bench/transports.hpp"
#include "clients/pipelined_sweep.hpp"
#include "clients/shm_client.hpp"
#include "common/affinity.hpp"
#include "common/tsc_clock.hpp"
#include "data/gbm.hpp"
#include "kernel/kernel.hpp"
#include "kernel/live_signal.hpp"

namespace ipcfloor {
namespace {

// Attempts to get a lane back after a subscriber left (its lane drains first).
constexpr auto kReconnectPatience = std::chrono::seconds(5);

std::vector<Combo> combos_for(std::size_t count) {
  if (count == 1) return {combo_from_length(6)};
  std::vector<Combo> combos;
  for (const auto length : grid_lengths(6, 200, count)) combos.push_back(combo_from_length(length));
  return combos;
}

RequestSlot append_request(double close, std::uint64_t tick) {
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::append);
  request.params = LiveAppend{close, tick, {}}.as_params();
  return request;
}

// The next close of a bounded random walk, so the series stays positive and keeps crossing.
struct Walk {
  std::mt19937_64 rng{7};
  std::normal_distribution<double> step{0.0, 0.001};
  double close;
  double next() {
    close *= std::exp(step(rng));
    return close;
  }
};

// The compute of one bar of one combo, per sample, in this process: what the engine adds to the
// transport for each subscribed combo.
std::vector<double> one_bar_compute(const TscClock& clock, std::size_t samples) {
  GbmParams params;
  params.bars = samples + 1000;
  const std::vector<double> close = *generate_gbm(params);
  std::vector<double> storage(LiveSignal::storage_doubles(combo_from_length(6)));
  LiveBacktest backtest(combo_from_length(6), kDefaultFee, storage);
  std::vector<double> ns;
  ns.reserve(samples);
  [[maybe_unused]] volatile double sink = 0.0;  // keeps each bar's work observable
  for (std::size_t i = 0; i < close.size(); ++i) {
    const std::uint64_t t0 = TscClock::now();
    const LiveBar bar = backtest.on_bar(std::span<const double>(close.data(), i + 1));
    const std::uint64_t t1 = TscClock::now();
    sink = bar.pnl;
    if (i >= 1000) ns.push_back(clock.to_ns(t1 - t0));
  }
  return ns;
}

Expected<ShmClient> connect_with_patience(const std::string& name, ShmClientOptions options) {
  const auto deadline = std::chrono::steady_clock::now() + kReconnectPatience;
  for (;;) {
    auto client = ShmClient::connect(name, options);
    if (client || std::chrono::steady_clock::now() >= deadline) return client;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// Subscribes `combos` on `subscriber`'s lane.
Expected<void> subscribe_all(ShmClient& subscriber, std::span<const Combo> combos) {
  for (const Combo& combo : combos) {
    ResponseSlot answer{};
    if (const CallStatus status = subscriber.subscribe(combo, answer); status != CallStatus::ok)
      return fail(ErrorCode::io, "subscribe: {}", subscriber.describe(status));
    if (static_cast<Status>(answer.status) != Status::ok)
      return fail(ErrorCode::io, "subscribe refused: {}", to_string(static_cast<Status>(answer.status)));
  }
  return {};
}

// What one latency or throughput run needs: the engine's two clients and the walk of closes.
struct LiveRun {
  const LiveBenchOptions& options;
  const TscClock& clock;
  ShmClient& writer;
  ShmClient& subscriber;
  Walk& walk;
};

// Waits for the `count` signals of the bar just appended; checks each; returns the clock reading
// at the first one, or an error naming what was wrong.
Expected<std::uint64_t> receive_signals(LiveRun& run, std::size_t count, std::uint64_t bar, std::uint64_t tick) {
  std::uint64_t t_first = 0;
  std::size_t got = 0;
  SignalSlot signal{};
  while (got < count) {
    // As a subscriber waits (spin: PAUSE, and a yield once it waits long, so that a worker on
    // this cpu can run).
    const CallStatus status = run.subscriber.wait_signal(signal);
    if (status != CallStatus::ok) return fail(ErrorCode::io, "signal: {}", run.subscriber.describe(status));
    if (got == 0) t_first = TscClock::now();
    if (signal.bar != bar || signal.tick != tick || signal.subscription != got || signal.flags != 0)
      return fail(ErrorCode::io, "signal {} of bar {} is wrong: bar {}, subscription {}, flags {}", got, bar, signal.bar,
                  signal.subscription, signal.flags);
    ++got;
  }
  return t_first;
}

// One APPEND at a time: tick to the first and to all of the `count` signals of its bar, one-way.
Expected<nlohmann::json> latency_run(LiveRun& run, std::size_t count) {
  const std::uint64_t drops_before = run.subscriber.signals_dropped();
  std::vector<double> first_ns;
  std::vector<double> all_ns;
  first_ns.reserve(run.options.samples);
  all_ns.reserve(run.options.samples);
  std::uint64_t expected_bar = run.subscriber.segment().published_series().size();
  for (std::size_t i = 0; i < run.options.warmup + run.options.samples; ++i) {
    const double close = run.walk.next();
    std::uint64_t seq = 0;
    const std::uint64_t t0 = TscClock::now();
    if (const CallStatus status = run.writer.submit(append_request(close, t0), seq); status != CallStatus::ok)
      return fail(ErrorCode::io, "append: {}", run.writer.describe(status));
    auto t_first = receive_signals(run, count, expected_bar, t0);
    if (!t_first) return std::unexpected(t_first.error());
    const std::uint64_t t_all = TscClock::now();
    ResponseSlot answer{};
    if (const CallStatus status = run.writer.wait_response(answer); status != CallStatus::ok)
      return fail(ErrorCode::io, "append answer: {}", run.writer.describe(status));
    if (static_cast<Status>(answer.status) != Status::ok)
      return fail(ErrorCode::io, "append refused: {}", to_string(static_cast<Status>(answer.status)));
    ++expected_bar;
    if (i >= run.options.warmup) {
      first_ns.push_back(run.clock.to_ns(*t_first - t0));
      all_ns.push_back(run.clock.to_ns(t_all - t0));
    }
  }
  if (run.subscriber.signals_dropped() != drops_before)
    return fail(ErrorCode::io, "{} signals were dropped in the latency run",
                run.subscriber.signals_dropped() - drops_before);
  return nlohmann::json{{"combos", count},
                        {"first_signal", to_json(summarize(fmt::format("tick-to-first-signal-{}", count), "one-way",
                                                           first_ns, run.clock.step_ns()))},
                        {"all_signals", to_json(summarize(fmt::format("tick-to-all-signals-{}", count), "one-way",
                                                          all_ns, run.clock.step_ns()))}};
}

// Back to back: appends streamed through the request ring by pipelined_sweep (the loop every
// client streams with), the signals drained after each answer on the same thread.
Expected<nlohmann::json> throughput_run(LiveRun& run, std::size_t count) {
  const std::uint64_t drops_start = run.subscriber.signals_dropped();
  const std::size_t bars = run.options.throughput_bars;
  std::uint64_t received = 0;
  Combo append{};
  Status refused = Status::ok;
  SignalSlot signal{};
  const std::uint64_t start = TscClock::now();
  const SweepEnd end = pipelined_sweep(
      run.writer, bars,
      [&](std::size_t) {
        append = LiveAppend{run.walk.next(), 0, {}}.as_params();
        return SweepRequest{Opcode::append, 0, payload_of(append)};
      },
      [&](std::size_t, const ResponseSlot& answer) {
        if (refused == Status::ok) refused = static_cast<Status>(answer.status);
        while (run.subscriber.poll_signal(signal) == CallStatus::ok) ++received;
      });
  const double seconds = run.clock.to_ns(TscClock::now() - start) / 1e9;
  if (end.status != CallStatus::ok) return fail(ErrorCode::io, "append: {}", run.writer.describe(end.status));
  if (refused != Status::ok) return fail(ErrorCode::io, "append refused: {}", to_string(refused));
  // What was still on its way when the last append was answered.
  const auto drain_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  while (std::chrono::steady_clock::now() < drain_until)
    if (run.subscriber.poll_signal(signal) == CallStatus::ok) ++received;
  const std::uint64_t dropped = run.subscriber.signals_dropped() - drops_start;
  return nlohmann::json{{"combos", count},
                        {"bars", bars},
                        {"seconds", seconds},
                        {"bars_per_s", static_cast<double>(bars) / seconds},
                        {"signals_received", received},
                        {"signals_dropped", dropped},
                        {"kept_up", dropped == 0}};
}

// The goal of docs/SPEC.md: one combo's tick-to-signal p50 within 2x of floor + one bar's compute.
nlohmann::json goal_json(double floor_p50, double compute_p50, double one_combo_p50) {
  return {{"what", "one combo: tick-to-signal p50 within 2x of (physical floor RTT p50 + one bar's compute p50)"},
          {"bound_ns", 2.0 * (floor_p50 + compute_p50)},
          {"p50_ns", one_combo_p50},
          {"ratio", one_combo_p50 / (floor_p50 + compute_p50)},
          {"met", one_combo_p50 <= 2.0 * (floor_p50 + compute_p50)}};
}

// The raw cache-line bounce between the two pinned cpus, in the same run.
Expected<LatencySummary> physical_floor(const SuitePlacement& where, const LiveBenchOptions& options,
                                        const TscClock& clock) {
  auto floor = run_physical_floor(transport_context(where, options.samples, options.warmup, clock));
  if (!floor) return std::unexpected(floor.error());
  if (auto pinned = pin_current_thread(where.client_cpu); !pinned) return std::unexpected(pinned.error());
  return summarize("physical-floor", "rtt", *floor, clock.step_ns());
}

// A new client of engine `name` that has subscribed the `count` combos of combos_for.
Expected<ShmClient> subscribed_client(const std::string& name, const ShmClientOptions& options, std::size_t count) {
  auto subscriber = connect_with_patience(name, options);
  if (!subscriber) return std::unexpected(subscriber.error());
  if (auto subscribed = subscribe_all(*subscriber, combos_for(count)); !subscribed)
    return std::unexpected(subscribed.error());
  return subscriber;
}

// A live engine on the server cpu with room for every bar the runs append; `extra` adds options.
std::unique_ptr<EngineChild> start_live_engine(const SuitePlacement& where, const LiveBenchOptions& options,
                                               const std::vector<std::string>& extra = {}) {
  std::size_t total_bars = options.preload_bars;
  for (std::size_t i = 0; i < options.combo_counts.size(); ++i)
    total_bars += options.warmup + options.samples + options.throughput_bars;
  unpin_current_thread();  // the engine inherits this mask
  std::vector<std::string> args{"--wait", "spin", "--cpu", std::to_string(where.server_cpu), "--lanes", "2", "--bars",
                                std::to_string(options.preload_bars), "--live", "--capacity",
                                std::to_string(total_bars), "--signal-capacity", "8192", "--subscriptions", "128",
                                "--max-bar-cost", "0"};
  args.insert(args.end(), extra.begin(), extra.end());
  return std::make_unique<EngineChild>(where.binary, unique_segment_name("bench-live"), args);
}

// The latency run of `count` combos on an engine whose workers compute every bar's signal work.
Expected<nlohmann::json> at_workers_run(const SuitePlacement& where, const LiveBenchOptions& options,
                                        const TscClock& clock, const ShmClientOptions& client_options, std::size_t count) {
  const auto engine = start_live_engine(where, options, {"--inline-cost", "1"});
  if (!engine->up()) return fail(ErrorCode::io, "the live engine with workers did not come up");
  if (auto pinned = pin_current_thread(where.client_cpu); !pinned) return std::unexpected(pinned.error());
  auto writer = ShmClient::connect(engine->name(), client_options);
  if (!writer) return std::unexpected(writer.error());
  if (writer->segment().header().workers == 0)
    return fail(ErrorCode::io, "the live engine has no workers on this host: nothing to hand the signal work to");
  Walk walk{.close = writer->segment().published_series().back()};
  auto subscriber = subscribed_client(engine->name(), client_options, count);
  if (!subscriber) return std::unexpected(subscriber.error());
  LiveRun run{options, clock, *writer, *subscriber, walk};
  auto latency = latency_run(run, count);
  if (latency) (*latency)["at_workers"] = true;
  return latency;
}

}  // namespace

Expected<nlohmann::json> run_live_bench(const LiveBenchOptions& options) {
  const SuitePlacement where = place_suite(options.client_cpu, options.server_cpu, options.binary);
  const TscClock clock = TscClock::calibrate();
  if (auto pinned = pin_current_thread(where.client_cpu); !pinned) return std::unexpected(pinned.error());
  auto floor = physical_floor(where, options, clock);
  if (!floor) return std::unexpected(floor.error());
  std::vector<double> compute = one_bar_compute(clock, options.samples);
  const LatencySummary compute_summary = summarize("one-bar-compute-L6", "compute", compute, clock.step_ns());

  const auto engine = start_live_engine(where, options);
  if (!engine->up()) return fail(ErrorCode::io, "the live engine did not come up");
  if (auto pinned = pin_current_thread(where.client_cpu); !pinned) return std::unexpected(pinned.error());
  ShmClientOptions client_options;
  client_options.wait = WaitMode::spin;
  client_options.timeout = std::chrono::seconds(10);
  auto writer = ShmClient::connect(engine->name(), client_options);
  if (!writer) return std::unexpected(writer.error());
  Walk walk{.close = writer->segment().published_series().back()};

  nlohmann::json runs = nlohmann::json::array();
  nlohmann::json throughput = nlohmann::json::array();
  for (const std::size_t count : options.combo_counts) {
    auto subscriber = subscribed_client(engine->name(), client_options, count);
    if (!subscriber) return std::unexpected(subscriber.error());
    LiveRun run{options, clock, *writer, *subscriber, walk};
    auto latency = latency_run(run, count);
    if (!latency) return std::unexpected(latency.error());
    runs.push_back(std::move(*latency));
    auto rate = throughput_run(run, count);
    if (!rate) return std::unexpected(rate.error());
    throughput.push_back(std::move(*rate));
  }
  if (options.worker_combos != 0) {
    auto at_workers = at_workers_run(where, options, clock, client_options, options.worker_combos);
    if (!at_workers) return std::unexpected(at_workers.error());
    runs.push_back(std::move(*at_workers));
  }
  const double one_combo_p50 = runs[0]["first_signal"]["p50_interp"].get<double>();
  return nlohmann::json{{"suite", "live"},
                        {"clock", {{"ghz", clock.ghz()}, {"step_ns", clock.step_ns()}}},
                        {"client_cpu", where.client_cpu},
                        {"server_cpu", where.server_cpu},
                        {"physical_floor", to_json(*floor)},
                        {"one_bar_compute", to_json(compute_summary)},
                        {"tick_to_signal", runs},
                        {"throughput", throughput},
                        {"goal", goal_json(floor->p50_interp, compute_summary.p50_interp, one_combo_p50)}};
}

void print_live_bench(const nlohmann::json& report) {
  fmt::print("live: tick-to-signal, one-way, from the writer's clock before it publishes an APPEND to the "
             "subscriber's receipt (ns; p50~ is the median interpolated within the clock's step)\n");
  const auto& floor = report["physical_floor"];
  const auto& compute = report["one_bar_compute"];
  fmt::print("  {:<36} {:>9} {:>9} {:>9} {:>9}\n", "", "p50~", "p99", "p99.9", "max");
  fmt::print("  {:<36} {:>9.0f} {:>9.0f} {:>9.0f} {:>9.0f}\n", "physical-floor (RTT)", floor["p50_interp"].get<double>(),
             floor["p99"].get<double>(), floor["p999"].get<double>(), floor["max"].get<double>());
  fmt::print("  {:<36} {:>9.0f} {:>9.0f} {:>9.0f} {:>9.0f}\n", "one bar of L=6 (compute)",
             compute["p50_interp"].get<double>(), compute["p99"].get<double>(), compute["p999"].get<double>(),
             compute["max"].get<double>());
  for (const auto& run : report["tick_to_signal"]) {
    for (const char* which : {"first_signal", "all_signals"}) {
      const auto& s = run[which];
      fmt::print("  {:<36} {:>9.0f} {:>9.0f} {:>9.0f} {:>9.0f}\n",
                 fmt::format("{} combos{}, {}", run["combos"].get<std::size_t>(),
                             run.value("at_workers", false) ? " at workers" : "",
                             std::string(which) == "first_signal" ? "first signal" : "all signals"),
                 s["p50_interp"].get<double>(), s["p99"].get<double>(), s["p999"].get<double>(), s["max"].get<double>());
    }
  }
  const auto& goal = report["goal"];
  fmt::print("  goal: {}: p50~ {:.0f} ns against a bound of {:.0f} ns ({:.2f}x floor+compute): {}\n",
             goal["what"].get<std::string>(), goal["p50_ns"].get<double>(), goal["bound_ns"].get<double>(),
             goal["ratio"].get<double>(), goal["met"].get<bool>() ? "met" : "NOT met");
  fmt::print("  throughput: appends pipelined back to back (pipelined_sweep), signals drained by the same thread\n");
  for (const auto& t : report["throughput"])
    fmt::print("    {:>3} combos: {:>10.0f} bars/s, {} signals received, {} dropped{}\n", t["combos"].get<std::size_t>(),
               t["bars_per_s"].get<double>(), t["signals_received"].get<std::uint64_t>(),
               t["signals_dropped"].get<std::uint64_t>(), t["kept_up"].get<bool>() ? "" : " (signals fell behind)");
}

}  // namespace ipcfloor
