#include "bench/granularity_bench.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "bench/host_info.hpp"
#include "bench/latency.hpp"
#include "bench/socket_server_child.hpp"
#include "clients/shm_client.hpp"
#include "common/affinity.hpp"
#include "kernel/gbm.hpp"
#include "kernel/kernel.hpp"
#include "kernel/live_signal.hpp"
#include "kernel/series_io.hpp"

extern char** environ;

namespace ipcfloor {
namespace {

Expected<void> same_results(std::string_view way, const std::vector<BacktestResult>& got,
                            const std::vector<BacktestResult>& expected) {
  if (got.size() != expected.size())
    return fail(ErrorCode::bad_data, "{}: {} results for {} combos", way, got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == expected[i]))
      return fail(ErrorCode::bad_data, "{}: combo {} gave pnl {} trades {}, in-process {} {}", way, i, got[i].pnl,
                  got[i].trades, expected[i].pnl, expected[i].trades);
  return {};
}

// Runs `argv` with stdout captured; returns what it printed. The spawn-per-sweep way.
Expected<std::string> run_captured(const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return fail(ErrorCode::io, "pipe failed");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  std::vector<char*> args;
  std::vector<std::string> storage = argv;
  for (auto& a : storage) args.push_back(a.data());
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, storage[0].c_str(), &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return fail(ErrorCode::io, "cannot spawn {}", storage[0]);
  }
  std::string out;
  char buffer[65536];
  ssize_t got = 0;
  while ((got = read(fds[0], buffer, sizeof buffer)) > 0) out.append(buffer, static_cast<std::size_t>(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return fail(ErrorCode::io, "{} failed (status {})", storage[0], status);
  return out;
}

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

double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

Expected<nlohmann::json> run_granularity(const GranularityOptions& options) {
  const auto cpus = allowed_cpus();
  const int client_cpu = options.client_cpu >= 0 ? options.client_cpu : cpus.front();
  const int server_cpu = options.server_cpu >= 0 ? options.server_cpu : cpus.back();
  const std::string binary = options.binary.empty() ? self_executable() : options.binary;
  auto series = generate_gbm(GbmParams{});
  if (!series) return std::unexpected(series.error());
  const std::vector<double>& close = *series;
  std::vector<Combo> combos;
  for (const auto length : grid_lengths(6, 200, 80)) combos.push_back(combo_from_length(length));
  const TscClock clock = TscClock::calibrate();
  const auto ms_since = [&](std::uint64_t t0) { return clock.to_ns(TscClock::now() - t0); };
  if (auto pinned = pin_current_thread(client_cpu); !pinned) return std::unexpected(pinned.error());

  auto expected = run_sweep(close, combos, kDefaultFee, 1);
  if (!expected) return std::unexpected(expected.error());
  nlohmann::json results = nlohmann::json::array();
  const auto record = [&](const char* name, const char* what, std::vector<double>& ns) {
    auto row = to_json(summarize(name, "one sweep", ns));
    row["description"] = what;
    results.push_back(row);
  };

  // 1. In-process, one thread (every server below computes on one thread too).
  std::vector<double> inproc;
  for (std::size_t r = 0; r < options.repeats; ++r) {
    const std::uint64_t t0 = TscClock::now();
    auto swept = run_sweep(close, combos, kDefaultFee, 1);
    inproc.push_back(ms_since(t0));
    if (!swept) return std::unexpected(swept.error());
  }
  record("in-process", "run_sweep on one thread, no boundary", inproc);

  // 2-4. Over a Unix-domain socket to a socket-only engine.
  {
    auto server = start_socket_server(binary, server_cpu, false);
    if (!server) return std::unexpected(server.error());
    auto client = connect_to(*server);
    if (!client) return std::unexpected(client.error());
    std::vector<double> batch, chatty, stateful;
    for (std::size_t r = 0; r < options.repeats; ++r) {
      std::uint64_t t0 = TscClock::now();
      auto swept = client->sweep(close, combos);
      batch.push_back(ms_since(t0));
      if (!swept) return std::unexpected(swept.error());
      if (auto same = same_results("socket batch", *swept, *expected); !same) return std::unexpected(same.error());

      std::vector<BacktestResult> per_combo;
      t0 = TscClock::now();
      for (const Combo& combo : combos) {
        auto one = client->sweep(close, std::span<const Combo>(&combo, 1));
        if (!one) return std::unexpected(one.error());
        per_combo.push_back(one->front());
      }
      chatty.push_back(ms_since(t0));
      if (auto same = same_results("socket chatty", per_combo, *expected); !same) return std::unexpected(same.error());
    }
    if (auto loaded = client->load(close); !loaded) return std::unexpected(loaded.error());
    for (std::size_t r = 0; r < options.repeats; ++r) {
      std::vector<BacktestResult> per_combo;
      const std::uint64_t t0 = TscClock::now();
      for (const Combo& combo : combos) {
        auto one = client->sweep_loaded(std::span<const Combo>(&combo, 1));
        if (!one) return std::unexpected(one.error());
        per_combo.push_back(one->front());
      }
      stateful.push_back(ms_since(t0));
      if (auto same = same_results("socket stateful", per_combo, *expected); !same) return std::unexpected(same.error());
    }
    record("socket-batch", "opcode 0: the series and all 80 combos in one frame (stateless)", batch);
    record("socket-chatty", "opcode 0 per combo: the 1.2 MB series re-shipped 80 times", chatty);
    record("socket-stateful", "opcode 2 once (untimed), then opcode 3 per combo: params only", stateful);
  }

  // 5. A process per sweep: the CLI reads the series from a file and prints JSON lines.
  {
    const std::string path = (std::filesystem::temp_directory_path() /
                              ("ipcfloor-granularity-" + std::to_string(getpid()) + ".f64")).string();
    if (auto saved = save_series(path, close); !saved) return std::unexpected(saved.error());
    std::vector<double> spawned;
    for (std::size_t r = 0; r < options.repeats; ++r) {
      const std::uint64_t t0 = TscClock::now();
      auto out = run_captured({binary, "sweep", "--inproc", "--data", path, "--json", "--threads", "1"});
      spawned.push_back(ms_since(t0));
      if (!out) return std::unexpected(out.error());
      if (auto same = same_results("spawn per sweep", parse_sweep_json(*out), *expected); !same)
        return std::unexpected(same.error());
    }
    std::filesystem::remove(path);
    record("spawn-per-sweep", "ipcfloor sweep --inproc --data FILE --json as a new process per sweep", spawned);
  }

  // 6. Stateful over the shm ring: the engine preloaded the default series at start.
  std::vector<double> ring_floor;
  {
    EngineChild engine(binary, unique_segment_name("granularity"),
                       {"--wait", "spin", "--cpu", std::to_string(server_cpu)});
    if (!engine.up()) return fail(ErrorCode::io, "the engine did not come up");
    ShmClientOptions client_options;
    client_options.wait = WaitMode::spin;
    auto client = ShmClient::connect(engine.name(), client_options);
    if (!client) return std::unexpected(client.error());
    std::vector<double> ring;
    RequestSlot request{};
    request.opcode = static_cast<std::uint16_t>(Opcode::backtest);
    ResponseSlot response{};
    for (std::size_t r = 0; r < options.repeats; ++r) {
      std::vector<BacktestResult> per_combo;
      const std::uint64_t t0 = TscClock::now();
      for (const Combo& combo : combos) {
        request.params = combo;
        if (const auto s = client->call(request, response); s != CallStatus::ok)
          return fail(ErrorCode::io, "{}", client->describe(s));
        per_combo.push_back({response.pnl, response.trades});
      }
      ring.push_back(ms_since(t0));
      if (auto same = same_results("shm ring stateful", per_combo, *expected); !same) return std::unexpected(same.error());
    }
    record("shm-call-stateful", "BACKTEST per combo through the segment's exchange line (series preloaded)", ring);
    request.opcode = static_cast<std::uint16_t>(Opcode::echo);
    for (std::size_t i = 0; i < options.floor_samples; ++i) {
      const std::uint64_t t0 = TscClock::now();
      if (const auto s = client->call(request, response); s != CallStatus::ok)
        return fail(ErrorCode::io, "{}", client->describe(s));
      ring_floor.push_back(ms_since(t0));
    }
  }

  // Floors of the socket transports, in this run.
  std::vector<double> uds_floor, tcp_floor;
  for (const bool tcp : {false, true}) {
    auto server = start_socket_server(binary, server_cpu, tcp);
    if (!server) return std::unexpected(server.error());
    auto client = connect_to(*server);
    if (!client) return std::unexpected(client.error());
    auto& floor = tcp ? tcp_floor : uds_floor;
    for (std::size_t i = 0; i < options.floor_samples; ++i) {
      const std::uint64_t t0 = TscClock::now();
      auto echoed = client->echo_params(Combo{static_cast<std::int64_t>(i), 0, 0, 0, 0, 0});
      floor.push_back(ms_since(t0));
      if (!echoed) return std::unexpected(echoed.error());
    }
  }

  // Compute per call at each granularity, measured here: a whole sweep, one combo, one bar.
  std::vector<double> per_combo;
  {
    KernelWorkspace workspace(close.size());
    BacktestResult out;
    for (std::size_t r = 0; r < std::max<std::size_t>(1, options.repeats / 2); ++r)
      for (const Combo& combo : combos) {
        const std::uint64_t t0 = TscClock::now();
        (void)run_backtest(close, combo, kDefaultFee, workspace, out);
        per_combo.push_back(ms_since(t0));
      }
  }
  std::vector<double> per_bar;
  {
    LiveSignal live(combo_from_length(100));
    for (std::size_t i = 0; i < close.size(); ++i) {
      const std::uint64_t t0 = TscClock::now();
      const BarSignal signal = live.on_bar(std::span<const double>(close.data(), i + 1));
      const std::uint64_t t1 = TscClock::now();
      if (i + 20'000 >= close.size()) per_bar.push_back(clock.to_ns(t1 - t0));
      if (signal.cross > 2) return fail(ErrorCode::bad_data, "impossible signal");
    }
  }
  const double compute_sweep = median_of(inproc);
  const double compute_combo = median_of(per_combo);
  const double compute_bar = median_of(per_bar);
  const double floors[3] = {median_of(ring_floor), median_of(uds_floor), median_of(tcp_floor)};
  const char* floor_names[3] = {"shm-call-spin", "uds", "tcp"};
  nlohmann::json break_even = nlohmann::json::array();
  for (const auto& [level, compute] : {std::pair{"sweep (80 combos)", compute_sweep}, std::pair{"combo", compute_combo},
                                       std::pair{"bar (L=100, live)", compute_bar}}) {
    nlohmann::json row{{"granularity", level}, {"compute_ns", compute}};
    for (int t = 0; t < 3; ++t) {
      row[std::string("floor_ns_") + floor_names[t]] = floors[t];
      row[std::string("G_") + floor_names[t]] = compute / floors[t];
    }
    break_even.push_back(row);
  }
  return nlohmann::json{
      {"suite", "granularity"},
      {"host", collect_host_info()},
      {"config", {{"bars", close.size()}, {"combos", combos.size()}, {"repeats", options.repeats},
                  {"client_cpu", client_cpu}, {"server_cpu", server_cpu},
                  {"compute", "one thread everywhere (the engine's serving thread is one thread)"}}},
      {"results", results},
      {"break_even", break_even},
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
