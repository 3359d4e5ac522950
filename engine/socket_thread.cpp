#include "engine/socket_thread.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <exception>

#include <fmt/format.h>

namespace ipcfloor::socket_detail {
namespace {

constexpr int kMaxEvents = 64;

}  // namespace

ServerThread::ServerThread(const SocketServerOptions& options, std::atomic<std::size_t>& open_connections,
                           SharedBudget& budget, int unix_fd, int tcp_fd, int wake_fd)
    : options_(options),
      unix_fd_(unix_fd),
      tcp_fd_(tcp_fd),
      wake_fd_(wake_fd),
      tick_(std::clamp(options.stall_timeout / 4, std::chrono::milliseconds(1), std::chrono::milliseconds(100))),
      limit_(open_connections, options.max_connections, options.owner_reserve),
      log_(options.log),
      requests_(options, budget),
      context_{options, stats_, log_, epoll_, requests_} {}

ServerThread::~ServerThread() {
  close_all();
  if (reserve_fd_ >= 0) close(reserve_fd_);
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
    if (connection->holds_slot()) limit_.release();
  }
  connections_.clear();
}

Expected<void> ServerThread::init() {
  if (auto opened = epoll_.open(); !opened) return opened;
  // Several threads share the listeners: EPOLLEXCLUSIVE wakes one of them per connection.
  for (const int fd : {unix_fd_, tcp_fd_})
    if (fd >= 0)
      if (auto added = epoll_.add(fd, EPOLLIN | EPOLLEXCLUSIVE); !added) return added;
  if (auto added = epoll_.add(wake_fd_, EPOLLIN); !added) return added;
  // Spare descriptor: when the process runs out, it is closed to accept and shed a peer
  // instead of spinning on a listener that stays readable.
  reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
  return {};
}

void ServerThread::run() noexcept {
  std::array<epoll_event, kMaxEvents> events{};
  auto next_check = Clock::now() + tick_;
  const int wait_ms = static_cast<int>(tick_.count());
  for (;;) {
    const int ready = epoll_.wait(events, wait_ms);
    if (ready < 0 && errno != EINTR) {
      log_.line(fmt::format("epoll_wait failed: {}; this server thread stops", os_error(errno)));
      return;
    }
    const auto now = Clock::now();
    for (int i = 0; i < ready; ++i) {
      const int fd = events[static_cast<std::size_t>(i)].data.fd;
      const std::uint32_t what = events[static_cast<std::size_t>(i)].events;
      if (fd == wake_fd_) return;
      if (fd == unix_fd_ || fd == tcp_fd_) {
        guarded(nullptr, [&] { accept_all(fd, now); });
        continue;
      }
      const auto found = connections_.find(fd);
      if (found == connections_.end() || found->second->dead()) continue;
      Connection& connection = *found->second;
      guarded(&connection, [&] { connection.on_events(what, now); });
    }
    if (now >= next_check) {
      check_deadlines(now);
      next_check = now + tick_;
    }
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
    admit(fd, is_unix, address, now);
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

void ServerThread::admit(int fd, bool is_unix, const sockaddr_storage& address, Clock::time_point now) {
  auto peer = check_peer(fd, is_unix, address);
  if (!peer) return;
  auto connection = std::make_unique<Connection>(context_, fd, std::move(peer->name), now);
  std::optional<SocketFault> refusal = peer->refusal;
  if (!refusal) {
    // Only a Unix peer's uid is proven (SO_PEERCRED, checked above unless any_uid): TCP peers
    // are anyone's.
    refusal = limit_.claim(is_unix && !options_.any_uid);
    if (!refusal) connection->hold_slot();
  }
  // Refused peers linger briefly to receive their error; past this many, they are cut off.
  if (refusal && connections_.size() >= 2 * options_.max_connections + 16) {
    close(fd);
    stats_.refused.add();
    return;
  }
  Connection& added = *connection;
  connections_.emplace(fd, std::move(connection));
  if (auto registered = epoll_.add(fd, EPOLLIN | EPOLLRDHUP); !registered) {
    added.drop(registered.error().message);
    return;
  }
  if (refusal) {
    stats_.refused.add();
    added.close_with_error(refusal->error, ipcfloor::describe(*refusal), now);
  } else {
    stats_.accepted.add();
  }
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
    if (!options_.any_uid && credentials.uid != geteuid()) {
      SocketFault fault;
      fault.error = SocketError::permission_denied;
      fault.actual = credentials.uid;
      fault.expected = geteuid();
      peer.refusal = fault;
    }
    return peer;
  }
  peer.name = tcp_peer_name(address);
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    log_.line(fmt::format("{}: TCP_NODELAY failed: {}; connection closed", peer.name, os_error(errno)));
    close(fd);
    stats_.refused.add();
    return std::nullopt;
  }
  return peer;
}

void ServerThread::check_deadlines(Clock::time_point now) {
  for (auto& [fd, connection] : connections_) connection->check_deadline(now);
}

void ServerThread::reap() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if (!it->second->dead()) {
      ++it;
      continue;
    }
    close(it->first);
    if (it->second->holds_slot()) limit_.release();
    it = connections_.erase(it);
  }
}

}  // namespace ipcfloor::socket_detail
