#include "bench/scaling_bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <ranges>
#include <thread>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "bench/latency.hpp"
#include "bench/percentile.hpp"
#include "bench/transports.hpp"
#include "clients/pipelined_sweep.hpp"
#include "clients/shm_client.hpp"
#include "clients/socket_client.hpp"
#include "common/affinity.hpp"
#include "common/tsc_clock.hpp"
#include "data/gbm.hpp"
#include "data/grid.hpp"
#include "engine/shm_engine.hpp"
#include "kernel/kernel.hpp"
#include "kernel/strategy.hpp"
#include "kernel/strategy_loader.hpp"

namespace ipcfloor {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) { return std::chrono::duration<double, std::milli>(Clock::now() - start).count(); }

std::string join(const std::vector<int>& cpus) {
  std::string text;
  for (const int cpu : cpus) text += fmt::format("{}{}", text.empty() ? "" : ",", cpu);
  return text;
}

// Where everything runs: the serving thread on the last allowed cpu, the sweeping client on the
// one before, the probing client before that; workers on the others first, then (only when asked
// for more) on the clients' cpus.
struct Placement {
  std::vector<int> cpus;
  int serving = 0;
  int client = 0;
  int probe = 0;
  // serve's own order (default_worker_cpus), the cpus the client and the probe run on last.
  [[nodiscard]] std::vector<int> workers(std::size_t count) const {
    std::vector<int> chosen;
    for (const int cpu : default_worker_cpus(serving))
      if (cpu != client && cpu != probe && chosen.size() < count) chosen.push_back(cpu);
    for (const int cpu : {probe, client})
      if (chosen.size() < count && cpu != serving && std::find(chosen.begin(), chosen.end(), cpu) == chosen.end())
        chosen.push_back(cpu);
    return chosen;
  }
  [[nodiscard]] std::size_t max_workers() const { return cpus.size() - 1; }
  // Workers that can each have a cpu no client uses.
  [[nodiscard]] std::size_t clean_workers() const {
    return static_cast<std::size_t>(std::count_if(cpus.begin(), cpus.end(), [this](int cpu) {
      return cpu != serving && cpu != client && cpu != probe;
    }));
  }
};

Placement place() {
  Placement p;
  p.cpus = allowed_cpus();
  const std::size_t n = p.cpus.size();
  p.serving = p.cpus.back();
  p.client = n >= 2 ? p.cpus[n - 2] : p.cpus.front();
  p.probe = n >= 3 ? p.cpus[n - 3] : p.client;
  return p;
}

std::vector<std::uint32_t> default_counts(const Placement& placement) {
  const std::size_t clean = std::max<std::size_t>(1, placement.cpus.size() >= 3 ? placement.cpus.size() - 2 : 1);
  std::vector<std::uint32_t> counts{0};
  for (std::uint32_t n = 1; n <= clean; n *= 2) counts.push_back(n);
  if (counts.back() != clean) counts.push_back(static_cast<std::uint32_t>(clean));
  return counts;
}

// The engine of one row: N workers, and the socket server in the same process with N sweep
// threads on the same series.
struct RowEngine {
  std::string socket_path;
  std::unique_ptr<EngineChild> child;
};

// `strategy_file`: a FILE.so the engine loads besides the built-in strategy (none when empty).
Expected<RowEngine> start_engine(const ScalingOptions& options, const std::string& binary, const Placement& placement,
                                 std::uint32_t workers, const std::string& strategy_file = {}) {
  RowEngine row;
  row.socket_path = (std::filesystem::temp_directory_path() /
                     fmt::format("ipcfloor-scaling-{}-{}.sock", ::getpid(), workers)).string();
  std::vector<std::string> args{"--wait", "spin", "--cpu", std::to_string(placement.serving), "--bars",
                                std::to_string(options.bars), "--seed", std::to_string(options.seed), "--lanes", "8",
                                "--socket", row.socket_path, "--sweep-threads", std::to_string(std::max(1u, workers))};
  if (workers == 0) {
    args.insert(args.end(), {"--workers", "0"});
  } else {
    args.insert(args.end(), {"--worker-cpus", join(placement.workers(workers))});
  }
  if (!strategy_file.empty()) args.insert(args.end(), {"--strategy", strategy_file});
  row.child = std::make_unique<EngineChild>(binary, unique_segment_name(fmt::format("scaling-{}", workers)), args);
  if (!row.child->up()) return fail(ErrorCode::io, "the engine with {} workers did not come up ({} serve)", workers, binary);
  return row;
}

// Bit for bit: a pnl that differs only in its sign of zero or its NaN payload differs too.
Expected<void> check_same(std::string_view way, std::span<const BacktestResult> got, std::span<const BacktestResult> want) {
  for (std::size_t i = 0; i < want.size(); ++i)
    if (std::bit_cast<std::uint64_t>(got[i].pnl) != std::bit_cast<std::uint64_t>(want[i].pnl) ||
        got[i].trades != want[i].trades)
      return fail(ErrorCode::protocol, "{}: combo {} came back {} / {}, in process {} / {}", way, i, got[i].pnl,
                  got[i].trades, want[i].pnl, want[i].trades);
  return {};
}

// `flags`: the requests' (request_flags: series 0, the strategy's index in the segment's table).
Expected<std::vector<BacktestResult>> sweep_segment(ShmClient& client, std::span<const Combo> combos, std::uint16_t flags) {
  std::vector<BacktestResult> results(combos.size());
  const SweepEnd end = pipelined_sweep(
      client, combos.size(), [&](std::size_t i) { return SweepRequest{Opcode::backtest, flags, payload_of(combos[i])}; },
      [&](std::size_t i, const ResponseSlot& answer) { results[i] = {answer.pnl, answer.trades}; });
  if (end.status != CallStatus::ok) return std::unexpected(client.error_for(end.status));
  return results;
}

nlohmann::json ms_json(std::vector<double> ms) {
  std::sort(ms.begin(), ms.end());
  return {{"p50", sorted_percentile(ms, 50)}, {"min", ms.front()}, {"max", ms.back()}, {"samples", ms.size()}};
}

// run_sweep as `sweep --inproc --threads N` runs it: from a thread whose threads may use every
// cpu (this one is pinned to the client's, and a thread inherits its creator's mask).
Expected<std::vector<BacktestResult>> sweep_unpinned(const Strategy& strategy, std::span<const double> close,
                                                     std::span<const Combo> combos, unsigned threads, double& ms) {
  Expected<std::vector<BacktestResult>> swept = std::unexpected(Error{ErrorCode::io, "not run"});
  std::thread runner([&] {
    unpin_current_thread();
    const auto start = Clock::now();
    swept = run_sweep(strategy, close, combos, kDefaultFee, threads);
    ms = ms_since(start);
  });
  runner.join();
  return swept;
}

// What the rows sweep: a strategy (the built-in one, or one loaded from options.strategy) and its
// combos.
struct RowWork {
  const Strategy* strategy = nullptr;
  std::string file;  // the FILE.so the engine loads it from; empty for the built-in
  std::vector<Combo> combos;
};

// The strategy's index in the engine's table, as request flags (series 0).
Expected<std::uint16_t> strategy_flags(const ShmClient& client, const RowWork& work) {
  const auto index = client.segment().find_strategy(work.strategy->name());
  if (!index) return fail(ErrorCode::strategy, "the engine does not list the strategy {} it was started with ({})",
                          work.strategy->name(), work.file);
  return request_flags(0, *index);
}

// One row: the combos three ways, interleaved sweep by sweep.
Expected<nlohmann::json> scaling_row(const ScalingOptions& options, const std::string& binary, const Placement& placement,
                                     std::uint32_t workers, std::span<const double> close, const RowWork& work) {
  const std::span<const Combo> combos = work.combos;
  auto engine = start_engine(options, binary, placement, workers, work.file);
  if (!engine) return std::unexpected(engine.error());
  ShmClientOptions client_options;
  client_options.wait = WaitMode::backoff;
  client_options.timeout = std::chrono::seconds(120);
  auto client = ShmClient::connect(engine->child->name(), client_options);
  if (!client) return std::unexpected(client.error());
  const auto flags = strategy_flags(*client, work);
  if (!flags) return std::unexpected(flags.error());
  SocketClientOptions socket_options;
  socket_options.timeout = std::chrono::seconds(600);
  auto socket = SocketClient::connect_unix(engine->socket_path, socket_options);
  if (!socket) return std::unexpected(socket.error());
  if (auto preloaded = socket->use_preloaded(); !preloaded) return std::unexpected(preloaded.error());
  if (auto chosen = socket->use_strategy(work.strategy->name()); !chosen) return std::unexpected(chosen.error());
  std::vector<double> inproc_ms, segment_ms, socket_ms;
  std::vector<BacktestResult> reference;
  for (std::size_t r = 0; r < options.repeats; ++r) {
    double ms = 0.0;
    auto inproc = sweep_unpinned(*work.strategy, close, combos, std::max(1u, workers), ms);
    inproc_ms.push_back(ms);
    if (!inproc) return std::unexpected(inproc.error());
    auto start = Clock::now();
    if (reference.empty()) reference = *inproc;
    start = Clock::now();
    auto segment = sweep_segment(*client, combos, *flags);
    segment_ms.push_back(ms_since(start));
    if (!segment) return std::unexpected(segment.error());
    start = Clock::now();
    auto over_socket = socket->sweep_loaded(combos);
    socket_ms.push_back(ms_since(start));
    if (!over_socket) return std::unexpected(over_socket.error());
    for (const auto& [way, got] : {std::pair{"in process", &*inproc}, std::pair{"segment", &*segment},
                                   std::pair{"socket", &*over_socket}})
      if (auto same = check_same(way, *got, reference); !same) return std::unexpected(same.error());
  }
  nlohmann::json row{{"workers", workers},
                     {"worker_cpus", placement.workers(workers)},
                     {"inproc_threads", std::max(1u, workers)},
                     {"inproc_ms", ms_json(inproc_ms)},
                     {"segment_ms", ms_json(segment_ms)},
                     {"socket_ms", ms_json(socket_ms)}};
  const double in = row["inproc_ms"]["p50"], seg = row["segment_ms"]["p50"], sock = row["socket_ms"]["p50"];
  row["segment_speed_vs_inproc"] = in / seg;  // >= 0.85: the segment keeps up with in process
  row["segment_speed_vs_socket"] = sock / seg;  // >= 1: never slower than the socket
  return row;
}

// The sweeping lane of the interference and pickup scenarios: streams the grid again and again
// until told to stop; `busy` is true from its first answer on.
class Streamer {
 public:
  Streamer(const std::string& engine, int cpu, std::span<const Combo> combos) {
    thread_ = std::thread([this, engine, cpu, combos] {
      (void)pin_current_thread(cpu);
      ShmClientOptions options;
      options.wait = WaitMode::backoff;
      options.timeout = std::chrono::seconds(120);
      auto client = ShmClient::connect(engine, options);
      if (!client) {
        error_ = client.error().message;
        busy_.store(true, std::memory_order_release);  // release: publishes error_; pairs with wait_busy
        return;
      }
      // relaxed: a plain flag.
      while (!stop_.load(std::memory_order_relaxed)) {
        const SweepEnd end = pipelined_sweep(
            *client, combos.size(), [&](std::size_t i) { return SweepRequest{Opcode::backtest, 0, payload_of(combos[i])}; },
            [&](std::size_t, const ResponseSlot&) { busy_.store(true, std::memory_order_release); });  // release: as above
        if (end.status != CallStatus::ok) {
          error_ = client->describe(end.status);
          return;
        }
        ++sweeps_;
      }
    });
  }
  ~Streamer() { stop(); }
  Streamer(const Streamer&) = delete;
  Streamer& operator=(const Streamer&) = delete;
  // Waits (bounded) until the stream has answers coming; the error when it could not start.
  [[nodiscard]] Expected<void> wait_busy() {
    const auto deadline = Clock::now() + std::chrono::seconds(60);
    // acquire: pairs with the streamer's release stores of busy_.
    while (!busy_.load(std::memory_order_acquire) && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (!error_.empty()) return fail(ErrorCode::io, "the streaming client failed: {}", error_);
    return {};
  }
  std::size_t stop() {
    stop_.store(true, std::memory_order_relaxed);  // relaxed: a plain flag
    if (thread_.joinable()) thread_.join();
    return sweeps_;
  }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<bool> busy_{false};
  std::string error_;
  std::size_t sweeps_ = 0;
  std::thread thread_;
};

// Blocking ECHO RTTs on `client`, per sample with the TSC.
void time_echoes(ShmClient& client, const TscClock& clock, std::size_t count, std::vector<double>& ns) {
  const Combo payload{1, 2, 3, 4, 5, 6};
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t t0 = TscClock::now();
    const CallStatus got = client.call(Opcode::echo, 0, payload_of(payload));
    const std::uint64_t t1 = TscClock::now();
    if (got == CallStatus::ok) ns.push_back(clock.to_ns(t1 - t0));
  }
}

Expected<nlohmann::json> interference(const ScalingOptions& options, const std::string& engine, const Placement& placement,
                                      std::span<const Combo> combos, const TscClock& clock) {
  if (auto pinned = pin_current_thread(placement.probe); !pinned) return std::unexpected(pinned.error());
  ShmClientOptions client_options;
  client_options.wait = WaitMode::spin;
  auto client = ShmClient::connect(engine, client_options);
  if (!client) return std::unexpected(client.error());
  std::vector<double> idle, streaming;
  time_echoes(*client, clock, options.echo_samples / 10, idle);  // warm-up, dropped
  idle.clear();
  constexpr int kRounds = 5;
  std::size_t sweeps = 0;
  for (int round = 0; round < kRounds; ++round) {
    time_echoes(*client, clock, options.echo_samples / kRounds, idle);
    Streamer stream(engine, placement.client, combos);
    if (auto busy = stream.wait_busy(); !busy) return std::unexpected(busy.error());
    time_echoes(*client, clock, options.echo_samples / kRounds, streaming);
    sweeps += stream.stop();
  }
  const LatencySummary quiet = summarize("echo, engine idle", "rtt", idle, clock.step_ns());
  const LatencySummary loaded = summarize("echo, another lane streaming the grid", "rtt", streaming, clock.step_ns());
  return nlohmann::json{{"idle", to_json(quiet)},
                        {"streaming", to_json(loaded)},
                        {"p50_ratio", loaded.p50_interp / quiet.p50_interp},
                        {"grid_sweeps_meanwhile", sweeps},
                        {"probe_cpu", placement.probe}};
}

// Attach-to-first-answer of a new client, `count` times.
Expected<void> time_pickups(const std::string& engine, const TscClock& clock, std::size_t count,
                            std::vector<double>& attach_ns, std::vector<double>& first_ns) {
  ShmClientOptions client_options;
  client_options.wait = WaitMode::spin;
  const Combo payload{1, 2, 3, 4, 5, 6};
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint64_t t0 = TscClock::now();
    auto client = ShmClient::connect(engine, client_options);
    if (!client) return std::unexpected(client.error());
    const std::uint64_t t1 = TscClock::now();
    if (const CallStatus got = client->call(Opcode::echo, 0, payload_of(payload)); got != CallStatus::ok)
      return std::unexpected(client->error_for(got));
    const std::uint64_t t2 = TscClock::now();
    attach_ns.push_back(clock.to_ns(t2 - t0));
    first_ns.push_back(clock.to_ns(t2 - t1));
  }
  return {};
}

Expected<nlohmann::json> pickup(const ScalingOptions& options, const std::string& engine, const Placement& placement,
                                std::span<const Combo> combos, const TscClock& clock) {
  std::vector<double> idle_attach, idle_first, busy_attach, busy_first;
  if (auto idle = time_pickups(engine, clock, options.pickups, idle_attach, idle_first); !idle)
    return std::unexpected(idle.error());
  Streamer stream(engine, placement.client, combos);
  if (auto busy = stream.wait_busy(); !busy) return std::unexpected(busy.error());
  if (auto busy = time_pickups(engine, clock, options.pickups, busy_attach, busy_first); !busy)
    return std::unexpected(busy.error());
  stream.stop();
  return nlohmann::json{
      {"idle_attach_to_first_answer", to_json(summarize("attach to first answer, engine idle", "rtt", idle_attach))},
      {"idle_first_call", to_json(summarize("first call, engine idle", "rtt", idle_first))},
      {"streaming_attach_to_first_answer",
       to_json(summarize("attach to first answer, another lane streaming", "rtt", busy_attach))},
      {"streaming_first_call", to_json(summarize("first call, another lane streaming", "rtt", busy_first))}};
}

// `side` values of one parameter around the example's `centre` (strategy_grid's rule), ascending.
std::vector<std::int64_t> spread(std::int64_t centre, std::size_t side) {
  std::vector<std::int64_t> values;
  for (std::size_t i = 0; i < side; ++i) {
    if (centre == 0) {
      values.push_back(static_cast<std::int64_t>(i));
      continue;
    }
    const double exponent = side == 1 ? 0.0 : -1.0 + 2.0 * static_cast<double>(i) / static_cast<double>(side - 1);
    values.push_back(std::llround(static_cast<double>(centre) * std::exp2(exponent)));
  }
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

// The rows' strategy and combos: the built-in one on the grid, or options.strategy loaded into
// `catalog` on its strategy_grid of as many combos as the grid has.
Expected<RowWork> row_work(const ScalingOptions& options, std::span<const Combo> grid, StrategyCatalog& catalog) {
  RowWork work;
  if (options.strategy.empty()) {
    work.strategy = &builtin();
    work.combos.assign(grid.begin(), grid.end());
    return work;
  }
  const auto check_close = strategy_check_series();
  if (!check_close) return std::unexpected(check_close.error());
  auto loaded = catalog.load(options.strategy, *check_close);
  if (!loaded) return std::unexpected(loaded.error());
  auto combos = strategy_grid(**loaded, grid.size(), options.bars);
  if (!combos) return std::unexpected(combos.error());
  work.strategy = *loaded;
  work.file = options.strategy;
  work.combos = std::move(*combos);
  return work;
}

}  // namespace

Expected<std::vector<Combo>> strategy_grid(const Strategy& strategy, std::size_t count, std::size_t bars) {
  const std::size_t varied = std::min<std::uint32_t>(2, strategy.param_count());
  const auto side = varied == 2 ? static_cast<std::size_t>(std::ceil(std::sqrt(static_cast<double>(count)))) : count;
  const Combo centre = strategy.example();
  const auto centre_params = centre.as_array();
  const std::vector<std::int64_t> firsts = spread(centre_params[0], side);
  const std::vector<std::int64_t> seconds = varied == 2 ? spread(centre_params[1], side) : std::vector{centre_params[1]};
  std::vector<Combo> combos;
  for (const std::int64_t first : firsts)
    for (const std::int64_t second : seconds) {
      Combo combo = centre;
      combo.h = first;  // the strategy ABI's params[0] and params[1] (param_data)
      combo.L = second;
      if (strategy.accepts(combo, bars)) combos.push_back(combo);
    }
  if (combos.empty())
    return fail(ErrorCode::invalid_argument, "scaling: the strategy {} accepts none of the {} combos around its example "
                "for {} bars", strategy.name(), firsts.size() * seconds.size(), bars);
  return combos;
}

namespace {

// What run_scaling will do, once its options are checked.
struct ScalingPlan {
  Placement placement;
  std::vector<std::uint32_t> counts;
  std::vector<Combo> grid;  // the built-in strategy's: interference and pickup stream it
  std::unique_ptr<StrategyCatalog> catalog = std::make_unique<StrategyCatalog>();  // keeps a loaded strategy loaded
  RowWork work;
};

Expected<ScalingPlan> plan_scaling(const ScalingOptions& options) {
  if (options.repeats == 0 || options.echo_samples < 10 || options.pickups == 0)
    return fail(ErrorCode::invalid_argument, "scaling: repeats and pickups must be > 0, echo samples >= 10");
  ScalingPlan plan;
  plan.placement = place();
  plan.counts = options.workers.empty() ? default_counts(plan.placement) : options.workers;
  for (const std::uint32_t n : plan.counts)
    if (n > plan.placement.max_workers())
      return fail(ErrorCode::invalid_argument, "scaling: {} workers need {} cpus besides the serving one; this process "
                  "may use {} in all", n, n, plan.placement.cpus.size());
  auto lengths = parse_grid(options.grid);
  if (!lengths) return std::unexpected(lengths.error());
  for (const std::int64_t length : *lengths) plan.grid.push_back(combo_from_length(length));
  auto work = row_work(options, plan.grid, *plan.catalog);
  if (!work) return std::unexpected(work.error());
  plan.work = std::move(*work);
  return plan;
}

}  // namespace

Expected<void> check_scaling(const ScalingOptions& options) {
  auto plan = plan_scaling(options);
  if (!plan) return std::unexpected(plan.error());
  return {};
}

Expected<nlohmann::json> run_scaling(const ScalingOptions& options) {
  auto plan = plan_scaling(options);
  if (!plan) return std::unexpected(plan.error());
  const Placement& placement = plan->placement;
  const std::span<const Combo> combos = plan->grid;
  const RowWork* work = &plan->work;
  GbmParams gbm;
  gbm.bars = options.bars;
  gbm.seed = options.seed;
  auto close = generate_gbm(gbm);
  if (!close) return std::unexpected(close.error());
  const std::string binary = options.binary.empty() ? self_executable() : options.binary;
  if (auto pinned = pin_current_thread(placement.client); !pinned) return std::unexpected(pinned.error());
  nlohmann::json rows = nlohmann::json::array();
  for (const std::uint32_t n : plan->counts) {
    auto row = scaling_row(options, binary, placement, n, *close, *work);
    if (!row) return std::unexpected(row.error());
    rows.push_back(*row);
  }
  // Interference and pickup: as many workers as leave the serving, streaming and probing cpus free.
  const std::uint32_t workers = static_cast<std::uint32_t>(std::max<std::size_t>(1, placement.clean_workers()));
  auto engine = start_engine(options, binary, placement, workers);
  if (!engine) return std::unexpected(engine.error());
  const TscClock clock = TscClock::calibrate();
  auto probed = interference(options, engine->child->name(), placement, combos, clock);
  if (!probed) return std::unexpected(probed.error());
  auto picked = pickup(options, engine->child->name(), placement, combos, clock);
  if (!picked) return std::unexpected(picked.error());
  (*probed)["workers"] = workers;
  (*picked)["workers"] = workers;
  nlohmann::json strategy{{"name", std::string(work->strategy->name())}, {"file", work->file}};
  for (std::uint32_t k = 0; k < std::min<std::uint32_t>(2, work->strategy->param_count()); ++k) {
    const auto values = [&](const Combo& c) { return c.as_array()[k]; };
    const auto [lo, hi] = std::ranges::minmax(work->combos | std::views::transform(values));
    strategy["varied"].push_back({{"param", std::string(work->strategy->param_name(k))}, {"min", lo}, {"max", hi}});
  }
  return nlohmann::json{{"grid", options.grid},
                        {"strategy", strategy},
                        {"bars", options.bars},
                        {"combos", work->combos.size()},
                        {"serving_cpu", placement.serving},
                        {"client_cpu", placement.client},
                        {"rows", rows},
                        {"interference", *probed},
                        {"pickup", *picked}};
}

namespace {

// What the rows swept: "the grid G" for the built-in strategy, else the strategy and its spread.
std::string swept_what(const nlohmann::json& report) {
  const auto& strategy = report["strategy"];
  if (strategy["file"].get<std::string>().empty()) return fmt::format("the grid {}", report["grid"].get<std::string>());
  std::string what = fmt::format("the strategy {} (", strategy["name"].get<std::string>());
  for (const auto& v : strategy["varied"])
    what += fmt::format("{}{} {}..{}", what.ends_with("(") ? "" : ", ", v["param"].get<std::string>(),
                        v["min"].get<std::int64_t>(), v["max"].get<std::int64_t>());
  return what + ")";
}

}  // namespace

void print_scaling(const nlohmann::json& report) {
  fmt::print("workers: {} on {} bars ({} combos), ms per sweep (p50 of {} sweeps each), serving cpu {}\n",
             swept_what(report), report["bars"].get<std::size_t>(), report["combos"].get<std::size_t>(),
             report["rows"].empty() ? 0 : report["rows"][0]["inproc_ms"]["samples"].get<std::size_t>(),
             report["serving_cpu"].get<int>());
  fmt::print("  {:>7} {:>12} {:>12} {:>12} {:>16} {:>16}\n", "workers", "in process", "segment", "socket",
             "segment/inproc", "segment/socket");
  for (const auto& row : report["rows"])
    fmt::print("  {:>7} {:>12.1f} {:>12.1f} {:>12.1f} {:>15.2f}x {:>15.2f}x\n", row["workers"].get<unsigned>(),
               row["inproc_ms"]["p50"].get<double>(), row["segment_ms"]["p50"].get<double>(),
               row["socket_ms"]["p50"].get<double>(), row["segment_speed_vs_inproc"].get<double>(),
               row["segment_speed_vs_socket"].get<double>());
  fmt::print("  (in process: run_sweep on as many threads as workers, 1 for 0; segment: one lane, pipelined; socket: "
             "--sweep-threads as many; speed ratios: higher is faster for the segment)\n");
  const auto& i = report["interference"];
  fmt::print("interference ({} workers): blocking ECHO RTT, ns: idle p50 {:.0f} p90 {:.0f} p99 {:.0f} max {:.0f}; another "
             "lane streaming the grid p50 {:.0f} p90 {:.0f} p99 {:.0f} max {:.0f}; p50 ratio {:.2f}\n",
             i["workers"].get<unsigned>(), i["idle"]["p50"].get<double>(), i["idle"]["p90"].get<double>(),
             i["idle"]["p99"].get<double>(), i["idle"]["max"].get<double>(), i["streaming"]["p50"].get<double>(),
             i["streaming"]["p90"].get<double>(), i["streaming"]["p99"].get<double>(), i["streaming"]["max"].get<double>(),
             i["p50_ratio"].get<double>());
  const auto& p = report["pickup"];
  fmt::print("pickup ({} workers): a client attaching, attach to first answer, us: idle p50 {:.1f} max {:.1f}; another "
             "lane streaming p50 {:.1f} max {:.1f} (first call alone: p50 {:.1f} max {:.1f} us)\n",
             p["workers"].get<unsigned>(), p["idle_attach_to_first_answer"]["p50"].get<double>() / 1e3,
             p["idle_attach_to_first_answer"]["max"].get<double>() / 1e3,
             p["streaming_attach_to_first_answer"]["p50"].get<double>() / 1e3,
             p["streaming_attach_to_first_answer"]["max"].get<double>() / 1e3,
             p["streaming_first_call"]["p50"].get<double>() / 1e3, p["streaming_first_call"]["max"].get<double>() / 1e3);
}

}  // namespace ipcfloor
