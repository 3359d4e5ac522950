#include "socket_server/socket_listener.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

namespace ipcfloor::socket_detail {
namespace {

constexpr int kListenBacklog = 128;

}  // namespace

std::string os_error(int error) { return std::error_code(error, std::generic_category()).message(); }

Expected<int> open_unix_listener(const std::string& path, mode_t mode, std::uint64_t& dev, std::uint64_t& ino) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path)
    return fail(ErrorCode::invalid_argument, "socket path '{}' must be 1..{} bytes", path, sizeof address.sun_path - 1);
  std::memcpy(address.sun_path, path.data(), path.size());
  const auto* raw = reinterpret_cast<const sockaddr*>(&address);
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);

  struct stat existing {};
  if (lstat(path.c_str(), &existing) == 0) {
    if (!S_ISSOCK(existing.st_mode))
      return fail(ErrorCode::busy, "{} exists and is not a socket; refusing to replace it", path);
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0) return fail(ErrorCode::io, "cannot create a socket to probe {}: {}", path, os_error(errno));
    const int connected = connect(probe, raw, length);
    const int probe_error = errno;
    close(probe);
    if (connected == 0)
      return fail(ErrorCode::busy, "a server is already listening on {}; stop it or pick another --socket path", path);
    if (probe_error != ECONNREFUSED)
      return fail(ErrorCode::io, "cannot tell whether {} is stale: connecting to it failed with {}", path,
                  os_error(probe_error));
    // Nobody listens: a crashed server left it behind.
    if (unlink(path.c_str()) != 0 && errno != ENOENT)
      return fail(ErrorCode::io, "cannot remove the stale socket {}: {}", path, os_error(errno));
  } else if (errno != ENOENT) {
    return fail(ErrorCode::io, "cannot inspect {}: {}", path, os_error(errno));
  }

  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(ErrorCode::io, "cannot create a Unix socket: {}", os_error(errno));
  const auto give_up = [&](std::string what, int error, bool created) -> Expected<int> {
    close(fd);
    if (created) unlink(path.c_str());
    return fail(ErrorCode::io, "{} {}: {}", what, path, os_error(error));
  };
  if (bind(fd, raw, length) != 0) return give_up("cannot bind", errno, false);
  // No peer can connect before listen(), so setting the mode here leaves no window in which
  // the umask's wider mode admits anyone.
  if (chmod(path.c_str(), mode) != 0) return give_up("cannot set the mode of", errno, true);
  struct stat created {};
  if (lstat(path.c_str(), &created) != 0) return give_up("cannot inspect", errno, true);
  if (listen(fd, kListenBacklog) != 0) return give_up("cannot listen on", errno, true);
  dev = static_cast<std::uint64_t>(created.st_dev);
  ino = static_cast<std::uint64_t>(created.st_ino);
  return fd;
}

Expected<int> open_tcp_listener(const TcpEndpoint& endpoint, std::uint16_t& bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(endpoint.port);
  if (const int rc = getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return fail(ErrorCode::invalid_argument, "cannot resolve tcp host '{}': {}", endpoint.host, gai_strerror(rc));
  std::string last_error = "no address";
  int fd = -1;
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = os_error(errno);
      continue;
    }
    const int one = 1;
    // A restarted server must not wait out TIME_WAIT of its previous life.
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, kListenBacklog) == 0) break;
    last_error = os_error(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0)
    return fail(ErrorCode::io, "cannot listen on tcp {}:{}: {}", endpoint.host, endpoint.port, last_error);
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof bound;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) {
    const int error = errno;
    close(fd);
    return fail(ErrorCode::io, "cannot read the bound tcp port: {}", os_error(error));
  }
  bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                                           : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  return fd;
}

std::string tcp_peer_address(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = "?";
  if (address.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&address)->sin_addr, text, sizeof text);
  if (address.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&address)->sin6_addr, text, sizeof text);
  return text;
}

std::string tcp_peer_name(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = "?";
  std::uint16_t port = 0;
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    port = ntohs(v4->sin_port);
    return fmt::format("tcp peer {}:{}", text, port);
  }
  if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    port = ntohs(v6->sin6_port);
    return fmt::format("tcp peer [{}]:{}", text, port);
  }
  return "tcp peer (unknown address)";
}

EpollSet::~EpollSet() {
  if (fd_ >= 0) close(fd_);
}

Expected<void> EpollSet::open() {
  fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (fd_ < 0) return fail(ErrorCode::io, "epoll_create1 failed: {}", os_error(errno));
  return {};
}

Expected<void> EpollSet::add(int fd, std::uint32_t events) {
  epoll_event event{};
  event.events = events;
  event.data.fd = fd;
  if (epoll_ctl(fd_, EPOLL_CTL_ADD, fd, &event) != 0)
    return fail(ErrorCode::io, "epoll_ctl(ADD) failed: {}", os_error(errno));
  return {};
}

bool EpollSet::modify(int fd, std::uint32_t events) noexcept {
  epoll_event event{};
  event.events = events;
  event.data.fd = fd;
  return epoll_ctl(fd_, EPOLL_CTL_MOD, fd, &event) == 0;
}

int EpollSet::wait(std::span<epoll_event> events, int timeout_ms) noexcept {
  return epoll_wait(fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
}

std::optional<SocketFault> ConnectionLimit::claim(bool owner) noexcept {
  const std::size_t limit = owner ? max_ : others_max_;
  // relaxed: a count compared against the limit and nothing else; no memory is published
  // through it, and an RMW on one atomic sees every earlier RMW on it in any order, so the count
  // is exact without ordering (the other RMW is ConnectionLimit::release).
  if (open_.fetch_add(1, std::memory_order_relaxed) >= limit) {
    release();
    SocketFault fault;
    fault.error = SocketError::too_many_connections;
    fault.expected = limit;
    return fault;
  }
  return std::nullopt;
}

bool ConnectionLimit::one_release_admits(bool owner) const noexcept {
  // relaxed: a hint for eviction, read without ordering because nothing is published through
  // the count; a stale value only closes one idle connection more or fewer, and claim() still
  // holds the limit exactly with its RMW.
  return open_.load(std::memory_order_relaxed) <= (owner ? max_ : others_max_);
}

void ConnectionLimit::release() noexcept {
  // relaxed: a count compared against the limit; no memory is published through it, and RMWs
  // on one atomic stay exact without ordering (the other RMW is ConnectionLimit::claim).
  open_.fetch_sub(1, std::memory_order_relaxed);
}

PeerLimit::Claim PeerLimit::claim(const std::string& key) {
  const std::lock_guard lock(mutex_);
  const auto found = held_.find(key);
  const std::size_t held = found == held_.end() ? 0 : found->second;
  if (held >= max_) return Claim::peer_at_max;
  // A peer with one connection may still take a kept slot: a client that reconnects before the
  // server has seen its last connection close is a new peer all the same.
  if (held > 1 && total_ >= shared_) return Claim::kept_for_new_peers;
  ++held_[key];
  ++total_;
  return Claim::taken;
}

void PeerLimit::release(const std::string& key) noexcept {
  const std::lock_guard lock(mutex_);
  const auto found = held_.find(key);
  if (found == held_.end()) return;
  --total_;
  if (--found->second == 0) held_.erase(found);
}

}  // namespace ipcfloor::socket_detail
