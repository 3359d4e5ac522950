#pragma once
// Where a TCP listener or client goes: "HOST:PORT" as users write it on the command line.

#include <cstdint>
#include <string>
#include <string_view>

#include "common/error.hpp"

namespace ipcfloor {

struct TcpEndpoint {
  std::string host;  // numeric address or name, as getaddrinfo takes it
  std::uint16_t port = 0;
};

inline constexpr std::string_view kDefaultTcpHost = "127.0.0.1";

// "HOST:PORT", "[IPv6]:PORT", ":PORT" or "PORT"; a missing host is loopback (127.0.0.1), so the
// server is reachable from other hosts only when the user names such an address. Port 0 asks
// the kernel for a free port (see SocketServer::tcp_port). Pure; allocates.
[[nodiscard]] Expected<TcpEndpoint> parse_tcp_endpoint(std::string_view text);

}  // namespace ipcfloor
