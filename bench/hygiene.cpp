#include "bench/hygiene.hpp"

#include <chrono>
#include <thread>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "bench/host_info.hpp"
#include "bench/thread_probe.hpp"
#include "clients/shm_client.hpp"
#include "engine/affinity.hpp"

namespace ipcfloor {
namespace {

// Drives `count` requests of `opcode` through `client`, counting what the serving thread does.
Expected<nlohmann::json> measure(ShmClient& client, const EngineChild& engine, Opcode opcode, std::size_t count,
                                 const std::string& wait) {
  // The segment becomes attachable before the serving thread has started and named itself.
  pid_t tid = engine.serving_thread();
  for (int tries = 0; tid < 0 && tries < 400; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    tid = engine.serving_thread();
  }
  if (tid < 0) return fail(ErrorCode::io, "cannot find the engine's serving thread (ipcf-serve) in pid {}", engine.pid());
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(opcode);
  request.params = combo_from_length(20);
  ResponseSlot response{};
  for (int i = 0; i < 1000; ++i)  // warm-up: faults of first use happen here, not in the count
    if (const auto s = client.call(request, response); s != CallStatus::ok) return fail(ErrorCode::io, "{}", client.describe(s));

  auto before = read_thread_counters(engine.pid(), tid);
  if (!before) return std::unexpected(before.error());
  SyscallCounter syscalls;
  if (auto started = syscalls.start(tid); !started) return std::unexpected(started.error());
  for (std::size_t i = 0; i < count; ++i) {
    request.params.s = 1 + static_cast<std::int64_t>(i % 7);
    if (const auto s = client.call(request, response); s != CallStatus::ok) {
      (void)syscalls.stop();
      return fail(ErrorCode::io, "{}", client.describe(s));
    }
    if (response.status != static_cast<std::uint16_t>(Status::ok)) {
      (void)syscalls.stop();
      return fail(ErrorCode::protocol, "request {} answered {}", i, to_string(static_cast<Status>(response.status)));
    }
  }
  auto entered = syscalls.stop();
  if (!entered) return std::unexpected(entered.error());
  auto after = read_thread_counters(engine.pid(), tid);
  if (!after) return std::unexpected(after.error());
  const auto per = [count](std::uint64_t n) { return static_cast<double>(n) / static_cast<double>(count); };
  const std::uint64_t minor = after->minor_faults - before->minor_faults;
  const std::uint64_t major = after->major_faults - before->major_faults;
  const std::uint64_t voluntary = after->voluntary_switches - before->voluntary_switches;
  const std::uint64_t involuntary = after->involuntary_switches - before->involuntary_switches;
  return nlohmann::json{
      {"transport", "shm-ring-" + wait},
      {"side", "engine serving thread"},
      {"opcode", opcode == Opcode::echo ? "echo" : "backtest"},
      {"requests", count},
      {"syscalls", *entered},
      {"minor_faults", minor},
      {"major_faults", major},
      {"voluntary_switches", voluntary},
      {"involuntary_switches", involuntary},
      {"syscalls_per_request", per(*entered)},
      {"faults_per_request", per(minor + major)},
      {"switches_per_request", per(voluntary + involuntary)},
  };
}

}  // namespace

Expected<nlohmann::json> run_hygiene(const HygieneOptions& options) {
  const auto cpus = allowed_cpus();
  const int client_cpu = options.client_cpu >= 0 ? options.client_cpu : cpus.front();
  const int server_cpu = options.server_cpu >= 0 ? options.server_cpu : cpus.back();
  auto mode = parse_wait_mode(options.wait);
  if (!mode) return std::unexpected(mode.error());
  EngineChild engine(options.binary.empty() ? self_executable() : options.binary, unique_segment_name("hygiene"),
                     {"--wait", options.wait, "--cpu", std::to_string(server_cpu), "--bars", "2000"});
  if (!engine.up()) return fail(ErrorCode::io, "the engine did not come up");
  ShmClientOptions client_options;
  client_options.wait = *mode;
  auto client = ShmClient::connect(engine.name(), client_options);
  if (!client) return std::unexpected(client.error());
  if (auto pinned = pin_current_thread(client_cpu); !pinned) return std::unexpected(pinned.error());

  nlohmann::json results = nlohmann::json::array();
  for (const auto& [opcode, count] : {std::pair{Opcode::echo, options.echo_requests},
                                      std::pair{Opcode::backtest, options.backtest_requests}}) {
    auto row = measure(*client, engine, opcode, count, options.wait);
    if (!row) return std::unexpected(row.error());
    results.push_back(*row);
  }
  return nlohmann::json{
      {"suite", "hygiene"},
      {"host", collect_host_info()},
      {"config", {{"client_cpu", client_cpu}, {"server_cpu", server_cpu}, {"wait", options.wait},
                  {"method", "syscalls: ptrace syscall-stops on the serving thread; faults and context "
                             "switches: /proc/PID/task/TID/stat and status, before and after"}}},
      {"results", results},
  };
}

void print_hygiene(const nlohmann::json& report) {
  fmt::print("hygiene: what the engine's serving thread does per request (counted, not sampled)\n");
  fmt::print("  {:<18} {:<9} {:>9} {:>9} {:>13} {:>13} {:>13}\n", "transport", "opcode", "requests", "syscalls",
             "page faults", "vol. switch", "invol. switch");
  for (const auto& r : report["results"])
    fmt::print("  {:<18} {:<9} {:>9} {:>9} {:>13} {:>13} {:>13}\n", r["transport"].get<std::string>(),
               r["opcode"].get<std::string>(), r["requests"].get<std::size_t>(), r["syscalls"].get<std::uint64_t>(),
               r["minor_faults"].get<std::uint64_t>() + r["major_faults"].get<std::uint64_t>(),
               r["voluntary_switches"].get<std::uint64_t>(), r["involuntary_switches"].get<std::uint64_t>());
}

}  // namespace ipcfloor
