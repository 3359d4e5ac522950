#pragma once
// One socket server thread (socket_server/socket_server.hpp): its epoll loop, the connections it
// accepted, and what they share (counters, log, request scratch). The listeners sit in every
// thread's epoll set (EPOLLEXCLUSIVE); a connection stays on the thread that accepted it.
//
// The loop: wait for events (not at all while a sweep is running), serve what arrived (every
// request but a sweep is answered here), check deadlines once a tick, then run one chunk of the
// sweep at the front of the run queue and put it at the back. So a request waits for at most
// one chunk, and each running sweep for one chunk of every other.

#include <sys/socket.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "socket_server/socket_connection.hpp"
#include "socket_server/socket_listener.hpp"
#include "socket_server/socket_request_handler.hpp"
#include "socket_server/socket_options.hpp"

namespace ipcfloor::socket_detail {

// Who a new connection comes from, and why it is refused if it is.
struct PeerCheck {
  std::string name;  // "unix peer pid P uid U" or "tcp peer ADDR:PORT", for logs
  bool owner = false;  // proven to be the server's own uid (a Unix peer, SO_PEERCRED, without any_uid)
  std::string key;     // its PeerLimit key: "uid U" or the TCP address; empty for the owner (no limit)
  std::optional<SocketFault> refusal;
};

// A connection accepted at the limit, on its way to the thread that may close an idle one for it.
struct Newcomer {
  int fd = -1;
  PeerCheck peer;
  std::uint64_t tried = 0;  // the threads (bit by index) that had no idle connection to close for it
  bool peer_slot = false;   // holds a slot of its peer's PeerLimit
};

// 25 member functions: one duty cycle (epoll, accept, each connection's turn, the sweep hand-off),
// whose steps are members so that the loop reads top to bottom.
class ServerThread {
 public:
  // `options`, `open_connections`, `peers` and `budget` are the server's and outlive the thread;
  // the fds are the server's listeners (-1: none) and its wake-up eventfd. `index` < 64.
  ServerThread(const SocketServerOptions& options, std::atomic<std::size_t>& open_connections, PeerLimit& peers,
               SharedBudget& budget, int unix_fd, int tcp_fd, int wake_fd, unsigned index);
  ServerThread(const ServerThread&) = delete;
  ServerThread& operator=(const ServerThread&) = delete;
  ~ServerThread();

  // Setup: the epoll set with the listeners, the wake-up eventfd and this thread's hand-over
  // eventfd. `all` is every server thread, this one included; they outlive each other's loops.
  [[nodiscard]] Expected<void> init(std::span<ServerThread* const> all);

  // The loop, until the wake-up eventfd is readable (SocketServer::stop). On its own thread.
  void run() noexcept;

  // Closes every connection, and newcomers handed over but not placed. Only once every server
  // thread has stopped.
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
  // Names the peer and applies the uid rule (Unix) or sets TCP_NODELAY (TCP). Empty, the fd
  // closed and the peer counted as refused, when the socket cannot be asked or set up.
  std::optional<PeerCheck> check_peer(int fd, bool is_unix, const sockaddr_storage& address);

  // A newcomer first takes a slot of its peer's PeerLimit: at the peer's limit, this thread
  // closes the peer's own connection first in line (Connection::close_rank) that never completed
  // a frame, or refuses it. Then it takes a free slot of the server; at the limit, it goes to the
  // thread whose connection first in line comes first, which closes that connection for it;
  // where no thread has one, it is refused. A peer not proven to be the owner never closes an
  // owner's connection, and a connection that completed a request within keep_active is never
  // closed.
  void place(Newcomer newcomer, Clock::time_point now);
  // The newcomer's slot of its peer's PeerLimit, or its refusal.
  void claim_peer_slot(Newcomer& newcomer, Clock::time_point now);
  // Serves the newcomer (it holds a slot) or, refused, sends it its error.
  void serve_or_refuse(Newcomer newcomer, Clock::time_point now);
  // This thread's connection first in line to be closed for a newcomer (`owner` or not), or null.
  [[nodiscard]] Connection* first_to_close(bool owner, Clock::time_point now) const noexcept;
  // Another thread, not yet tried, whose published first in line comes before `than`.
  [[nodiscard]] ServerThread* thread_closing_earlier(bool owner, std::uint64_t tried, const Connection* than,
                                                     Clock::time_point now) const noexcept;
  // Closes `victim` (busy: too_many_connections) and claims its slot; `refusal` when that cannot help.
  [[nodiscard]] std::optional<SocketFault> claim_by_closing(Connection* victim, bool owner, const SocketFault& refusal,
                                                            Clock::time_point now);
  // Closes `victim` for a newcomer, telling it why, and gives back its slots.
  void close_for_newcomer(Connection& victim, Clock::time_point now);
  // Gives back the slots `connection` holds (the server's and its peer's).
  void release_slots(Connection& connection) noexcept;
  // Queues a newcomer for this thread and wakes it. Any thread.
  void hand_over(Newcomer newcomer);
  // Places the newcomers other threads handed over.
  void receive(Clock::time_point now);

  // A connection whose sweep is running joins the back of the run queue.
  void enqueue(int fd, Connection& connection);
  // Runs one chunk of the sweep at the front of the run queue.
  void run_next_chunk();

  // Every connection's deadlines; then publishes this thread's first in line to be closed.
  void check_deadlines(Clock::time_point now);
  // Closes the connections marked dead in this batch. Their fds stay open until here, so no
  // event of the batch can name a reused fd.
  void reap();

  const SocketServerOptions& options_;
  const int unix_fd_;
  const int tcp_fd_;
  const int wake_fd_;
  const unsigned index_;
  const std::chrono::milliseconds tick_;
  ConnectionLimit limit_;
  PeerLimit& peers_;
  ThreadStats stats_;
  RateLimitedLog log_;
  EpollSet epoll_;
  RequestHandler requests_;
  ThreadContext context_;  // refers to the members above; every connection of this thread holds it
  int reserve_fd_ = -1;
  std::uint64_t next_id_ = 1;
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;
  std::deque<std::pair<int, std::uint64_t>> run_queue_;  // (fd, connection id) with a sweep running
  std::vector<ServerThread*> all_;  // every server thread, this one at index_
  // The close_rank of this thread's connection first in line to be closed for a newcomer,
  // published each tick for other threads' place(): [0] any, [1] of peers not proven the owner.
  // kNeverClosedForNewcomer: none.
  std::array<std::atomic<std::int64_t>, 2> first_rank_;
  int inbox_fd_ = -1;        // eventfd: readable when inbox_ holds newcomers
  std::mutex inbox_mutex_;   // guards inbox_ (never taken on the shm serving thread)
  std::vector<Newcomer> inbox_;
};

}  // namespace ipcfloor::socket_detail
