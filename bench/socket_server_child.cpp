#include "bench/socket_server_child.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>

namespace ipcfloor {
namespace {

Expected<std::uint16_t> free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(ErrorCode::io, "cannot create a TCP socket: {}", std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int error = errno;
  close(fd);
  if (!ok) return fail(ErrorCode::io, "cannot find a free loopback port: {}", std::strerror(error));
  return ntohs(address.sin_port);
}

}  // namespace

Expected<SocketClient> connect_to(const SocketServerChild& server, const SocketClientOptions& options) {
  return server.tcp ? SocketClient::connect_tcp("127.0.0.1", server.port, options)
                    : SocketClient::connect_unix(server.path, options);
}

Expected<SocketServerChild> start_socket_server(const std::string& binary, int server_cpu, bool tcp) {
  static std::atomic<int> counter{0};
  std::vector<std::string> argv{binary, "serve", "--no-shm", "--quiet", "--socket-cpu", std::to_string(server_cpu)};
  std::string path;
  std::uint16_t port = 0;
  if (tcp) {
    auto free = free_port();
    if (!free) return std::unexpected(free.error());
    port = *free;
    argv.insert(argv.end(), {"--tcp", "127.0.0.1:" + std::to_string(port)});
  } else {
    // relaxed: only distinctness matters.
    path = "/tmp/ipcfloor-bench-" + std::to_string(getpid()) + "-" +
           std::to_string(counter.fetch_add(1, std::memory_order_relaxed)) + ".sock";
    argv.insert(argv.end(), {"--socket", path});
  }
  auto child = ChildProcess::spawn(argv);
  if (!child) return std::unexpected(child.error());
  SocketServerChild server{std::move(*child), tcp, path, port};
  std::string last = "no attempt";
  const bool up = server.process.wait_until(
      [&] {
        auto attempt = connect_to(server);
        if (!attempt) last = attempt.error().message;
        return attempt.has_value();
      },
      std::chrono::seconds(10));
  if (!up)
    return fail(ErrorCode::io, "{} serve --no-shm did not come up within 10 s ({}; last connect: {})", binary,
                server.process.running() ? "still running" : "it exited", last);
  return server;
}

}  // namespace ipcfloor
