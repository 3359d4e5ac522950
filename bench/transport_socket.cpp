// uds-echo and tcp-echo: see bench/transport_socket.hpp.

#include "bench/transport_socket.hpp"

#include <string>

#include "bench/latency.hpp"
#include "bench/socket_server_child.hpp"
#include "clients/socket_client.hpp"
#include "common/affinity.hpp"

namespace ipcfloor {
namespace {

Expected<std::vector<double>> time_echo_params(SocketClient& client, const TransportContext& context) {
  if (context.clock == nullptr) return fail(ErrorCode::invalid_argument, "the ladder passed no TscClock");
  if (auto pinned = pin_current_thread(context.client_cpu); !pinned) return std::unexpected(pinned.error());
  std::vector<double> samples = reserved_samples(context);
  const std::size_t total = context.warmup + context.samples;
  Combo payload{0, 1, 2, 3, 4, 5};
  for (std::size_t i = 0; i < total; ++i) {
    payload.h = static_cast<std::int64_t>(i);
    const std::uint64_t t0 = TscClock::now();
    auto echoed = client.echo_params(payload);
    const std::uint64_t t1 = TscClock::now();
    if (!echoed) return std::unexpected(echoed.error());
    if (echoed->h != payload.h)
      return fail(ErrorCode::protocol, "echo_params {} came back as {} from {}", payload.h, echoed->h, client.server());
    if (i >= context.warmup) samples.push_back(context.clock->to_ns(t1 - t0));
  }
  return samples;
}

// Times the round trips over a new connection to `server`, which outlives it.
Expected<std::vector<double>> time_echo_params(const SocketServerChild& server, const TransportContext& context) {
  auto client = connect_to(server);
  if (!client) return std::unexpected(client.error());
  return time_echo_params(*client, context);
}

}  // namespace

Expected<std::vector<double>> run_uds_echo(const TransportContext& context) {
  auto server = start_socket_server(context.binary, context.server_cpu, false);
  if (!server) return std::unexpected(server.error());
  return time_echo_params(*server, context);
}

Expected<std::vector<double>> run_tcp_echo(const TransportContext& context) {
  // Another process may take the free port between the probe and the server's bind: retry.
  auto server = start_socket_server(context.binary, context.server_cpu, true);
  for (int attempt = 1; attempt < 3 && !server; ++attempt)
    server = start_socket_server(context.binary, context.server_cpu, true);
  if (!server) return std::unexpected(server.error());
  return time_echo_params(*server, context);
}

}  // namespace ipcfloor
