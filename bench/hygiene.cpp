#include "bench/hygiene.hpp"

#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "bench/host_info.hpp"
#include "bench/memory_bench.hpp"
#include "bench/socket_server_child.hpp"
#include "bench/suite_common.hpp"
#include "bench/thread_probe.hpp"
#include "bench/transports.hpp"
#include "clients/shm_client.hpp"
#include "common/affinity.hpp"

namespace ipcfloor {
namespace {

// Waits (bounded) for thread `name` of `pid`: a server is reachable before its serving thread
// has started and named itself.
Expected<pid_t> wait_for_thread(pid_t pid, const std::string& name) {
  for (int tries = 0; tries < 400; ++tries) {
    if (const pid_t tid = find_thread(pid, name); tid >= 0) return tid;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return fail(ErrorCode::io, "cannot find the serving thread ({}) in pid {}", name, pid);
}

// Runs `request(i)` (one round trip; Expected<void>) after 1000 of warm-up, in two passes on
// thread `tid` of `pid`: `traced` requests under a syscall tracer (syscalls entered), then
// `counted` requests without it (faults and context switches; a traced thread stops twice per
// syscall, which /proc counts as voluntary switches, so they are taken untraced).
template <class Request>
Expected<nlohmann::json> measure(pid_t pid, pid_t tid, std::size_t traced, std::size_t counted, Request&& request) {
  for (std::size_t i = 0; i < 1000; ++i)  // warm-up: faults of first use happen here, not in the count
    if (auto done = request(i); !done) return std::unexpected(done.error());
  SyscallCounter syscalls;
  if (auto started = syscalls.start(tid); !started) return std::unexpected(started.error());
  for (std::size_t i = 0; i < traced; ++i) {
    if (auto done = request(i); !done) {
      (void)syscalls.stop();
      return std::unexpected(done.error());
    }
  }
  auto entered = syscalls.stop();
  if (!entered) return std::unexpected(entered.error());

  auto before = read_thread_counters(pid, tid);
  if (!before) return std::unexpected(before.error());
  for (std::size_t i = 0; i < counted; ++i)
    if (auto done = request(i); !done) return std::unexpected(done.error());
  auto after = read_thread_counters(pid, tid);
  if (!after) return std::unexpected(after.error());
  const auto per = [](std::uint64_t n, std::size_t of) { return static_cast<double>(n) / static_cast<double>(of); };
  const std::uint64_t minor = after->minor_faults - before->minor_faults;
  const std::uint64_t major = after->major_faults - before->major_faults;
  const std::uint64_t voluntary = after->voluntary_switches - before->voluntary_switches;
  const std::uint64_t involuntary = after->involuntary_switches - before->involuntary_switches;
  return nlohmann::json{
      {"requests", counted},
      {"traced_requests", traced},
      {"syscalls", *entered},
      {"minor_faults", minor},
      {"major_faults", major},
      {"voluntary_switches", voluntary},
      {"involuntary_switches", involuntary},
      {"syscalls_per_request", per(*entered, traced)},
      {"faults_per_request", per(minor + major, counted)},
      {"switches_per_request", per(voluntary + involuntary, counted)},
  };
}

// Live APPENDs through the exchange line of an engine with a journal (--fsync none, in a fresh
// folder under /var/tmp): the serving thread hands each record to the journal's writer thread and
// takes its outcome back without a system call of its own.
Expected<nlohmann::json> journaled_appends(const HygieneOptions& options, const std::string& binary, int server_cpu,
                                           WaitMode mode) {
  char folder[] = "/var/tmp/ipcfloor-hygiene-XXXXXX";
  if (::mkdtemp(folder) == nullptr) return fail(ErrorCode::io, "cannot make a folder for the journal under /var/tmp");
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove_all(path); }
  } remove{folder};
  const std::size_t bars = 2000 + 1000 + 2 * options.append_requests;
  EngineChild engine(binary, unique_segment_name("hygiene-journal"),
                     {"--wait", options.wait, "--cpu", std::to_string(server_cpu), "--bars", "2000", "--workers", "0",
                      "--live", "--capacity", std::to_string(bars), "--journal", std::string(folder) + "/j",
                      "--fsync", "none"});
  if (!engine.up()) return fail(ErrorCode::io, "the engine with a journal did not come up");
  ShmClientOptions client_options;
  client_options.wait = mode;
  auto client = ShmClient::connect(engine.name(), client_options);
  if (!client) return std::unexpected(client.error());
  auto tid = wait_for_thread(engine.pid(), "ipcf-serve");
  if (!tid) return std::unexpected(tid.error());
  double close = 100.0;
  auto row = measure(engine.pid(), *tid, options.append_requests, options.append_requests,
                     [&](std::size_t i) -> Expected<void> {
                       close *= i % 3 == 0 ? 1.001 : 0.9995;
                       ResponseSlot response{};
                       const CallStatus status = client->append(close, i, response);
                       if (status != CallStatus::ok) return fail(ErrorCode::io, "{}", client->describe(status));
                       if (response.status != static_cast<std::uint16_t>(Status::ok))
                         return fail(ErrorCode::protocol, "append {} answered {}", i,
                                     to_string(static_cast<Status>(response.status)));
                       return {};
                     });
  if (!row) return std::unexpected(row.error());
  (*row)["transport"] = "shm-call-" + options.wait;
  (*row)["side"] = "engine serving thread";
  (*row)["opcode"] = "append (journaled)";
  return row;
}

}  // namespace

Expected<nlohmann::json> run_hygiene(const HygieneOptions& options) {
  const auto [client_cpu, server_cpu, binary] = place_suite(options.client_cpu, options.server_cpu, options.binary);
  auto mode = parse_wait_mode(options.wait);
  if (!mode) return std::unexpected(mode.error());
  if (auto pinned = pin_current_thread(client_cpu); !pinned) return std::unexpected(pinned.error());
  nlohmann::json results = nlohmann::json::array();
  // The BACKTESTs go to a worker: on a cpu of its own where the host has one besides the
  // client's and the server's; else it shares the client's, and the client waits in backoff mode
  // so that it yields to it (how the client waits does not change what the serving thread does).
  int worker_cpu = client_cpu;
  for (const int cpu : allowed_cpus())
    if (cpu != client_cpu && cpu != server_cpu) worker_cpu = cpu;
  const bool worker_shares_client = worker_cpu == client_cpu;
  {
    EngineChild engine(binary, unique_segment_name("hygiene"),
                       {"--wait", options.wait, "--cpu", std::to_string(server_cpu), "--bars", "2000",
                        "--worker-cpus", std::to_string(worker_cpu)});
    if (!engine.up()) return fail(ErrorCode::io, "the engine did not come up");
    ShmClientOptions client_options;
    client_options.wait = worker_shares_client ? WaitMode::backoff : *mode;
    auto client = ShmClient::connect(engine.name(), client_options);
    if (!client) return std::unexpected(client.error());
    auto tid = wait_for_thread(engine.pid(), "ipcf-serve");
    if (!tid) return std::unexpected(tid.error());
    // Both ways a client reaches the engine: the exchange line (call) and the rings (one frame in
    // flight, submit + wait_response).
    for (const bool through_ring : {false, true}) {
      for (const auto& [opcode, count] : {std::pair{Opcode::echo, options.echo_requests},
                                          std::pair{Opcode::backtest, options.backtest_requests}}) {
        RequestSlot request{};
        request.opcode = static_cast<std::uint16_t>(opcode);
        request.params = combo_from_length(20);
        ResponseSlot response{};
        auto row = measure(engine.pid(), *tid, count, count, [&](std::size_t i) -> Expected<void> {
          request.params.s = 1 + static_cast<std::int64_t>(i % 7);
          CallStatus status = CallStatus::ok;
          if (through_ring) {
            std::uint64_t seq = 0;
            status = client->submit(request, seq);
            if (status == CallStatus::ok) status = client->wait_response(response);
          } else {
            status = client->call(request, response);
          }
          if (status != CallStatus::ok) return fail(ErrorCode::io, "{}", client->describe(status));
          if (response.status != static_cast<std::uint16_t>(Status::ok))
            return fail(ErrorCode::protocol, "request {} answered {}", i, to_string(static_cast<Status>(response.status)));
          return {};
        });
        if (!row) return std::unexpected(row.error());
        (*row)["transport"] = (through_ring ? "shm-ring-" : "shm-call-") + options.wait;
        (*row)["side"] = "engine serving thread";
        (*row)["opcode"] = opcode == Opcode::echo ? "echo" : "backtest";
        results.push_back(*row);
      }
    }
  }
  if (options.append_requests != 0) {
    auto row = journaled_appends(options, binary, server_cpu, worker_shares_client ? WaitMode::backoff : *mode);
    if (!row) return std::unexpected(row.error());
    results.push_back(std::move(*row));
  }
  {
    // The socket baseline's server thread, answering the same 48-byte echo (opcode 4).
    auto server = start_socket_server(binary, server_cpu, false);
    if (!server) return std::unexpected(server.error());
    auto client = connect_to(*server);
    if (!client) return std::unexpected(client.error());
    auto tid = wait_for_thread(server->process.pid(), "ipcf-sock");
    if (!tid) return std::unexpected(tid.error());
    auto row = measure(server->process.pid(), *tid, options.socket_traced_requests, options.socket_requests, [&](std::size_t i) -> Expected<void> {
      const Combo sent = ladder_payload(i);
      auto back = client->echo_params(sent);
      if (!back) return std::unexpected(back.error());
      if (*back != sent) return fail(ErrorCode::protocol, "socket echo {} came back changed", i);
      return {};
    });
    if (!row) return std::unexpected(row.error());
    (*row)["transport"] = "uds";
    (*row)["side"] = "socket server thread";
    (*row)["opcode"] = "echo";
    results.push_back(*row);
  }
  // The memory choices behind the segment (prefault, page size), on the serving core.
  MemoryBenchOptions memory_options;
  memory_options.cpu = server_cpu;
  memory_options.touch_bytes = options.memory_touch_bytes;
  auto memory = run_memory_bench(memory_options);
  if (!memory) return std::unexpected(memory.error());
  if (auto pinned = pin_current_thread(client_cpu); !pinned) return std::unexpected(pinned.error());
  return nlohmann::json{
      {"suite", "hygiene"},
      {"memory", *memory},
      {"host", collect_host_info()},
      {"config", {{"client_cpu", client_cpu}, {"server_cpu", server_cpu}, {"worker_cpu", worker_cpu}, {"wait", options.wait},
                  {"method", "syscalls: ptrace syscall-stops on the serving thread (traced_requests); faults and "
                             "context switches: /proc/PID/task/TID/stat and status, before and after a second, "
                             "untraced pass (requests)"}}},
      {"results", results},
  };
}

void print_hygiene(const nlohmann::json& report) {
  fmt::print("hygiene: what the serving thread does per request (counted, not sampled)\n");
  fmt::print("  {:<16} {:<9} {:>15} {:>15} {:>13} {:>13} {:>13}\n", "transport", "opcode", "syscalls/req",
             "faults/req", "switches/req", "traced reqs", "counted reqs");
  for (const auto& r : report["results"])
    fmt::print("  {:<16} {:<9} {:>15.4f} {:>15.6f} {:>13.6f} {:>13} {:>13}\n", r["transport"].get<std::string>(),
               r["opcode"].get<std::string>(), r["syscalls_per_request"].get<double>(),
               r["faults_per_request"].get<double>(), r["switches_per_request"].get<double>(),
               r["traced_requests"].get<std::size_t>(), r["requests"].get<std::size_t>());
  if (report.contains("memory")) print_memory_bench(report["memory"]);
}

}  // namespace ipcfloor
