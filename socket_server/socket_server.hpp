#pragma once
// The socket baseline server (docs/SPEC.md §4): the protocol of socket/socket_protocol.hpp over a
// Unix-domain socket and/or TCP, inside `ipcfloor serve` beside (or instead of) the segment.
//
// Threads: start() spawns `threads` server threads ("ipcf-sock"), each with its own epoll set,
// kernel workspaces and connections; the listeners sit in every set (EPOLLEXCLUSIVE) and a
// connection stays on the thread that accepted it. Sockets are non-blocking, so a slow,
// stuck or hostile client never holds up another: a frame must arrive whole within
// `stall_timeout` of its first byte and a reply must be taken whole within it, or the
// connection is dropped. These threads never touch the segment or the pinned shm thread.
//
// Fairness: a sweep runs a chunk of combos at a time (at most sweep_chunk_cost work units per
// sweep thread, and at least one combo), and between two chunks its thread serves every other
// request that has arrived and one chunk of each other sweep in turn. So no connection waits
// for more than one chunk of another's work, and stop() waits for one combo per sweep thread.
// The bound is in work units (kernel/cost.hpp), never in time: the schedule is the same on
// every host.
//
// Limits: at most `max_connections` are served, at most `max_per_peer` of them for one peer not
// proven to be the server's own uid (a TCP address; a uid with any_uid), and the peers that hold
// connections share all but the last kNewPeerReserve slots, kept for peers that hold none. A newcomer at the limit
// closes (with too_many_connections, which clients call busy) first a connection that never
// completed a frame, the earliest connected first, then the longest-idle connection that has no
// request in flight and completed none for `keep_active`; it is refused when there is none. So
// a flood of idle or trickling connections only ever replaces itself, and a client that sends a
// request at least every `keep_active` keeps its connection. A peer not proven to be the
// server's own uid never closes one that is. A frame that arrives slower than `min_frame_rate`
// on average is dropped as stalled. Memory: a connection holds at most one request frame (<= 4 +
// max_frame_bytes), its reply and scratch, and its loaded series (none when it uses the
// server's preloaded one, which all connections share); a connection that pipelines is not
// read again until its reply has left. Frames, replies, scratch and loaded series of every
// connection together count against max_loaded_bytes; a frame that would pass it is refused
// from its length prefix, before its buffer is allocated.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "socket_server/socket_options.hpp"

namespace ipcfloor {

namespace socket_detail {
struct SharedBudget;  // what the server threads share (socket_request_handler.hpp)
class PeerLimit;      // the connections each peer holds (socket_listener.hpp)
class ServerThread;   // one server thread's epoll set, connections and scratch (socket_thread.hpp)
}  // namespace socket_detail

class SocketServer {
 public:
  // Binds and listens, then starts the threads. Setup path: allocates, returns Expected.
  // The Unix socket: a path over the sockaddr limit, a non-socket file in the way or a live
  // server on it is refused; a socket file nobody listens on is stale and replaced. It is
  // created with mode 0600 (0666 with any_uid) before listen(), so no peer can connect
  // through a wider mode. Errors name the path or endpoint and the OS reason.
  [[nodiscard]] static Expected<std::unique_ptr<SocketServer>> start(const SocketServerOptions& options);

  SocketServer(const SocketServer&) = delete;
  SocketServer& operator=(const SocketServer&) = delete;
  ~SocketServer();  // stop()

  // Stops the threads, closes every connection and removes the socket file if it is still
  // ours. Idempotent; any thread but a server thread.
  void stop() noexcept;

  // A snapshot of the counters; any thread, lock-free (each counter is read on its own).
  [[nodiscard]] SocketServerStats stats() const noexcept;

  [[nodiscard]] const std::string& unix_path() const noexcept { return unix_path_; }
  // The bound TCP port (the kernel's choice when the endpoint said 0); 0 without TCP.
  [[nodiscard]] std::uint16_t tcp_port() const noexcept { return tcp_port_; }
  // "unix socket PATH (mode 0600, uid U only), tcp 127.0.0.1:PORT" for reports.
  [[nodiscard]] std::string describe() const;

 private:
  SocketServer() = default;

  SocketServerOptions options_;
  std::string unix_path_;
  std::uint16_t tcp_port_ = 0;
  std::string tcp_host_;
  int unix_fd_ = -1;
  int tcp_fd_ = -1;
  int wake_fd_ = -1;           // eventfd: readable once stop() begins, wakes every epoll set
  std::uint64_t unix_dev_ = 0; // identity of the socket file we created, so stop() removes
  std::uint64_t unix_ino_ = 0; // only ours
  std::atomic<std::size_t> open_connections_{0};
  std::unique_ptr<socket_detail::PeerLimit> peers_;  // each peer's connections, shared by the threads
  std::unique_ptr<socket_detail::SharedBudget> budget_;  // loaded bytes and the stop flag, shared by the threads
  std::vector<std::unique_ptr<socket_detail::ServerThread>> workers_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

}  // namespace ipcfloor
