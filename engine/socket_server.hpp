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
// Limits: at most `max_connections` are served. A newcomer at the limit closes the longest-idle
// connection that has no request in flight (with too_many_connections, which clients call
// busy), or is refused with it when there is none; a peer not proven to be the server's own uid
// never closes one that is. Memory: a connection holds at most one request frame (<= 4 +
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

#include "kernel/kernel.hpp"
#include "socket/socket_protocol.hpp"
#include "socket/tcp_endpoint.hpp"
#include "common/error.hpp"

namespace ipcfloor {

// A series the server holds for every connection (opcode 5, use_preloaded): the one `ipcfloor
// serve` preloaded. Shared and never written after start, so connections read it without a copy.
struct PreloadedSeries {
  std::vector<double> close;
  std::string name;            // where it came from, e.g. "gbm(bars=150000, seed=42)"
  std::uint64_t checksum = 0;  // fnv1a64 of close's bytes
};

// The work units one chunk of a sweep holds per sweep thread by default; what that takes on a
// measured host is in docs/RELIABILITY.md.
inline constexpr std::uint64_t kDefaultSweepChunkCost = std::uint64_t{1} << 27;
inline constexpr std::uint64_t kMaxSweepChunkCost = std::uint64_t{1} << 40;

struct SocketServerOptions {
  std::string unix_path;            // empty: no Unix socket
  std::optional<TcpEndpoint> tcp;   // unset: no TCP listener
  double fee = kDefaultFee;         // what sweeps charge per round trip
  std::shared_ptr<const PreloadedSeries> preloaded;  // null: use_preloaded answers no_preloaded_series
  std::uint32_t max_frame_bytes = kDefaultMaxFrameBytes;  // limit on body_len, checked first
  std::chrono::milliseconds stall_timeout{5000};
  // A connection with no frame in progress and no reply pending for this long is closed with
  // idle_timeout: idle peers cannot hold the connection slots. 0: never.
  std::chrono::milliseconds idle_timeout{60'000};
  std::size_t max_connections = 64;
  // Slots only peers of the server's own uid may take (Unix-socket peers, whose uid
  // SO_PEERCRED proves): TCP peers, any local user, get at most max_connections - owner_reserve.
  std::size_t owner_reserve = 4;
  // Bytes all connections together may hold: series loaded (opcode 2), frames being buffered,
  // replies being sent and sweep scratch. A frame, load or request past it gets
  // over_memory_cap and the connection stays usable. Not counted: the preloaded series (shared),
  // the buffers a connection keeps between requests (input, reply, sweep scratch: each released
  // past 4 MiB) and the sweep workers' kernel workspaces. >= 4096.
  std::uint64_t max_loaded_bytes = std::uint64_t{1} << 30;
  // Bound on one combo's backtest_cost (kernel/cost.hpp); 0: none. A sweep holding a costlier
  // combo gets too_costly.
  std::uint64_t max_combo_cost = 0;
  // Work units (backtest_cost) one chunk of a sweep may hold per sweep thread; a chunk always
  // runs at least one combo. 1..2^40.
  std::uint64_t sweep_chunk_cost = kDefaultSweepChunkCost;
  unsigned threads = 1;              // server threads, each with its own epoll set
  std::vector<int> cpus;             // the threads' affinity; empty: inherited
  unsigned sweep_threads = 1;        // 1..64; > 1: each chunk of a sweep runs on that many workers
  bool any_uid = false;              // Unix socket file 0666 and no SO_PEERCRED uid check
  bool log = true;                   // rejected frames and dropped peers to stderr (rate-limited)
};

// Counters since start. served[] by opcode, rejected[] by SocketError code (slot 0 unused).
struct SocketServerStats {
  std::uint64_t connections_accepted = 0;  // connections served (refused ones not included)
  std::uint64_t connections_refused = 0;   // wrong uid or at the connection limit
  std::uint64_t connections_dropped = 0;   // closed by the server: stalled, truncated, too large
  std::array<std::uint64_t, kSocketOpcodeCount> served{};
  std::array<std::uint64_t, kSocketErrorSlots> rejected{};
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;

  [[nodiscard]] std::uint64_t total_served() const noexcept;
  [[nodiscard]] std::uint64_t total_rejected() const noexcept;
};

// One line for the shutdown report, e.g. "3 connections; served 161 frames (sweep 1, ...);
// rejected 2 (bad_price 1, ...); 1 dropped, 0 refused". Allocates.
[[nodiscard]] std::string format_stats(const SocketServerStats& stats);

namespace socket_detail {
struct SharedBudget;  // what the server threads share (socket_request_handler.hpp)
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
  std::unique_ptr<socket_detail::SharedBudget> budget_;  // loaded bytes and the stop flag, shared by the threads
  std::vector<std::unique_ptr<socket_detail::ServerThread>> workers_;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

}  // namespace ipcfloor
