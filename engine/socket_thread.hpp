#pragma once
// One socket server thread (engine/socket_server.hpp): its epoll loop, the connections it
// accepted, and what they share (counters, log, request scratch). The listeners sit in every
// thread's epoll set (EPOLLEXCLUSIVE); a connection stays on the thread that accepted it.

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/error.hpp"
#include "engine/socket_connection.hpp"
#include "engine/socket_listener.hpp"
#include "engine/socket_request_handler.hpp"
#include "engine/socket_server.hpp"

namespace ipcfloor::socket_detail {

// Who a new connection comes from, and why it is refused if it is.
struct PeerCheck {
  std::string name;  // "unix peer pid P uid U" or "tcp peer ADDR:PORT", for logs
  std::optional<SocketFault> refusal;
};

class ServerThread {
 public:
  // `options`, `open_connections` and `budget` are the server's and outlive the thread; the
  // fds are the server's listeners (-1: none) and its wake-up eventfd.
  ServerThread(const SocketServerOptions& options, std::atomic<std::size_t>& open_connections, SharedBudget& budget,
               int unix_fd, int tcp_fd, int wake_fd);
  ServerThread(const ServerThread&) = delete;
  ServerThread& operator=(const ServerThread&) = delete;
  ~ServerThread();

  // Setup: the epoll set with the listeners and the wake-up eventfd.
  [[nodiscard]] Expected<void> init();

  // The loop, until the wake-up eventfd is readable (SocketServer::stop). On its own thread.
  void run() noexcept;

  // Closes every connection. Only once the thread has stopped.
  void close_all() noexcept;

  // Adds this thread's counters to `stats`; any thread.
  void add_to(SocketServerStats& stats) const noexcept { stats_.add_to(stats); }

 private:
  // Runs `work`; an exception (bad_alloc on a huge frame, say) costs that one connection only.
  template <class Work>
  void guarded(Connection* connection, Work&& work) noexcept;

  void accept_all(int listen_fd, Clock::time_point now);
  // After accept4 failed with `error`: whether to call it again now.
  bool keeps_accepting(int listen_fd, int error);
  // A new connection is served, or, refused (wrong uid, every slot taken), sent its error.
  void admit(int fd, bool is_unix, const sockaddr_storage& address, Clock::time_point now);
  // Names the peer and applies the uid rule (Unix) or sets TCP_NODELAY (TCP). Empty, the fd
  // closed and the peer counted as refused, when the socket cannot be asked or set up.
  std::optional<PeerCheck> check_peer(int fd, bool is_unix, const sockaddr_storage& address);
  void check_deadlines(Clock::time_point now);
  // Closes the connections marked dead in this batch. Their fds stay open until here, so no
  // event of the batch can name a reused fd.
  void reap();

  const SocketServerOptions& options_;
  const int unix_fd_;
  const int tcp_fd_;
  const int wake_fd_;
  const std::chrono::milliseconds tick_;
  ConnectionLimit limit_;
  ThreadStats stats_;
  RateLimitedLog log_;
  EpollSet epoll_;
  RequestHandler requests_;
  ThreadContext context_;  // refers to the members above; every connection of this thread holds it
  int reserve_fd_ = -1;
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;
};

}  // namespace ipcfloor::socket_detail
