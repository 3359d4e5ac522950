#include "bench/ladder.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "bench/host_info.hpp"
#include "bench/latency.hpp"
#include "bench/transport_socket.hpp"
#include "bench/transports.hpp"
#include "engine/affinity.hpp"

namespace ipcfloor {

const std::vector<Transport>& all_transports() {
  static const std::vector<Transport> transports = {
      {"physical-floor", "one cache line bounced between the two pinned cores (no software)", run_physical_floor},
      {"inproc-call", "dispatch_request ECHO as an opaque function call on one thread (both sides on the client core)",
       run_inproc_call},
      {"moodycamel-thread", "two moodycamel::ReaderWriterQueue between two pinned threads of one process, both spinning",
       run_moodycamel_thread},
      {"shm-ring-spin", "ipcfloor segment, ECHO, engine in another process, both sides PAUSE-spin",
       [](const TransportContext& c) { return run_shm_ring(c, "spin"); }},
      {"shm-ring-backoff", "ipcfloor segment, ECHO, spin then yield then sleep",
       [](const TransportContext& c) { return run_shm_ring(c, "backoff"); }},
      {"shm-ring-block", "ipcfloor segment, ECHO, futex sleep and wake on both sides",
       [](const TransportContext& c) { return run_shm_ring(c, "block"); }},
      {"iceoryx", "iceoryx 2.0 request/response (popo::Client/Server) across processes, both busy-polling; own RouDi",
       run_iceoryx},
      {"boost-message-queue", "Boost.Interprocess message_queue pair to a forked process (shared mutex + condvar)",
       run_boost_message_queue},
      {"zeromq-ipc", "libzmq REQ/REP over ipc:// to a forked process", run_zeromq_ipc},
      {"uds", "the socket server over a Unix-domain socket: 48-byte echo_params frame (opcode 4)", run_uds_echo},
      {"tcp", "the socket server over TCP loopback, TCP_NODELAY: 48-byte echo_params frame (opcode 4)", run_tcp_echo},
      {"spawn", "a process per call: `ipcfloor stdio` on stdin/stdout, spawn to reap; at most 2000 samples, 50 warm-up",
       run_spawn},
  };
  return transports;
}

Expected<nlohmann::json> run_ladder(const LadderOptions& options) {
  const auto& registry = all_transports();
  std::vector<const Transport*> chosen;
  if (options.transports.empty()) {
    for (const Transport& t : registry) chosen.push_back(&t);
  } else {
    for (const std::string& name : options.transports) {
      const auto it = std::find_if(registry.begin(), registry.end(), [&](const Transport& t) { return t.name == name; });
      if (it == registry.end()) {
        std::string known;
        for (const Transport& t : registry) known += (known.empty() ? "" : ", ") + t.name;
        return fail(ErrorCode::invalid_argument, "unknown transport '{}'; known: {}", name, known);
      }
      chosen.push_back(&*it);
    }
  }
  const auto cpus = allowed_cpus();
  if (cpus.size() < 2 && (options.client_cpu < 0 || options.server_cpu < 0))
    return fail(ErrorCode::resource, "the ladder needs two cores (one per side); this process may use {}", cpus.size());
  const TscClock clock = TscClock::calibrate();
  TransportContext context;
  context.samples = options.samples;
  context.warmup = options.warmup;
  context.client_cpu = options.client_cpu >= 0 ? options.client_cpu : cpus.front();
  context.server_cpu = options.server_cpu >= 0 ? options.server_cpu : cpus.back();
  context.binary = options.binary.empty() ? self_executable() : options.binary;
  context.clock = &clock;

  nlohmann::json results = nlohmann::json::array();
  nlohmann::json skipped = nlohmann::json::array();
  for (const Transport* transport : chosen) {
    auto samples = transport->run(context);
    if (!samples) {
      skipped.push_back({{"name", transport->name}, {"reason", samples.error().message}});
      continue;
    }
    auto summary = summarize(transport->name, "rtt", *samples);
    auto row = to_json(summary);
    row["description"] = transport->description;
    results.push_back(row);
  }
  // Ratios within this run: each rung's p50 over the physical floor's.
  nlohmann::json ratios = nlohmann::json::object();
  const auto floor = std::find_if(results.begin(), results.end(), [](const auto& r) { return r["name"] == "physical-floor"; });
  if (floor != results.end()) {
    for (const auto& r : results)
      if (r["name"] != "physical-floor")
        ratios[r["name"].get<std::string>() + "/physical-floor"] = r["p50"].get<double>() / (*floor)["p50"].get<double>();
  }
  const auto spin = std::find_if(results.begin(), results.end(), [](const auto& r) { return r["name"] == "shm-ring-spin"; });
  if (spin != results.end()) {
    for (const auto& r : results)
      if (r["name"] != "shm-ring-spin" && r["name"] != "physical-floor")
        ratios[r["name"].get<std::string>() + "/shm-ring-spin"] = r["p50"].get<double>() / (*spin)["p50"].get<double>();
  }
  return nlohmann::json{
      {"suite", "ladder"},
      {"host", collect_host_info()},
      {"config",
       {{"payload_bytes", 48}, {"samples", options.samples}, {"warmup", options.warmup},
        {"client_cpu", context.client_cpu}, {"server_cpu", context.server_cpu}, {"tsc_ghz", clock.ghz()},
        {"timer", "rdtsc (lfence-ordered), calibrated against steady_clock"}}},
      {"results", results},
      {"skipped", skipped},
      {"ratios", ratios},
  };
}

void print_ladder(const nlohmann::json& report) {
  const auto& config = report["config"];
  fmt::print("ladder: RTT of a 48-byte request and its reply, ns; {} samples each after {} warm-up; client cpu {}, server cpu {}\n",
             config["samples"].get<std::size_t>(), config["warmup"].get<std::size_t>(), config["client_cpu"].get<int>(),
             config["server_cpu"].get<int>());
  fmt::print("  {:<22} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9}\n", "transport", "p50", "p90", "p99", "p99.9",
             "p99.99", "max", "p50/floor");
  double floor = 0;
  for (const auto& r : report["results"])
    if (r["name"] == "physical-floor") floor = r["p50"].get<double>();
  for (const auto& r : report["results"]) {
    const std::string ratio = floor > 0 ? fmt::format("{:.2f}x", r["p50"].get<double>() / floor) : "-";
    fmt::print("  {:<22} {:>9.0f} {:>9.0f} {:>9.0f} {:>9.0f} {:>10.0f} {:>10.0f} {:>9}\n", r["name"].get<std::string>(),
               r["p50"].get<double>(), r["p90"].get<double>(), r["p99"].get<double>(), r["p999"].get<double>(),
               r["p9999"].get<double>(), r["max"].get<double>(), ratio);
  }
  for (const auto& s : report["skipped"])
    fmt::print("  {:<22} skipped: {}\n", s["name"].get<std::string>(), s["reason"].get<std::string>());
}

}  // namespace ipcfloor
