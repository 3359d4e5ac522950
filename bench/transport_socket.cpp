// uds-echo and tcp-echo: see bench/transport_socket.hpp.

#include "bench/transport_socket.hpp"

#include <string>

#include "bench/rung_timing.hpp"
#include "bench/socket_server_child.hpp"
#include "clients/socket_client.hpp"

namespace ipcfloor {
namespace {

Expected<std::vector<double>> time_echo_params(SocketClient& client, const TransportContext& context) {
  Combo payload{0, 1, 2, 3, 4, 5};
  return time_round_trips(context, RoundTrip{
      .prepare = [&](std::size_t i) { payload.h = static_cast<std::int64_t>(i); },
      .exchange = [&](std::size_t) { return client.echo_params(payload); },
      .check = [&](std::size_t, const Expected<Combo>& echoed) -> Expected<Answer> {
        if (!echoed) return std::unexpected(echoed.error());
        if (echoed->h != payload.h)
          return fail(ErrorCode::protocol, "echo_params {} came back as {} from {}", payload.h, echoed->h,
                      client.server());
        return Answer::answered;
      },
  });
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
