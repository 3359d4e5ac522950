#include "bench/granularity_bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "bench/child_process.hpp"
#include "bench/engine_child.hpp"
#include "bench/host_info.hpp"
#include "bench/latency.hpp"
#include "bench/percentile.hpp"
#include "bench/socket_server_child.hpp"
#include "bench/suite_common.hpp"
#include "clients/shm_client.hpp"
#include "common/affinity.hpp"
#include "data/gbm.hpp"
#include "data/series_io.hpp"
#include "kernel/kernel.hpp"
#include "kernel/live_signal.hpp"

namespace ipcfloor {
namespace {

std::vector<BacktestResult> parse_sweep_json(const std::string& text) {
  std::vector<BacktestResult> results;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const auto row = nlohmann::json::parse(line, nullptr, false);
    if (row.is_discarded()) continue;
    results.push_back({row["pnl"].get<double>(), row["trades"].get<std::int64_t>()});
  }
  return results;
}

// What every way of the suite shares: the series, the grid, its in-process answers, the clock,
// and the rows recorded so far. Each way adds its rows and returns what the break-even needs.
struct GranularityRun {
  const GranularityOptions& options;
  SuitePlacement where;
  TscClock clock;
  std::vector<double> close;
  std::vector<Combo> combos;
  std::vector<BacktestResult> expected;
  nlohmann::json rows = nlohmann::json::array();

  [[nodiscard]] double ns_since(std::uint64_t t0) const { return clock.to_ns(TscClock::now() - t0); }
  void record(const char* name, const char* what, std::vector<double>& ns) {
    auto row = to_json(summarize(name, "one sweep", ns));
    row["description"] = what;
    rows.push_back(row);
  }
};

// A whole sweep over the socket (`sweep`), per combo, or per combo with the series loaded once:
// the answers of one repeat, timed by the caller.
using SocketWay = Expected<std::vector<BacktestResult>> (*)(SocketClient& client, const GranularityRun& run);

Expected<std::vector<BacktestResult>> socket_batch(SocketClient& client, const GranularityRun& run) {
  return client.sweep(run.close, run.combos);
}

Expected<std::vector<BacktestResult>> socket_chatty(SocketClient& client, const GranularityRun& run) {
  std::vector<BacktestResult> answers;
  for (const Combo& combo : run.combos) {
    auto one = client.sweep(run.close, std::span<const Combo>(&combo, 1));
    if (!one) return std::unexpected(one.error());
    answers.push_back(one->front());
  }
  return answers;
}

Expected<std::vector<BacktestResult>> socket_stateful(SocketClient& client, const GranularityRun& run) {
  std::vector<BacktestResult> answers;
  for (const Combo& combo : run.combos) {
    auto one = client.sweep_loaded(std::span<const Combo>(&combo, 1));
    if (!one) return std::unexpected(one.error());
    answers.push_back(one->front());
  }
  return answers;
}

// `repeats` timed sweeps of one way, each checked against the in-process answers.
Expected<std::vector<double>> time_socket_way(GranularityRun& run, SocketClient& client, SocketWay way,
                                              std::string_view name) {
  std::vector<double> ns;
  for (std::size_t r = 0; r < run.options.repeats; ++r) {
    const std::uint64_t t0 = TscClock::now();
    auto answers = way(client, run);
    ns.push_back(run.ns_since(t0));
    if (!answers) return std::unexpected(answers.error());
    if (auto same = same_results(name, *answers, run.expected); !same) return std::unexpected(same.error());
  }
  return ns;
}

// 1. In-process, one thread (every server below computes on one thread too). Returns the samples.
Expected<std::vector<double>> way_inproc(GranularityRun& run) {
  std::vector<double> ns;
  for (std::size_t r = 0; r < run.options.repeats; ++r) {
    const std::uint64_t t0 = TscClock::now();
    auto swept = run_sweep(builtin(), run.close, run.combos, kDefaultFee, 1);
    ns.push_back(run.ns_since(t0));
    if (!swept) return std::unexpected(swept.error());
  }
  run.record("in-process", "run_sweep on one thread, no boundary", ns);
  return ns;
}

// 2-4. Over a Unix-domain socket to a socket-only engine: batch, chatty, then stateful.
Expected<void> ways_over_socket(GranularityRun& run) {
  auto server = start_socket_server(run.where.binary, run.where.server_cpu, false);
  if (!server) return std::unexpected(server.error());
  auto client = connect_to(*server);
  if (!client) return std::unexpected(client.error());
  auto batch = time_socket_way(run, *client, socket_batch, "socket batch");
  if (!batch) return std::unexpected(batch.error());
  auto chatty = time_socket_way(run, *client, socket_chatty, "socket chatty");
  if (!chatty) return std::unexpected(chatty.error());
  if (auto loaded = client->load(run.close); !loaded) return std::unexpected(loaded.error());
  auto stateful = time_socket_way(run, *client, socket_stateful, "socket stateful");
  if (!stateful) return std::unexpected(stateful.error());
  run.record("socket-batch", "opcode 0: the series and all 80 combos in one frame (stateless)", *batch);
  run.record("socket-chatty", "opcode 0 per combo: the 1.2 MB series re-shipped 80 times", *chatty);
  run.record("socket-stateful", "opcode 2 once (untimed), then opcode 3 per combo: params only", *stateful);
  return {};
}

// 5. A process per sweep: the CLI reads the series from a file and prints JSON lines.
Expected<void> way_spawned(GranularityRun& run) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("ipcfloor-granularity-" + std::to_string(getpid()) + ".f64")).string();
  if (auto saved = save_series(path, run.close); !saved) return std::unexpected(saved.error());
  std::vector<double> spawned;
  for (std::size_t r = 0; r < run.options.repeats; ++r) {
    const std::uint64_t t0 = TscClock::now();
    auto out = run_captured({run.where.binary, "sweep", "--inproc", "--data", path, "--json", "--threads", "1"});
    spawned.push_back(run.ns_since(t0));
    if (!out) {
      std::filesystem::remove(path);
      return std::unexpected(out.error());
    }
    if (auto same = same_results("spawn per sweep", parse_sweep_json(*out), run.expected); !same) {
      std::filesystem::remove(path);
      return std::unexpected(same.error());
    }
  }
  std::filesystem::remove(path);
  run.record("spawn-per-sweep", "ipcfloor sweep --inproc --data FILE --json as a new process per sweep", spawned);
  return {};
}

// 6. Stateful over the shm exchange line: the engine preloaded the default series at start.
// Returns the line's ECHO floor, measured on the same engine.
Expected<std::vector<double>> way_shm_call(GranularityRun& run) {
  EngineChild engine(run.where.binary, unique_segment_name("granularity"),
                     {"--wait", "spin", "--cpu", std::to_string(run.where.server_cpu)});
  if (!engine.up()) return fail(ErrorCode::io, "the engine did not come up");
  ShmClientOptions client_options;
  client_options.wait = WaitMode::spin;
  auto client = ShmClient::connect(engine.name(), client_options);
  if (!client) return std::unexpected(client.error());
  std::vector<double> ring;
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::backtest);
  ResponseSlot response{};
  for (std::size_t r = 0; r < run.options.repeats; ++r) {
    std::vector<BacktestResult> per_combo;
    const std::uint64_t t0 = TscClock::now();
    for (const Combo& combo : run.combos) {
      request.params = combo;
      if (const auto s = client->call(request, response); s != CallStatus::ok)
        return fail(ErrorCode::io, "{}", client->describe(s));
      per_combo.push_back({response.pnl, response.trades});
    }
    ring.push_back(run.ns_since(t0));
    if (auto same = same_results("shm ring stateful", per_combo, run.expected); !same)
      return std::unexpected(same.error());
  }
  run.record("shm-call-stateful", "BACKTEST per combo through the segment's exchange line (series preloaded)", ring);
  std::vector<double> floor;
  request.opcode = static_cast<std::uint16_t>(Opcode::echo);
  for (std::size_t i = 0; i < run.options.floor_samples; ++i) {
    const std::uint64_t t0 = TscClock::now();
    if (const auto s = client->call(request, response); s != CallStatus::ok)
      return fail(ErrorCode::io, "{}", client->describe(s));
    floor.push_back(run.ns_since(t0));
  }
  return floor;
}

// The ECHO_PARAMS floor of one socket transport, in this run.
Expected<std::vector<double>> socket_floor(GranularityRun& run, bool tcp) {
  auto server = start_socket_server(run.where.binary, run.where.server_cpu, tcp);
  if (!server) return std::unexpected(server.error());
  auto client = connect_to(*server);
  if (!client) return std::unexpected(client.error());
  std::vector<double> floor;
  for (std::size_t i = 0; i < run.options.floor_samples; ++i) {
    const std::uint64_t t0 = TscClock::now();
    auto echoed = client->echo_params(Combo{static_cast<std::int64_t>(i), 0, 0, 0, 0, 0});
    floor.push_back(run.ns_since(t0));
    if (!echoed) return std::unexpected(echoed.error());
  }
  return floor;
}

// The compute of one combo, per call, measured here.
std::vector<double> compute_per_combo(const GranularityRun& run) {
  std::vector<double> ns;
  KernelWorkspace workspace(builtin().workspace_bytes(run.close.size()));
  BacktestResult out;
  for (std::size_t r = 0; r < std::max<std::size_t>(1, run.options.repeats / 2); ++r)
    for (const Combo& combo : run.combos) {
      const std::uint64_t t0 = TscClock::now();
      (void)run_backtest(run.close, combo, kDefaultFee, workspace, out);
      ns.push_back(run.ns_since(t0));
    }
  return ns;
}

// The compute of one live bar (L=100), per bar, over the last 20,000 bars of the series.
Expected<std::vector<double>> compute_per_bar(const GranularityRun& run) {
  std::vector<double> ns;
  LiveSignal live(combo_from_length(100));
  for (std::size_t i = 0; i < run.close.size(); ++i) {
    const std::uint64_t t0 = TscClock::now();
    const BarSignal signal = live.on_bar(std::span<const double>(run.close.data(), i + 1));
    const std::uint64_t t1 = TscClock::now();
    if (i + 20'000 >= run.close.size()) ns.push_back(run.clock.to_ns(t1 - t0));
    if (signal.cross > 2) return fail(ErrorCode::bad_data, "impossible signal");
  }
  return ns;
}

// G = compute per call / transport floor at sweep, combo and bar granularity.
nlohmann::json break_even_table(const std::array<double, 3>& compute, const std::array<double, 3>& floors) {
  const char* floor_names[3] = {"shm-call-spin", "uds", "tcp"};
  const char* levels[3] = {"sweep (80 combos)", "combo", "bar (L=100, live)"};
  nlohmann::json table = nlohmann::json::array();
  for (std::size_t level = 0; level < 3; ++level) {
    nlohmann::json row{{"granularity", levels[level]}, {"compute_ns", compute[level]}};
    for (std::size_t t = 0; t < 3; ++t) {
      row[std::string("floor_ns_") + floor_names[t]] = floors[t];
      row[std::string("G_") + floor_names[t]] = compute[level] / floors[t];
    }
    table.push_back(row);
  }
  return table;
}

}  // namespace

Expected<nlohmann::json> run_granularity(const GranularityOptions& options) {
  auto series = generate_gbm(GbmParams{});
  if (!series) return std::unexpected(series.error());
  GranularityRun run{options, place_suite(options.client_cpu, options.server_cpu, options.binary),
                     TscClock::calibrate(), std::move(*series), default_grid_combos(), {}};
  if (auto pinned = pin_current_thread(run.where.client_cpu); !pinned) return std::unexpected(pinned.error());
  auto expected = run_sweep(builtin(), run.close, run.combos, kDefaultFee, 1);
  if (!expected) return std::unexpected(expected.error());
  run.expected = std::move(*expected);

  auto inproc = way_inproc(run);
  if (!inproc) return std::unexpected(inproc.error());
  if (auto socket = ways_over_socket(run); !socket) return std::unexpected(socket.error());
  if (auto spawned = way_spawned(run); !spawned) return std::unexpected(spawned.error());
  auto ring_floor = way_shm_call(run);
  if (!ring_floor) return std::unexpected(ring_floor.error());
  auto uds_floor = socket_floor(run, false);
  if (!uds_floor) return std::unexpected(uds_floor.error());
  auto tcp_floor = socket_floor(run, true);
  if (!tcp_floor) return std::unexpected(tcp_floor.error());
  auto per_bar = compute_per_bar(run);
  if (!per_bar) return std::unexpected(per_bar.error());
  const std::array<double, 3> compute = {percentile(*inproc, 50), percentile(compute_per_combo(run), 50),
                                         percentile(*per_bar, 50)};
  const std::array<double, 3> floors = {percentile(*ring_floor, 50), percentile(*uds_floor, 50),
                                        percentile(*tcp_floor, 50)};
  return nlohmann::json{
      {"suite", "granularity"},
      {"host", collect_host_info()},
      {"config", {{"bars", run.close.size()}, {"combos", run.combos.size()}, {"repeats", options.repeats},
                  {"client_cpu", run.where.client_cpu}, {"server_cpu", run.where.server_cpu},
                  {"compute", "one thread everywhere (the engine's serving thread is one thread)"}}},
      {"results", run.rows},
      {"break_even", break_even_table(compute, floors)},
  };
}

void print_granularity(const nlohmann::json& report) {
  fmt::print("granularity: the 80-combo sweep on 150,000 bars, six ways (ms per whole sweep; results checked equal)\n");
  fmt::print("  {:<20} {:>10} {:>10} {:>10}  {}\n", "way", "p50 ms", "min ms", "max ms", "what crosses the boundary");
  for (const auto& r : report["results"])
    fmt::print("  {:<20} {:>10.1f} {:>10.1f} {:>10.1f}  {}\n", r["name"].get<std::string>(), r["p50"].get<double>() / 1e6,
               r["min"].get<double>() / 1e6, r["max"].get<double>() / 1e6, r["description"].get<std::string>());
  fmt::print("  break-even G = compute per call / transport floor (RTT p50); G >> 1: the boundary is noise\n");
  fmt::print("  {:<20} {:>14} {:>12} {:>12} {:>12}\n", "granularity", "compute ns", "G shm-call", "G uds", "G tcp");
  for (const auto& r : report["break_even"])
    fmt::print("  {:<20} {:>14.0f} {:>12.1f} {:>12.1f} {:>12.1f}\n", r["granularity"].get<std::string>(),
               r["compute_ns"].get<double>(), r["G_shm-call-spin"].get<double>(), r["G_uds"].get<double>(),
               r["G_tcp"].get<double>());
}

}  // namespace ipcfloor
