#include "bench/throughput_bench.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "bench/host_info.hpp"
#include "bench/latency.hpp"
#include "bench/percentile.hpp"
#include "bench/socket_server_child.hpp"
#include "bench/suite_common.hpp"
#include "clients/pipelined_sweep.hpp"
#include "clients/shm_client.hpp"
#include "common/affinity.hpp"
#include "common/tsc_clock.hpp"
#include "data/gbm.hpp"
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

// What one scenario measured: a rate per window and an RTT per request.
struct Measured {
  std::vector<double> window_rates;  // requests per second, one per window
  std::vector<double> rtt_ns;        // one per request
};

// Counts answers into windows of `window_requests`. The first window warms up; after it, each
// answer's RTT and each window's rate (its answers over the time since the previous window
// closed) are kept. One per scenario run; allocates its vectors up front.
class WindowTally {
 public:
  WindowTally(const ThroughputOptions& options, const TscClock& clock)
      : window_(options.window_requests), total_((options.windows + 1) * options.window_requests), clock_(clock) {
    measured_.rtt_ns.reserve(options.windows * options.window_requests);
    measured_.window_rates.reserve(options.windows);
  }

  // Answers to wait for, the warm-up window included.
  [[nodiscard]] std::size_t total() const noexcept { return total_; }
  [[nodiscard]] std::size_t done() const noexcept { return done_; }

  // One answer, read at `answered_at` for a request sent at `sent_at` (TscClock ticks).
  void answered(std::uint64_t sent_at, std::uint64_t answered_at) {
    if (done_ >= window_) measured_.rtt_ns.push_back(clock_.to_ns(answered_at - sent_at));
    ++done_;
    if (done_ % window_ != 0) return;
    const std::uint64_t now = TscClock::now();
    if (done_ > window_)
      measured_.window_rates.push_back(static_cast<double>(window_) * 1e9 / clock_.to_ns(now - window_start_));
    window_start_ = now;
  }

  [[nodiscard]] Measured take() { return std::move(measured_); }

 private:
  const std::size_t window_;
  const std::size_t total_;
  const TscClock& clock_;
  Measured measured_;
  std::size_t done_ = 0;
  std::uint64_t window_start_ = TscClock::now();
};

nlohmann::json scenario_json(std::string name, std::string transport, std::size_t lanes, std::size_t in_flight,
                             Measured& measured, double step_ns) {
  const double p10 = percentile(measured.window_rates, 10);
  const double p50 = percentile(measured.window_rates, 50);
  const double p90 = percentile(measured.window_rates, 90);
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

// Keeps `in_flight` ECHO frames in one lane's rings with pipelined_sweep, the loop every client
// streams with, until `windows` windows of `window_requests` answers each have been timed, after
// one untimed window of warm-up. Each answer's RTT runs from just before its submit to its read.
Expected<Measured> run_one_lane(ShmClient& client, std::uint32_t in_flight, const ThroughputOptions& options,
                                const TscClock& clock) {
  if (in_flight > client.capacity())
    return fail(ErrorCode::invalid_argument, "{} frames in flight exceed the ring's {} slots", in_flight,
                client.capacity());
  WindowTally tally(options, clock);
  std::vector<std::uint64_t> submitted_at(client.capacity());  // by request number modulo the capacity
  const std::size_t mask = client.capacity() - 1;
  Combo payload{};
  std::optional<std::size_t> wrong;
  const SweepEnd end = pipelined_sweep(
      client, tally.total(),
      [&](std::size_t i) {
        payload = payload_for(i);
        submitted_at[i & mask] = TscClock::now();
        return SweepRequest{Opcode::echo, 0, payload_of(payload)};
      },
      [&](std::size_t i, const ResponseSlot& answer) {
        const std::uint64_t t1 = TscClock::now();
        if (!wrong && (answer.status != static_cast<std::uint16_t>(Status::ok) || !echoed(answer, payload_for(i))))
          wrong = i;
        tally.answered(submitted_at[i & mask], t1);
      },
      in_flight);
  if (end.status != CallStatus::ok)
    return fail(ErrorCode::io, "lane {}: {}", client.lane(), client.describe(end.status));
  if (wrong)
    return fail(ErrorCode::bad_data, "lane {}: the answer to request {} is not its payload", client.lane(), *wrong);
  return tally.take();
}

// Keeps `in_flight` ECHO frames outstanding in each client's rings (one thread, lanes visited in
// turn) until `windows` windows of `window_requests` answers each have been timed, after one
// untimed window of warm-up. Not pipelined_sweep: that loop serves one lane and waits for its next
// answer, while this one reads whichever lane has answers (poll) so that no lane drains while
// another is waited on.
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
  WindowTally tally(options, clock);
  std::uint64_t next_number = 0;
  std::size_t issued = 0;
  while (tally.done() < tally.total()) {
    for (Lane& lane : lanes) {
      const std::uint32_t mask = lane.client->capacity() - 1;
      while (lane.client->outstanding() < in_flight && issued < tally.total()) {
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
        tally.answered(lane.submitted_at[response.seq & mask], t1);
      }
    }
  }
  return tally.take();
}

// One request at a time through the exchange line: call().
Expected<Measured> run_calls(ShmClient& client, const ThroughputOptions& options, const TscClock& clock) {
  WindowTally tally(options, clock);
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::echo);
  ResponseSlot response{};
  for (std::size_t n = 0; n < tally.total(); ++n) {
    request.params = payload_for(n);
    const std::uint64_t t0 = TscClock::now();
    const CallStatus s = client.call(request, response);
    const std::uint64_t t1 = TscClock::now();
    if (s != CallStatus::ok) return fail(ErrorCode::io, "call: {}", client.describe(s));
    if (!echoed(response, request.params)) return fail(ErrorCode::bad_data, "call {}: wrong answer", n);
    tally.answered(t0, t1);
  }
  return tally.take();
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
  WindowTally tally(options, clock);
  std::vector<std::uint64_t> sent_at(in_flight);
  std::array<std::byte, kEchoParamsRequestBytes> frame{};
  std::array<std::byte, kEchoParamsReplyBytes> reply{};
  std::size_t issued = 0;
  const auto send_one = [&]() -> Expected<void> {
    encode_echo_params_request(payload_for(issued), frame);
    sent_at[issued % in_flight] = TscClock::now();
    ++issued;
    return write_all(fd, frame.data(), frame.size());
  };
  while (issued < std::min(in_flight, tally.total()))
    if (auto sent = send_one(); !sent) return std::unexpected(sent.error());
  while (tally.done() < tally.total()) {
    if (auto got = read_exact(fd, reply.data(), reply.size()); !got) return std::unexpected(got.error());
    const std::uint64_t t1 = TscClock::now();
    const std::size_t done = tally.done();
    const Combo expected = payload_for(done);
    if (load_le<std::uint32_t>(reply.data()) != kComboWireBytes ||
        std::memcmp(reply.data() + kLengthPrefixBytes, &expected, sizeof expected) != 0)
      return fail(ErrorCode::bad_data, "socket answer {} is not its request's payload", done);
    tally.answered(sent_at[done % in_flight], t1);
    if (issued < tally.total())
      if (auto sent = send_one(); !sent) return std::unexpected(sent.error());
  }
  return tally.take();
}

nlohmann::json grid_json(std::string name, std::string what, std::vector<double>& ms, std::size_t combos,
                         double inproc_p50_ms) {
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double p50 = sorted_percentile(sorted, 50);
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

// What every scenario of the suite shares: the options, where it runs, the clock, and the rows
// so far. A new row is a function that takes it and pushes its row.
struct ThroughputRun {
  const ThroughputOptions& options;
  SuitePlacement where;
  TscClock clock;
  double step_ns = 0;
  nlohmann::json scenarios = nlohmann::json::array();
  nlohmann::json grid = nlohmann::json::array();
  std::vector<std::uint32_t> depths{};  // 1, 8 and a ring's capacity in flight, each once
  std::uint32_t capacity = 0;         // slots per ring of the engine

  // `serve` arguments for an engine on the server cpu.
  [[nodiscard]] std::vector<std::string> engine_args(std::string_view wait, int lanes) const {
    // No workers: the ECHO scenarios need none, and the grid here is the one-core comparison (the
    // workers have their own section, bench/scaling_bench.hpp).
    std::vector<std::string> args{"--wait", std::string(wait), "--cpu", std::to_string(where.server_cpu), "--lanes",
                                  std::to_string(lanes), "--workers", "0"};
    if (options.ring_capacity != 0) {
      args.push_back("--ring-capacity");
      args.push_back(std::to_string(options.ring_capacity));
    }
    return args;
  }
};

// One request at a time through the exchange line.
Expected<void> scenario_shm_call(ThroughputRun& run, ShmClient& client) {
  auto calls = run_calls(client, run.options, run.clock);
  if (!calls) return std::unexpected(calls.error());
  run.scenarios.push_back(scenario_json("shm-call", "shm exchange line (call)", 1, 1, *calls, run.step_ns));
  return {};
}

// 1, 8 and a ring's capacity in flight through one lane.
Expected<void> scenario_ring_depths(ThroughputRun& run, ShmClient& client) {
  for (const std::uint32_t in_flight : run.depths) {
    auto rings = run_one_lane(client, in_flight, run.options, run.clock);
    if (!rings) return std::unexpected(rings.error());
    run.scenarios.push_back(scenario_json(fmt::format("shm-ring-1lane-{}", in_flight), "shm rings", 1, in_flight,
                                          *rings, run.step_ns));
  }
  return {};
}

// A ring's capacity in flight in each of `lanes` lanes, one client thread visiting them in turn.
Expected<void> scenario_ring_lanes(ThroughputRun& run, std::span<ShmClient*> clients) {
  auto rings = run_rings(clients, run.capacity, run.options, run.clock);
  if (!rings) return std::unexpected(rings.error());
  run.scenarios.push_back(scenario_json(fmt::format("shm-ring-{}lanes-{}", clients.size(), run.capacity), "shm rings",
                                        clients.size(), run.capacity * clients.size(), *rings, run.step_ns));
  return {};
}

// The ECHO scenarios through the segment. A spinning engine owns the server cpu while it lives:
// it is stopped before anything else runs there.
Expected<void> shm_scenarios(ThroughputRun& run) {
  EngineChild engine(run.where.binary, unique_segment_name("throughput"), run.engine_args("spin", 4));
  if (!engine.up()) return fail(ErrorCode::io, "the engine did not come up ({} serve --wait spin)", run.where.binary);
  ShmClientOptions client_options;
  client_options.wait = WaitMode::spin;
  std::vector<std::unique_ptr<ShmClient>> clients;
  for (int i = 0; i < 4; ++i) {
    auto client = ShmClient::connect(engine.name(), client_options);
    if (!client) return std::unexpected(client.error());
    clients.push_back(std::make_unique<ShmClient>(std::move(*client)));
  }
  run.capacity = clients.front()->capacity();
  for (const std::uint32_t depth : {1u, 8u, run.capacity})
    if (depth <= run.capacity && std::find(run.depths.begin(), run.depths.end(), depth) == run.depths.end())
      run.depths.push_back(depth);
  if (auto call = scenario_shm_call(run, *clients.front()); !call) return call;
  if (auto depths = scenario_ring_depths(run, *clients.front()); !depths) return depths;
  for (const std::size_t lanes : {2u, 4u}) {
    std::vector<ShmClient*> some;
    for (std::size_t i = 0; i < lanes; ++i) some.push_back(clients[i].get());
    if (auto spread = scenario_ring_lanes(run, some); !spread) return spread;
  }
  return {};
}

// The same 48-byte frames pipelined over one Unix-socket connection, at each depth.
Expected<void> scenario_socket_depths(ThroughputRun& run, SocketClient& client) {
  for (const std::size_t in_flight : run.depths) {
    auto piped = run_socket(client.native_handle(), in_flight, run.options, run.clock);
    if (!piped) return std::unexpected(piped.error());
    run.scenarios.push_back(scenario_json(fmt::format("uds-1conn-{}", in_flight), "Unix socket", 1, in_flight, *piped,
                                          run.step_ns));
  }
  return {};
}

// One way of computing the 80-combo grid: runs it once, checks the answers, returns the ms.
struct GridWay {
  std::string name;
  std::string description;
  std::function<Expected<double>()> run_once;
  std::vector<double> ms;
};

// run_sweep on a thread pinned to the server cpu: the core the engine and the server compute on.
Expected<double> grid_in_process(const ThroughputRun& run, std::span<const double> series,
                                 std::span<const Combo> combos, std::span<const BacktestResult> expected) {
  Expected<std::vector<BacktestResult>> swept = std::unexpected(Error{ErrorCode::io, "not run"});
  double ms = 0.0;
  std::thread worker([&] {
    if (auto pinned = pin_current_thread(run.where.server_cpu); !pinned) {
      swept = std::unexpected(pinned.error());
      return;
    }
    const std::uint64_t t0 = TscClock::now();
    swept = run_sweep(builtin(), series, combos, kDefaultFee, 1);
    ms = run.clock.to_ns(TscClock::now() - t0) / 1e6;
  });
  worker.join();
  if (!swept) return std::unexpected(swept.error());
  if (auto same = same_results("grid in process", *swept, expected); !same) return std::unexpected(same.error());
  return ms;
}

// The grid as BACKTEST frames streamed through one lane of an engine in --wait block.
Expected<double> grid_through_rings(const ThroughputRun& run, ShmClient& client, std::span<const Combo> combos,
                                    std::span<const BacktestResult> expected) {
  const std::uint64_t t0 = TscClock::now();
  auto answers = run_all(client, combos, Opcode::backtest);
  const double ms = run.clock.to_ns(TscClock::now() - t0) / 1e6;
  if (!answers) return std::unexpected(answers.error());
  std::vector<BacktestResult> through_shm;
  for (const ResponseSlot& answer : *answers) {
    if (answer.status != static_cast<std::uint16_t>(Status::ok))
      return fail(ErrorCode::bad_data, "grid through the segment: status {}", answer.status);
    through_shm.push_back({answer.pnl, answer.trades});
  }
  if (auto same = same_results("grid through the segment", through_shm, expected); !same)
    return std::unexpected(same.error());
  return ms;
}

// The grid in one sweep_loaded frame to a socket server holding the series.
Expected<double> grid_over_socket(const ThroughputRun& run, SocketClient& client, std::span<const Combo> combos,
                                  std::span<const BacktestResult> expected) {
  const std::uint64_t t0 = TscClock::now();
  auto answers = client.sweep_loaded(combos);
  const double ms = run.clock.to_ns(TscClock::now() - t0) / 1e6;
  if (!answers) return std::unexpected(answers.error());
  if (auto same = same_results("grid over the socket", *answers, expected); !same) return std::unexpected(same.error());
  return ms;
}

// Every way once per repeat, interleaved so that each sees the same host states; the first way
// is the in-process reference of the overhead column.
Expected<void> run_grid_ways(ThroughputRun& run, std::vector<GridWay>& ways, std::size_t combos) {
  for (std::size_t r = 0; r < run.options.grid_repeats; ++r)
    for (GridWay& way : ways) {
      auto ms = way.run_once();
      if (!ms) return std::unexpected(ms.error());
      way.ms.push_back(*ms);
    }
  const double reference_p50 = percentile(ways.front().ms, 50);
  for (GridWay& way : ways) run.grid.push_back(grid_json(way.name, way.description, way.ms, combos, reference_p50));
  return {};
}

// The 80-combo grid: in-process, streamed through one lane, and over the socket. The grid's
// engine blocks when idle, so that it, the idle socket server and the in-process sweep can share
// the server cpu: each way computes there on one thread, one way at a time.
Expected<void> grid_scenarios(ThroughputRun& run, SocketClient& socket_client, std::span<const double> series) {
  const std::vector<Combo> combos = default_grid_combos();
  auto expected = run_sweep(builtin(), series, combos, kDefaultFee, 1);
  if (!expected) return std::unexpected(expected.error());
  if (auto loaded = socket_client.load(series); !loaded) return std::unexpected(loaded.error());
  EngineChild grid_engine(run.where.binary, unique_segment_name("throughput-grid"), run.engine_args("block", 1));
  if (!grid_engine.up())
    return fail(ErrorCode::io, "the engine did not come up ({} serve --wait block)", run.where.binary);
  ShmClientOptions grid_options;
  grid_options.wait = WaitMode::spin;
  auto grid_client = ShmClient::connect(grid_engine.name(), grid_options);
  if (!grid_client) return std::unexpected(grid_client.error());
  std::vector<GridWay> ways;
  ways.push_back({"in-process", "run_sweep on one thread pinned to the server cpu",
                  [&] { return grid_in_process(run, series, combos, *expected); }, {}});
  ways.push_back({"shm-rings",
                  fmt::format("80 BACKTEST frames streamed through one lane, up to {} in flight, to an engine in --wait "
                              "block without workers (--workers 0); it computes on its serving thread",
                              run.capacity),
                  [&] { return grid_through_rings(run, *grid_client, combos, *expected); }, {}});
  ways.push_back({"uds-stateful", "the 80 combos in one frame to a socket server holding the series",
                  [&] { return grid_over_socket(run, socket_client, combos, *expected); }, {}});
  return run_grid_ways(run, ways, combos.size());
}

}  // namespace

Expected<nlohmann::json> run_throughput(const ThroughputOptions& options) {
  if (options.windows == 0 || options.window_requests == 0 || options.grid_repeats == 0)
    return fail(ErrorCode::invalid_argument, "throughput: windows, window requests and grid repeats must be > 0");
  if (options.with_workers) {
    // The workers section comes last: a bad option of its own is refused before the minutes the others take.
    if (auto checked = check_scaling(options.workers); !checked) return std::unexpected(checked.error());
  }
  ThroughputRun run{options, place_suite(options.client_cpu, options.server_cpu, options.binary), TscClock::calibrate()};
  run.step_ns = run.clock.step_ns();
  if (auto pinned = pin_current_thread(run.where.client_cpu); !pinned) return std::unexpected(pinned.error());
  if (auto shm = shm_scenarios(run); !shm) return std::unexpected(shm.error());

  auto series = generate_gbm(GbmParams{});
  if (!series) return std::unexpected(series.error());
  auto server = start_socket_server(run.where.binary, run.where.server_cpu, false);
  if (!server) return std::unexpected(server.error());
  // The grid travels in one frame: its answer takes seconds on a slow host or a sanitizer build.
  SocketClientOptions socket_options;
  socket_options.timeout = std::chrono::seconds(600);
  auto socket_client = connect_to(*server, socket_options);
  if (!socket_client) return std::unexpected(socket_client.error());
  if (auto piped = scenario_socket_depths(run, *socket_client); !piped) return std::unexpected(piped.error());
  if (auto grid = grid_scenarios(run, *socket_client, *series); !grid) return std::unexpected(grid.error());
  nlohmann::json workers;
  if (options.with_workers) {
    ScalingOptions scaling = options.workers;
    if (scaling.binary.empty()) scaling.binary = run.where.binary;
    auto scaled = run_scaling(scaling);
    if (!scaled) return std::unexpected(scaled.error());
    workers = std::move(*scaled);
  }

  return nlohmann::json{
      {"suite", "throughput"},
      {"host", collect_host_info()},
      {"config",
       {{"windows", options.windows}, {"window_requests", options.window_requests},
        {"grid_repeats", options.grid_repeats}, {"ring_capacity", run.capacity},
        {"client_cpu", run.where.client_cpu}, {"server_cpu", run.where.server_cpu}, {"client_threads", 1},
        {"engine_wait", "spin"}, {"clock_step_ns", run.step_ns}}},
      {"scenarios", run.scenarios},
      {"grid", run.grid},
      {"workers", workers},
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
  if (report.contains("workers") && !report["workers"].is_null()) print_scaling(report["workers"]);
}

}  // namespace ipcfloor
