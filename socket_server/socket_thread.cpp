#include "socket_server/socket_thread.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <exception>
#include <limits>

#include <fmt/format.h>

namespace ipcfloor::socket_detail {
namespace {

constexpr int kMaxEvents = 64;

}  // namespace

ServerThread::ServerThread(const SocketServerOptions& options, std::atomic<std::size_t>& open_connections,
                           PeerLimit& peers, SharedBudget& budget, int unix_fd, int tcp_fd, int wake_fd, unsigned index)
    : options_(options),
      unix_fd_(unix_fd),
      tcp_fd_(tcp_fd),
      wake_fd_(wake_fd),
      index_(index),
      tick_(std::clamp(options.stall_timeout / 4, std::chrono::milliseconds(1), std::chrono::milliseconds(100))),
      limit_(open_connections, options.max_connections, options.owner_reserve),
      peers_(peers),
      log_(options.log),
      requests_(options, options.strategies->set(), budget),
      context_{options, stats_, log_, epoll_, requests_},
      first_rank_{kNeverClosedForNewcomer, kNeverClosedForNewcomer} {}

ServerThread::~ServerThread() {
  close_all();
  if (reserve_fd_ >= 0) close(reserve_fd_);
  if (inbox_fd_ >= 0) close(inbox_fd_);
}

template <class Work>
void ServerThread::guarded(Connection* connection, Work&& work) noexcept {
  try {
    work();
  } catch (const std::exception& error) {
    if (connection != nullptr) {
      connection->drop(fmt::format("dropped after an internal error: {}", error.what()));
    } else {
      log_.line(fmt::format("accept failed: {}", error.what()));
    }
  } catch (...) {
    if (connection != nullptr) connection->mark_dead();
  }
}

void ServerThread::close_all() noexcept {
  for (auto& [fd, connection] : connections_) {
    close(fd);
    release_slots(*connection);
  }
  connections_.clear();
  run_queue_.clear();
  const std::lock_guard lock(inbox_mutex_);
  for (const Newcomer& newcomer : inbox_) {
    close(newcomer.fd);
    if (newcomer.peer_slot) peers_.release(newcomer.peer.key);
  }
  inbox_.clear();
}

Expected<void> ServerThread::init(std::span<ServerThread* const> all) {
  all_.assign(all.begin(), all.end());
  if (auto opened = epoll_.open(); !opened) return opened;
  // Several threads share the listeners: EPOLLEXCLUSIVE wakes one of them per connection.
  for (const int fd : {unix_fd_, tcp_fd_})
    if (fd >= 0)
      if (auto added = epoll_.add(fd, EPOLLIN | EPOLLEXCLUSIVE); !added) return added;
  if (auto added = epoll_.add(wake_fd_, EPOLLIN); !added) return added;
  inbox_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (inbox_fd_ < 0) return fail(ErrorCode::io, "eventfd failed: {}", os_error(errno));
  if (auto added = epoll_.add(inbox_fd_, EPOLLIN); !added) return added;
  // Spare descriptor: when the process runs out, it is closed to accept and shed a peer
  // instead of spinning on a listener that stays readable.
  reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return {};
}

void ServerThread::run() noexcept {
  std::array<epoll_event, kMaxEvents> events{};
  auto next_check = Clock::now() + tick_;
  const int tick_ms = static_cast<int>(tick_.count());
  for (;;) {
    const int ready = epoll_.wait(events, run_queue_.empty() ? tick_ms : 0);
    if (ready < 0 && errno != EINTR) {
      log_.line(fmt::format("epoll_wait failed: {}; this server thread stops", os_error(errno)));
      return;
    }
    const auto now = Clock::now();
    for (int i = 0; i < ready; ++i) {
      const int fd = events[static_cast<std::size_t>(i)].data.fd;
      const std::uint32_t what = events[static_cast<std::size_t>(i)].events;
      if (fd == wake_fd_) return;
      if (fd == inbox_fd_) {
        receive(now);
        continue;
      }
      if (fd == unix_fd_ || fd == tcp_fd_) {
        guarded(nullptr, [&] { accept_all(fd, now); });
        continue;
      }
      const auto found = connections_.find(fd);
      if (found == connections_.end() || found->second->dead()) continue;
      Connection& connection = *found->second;
      guarded(&connection, [&] { connection.on_events(what, now); });
      enqueue(fd, connection);
    }
    if (now >= next_check) {
      check_deadlines(now);
      next_check = now + tick_;
    }
    run_next_chunk();
    reap();
  }
}

void ServerThread::accept_all(int listen_fd, Clock::time_point now) {
  const bool is_unix = listen_fd == unix_fd_;
  for (;;) {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (keeps_accepting(listen_fd, errno)) continue;
      return;
    }
    auto peer = check_peer(fd, is_unix, address);
    if (peer) place(Newcomer{fd, std::move(*peer), 0}, now);
  }
}

bool ServerThread::keeps_accepting(int listen_fd, int error) {
  if (error == EAGAIN || error == EWOULDBLOCK) return false;
  if (error == EINTR || error == ECONNABORTED || error == EPROTO) return true;
  if ((error == EMFILE || error == ENFILE) && reserve_fd_ >= 0) {
    close(reserve_fd_);
    const int shed = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (shed >= 0) close(shed);
    reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    log_.line("out of file descriptors: shed a new connection");
    stats_.refused.add();
    return true;
  }
  log_.line(fmt::format("accept failed: {}", os_error(error)));
  return false;
}

std::optional<PeerCheck> ServerThread::check_peer(int fd, bool is_unix, const sockaddr_storage& address) {
  PeerCheck peer;
  if (is_unix) {
    ucred credentials{};
    socklen_t length = sizeof credentials;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
      log_.line(fmt::format("SO_PEERCRED failed: {}; connection closed", os_error(errno)));
      close(fd);
      stats_.refused.add();
      return std::nullopt;
    }
    peer.name = fmt::format("unix peer pid {} uid {}", credentials.pid, credentials.uid);
    // Only a Unix peer's uid is proven (SO_PEERCRED, unless any_uid): TCP peers are anyone's.
    peer.owner = !options_.any_uid && credentials.uid == geteuid();
    if (!peer.owner) peer.key = fmt::format("uid {}", credentials.uid);
    if (!options_.any_uid &&
        !options_.peers.admits(fd, PeerCredentials{credentials.pid, credentials.uid, credentials.gid})) {
      SocketFault fault;
      fault.error = SocketError::permission_denied;
      fault.actual = credentials.uid;
      fault.expected = geteuid();
      fault.field = options_.peers.admits_others() ? kAllowListAdmits : 0;
      peer.refusal = fault;
    }
    return peer;
  }
  peer.name = tcp_peer_name(address);
  peer.key = tcp_peer_address(address);
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    log_.line(fmt::format("{}: TCP_NODELAY failed: {}; connection closed", peer.name, os_error(errno)));
    close(fd);
    stats_.refused.add();
    return std::nullopt;
  }
  return peer;
}

void ServerThread::place(Newcomer newcomer, Clock::time_point now) {
  newcomer.tried |= std::uint64_t{1} << index_;
  if (!newcomer.peer.refusal && !newcomer.peer_slot && !newcomer.peer.key.empty()) claim_peer_slot(newcomer, now);
  if (!newcomer.peer.refusal) {
    const bool owner = newcomer.peer.owner;
    if (auto refusal = limit_.claim(owner)) {
      Connection* local = first_to_close(owner, now);
      if (ServerThread* other = thread_closing_earlier(owner, newcomer.tried, local, now)) {
        other->hand_over(std::move(newcomer));
        return;
      }
      newcomer.peer.refusal = claim_by_closing(local, owner, *refusal, now);
    }
  }
  if (newcomer.peer.refusal && newcomer.peer_slot) {
    peers_.release(newcomer.peer.key);
    newcomer.peer_slot = false;
  }
  serve_or_refuse(std::move(newcomer), now);
}

void ServerThread::claim_peer_slot(Newcomer& newcomer, Clock::time_point now) {
  const std::string& key = newcomer.peer.key;
  PeerLimit::Claim claim = peers_.claim(key);
  newcomer.peer_slot = claim == PeerLimit::Claim::taken;
  if (newcomer.peer_slot) return;
  // The peer holds its most: one of its own that never completed a frame makes room, if this
  // thread has one (other threads' are not searched).
  Connection* victim = nullptr;
  for (const auto& [fd, connection] : connections_) {
    if (!connection->holds_peer_slot() || connection->peer_key() != key || connection->served_a_frame()) continue;
    if (connection->close_rank(now) == kNeverClosedForNewcomer) continue;
    // Accepted in one batch, connections share a time: the first accepted goes first.
    if (victim == nullptr || std::pair(connection->accepted_at(), connection->id()) <
                                 std::pair(victim->accepted_at(), victim->id()))
      victim = connection.get();
  }
  if (victim != nullptr) {
    close_for_newcomer(*victim, now);
    claim = peers_.claim(key);
    newcomer.peer_slot = claim == PeerLimit::Claim::taken;
    if (newcomer.peer_slot) return;
  }
  // Past what the peers that hold connections share: a connection of any peer that could be closed
  // at the connection limit (never completed a frame, or idle past keep_active) makes room, as it
  // would there; a peer whose connections are all busy is refused, and the kept slots stay for
  // new peers.
  if (claim == PeerLimit::Claim::kept_for_new_peers) {
    Connection* idle = first_to_close(false, now);
    if (idle != nullptr && idle->holds_peer_slot()) {
      close_for_newcomer(*idle, now);
      claim = peers_.claim(key);
      newcomer.peer_slot = claim == PeerLimit::Claim::taken;
      if (newcomer.peer_slot) return;
    }
  }
  SocketFault fault;
  fault.error = SocketError::too_many_connections;
  if (claim == PeerLimit::Claim::kept_for_new_peers) {
    fault.field = kKeptForNewPeers;
    fault.expected = peers_.shared();
    fault.limit = options_.max_connections - std::min(options_.owner_reserve, options_.max_connections - 1) - peers_.shared();
  } else {
    fault.field = kPeerAtLimit;
    fault.expected = options_.max_per_peer;
  }
  newcomer.peer.refusal = fault;
}

void ServerThread::serve_or_refuse(Newcomer newcomer, Clock::time_point now) {
  const int fd = newcomer.fd;
  const bool holds_slot = !newcomer.peer.refusal;
  // Refused peers linger briefly to receive their error; past this many, they are cut off.
  if (!holds_slot && connections_.size() >= 2 * options_.max_connections + 16) {
    close(fd);
    stats_.refused.add();
    return;
  }
  std::unique_ptr<Connection> connection;
  try {
    connection = std::make_unique<Connection>(context_, fd, std::move(newcomer.peer.name), newcomer.peer.owner,
                                              next_id_++, now);
  } catch (...) {
    close(fd);
    if (holds_slot) limit_.release();
    if (newcomer.peer_slot) peers_.release(newcomer.peer.key);
    throw;
  }
  if (holds_slot) connection->hold_slot();
  if (newcomer.peer_slot) connection->hold_peer_slot(std::move(newcomer.peer.key));
  Connection& added = *connection;
  connections_.emplace(fd, std::move(connection));
  if (auto registered = epoll_.add(fd, EPOLLIN | EPOLLRDHUP); !registered) {
    added.drop(registered.error().message);
    return;
  }
  if (newcomer.peer.refusal) {
    stats_.refused.add();
    added.close_with_error(newcomer.peer.refusal->error, ipcfloor::describe(*newcomer.peer.refusal), now);
  } else {
    stats_.accepted.add();
  }
}

Connection* ServerThread::first_to_close(bool owner, Clock::time_point now) const noexcept {
  Connection* first = nullptr;
  std::int64_t first_rank = kNeverClosedForNewcomer;
  for (const auto& [fd, connection] : connections_) {
    if (!owner && connection->owner()) continue;
    const std::int64_t rank = connection->close_rank(now);
    // Accepted in one batch, connections share a rank: the first accepted goes first.
    if (rank < first_rank || (rank == first_rank && first != nullptr && connection->id() < first->id())) {
      first_rank = rank;
      first = connection.get();
    }
  }
  return first;
}

ServerThread* ServerThread::thread_closing_earlier(bool owner, std::uint64_t tried, const Connection* than,
                                                   Clock::time_point now) const noexcept {
  std::int64_t first = than != nullptr ? than->close_rank(now) : kNeverClosedForNewcomer;
  ServerThread* found = nullptr;
  for (ServerThread* other : all_) {
    if ((tried >> other->index_ & 1) != 0) continue;
    // relaxed: a hint that publishes no memory (ServerThread::check_deadlines on the other thread
    // stores it); a stale value only picks another thread, which looks again in place().
    const std::int64_t rank = other->first_rank_[owner ? 0 : 1].load(std::memory_order_relaxed);
    if (rank < first) {
      first = rank;
      found = other;
    }
  }
  return found;
}

std::optional<SocketFault> ServerThread::claim_by_closing(Connection* victim, bool owner, const SocketFault& refusal,
                                                          Clock::time_point now) {
  if (victim == nullptr || !limit_.one_release_admits(owner)) return refusal;
  close_for_newcomer(*victim, now);
  return limit_.claim(owner);
}

void ServerThread::close_for_newcomer(Connection& victim, Clock::time_point now) {
  SocketFault fault;
  fault.error = SocketError::too_many_connections;
  fault.expected = options_.max_connections;
  const bool unserved = !victim.served_a_frame();
  fault.field = unserved ? kClosedUnserved : kClosedForNewcomer;
  fault.limit = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now - (unserved ? victim.accepted_at() : victim.idle_since()))
          .count());
  victim.close_with_error(fault.error, ipcfloor::describe(fault), now);
  release_slots(victim);
}

void ServerThread::release_slots(Connection& connection) noexcept {
  if (connection.holds_slot()) {
    connection.slot_returned();
    limit_.release();
  }
  if (connection.holds_peer_slot()) {
    connection.peer_slot_returned();
    peers_.release(connection.peer_key());
  }
}

void ServerThread::hand_over(Newcomer newcomer) {
  try {
    const std::lock_guard lock(inbox_mutex_);
    inbox_.push_back(newcomer);
  } catch (...) {
    close(newcomer.fd);
    if (newcomer.peer_slot) peers_.release(newcomer.peer.key);
    throw;
  }
  const std::uint64_t one = 1;
  // The counter cannot overflow here: at most one write per newcomer.
  [[maybe_unused]] const ssize_t written = write(inbox_fd_, &one, sizeof one);
}

void ServerThread::receive(Clock::time_point now) {
  std::uint64_t count = 0;
  [[maybe_unused]] const ssize_t got = read(inbox_fd_, &count, sizeof count);  // resets the eventfd
  std::vector<Newcomer> arrived;
  {
    const std::lock_guard lock(inbox_mutex_);
    arrived.swap(inbox_);
  }
  for (Newcomer& newcomer : arrived) guarded(nullptr, [&] { place(std::move(newcomer), now); });
}

void ServerThread::enqueue(int fd, Connection& connection) {
  if (!connection.sweeping() || connection.queued() || connection.dead()) return;
  run_queue_.emplace_back(fd, connection.id());
  connection.set_queued(true);
}

void ServerThread::run_next_chunk() {
  while (!run_queue_.empty()) {
    const auto [fd, id] = run_queue_.front();
    run_queue_.pop_front();
    const auto found = connections_.find(fd);
    if (found == connections_.end() || found->second->id() != id) continue;  // closed since
    Connection& connection = *found->second;
    connection.set_queued(false);
    if (connection.dead() || !connection.sweeping()) continue;
    guarded(&connection, [&] { connection.run_chunk(); });
    enqueue(fd, connection);  // more chunks to come, or a sweep pipelined behind the last
    return;
  }
}

void ServerThread::check_deadlines(Clock::time_point now) {
  std::int64_t any = kNeverClosedForNewcomer;
  std::int64_t others = kNeverClosedForNewcomer;
  for (auto& [fd, connection] : connections_) {
    connection->check_deadline(now);
    const std::int64_t rank = connection->close_rank(now);
    any = std::min(any, rank);
    if (!connection->owner()) others = std::min(others, rank);
  }
  // relaxed: hints for other threads' place() (ServerThread::thread_closing_earlier reads them);
  // ServerThread::thread_closing_earlier); nothing is published through them.
  first_rank_[0].store(any, std::memory_order_relaxed);
  first_rank_[1].store(others, std::memory_order_relaxed);
}

void ServerThread::reap() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (!it->second->dead()) {
      ++it;
      continue;
    }
    close(it->first);
    release_slots(*it->second);
    it = connections_.erase(it);
  }
}

}  // namespace ipcfloor::socket_detail
