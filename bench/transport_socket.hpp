#pragma once
// The socket rungs of the floor ladder (docs/SPEC.md §7.1): the 48-byte echo_params round trip (opcode 4
// of docs/PROTOCOL.md) to a real `ipcfloor serve --no-shm` in another process, over a Unix-domain
// socket and over TCP loopback. The server thread is pinned to context.server_cpu
// (--socket-cpu), the measuring thread to context.client_cpu; each call is timed on its own
// with TscClock after context.warmup untimed calls. Setup path (spawns, connects, allocates the
// sample vector); the timed loop allocates nothing.

#include <vector>

#include "bench/transports.hpp"
#include "common/error.hpp"

namespace ipcfloor {

// "uds-echo": round trips in ns over a Unix-domain socket.
[[nodiscard]] Expected<std::vector<double>> run_uds_echo(const TransportContext& context);

// "tcp-echo": round trips in ns over TCP loopback (127.0.0.1, TCP_NODELAY).
[[nodiscard]] Expected<std::vector<double>> run_tcp_echo(const TransportContext& context);

}  // namespace ipcfloor
