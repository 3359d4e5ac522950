// shm-ring-{spin,backoff,block}: a 48-byte ECHO through the ipcfloor segment to an engine in
// another process, whose serving thread is pinned to the other core. The client thread is
// pinned here and times each call on its own.

#include "bench/engine_child.hpp"
#include "bench/transports.hpp"
#include "clients/shm_client.hpp"
#include "common/affinity.hpp"

namespace ipcfloor {

Expected<std::vector<double>> run_shm_ring(const TransportContext& context, const char* wait_mode) {
  auto mode = parse_wait_mode(wait_mode);
  if (!mode) return std::unexpected(mode.error());
  EngineChild engine(context.binary, unique_segment_name(std::string("ladder-") + wait_mode),
                     {"--wait", wait_mode, "--cpu", std::to_string(context.server_cpu), "--bars", "1000", "--ring-capacity",
                      std::to_string(context.ring_capacity)});
  if (!engine.up())
    return fail(ErrorCode::io, "the engine ({} serve --wait {}) did not come up", context.binary, wait_mode);
  ShmClientOptions options;
  options.wait = *mode;
  auto client = ShmClient::connect(engine.name(), options);
  if (!client) return std::unexpected(client.error());
  if (auto pinned = pin_current_thread(context.client_cpu); !pinned) return std::unexpected(pinned.error());

  std::vector<double> samples = reserved_samples(context);
  RequestSlot request = ladder_echo_request();
  ResponseSlot response{};
  const std::size_t total = context.warmup + context.samples;
  for (std::size_t i = 0; i < total; ++i) {
    request.params.h = static_cast<std::int64_t>(i);
    const std::uint64_t t0 = TscClock::now();
    const CallStatus status = client->call(request, response);
    const std::uint64_t t1 = TscClock::now();
    if (status != CallStatus::ok) return fail(ErrorCode::io, "{}", client->describe(status));
    if (response.echo().h != static_cast<std::int64_t>(i))
      return fail(ErrorCode::protocol, "ECHO {} came back as {}", i, response.echo().h);
    if (i >= context.warmup) samples.push_back(context.clock->to_ns(t1 - t0));
  }
  return samples;
}

}  // namespace ipcfloor
