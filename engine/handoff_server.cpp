#include "engine/handoff_server.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

// A connection must send its hand-off request this soon after connecting, and an observer's
// connection is closed this soon after its reply (it needs nothing more): an idle connection
// would otherwise hold a slot for nothing.
constexpr std::chrono::milliseconds kHandoffPatience{1000};
// Connections that are not a lane's lease (observers and hand-offs in progress). At the cap the
// longest idle of them is closed to make room: nginx's rule for idle keep-alive connections.
constexpr std::size_t kMaxExtraConnections = 64;
// Events handled, and connections accepted, per service() call: the keeper writes its heartbeat
// between two calls.
constexpr int kEventsPerPass = 32;
constexpr std::size_t kAcceptsPerPass = 32;

// Closing a Unix socket with an unread request resets the peer, which would then lose the
// answer just sent: stop the peer's sends first (SHUT_RD makes them fail), then drop what came.
void shut_without_reset(int fd) noexcept {
  (void)::shutdown(fd, SHUT_RDWR);
  std::byte sink[sizeof(HandoffRequest)];
  while (::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
  }
}

}  // namespace

Expected<HandoffServer> HandoffServer::make(Segment& segment, LaneKeeper& lanes, KeeperEvents& events) {
  HandoffServer server(segment, lanes, events);
  server.epoll_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!server.epoll_) return fail(ErrorCode::io, "epoll_create1 failed: {}", std::strerror(errno));
  server.reserve_fd_ = UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  epoll_event listen_event{};
  listen_event.events = EPOLLIN;
  listen_event.data.fd = segment.listen_fd();
  if (::epoll_ctl(server.epoll_.get(), EPOLL_CTL_ADD, segment.listen_fd(), &listen_event) != 0)
    return fail(ErrorCode::io, "cannot watch {}: {}", segment.socket_path(), std::strerror(errno));
  return server;
}

std::chrono::steady_clock::time_point HandoffServer::next_deadline() const noexcept {
  auto until = std::chrono::steady_clock::time_point::max();
  for (const Connection& connection : connections_)
    if (connection.role != Connection::Role::lane) until = std::min(until, connection.deadline);
  return until;
}

void HandoffServer::service() noexcept {
  // One batch of events a call, requests before newcomers: a flood of connections cannot keep the
  // keeper from its heartbeat (the caller writes it between two calls, and calls again at once
  // while the epoll set is readable) nor starve a request that has arrived.
  epoll_event ready[kEventsPerPass];
  const int count = ::epoll_wait(epoll_.get(), ready, kEventsPerPass, 0);
  bool newcomers = false;
  for (int i = 0; i < count; ++i) {
    if (ready[i].data.fd == segment_->listen_fd()) {
      newcomers = true;
    } else {
      handle_readable(ready[i].data.fd);
    }
  }
  if (newcomers) accept_connections();
  expire_idle();
  flush_notes();
}

HandoffServer::Connection* HandoffServer::find(int fd) noexcept {
  const auto found = std::find_if(connections_.begin(), connections_.end(),
                                  [fd](const Connection& c) { return c.fd.get() == fd; });
  return found == connections_.end() ? nullptr : &*found;
}

void HandoffServer::accept_connections() noexcept {
  for (std::size_t accepted = 0; accepted < kAcceptsPerPass; ++accepted) {
    UniqueFd fd(::accept4(segment_->listen_fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) {
      const int error = errno;
      if (error == EINTR || error == ECONNABORTED) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) return;
      if (error == EMFILE || error == ENFILE) {
        // accept4 fails so before it looks at the backlog: shed a peer if one waits, else nothing
        // was lost and there is nothing to say.
        if (shed_connection(error)) continue;
        return;
      }
      warn_at_most_once_a_second(fmt::format("accept failed: {}", std::strerror(error)));
      return;
    }
    auto peer = peer_credentials(fd.get());
    Connection connection;
    connection.fd = std::move(fd);
    connection.last_active = std::chrono::steady_clock::now();
    connection.deadline = connection.last_active + kHandoffPatience;
    if (peer) {
      connection.pid = peer->pid;
      connection.uid = peer->uid;
    }
    if (!peer || !segment_->peers().admits(connection.fd.get(), *peer)) {
      refuse_peer(connection);
      refused_uid_.add(connection.pid, connection.uid);  // logged at most once a second (flush_notes)
      continue;  // closed with `connection`
    }
    make_room();
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.fd = connection.fd.get();
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, connection.fd.get(), &event) != 0) continue;
    try {
      connections_.push_back(std::move(connection));
    } catch (...) {
      // No memory to track it: closing it tells the client.
    }
  }
}

void HandoffServer::refuse_peer(Connection& connection) noexcept {
  try {
    // At most kHandoffMessageBytes reach the client: who may connect comes first.
    reply(connection, HandoffStatus::refused,
          fmt::format("engine {} serves {}; uid {} is not allowed (serve --allow-uid, --allow-group)", segment_->name(),
                      segment_->peers().describe(), user_text(connection.uid)));
  } catch (...) {
    // No memory for the sentence: the connection still closes, which tells the peer.
  }
}

bool HandoffServer::shed_connection(int error) noexcept {
  // The listener stays readable while a peer waits in its backlog: without a descriptor to
  // accept it with, the keeper would wake at once, forever. The reserve is that descriptor.
  if (!reserve_fd_) {
    reserve_fd_ = UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));  // a descriptor freed since?
    warn_at_most_once_a_second(fmt::format("out of file descriptors ({}) and no reserve left: new connections "
                                           "wait in the backlog", std::strerror(error)));
    return false;
  }
  reserve_fd_.reset();
  Connection connection;
  connection.fd = UniqueFd(::accept4(segment_->listen_fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  const bool shed = static_cast<bool>(connection.fd);
  if (shed) {
    reply(connection, HandoffStatus::internal,
          fmt::format("engine {} is out of file descriptors ({}); it keeps serving its clients: try again later, or "
                      "raise its RLIMIT_NOFILE (ulimit -n)", segment_->name(), std::strerror(error)));
    shut_without_reset(connection.fd.get());
  }
  connection.fd.reset();
  reserve_fd_ = UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  // accept4 fails with EMFILE before it looks at the backlog: nobody may be waiting at all.
  if (!shed) return false;
  warn_at_most_once_a_second(fmt::format("out of file descriptors ({}): told a new connection to try again later",
                                         std::strerror(error)));
  return static_cast<bool>(reserve_fd_);
}

void HandoffServer::warn_at_most_once_a_second(std::string text) noexcept {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_fd_warning_) return;
  next_fd_warning_ = now + std::chrono::seconds(1);
  events_->note({EngineEvent::Kind::warning, 0, 0, 0, 0, std::move(text)});
}

void HandoffServer::handle_readable(int fd) noexcept {
  for (;;) {
    Connection* connection = find(fd);
    if (connection == nullptr) return;
    HandoffRequest request{};
    const ssize_t got = ::recv(fd, &request, sizeof request, MSG_DONTWAIT);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (got <= 0) {  // EOF or an error: the client is gone
      close_connection(fd);
      return;
    }
    connection->last_active = std::chrono::steady_clock::now();
    if (connection->role != Connection::Role::pending) {
      // A lane's client may say it leaves on purpose; anything else it sends is ignored.
      ReleaseNotice notice{};
      std::memcpy(&notice, &request, sizeof notice);
      if (connection->role == Connection::Role::lane && static_cast<std::size_t>(got) == sizeof notice &&
          notice.magic == kHandoffMagic && notice.kind == 1)
        connection->released = true;
      continue;
    }
    if (static_cast<std::size_t>(got) != sizeof request) request.magic = 0;  // a short read is a bad request
    handle_request(*connection, request);
    if (connection->role == Connection::Role::pending) {
      close_connection(fd);  // refused: the reply said why
      return;
    }
  }
}

void HandoffServer::handle_request(Connection& connection, const HandoffRequest& request) noexcept {
  if (request.magic != kHandoffMagic) {
    reply(connection, HandoffStatus::bad_request, "a hand-off request is 16 bytes starting with the ipcfloor magic");
    return;
  }
  if (request.version != kHandoffVersion || request.layout_version != kLayoutVersion) {
    reply(connection, HandoffStatus::version_mismatch,
          fmt::format("the engine speaks hand-off version {} with layout {}", kHandoffVersion, kLayoutVersion));
    return;
  }
  if (request.role == static_cast<std::uint16_t>(HandoffRole::observer)) {
    connection.role = Connection::Role::observer;
    connection.deadline = connection.last_active + kHandoffPatience;
    const int fds[] = {segment_->data_fd()};
    reply(connection, HandoffStatus::ok, "", fds);
    return;
  }
  if (request.role != static_cast<std::uint16_t>(HandoffRole::lane)) {
    reply(connection, HandoffStatus::bad_request, fmt::format("unknown role {}", request.role));
    return;
  }
  if (stopping_) {
    reply(connection, HandoffStatus::stopping, fmt::format("engine {} is stopping", segment_->name()));
    return;
  }
  const LaneKeeper::Grant grant = lanes_->claim(connection.pid, connection.uid, request.reattaches);
  if (grant.status != HandoffStatus::ok) {
    reply(connection, grant.status, grant.message);
    return;
  }
  // Claimed from here on, even if the client is already gone: it may hold the object, so the
  // lane goes through draining (when its EOF is read) and gets a fresh object before reuse.
  connection.role = Connection::Role::lane;
  connection.lane = grant.lane;
  const int fds[] = {segment_->data_fd(), grant.object_fd};
  reply(connection, HandoffStatus::ok, "", fds, grant.lane, grant.generation);
}

void HandoffServer::reply(Connection& connection, HandoffStatus status, std::string_view message,
                          std::span<const int> fds, std::uint32_t lane, std::uint64_t generation) noexcept {
  HandoffReply answer{};
  answer.magic = kHandoffMagic;
  answer.version = kHandoffVersion;
  answer.status = static_cast<std::uint16_t>(status);
  answer.layout_version = kLayoutVersion;
  answer.lane = lane;
  answer.generation = generation;
  answer.data_bytes = segment_->size();
  answer.lane_bytes = fds.size() > 1 ? segment_->geometry().lane_bytes : 0;
  const std::string& name = segment_->name();  // at most kMaxSegmentNameBytes (valid_segment_name)
  std::memcpy(answer.engine, name.data(), std::min(name.size(), kHandoffNameBytes - 1));
  const std::size_t length = std::min(message.size(), kHandoffMessageBytes - 1);
  std::memcpy(answer.message, message.data(), length);
  // A client that vanished or stopped reading loses its answer; the engine goes on either way.
  (void)send_handoff(connection.fd.get(), std::as_bytes(std::span(&answer, 1)), fds);
}

void HandoffServer::close_connection(int fd) noexcept {
  const auto found = std::find_if(connections_.begin(), connections_.end(),
                                  [fd](const Connection& c) { return c.fd.get() == fd; });
  if (found == connections_.end()) return;
  if (found->role == Connection::Role::lane) lanes_->release(found->lane, found->released, found->pid);
  connections_.erase(found);  // closes the descriptor, which also leaves the epoll set
}

void HandoffServer::expire_idle() noexcept {
  const auto now = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < connections_.size();) {
    Connection& connection = connections_[i];
    if (connection.role != Connection::Role::lane && now >= connection.deadline) {
      (connection.role == Connection::Role::pending ? dropped_silent_ : closed_observers_).add(connection.pid, connection.uid);
      close_connection(connection.fd.get());
      continue;
    }
    ++i;
  }
}

void HandoffServer::flush_notes() noexcept {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_note_) return;
  if (refused_uid_.count + dropped_silent_.count + closed_observers_.count == 0) return;
  next_note_ = now + std::chrono::seconds(1);
  // One line a second for each kind, however many connections: a flood costs the keeper a count.
  if (refused_uid_.count != 0)
    events_->note({EngineEvent::Kind::refused, 0, 0, refused_uid_.pid, 0,
                   fmt::format("refused a connection from uid {} (pid {}){}", refused_uid_.uid, refused_uid_.pid,
                               refused_uid_.count > 1
                                   ? fmt::format(", and {} more the engine does not admit since the last note", refused_uid_.count - 1)
                                   : std::string())});
  if (dropped_silent_.count != 0)
    events_->note({EngineEvent::Kind::refused, 0, 0, dropped_silent_.pid, 0,
                   fmt::format("dropped {} connection(s) that sent no hand-off request within {} ms (the last from "
                               "pid {})", dropped_silent_.count, kHandoffPatience.count(), dropped_silent_.pid)});
  if (closed_observers_.count != 0)
    events_->note({EngineEvent::Kind::refused, 0, 0, closed_observers_.pid, 0,
                   fmt::format("closed {} observer connection(s) idle for {} ms after their hand-off (the last of pid "
                               "{})", closed_observers_.count, kHandoffPatience.count(), closed_observers_.pid)});
  refused_uid_ = {};
  dropped_silent_ = {};
  closed_observers_ = {};
}

void HandoffServer::make_room() noexcept {
  for (;;) {
    std::size_t extra = 0;
    const Connection* victim = nullptr;
    for (const Connection& connection : connections_) {
      if (connection.role == Connection::Role::lane) continue;
      ++extra;
      if (victim == nullptr || connection.last_active < victim->last_active) victim = &connection;
    }
    if (extra < kMaxExtraConnections || victim == nullptr) return;
    const int fd = victim->fd.get();
    if (victim->role == Connection::Role::pending) {
      // A request that already arrived is not idle: serve it (it becomes a lease, an observer
      // or closed) and look again.
      std::byte peek[1];
      if (::recv(fd, peek, sizeof peek, MSG_PEEK | MSG_DONTWAIT) > 0) {
        handle_readable(fd);
        continue;
      }
      shed_idle(fd);
    } else {
      close_connection(fd);  // an observer has had its reply; it needs nothing more
    }
    ++shed_since_note_;
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_shed_note_) {
      next_shed_note_ = now + std::chrono::seconds(1);
      events_->note({EngineEvent::Kind::refused, 0, 0, 0, 0,
                     fmt::format("at the cap of {} connections without a lane: closed {} idle one(s), the longest "
                                 "idle first, to make room for new ones",
                                 kMaxExtraConnections, std::exchange(shed_since_note_, 0))});
    }
  }
}

void HandoffServer::shed_idle(int fd) noexcept {
  Connection* connection = find(fd);
  if (connection == nullptr) return;
  reply(*connection, HandoffStatus::busy,
        fmt::format("engine {} has {} connections open that hold no lane and closed this one, the longest idle; ask "
                    "again", segment_->name(), kMaxExtraConnections));
  // As in shed_connection: a request that arrives between the reply and the close would reset
  // the peer and lose the answer.
  shut_without_reset(fd);
  close_connection(fd);
}

}  // namespace ipcfloor
