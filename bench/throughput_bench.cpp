#include "bench/throughput_bench.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "bench/host_info.hpp"
#include "bench/latency.hpp"
#include "bench/socket_server_child.hpp"
#include "clients/pipelined_sweep.hpp"
#include "clients/shm_client.hpp"
#include "common/affinity.hpp"
#include "common/tsc_clock.hpp"
#include "kernel/gbm.hpp"
#include "kernel/kernel.hpp"
#include "socket/socket_protocol.hpp"

namespace ipcfloor {
namespace {

constexpr int kSocketPatienceMs = 5000;

// The ECHO payload for request number `n`: distinct per request, so a stale or misrouted answer
// cannot pass for the right one.
Combo payload_for(std::uint64_t n) noexcept {
  const auto v = static_cast<std::int64_t>(n);
  return Combo{v, v ^ 0x5a5a, v + 1, v + 2, v + 3, ~v};
}

bool echoed(const ResponseSlot& response, const Combo& sent) noexcept {
  ResponseSlot expected{};
  expected.set_echo(sent);
  return std::memcmp(&response.pnl, &expected.pnl, sizeof(Combo)) == 0;
}

double percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(q * static_cast<double>(values.size() - 1) + 0.5);
  return values[std::min(rank, values.size() - 1)];
}

// What one scenario measured: a rate per window and an RTT per request.
struct Measured {
  std::vector<double> window_rates;  // requests per second, one per window
  std::vector<double> rtt_ns;        // one per request
};

nlohmann::json scenario_json(std::string name, std::string transport, std::size_t lanes, std::size_t in_flight,
                             Measured& measured, double step_ns) {
  const double p10 = percentile(measured.window_rates, 0.10);
  const double p50 = percentile(measured.window_rates, 0.50);
  const double p90 = percentile(measured.window_rates, 0.90);
  const std::size_t requests = measured.rtt_ns.size();
  const LatencySummary rtt = summarize(name, "rtt", measured.rtt_ns, step_ns);
  return nlohmann::json{
      {"name", std::move(name)},
      {"transport", std::move(transport)},
      {"lanes", lanes},
      {"in_flight", in_flight},
      {"windows", measured.window_rates.size()},
      {"requests", requests},
      {"rate_p10", p10},
      {"rate_p50", p50},
      {"rate_p90", p90},
      {"window_rates", measured.window_rates},
      {"rtt", to_json(rtt)},
  };
}

// Keeps `in_flight` ECHO frames outstanding in each client's rings (one thread, lanes visited in
// turn) until `windows` windows of `window_requests` answers each have been timed, after one
// untimed window of warm-up.
Expected<Measured> run_rings(std::span<ShmClient*> clients, std::uint32_t in_flight, const ThroughputOptions& options,
                             const TscClock& clock) {
  struct Lane {
    ShmClient* client;
    std::vector<std::uint64_t> submitted_at;  // by seq modulo the ring's capacity
    std::vector<std::uint64_t> number;        // request number by seq modulo capacity
  };
  std::vector<Lane> lanes;
  for (ShmClient* client : clients) {
    if (in_flight > client->capacity())
      return fail(ErrorCode::invalid_argument, "{} frames in flight exceed the ring's {} slots", in_flight,
                  client->capacity());
    lanes.push_back(Lane{client, std::vector<std::uint64_t>(client->capacity()),
                         std::vector<std::uint64_t>(client->capacity())});
  }
  const std::size_t timed = options.windows * options.window_requests;
  const std::size_t total = timed + options.window_requests;  // the first window warms up
  Measured measured;
  measured.rtt_ns.reserve(timed);
  measured.window_rates.reserve(options.windows);
  std::uint64_t next_number = 0;
  std::size_t done = 0;
  std::uint64_t window_start = TscClock::now();
  std::size_t issued = 0;
  while (done < total) {
    for (Lane& lane : lanes) {
      const std::uint32_t mask = lane.client->capacity() - 1;
      while (lane.client->outstanding() < in_flight && issued < total) {
        RequestSlot request{};
        request.opcode = static_cast<std::uint16_t>(Opcode::echo);
        request.params = payload_for(next_number);
        std::uint64_t seq = 0;
        const std::uint64_t t0 = TscClock::now();
        if (const CallStatus s = lane.client->submit(request, seq); s != CallStatus::ok)
          return fail(ErrorCode::io, "submit: {}", lane.client->describe(s));
        lane.submitted_at[seq & mask] = t0;
        lane.number[seq & mask] = next_number++;
        ++issued;
      }
      ResponseSlot response{};
      for (;;) {
        const CallStatus s = lane.client->poll(response);
        if (s == CallStatus::empty) break;
        const std::uint64_t t1 = TscClock::now();
        if (s != CallStatus::ok) return fail(ErrorCode::io, "poll: {}", lane.client->describe(s));
        if (response.status != static_cast<std::uint16_t>(Status::ok) ||
            !echoed(response, payload_for(lane.number[response.seq & mask])))
          return fail(ErrorCode::bad_data, "lane {}: the answer to seq {} is not its request's payload",
                      lane.client->lane(), response.seq);
        if (done >= options.window_requests) measured.rtt_ns.push_back(clock.to_ns(t1 - lane.submitted_at[response.seq & mask]));
        ++done;
        if (done % options.window_requests == 0) {
          const std::uint64_t now = TscClock::now();
          if (done > options.window_requests)
            measured.window_rates.push_back(static_cast<double>(options.window_requests) * 1e9 /
                                            clock.to_ns(now - window_start));
          window_start = now;
        }
      }
    }
  }
  return measured;
}

// One request at a time through the exchange line: call().
Expected<Measured> run_calls(ShmClient& client, const ThroughputOptions& options, const TscClock& clock) {
  const std::size_t timed = options.windows * options.window_requests;
  Measured measured;
  measured.rtt_ns.reserve(timed);
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::echo);
  ResponseSlot response{};
  std::uint64_t window_start = 0;
  for (std::size_t n = 0; n < timed + options.window_requests; ++n) {
    if (n % options.window_requests == 0) {
      const std::uint64_t now = TscClock::now();
      if (n > options.window_requests)
        measured.window_rates.push_back(static_cast<double>(options.window_requests) * 1e9 /
                                        clock.to_ns(now - window_start));
      window_start = now;
    }
    request.params = payload_for(n);
    const std::uint64_t t0 = TscClock::now();
    const CallStatus s = client.call(request, response);
    const std::uint64_t t1 = TscClock::now();
    if (s != CallStatus::ok) return fail(ErrorCode::io, "call: {}", client.describe(s));
    if (!echoed(response, request.params)) return fail(ErrorCode::bad_data, "call {}: wrong answer", n);
    if (n >= options.window_requests) measured.rtt_ns.push_back(clock.to_ns(t1 - t0));
  }
  const std::uint64_t now = TscClock::now();
  measured.window_rates.push_back(static_cast<double>(options.window_requests) * 1e9 / clock.to_ns(now - window_start));
  return measured;
}

Expected<void> write_all(int fd, const std::byte* data, std::size_t size) {
  while (size > 0) {
    const ssize_t wrote = ::send(fd, data, size, MSG_NOSIGNAL);
    if (wrote < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd p{fd, POLLOUT, 0};
        if (::poll(&p, 1, kSocketPatienceMs) <= 0) return fail(ErrorCode::timeout, "the socket stayed full");
        continue;
      }
      return fail(ErrorCode::io, "send: {}", std::strerror(errno));
    }
    data += wrote;
    size -= static_cast<std::size_t>(wrote);
  }
  return {};
}

Expected<void> read_exact(int fd, std::byte* data, std::size_t size) {
  while (size > 0) {
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, kSocketPatienceMs);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return fail(ErrorCode::timeout, "no answer from the socket server within {} ms", kSocketPatienceMs);
    const ssize_t got = ::recv(fd, data, size, 0);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got <= 0) return fail(ErrorCode::peer_gone, "the socket server closed the connection");
    data += got;
    size -= static_cast<std::size_t>(got);
  }
  return {};
}

// `in_flight` 48-byte ECHO_PARAMS frames pipelined on one Unix-socket connection. The server
// answers in order, so the oldest outstanding frame's clock read times each answer.
Expected<Measured> run_socket(int fd, std::size_t in_flight, const ThroughputOptions& options, const TscClock& clock) {
  const std::size_t timed = options.windows * options.window_requests;
  const std::size_t total = timed + options.window_requests;
  Measured measured;
  measured.rtt_ns.reserve(timed);
  std::vector<std::uint64_t> sent_at(in_flight);
  std::array<std::byte, kEchoParamsRequestBytes> frame{};
  std::array<std::byte, kEchoParamsReplyBytes> reply{};
  std::size_t issued = 0, done = 0;
  std::uint64_t window_start = TscClock::now();
  const auto send_one = [&]() -> Expected<void> {
    encode_echo_params_request(payload_for(issued), frame);
    sent_at[issued % in_flight] = TscClock::now();
    ++issued;
    return write_all(fd, frame.data(), frame.size());
  };
  while (issued < std::min(in_flight, total))
    if (auto sent = send_one(); !sent) return std::unexpected(sent.error());
  while (done < total) {
    if (auto got = read_exact(fd, reply.data(), reply.size()); !got) return std::unexpected(got.error());
    const std::uint64_t t1 = TscClock::now();
    const Combo expected = payload_for(done);
    if (load_le<std::uint32_t>(reply.data()) != kComboWireBytes ||
        std::memcmp(reply.data() + kLengthPrefixBytes, &expected, sizeof expected) != 0)
      return fail(ErrorCode::bad_data, "socket answer {} is not its request's payload", done);
    if (done >= options.window_requests) measured.rtt_ns.push_back(clock.to_ns(t1 - sent_at[done % in_flight]));
    ++done;
    if (done % options.window_requests == 0) {
      const std::uint64_t now = TscClock::now();
      if (done > options.window_requests)
        measured.window_rates.push_back(static_cast<double>(options.window_requests) * 1e9 /
                                        clock.to_ns(now - window_start));
      window_start = now;
    }
    if (issued < total)
      if (auto sent = send_one(); !sent) return std::unexpected(sent.error());
  }
  return measured;
}

Expected<void> same_results(std::string_view way, std::span<const BacktestResult> got,
                            std::span<const BacktestResult> expected) {
  if (got.size() != expected.size())
    return fail(ErrorCode::bad_data, "{}: {} results for {} combos", way, got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == expected[i]))
      return fail(ErrorCode::bad_data, "{}: combo {} gave pnl {} trades {}, in-process {} {}", way, i, got[i].pnl,
                  got[i].trades, expected[i].pnl, expected[i].trades);
  return {};
}

nlohmann::json grid_json(std::string name, std::string what, std::vector<double>& ms, std::size_t combos,
                         double inproc_p50_ms) {
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double p50 = percentile(sorted, 0.5);
  return nlohmann::json{
      {"name", std::move(name)},
      {"description", std::move(what)},
      {"samples_ms", ms},
      {"p50_ms", p50},
      {"min_ms", sorted.front()},
      {"max_ms", sorted.back()},
      {"combos_per_s", static_cast<double>(combos) * 1e3 / p50},
      {"overhead_vs_inproc", inproc_p50_ms > 0 ? p50 / inproc_p50_ms - 1.0 : 0.0},
  };
}

}  // namespace

Expected<nlohmann::json> run_throughput(const ThroughputOptions& options) {
  if (options.windows == 0 || options.window_requests == 0 || options.grid_repeats == 0)
    return fail(ErrorCode::invalid_argument, "throughput: windows, window requests and grid repeats must be > 0");
  const auto cpus = allowed_cpus();
  const int client_cpu = options.client_cpu >= 0 ? options.client_cpu : cpus.front();
  const int server_cpu = options.server_cpu >= 0 ? options.server_cpu : cpus.back();
  const std::string binary = options.binary.empty() ? self_executable() : options.binary;
  if (auto pinned = pin_current_thread(client_cpu); !pinned) return std::unexpected(pinned.error());
  const TscClock clock = TscClock::calibrate();
  const double step_ns = clock.step_ns();

  const auto engine_args = [&](std::string_view wait, int lanes) {
    std::vector<std::string> args{"--wait", std::string(wait), "--cpu", std::to_string(server_cpu), "--lanes",
                                  std::to_string(lanes)};
    if (options.ring_capacity != 0) {
      args.push_back("--ring-capacity");
      args.push_back(std::to_string(options.ring_capacity));
    }
    return args;
  };
  nlohmann::json scenarios = nlohmann::json::array();
  std::vector<std::uint32_t> depths;  // 1, 8 and a ring's capacity in flight, each once
  std::uint32_t capacity = 0;
  {
    // A spinning engine owns the server cpu while it lives: it serves the ECHO scenarios and is
    // stopped before anything else runs there.
    EngineChild engine(binary, unique_segment_name("throughput"), engine_args("spin", 4));
    if (!engine.up()) return fail(ErrorCode::io, "the engine did not come up ({} serve --wait spin)", binary);
    ShmClientOptions client_options;
    client_options.wait = WaitMode::spin;
    std::vector<std::unique_ptr<ShmClient>> clients;
    for (int i = 0; i < 4; ++i) {
      auto client = ShmClient::connect(engine.name(), client_options);
      if (!client) return std::unexpected(client.error());
      clients.push_back(std::make_unique<ShmClient>(std::move(*client)));
    }
    capacity = clients.front()->capacity();
    for (const std::uint32_t depth : {1u, 8u, capacity})
      if (depth <= capacity && std::find(depths.begin(), depths.end(), depth) == depths.end()) depths.push_back(depth);

    auto calls = run_calls(*clients.front(), options, clock);
    if (!calls) return std::unexpected(calls.error());
    scenarios.push_back(scenario_json("shm-call", "shm exchange line (call)", 1, 1, *calls, step_ns));
    for (const std::uint32_t in_flight : depths) {
      ShmClient* one[] = {clients.front().get()};
      auto rings = run_rings(one, in_flight, options, clock);
      if (!rings) return std::unexpected(rings.error());
      scenarios.push_back(scenario_json(fmt::format("shm-ring-1lane-{}", in_flight), "shm rings", 1, in_flight,
                                        *rings, step_ns));
    }
    for (const std::size_t lanes : {2u, 4u}) {
      std::vector<ShmClient*> some;
      for (std::size_t i = 0; i < lanes; ++i) some.push_back(clients[i].get());
      auto rings = run_rings(some, capacity, options, clock);
      if (!rings) return std::unexpected(rings.error());
      scenarios.push_back(scenario_json(fmt::format("shm-ring-{}lanes-{}", lanes, capacity), "shm rings", lanes,
                                        capacity * lanes, *rings, step_ns));
    }
  }

  // The 80-combo grid: in-process, streamed through one lane, and over the socket, interleaved
  // repeat by repeat so that each way sees the same host states.
  auto series = generate_gbm(GbmParams{});
  if (!series) return std::unexpected(series.error());
  std::vector<Combo> combos;
  for (const auto length : grid_lengths(6, 200, 80)) combos.push_back(combo_from_length(length));
  auto expected = run_sweep(*series, combos, kDefaultFee, 1);
  if (!expected) return std::unexpected(expected.error());

  auto server = start_socket_server(binary, server_cpu, false);
  if (!server) return std::unexpected(server.error());
  auto socket_client = connect_to(*server);
  if (!socket_client) return std::unexpected(socket_client.error());
  for (const std::size_t in_flight : depths) {
    auto piped = run_socket(socket_client->native_handle(), in_flight, options, clock);
    if (!piped) return std::unexpected(piped.error());
    scenarios.push_back(scenario_json(fmt::format("uds-1conn-{}", in_flight), "Unix socket", 1, in_flight, *piped,
                                      step_ns));
  }
  if (auto loaded = socket_client->load(*series); !loaded) return std::unexpected(loaded.error());

  // The grid's engine blocks when idle, so that it, the idle socket server and the in-process
  // sweep can share the server cpu: each way computes there on one thread, one way at a time.
  EngineChild grid_engine(binary, unique_segment_name("throughput-grid"), engine_args("block", 1));
  if (!grid_engine.up()) return fail(ErrorCode::io, "the engine did not come up ({} serve --wait block)", binary);
  ShmClientOptions grid_options;
  grid_options.wait = WaitMode::spin;
  auto grid_client = ShmClient::connect(grid_engine.name(), grid_options);
  if (!grid_client) return std::unexpected(grid_client.error());
  // run_sweep on a thread pinned to the server cpu: the core the engine and the server compute on.
  const auto sweep_on_server_cpu = [&](double& ms) -> Expected<std::vector<BacktestResult>> {
    Expected<std::vector<BacktestResult>> swept = std::unexpected(Error{ErrorCode::io, "not run"});
    std::thread worker([&] {
      if (auto pinned = pin_current_thread(server_cpu); !pinned) {
        swept = std::unexpected(pinned.error());
        return;
      }
      const std::uint64_t t0 = TscClock::now();
      swept = run_sweep(*series, combos, kDefaultFee, 1);
      ms = clock.to_ns(TscClock::now() - t0) / 1e6;
    });
    worker.join();
    return swept;
  };

  std::vector<double> inproc_ms, shm_ms, socket_ms;
  const auto ms_since = [&](std::uint64_t t0) { return clock.to_ns(TscClock::now() - t0) / 1e6; };
  for (std::size_t r = 0; r < options.grid_repeats; ++r) {
    double inproc = 0.0;
    auto swept = sweep_on_server_cpu(inproc);
    if (!swept) return std::unexpected(swept.error());
    inproc_ms.push_back(inproc);

    std::uint64_t t0 = TscClock::now();
    auto answers = run_all(*grid_client, combos, Opcode::backtest);
    shm_ms.push_back(ms_since(t0));
    if (!answers) return std::unexpected(answers.error());
    std::vector<BacktestResult> through_shm;
    for (const ResponseSlot& answer : *answers) {
      if (answer.status != static_cast<std::uint16_t>(Status::ok))
        return fail(ErrorCode::bad_data, "grid through the segment: status {}", answer.status);
      through_shm.push_back({answer.pnl, answer.trades});
    }
    if (auto same = same_results("grid through the segment", through_shm, *expected); !same)
      return std::unexpected(same.error());

    t0 = TscClock::now();
    auto over_socket = socket_client->sweep_loaded(combos);
    socket_ms.push_back(ms_since(t0));
    if (!over_socket) return std::unexpected(over_socket.error());
    if (auto same = same_results("grid over the socket", *over_socket, *expected); !same)
      return std::unexpected(same.error());
  }
  std::vector<double> sorted_inproc = inproc_ms;
  std::sort(sorted_inproc.begin(), sorted_inproc.end());
  const double inproc_p50 = percentile(sorted_inproc, 0.5);
  nlohmann::json grid = nlohmann::json::array();
  grid.push_back(grid_json("in-process", "run_sweep on one thread pinned to the server cpu", inproc_ms, combos.size(), inproc_p50));
  grid.push_back(grid_json("shm-rings", fmt::format("80 BACKTEST frames streamed through one lane, up to {} in flight, to "
                                                    "an engine in --wait block; it computes on its serving thread",
                                                    capacity),
                           shm_ms, combos.size(), inproc_p50));
  grid.push_back(grid_json("uds-stateful", "the 80 combos in one frame to a socket server holding the series",
                           socket_ms, combos.size(), inproc_p50));

  return nlohmann::json{
      {"suite", "throughput"},
      {"host", collect_host_info()},
      {"config",
       {{"windows", options.windows}, {"window_requests", options.window_requests},
        {"grid_repeats", options.grid_repeats}, {"ring_capacity", capacity}, {"client_cpu", client_cpu},
        {"server_cpu", server_cpu}, {"client_threads", 1}, {"engine_wait", "spin"}, {"clock_step_ns", step_ns}}},
      {"scenarios", scenarios},
      {"grid", grid},
  };
}

void print_throughput(const nlohmann::json& report) {
  const auto& config = report["config"];
  fmt::print("throughput: 48-byte ECHO frames, one client thread on cpu {}, engine spinning on cpu {}, {}-slot rings\n",
             config["client_cpu"].get<int>(), config["server_cpu"].get<int>(), config["ring_capacity"].get<unsigned>());
  fmt::print("  {:<22} {:>5} {:>9} {:>12} {:>12} {:>12} {:>10} {:>10}\n", "scenario", "lanes", "in flight",
             "req/s p10", "req/s p50", "req/s p90", "RTT p50", "RTT p99");
  for (const auto& s : report["scenarios"])
    fmt::print("  {:<22} {:>5} {:>9} {:>12.0f} {:>12.0f} {:>12.0f} {:>8.0f}ns {:>8.0f}ns\n", s["name"].get<std::string>(),
               s["lanes"].get<std::size_t>(), s["in_flight"].get<std::size_t>(), s["rate_p10"].get<double>(),
               s["rate_p50"].get<double>(), s["rate_p90"].get<double>(), s["rtt"]["p50"].get<double>(),
               s["rtt"]["p99"].get<double>());
  fmt::print("  the 80-combo grid on 150,000 bars, one computing thread each way ({} samples, interleaved):\n",
             config["grid_repeats"].get<std::size_t>());
  fmt::print("  {:<14} {:>9} {:>9} {:>9} {:>12} {:>10}\n", "way", "p50 ms", "min ms", "max ms", "combos/s", "vs inproc");
  for (const auto& g : report["grid"])
    fmt::print("  {:<14} {:>9.2f} {:>9.2f} {:>9.2f} {:>12.0f} {:>+9.2f}%\n", g["name"].get<std::string>(),
               g["p50_ms"].get<double>(), g["min_ms"].get<double>(), g["max_ms"].get<double>(),
               g["combos_per_s"].get<double>(), g["overhead_vs_inproc"].get<double>() * 100.0);
}

}  // namespace ipcfloor
