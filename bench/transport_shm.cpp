// The ipcfloor segment on the ladder: a 48-byte ECHO to an engine in another process, whose
// serving thread is pinned to the other core. The client thread is pinned here and times each
// round trip on its own.
//
// shm-call-{spin,backoff,block}: ShmClient::call, the single-flight exchange: the request and its
//   answer share one cache line (shm/exchange.hpp). What a blocking caller gets.
// shm-ring-{spin,backoff,block}: one frame in flight through the lane's request and response
//   rings (submit, then wait_response): what each frame of a pipelining client costs when the
//   pipeline is one deep, on two lines that move through the ring's slots.

#include "bench/engine_child.hpp"
#include "bench/rung_timing.hpp"
#include "bench/transports.hpp"
#include "clients/shm_client.hpp"
#include "common/affinity.hpp"

namespace ipcfloor {
namespace {

enum class ShmPath { call, ring };

Expected<std::vector<double>> run_shm(const TransportContext& context, const char* wait_mode, ShmPath path) {
  auto mode = parse_wait_mode(wait_mode);
  if (!mode) return std::unexpected(mode.error());
  const char* what = path == ShmPath::call ? "ladder-call-" : "ladder-ring-";
  // The engine as users run it, with workers, on the cores neither side of the ladder uses (an
  // ECHO never reaches them; a host with no such core runs it without: --workers 0).
  std::vector<std::string> args{"--wait", wait_mode, "--cpu", std::to_string(context.server_cpu), "--bars", "1000",
                                "--ring-capacity", std::to_string(context.ring_capacity)};
  std::string spare;
  for (const int cpu : allowed_cpus()) {
    if (cpu == context.client_cpu || cpu == context.server_cpu) continue;
    if (!spare.empty()) spare += ',';
    spare += std::to_string(cpu);
  }
  if (spare.empty()) {
    args.insert(args.end(), {"--workers", "0"});
  } else {
    args.insert(args.end(), {"--worker-cpus", spare});
  }
  for (const std::string& strategy : context.engine_strategies) args.insert(args.end(), {"--strategy", strategy});
  EngineChild engine(context.binary, unique_segment_name(std::string(what) + wait_mode), args);
  if (!engine.up())
    return fail(ErrorCode::io, "the engine ({} serve --wait {}) did not come up", context.binary, wait_mode);
  ShmClientOptions options;
  options.wait = *mode;
  auto client = ShmClient::connect(engine.name(), options);
  if (!client) return std::unexpected(client.error());

  RequestSlot request = ladder_echo_request();
  ResponseSlot response{};
  const auto prepare = [&](std::size_t i) { request.params = ladder_payload(i); };
  const auto check = [&](std::size_t i, CallStatus status) -> Expected<Answer> {
    if (status != CallStatus::ok) return fail(ErrorCode::io, "{}", client->describe(status));
    if (response.echo() != ladder_payload(i))
      return fail(ErrorCode::protocol, "ECHO {} came back as {}", i, response.echo().h);
    return Answer::answered;
  };
  if (path == ShmPath::call)
    return time_round_trips(context, RoundTrip{
        .prepare = prepare,
        .exchange = [&](std::size_t) { return client->call(request, response); },
        .check = check,
    });
  return time_round_trips(context, RoundTrip{
      .prepare = prepare,
      .exchange = [&](std::size_t) {
        std::uint64_t seq = 0;
        const CallStatus submitted = client->submit(request, seq);
        return submitted == CallStatus::ok ? client->wait_response(response) : submitted;
      },
      .check = check,
  });
}

}  // namespace

Expected<std::vector<double>> run_shm_call(const TransportContext& context, const char* wait_mode) {
  return run_shm(context, wait_mode, ShmPath::call);
}

Expected<std::vector<double>> run_shm_ring(const TransportContext& context, const char* wait_mode) {
  return run_shm(context, wait_mode, ShmPath::ring);
}

}  // namespace ipcfloor
