#pragma once
// A socket-only engine (`ipcfloor serve --no-shm`) as a child process, for the suites that
// compare the socket baseline with the ring: its server thread pinned to `server_cpu`, reached
// over a Unix-domain socket or TCP loopback.

#include <cstdint>
#include <string>

#include "bench/child_process.hpp"
#include "clients/socket_client.hpp"
#include "common/error.hpp"

namespace ipcfloor {

struct SocketServerChild {
  ChildProcess process;
  bool tcp = false;
  std::string path;        // Unix-domain socket path (tcp == false)
  std::uint16_t port = 0;  // loopback port (tcp == true)
};

// Spawns the server and waits (up to 10 s) until it accepts a connection. Setup path.
[[nodiscard]] Expected<SocketServerChild> start_socket_server(const std::string& binary, int server_cpu, bool tcp);

// A new connection to it, with the client's default bound on each call unless `options` says
// otherwise (a whole grid in one frame needs more).
[[nodiscard]] Expected<SocketClient> connect_to(const SocketServerChild& server, const SocketClientOptions& options = {});

}  // namespace ipcfloor
