// uds-echo and tcp-echo: see bench/transport_socket.hpp.

#include "bench/transport_socket.hpp"

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "bench/child_process.hpp"
#include "bench/latency.hpp"
#include "clients/socket_client.hpp"
#include "engine/affinity.hpp"

namespace ipcfloor {
namespace {

constexpr std::chrono::seconds kStartupLimit{10};

std::string unique_socket_path() {
  static std::atomic<int> counter{0};
  // relaxed: only distinctness matters.
  return "/tmp/ipcfloor-ladder-" + std::to_string(getpid()) + "-" +
         std::to_string(counter.fetch_add(1, std::memory_order_relaxed)) + ".sock";
}

// A port nobody listens on right now (the kernel's pick for 127.0.0.1:0).
Expected<std::uint16_t> free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(ErrorCode::io, "cannot create a TCP socket: {}", std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    const int error = errno;
    close(fd);
    return fail(ErrorCode::io, "cannot find a free loopback port: {}", std::strerror(error));
  }
  close(fd);
  return ntohs(address.sin_port);
}

// Starts `binary serve --no-shm ARGS` and connects once it listens.
template <class Connect>
Expected<SocketClient> start_and_connect(const TransportContext& context, std::vector<std::string> args,
                                         std::optional<ChildProcess>& server, Connect connect) {
  std::vector<std::string> argv = {context.binary, "serve", "--no-shm", "--quiet", "--socket-cpu",
                                   std::to_string(context.server_cpu)};
  argv.insert(argv.end(), args.begin(), args.end());
  auto child = ChildProcess::spawn(argv);
  if (!child) return std::unexpected(child.error());
  server.emplace(std::move(*child));
  std::optional<SocketClient> client;
  Error last{ErrorCode::timeout, "no attempt"};
  const bool up = server->wait_until(
      [&] {
        auto attempt = connect();
        if (!attempt) {
          last = attempt.error();
          return false;
        }
        client.emplace(std::move(*attempt));
        return true;
      },
      kStartupLimit);
  if (!up)
    return fail(ErrorCode::io, "{} serve --no-shm did not come up within {} s ({}; last connect: {})", context.binary,
                kStartupLimit.count(), server->running() ? "still running" : "it exited", last.message);
  return std::move(*client);
}

Expected<std::vector<double>> time_echo_params(SocketClient& client, const TransportContext& context) {
  if (context.clock == nullptr) return fail(ErrorCode::invalid_argument, "the ladder passed no TscClock");
  if (auto pinned = pin_current_thread(context.client_cpu); !pinned) return std::unexpected(pinned.error());
  std::vector<double> samples;
  samples.reserve(context.samples);
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

}  // namespace

Expected<std::vector<double>> run_uds_echo(const TransportContext& context) {
  const std::string path = unique_socket_path();
  std::optional<ChildProcess> server;
  auto client = start_and_connect(context, {"--socket", path}, server,
                                  [&] { return SocketClient::connect_unix(path); });
  if (!client) return std::unexpected(client.error());
  return time_echo_params(*client, context);
}

Expected<std::vector<double>> run_tcp_echo(const TransportContext& context) {
  // Another process may take the free port between the probe and the server's bind: retry.
  Error last{ErrorCode::io, "no attempt"};
  for (int attempt = 0; attempt < 3; ++attempt) {
    auto port = free_loopback_port();
    if (!port) return std::unexpected(port.error());
    std::optional<ChildProcess> server;
    auto client = start_and_connect(context, {"--tcp", "127.0.0.1:" + std::to_string(*port)}, server,
                                    [&] { return SocketClient::connect_tcp("127.0.0.1", *port); });
    if (!client) {
      last = client.error();
      continue;
    }
    return time_echo_params(*client, context);
  }
  return std::unexpected(last);
}

}  // namespace ipcfloor
