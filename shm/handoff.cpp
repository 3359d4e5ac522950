#include "shm/handoff.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "shm/layout.hpp"
#include "shm/liveness.hpp"

namespace ipcfloor {
namespace {

// The modes an engine gives its socket: 0600, or 0666 when it admits other users (who may
// connect is then the engine's PeerPolicy, checked on SO_PEERCRED).
constexpr mode_t kPrivateSocketMode = 0600;
constexpr mode_t kSharedSocketMode = 0666;
// How soon an attach asks again while a lane is being freed (it frees itself within a frame).
constexpr std::chrono::microseconds kLaneDrainingRetry{500};
// How soon an attach asks a busy engine again: doubling from the first to the last pause, so a
// crowd of retrying clients thins out instead of adding to the crowd.
constexpr std::chrono::microseconds kBusyFirstRetry{500};
constexpr std::chrono::microseconds kBusyLastRetry{20'000};

std::string errno_text(int error) { return std::strerror(error); }

std::string mode_text(mode_t mode) { return fmt::format("{:04o}", mode & 07777); }

}  // namespace

std::string_view to_string(HandoffStatus status) noexcept {
  switch (status) {
    case HandoffStatus::ok: return "ok";
    case HandoffStatus::no_free_lane: return "no free lane";
    case HandoffStatus::version_mismatch: return "version mismatch";
    case HandoffStatus::refused: return "refused";
    case HandoffStatus::stopping: return "stopping";
    case HandoffStatus::internal: return "internal error";
    case HandoffStatus::bad_request: return "bad request";
    case HandoffStatus::lane_draining: return "lane draining";
    case HandoffStatus::busy: return "busy";
  }
  return "unknown";
}

std::string handoff_socket_path(std::string_view dir, std::string_view name) {
  std::string base(dir);
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return fmt::format("{}/{}", base, name);
}

Expected<sockaddr_un> unix_address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path)
    return fail(ErrorCode::invalid_argument, "socket path {} is longer than the {} bytes a Unix socket path may have",
                path, sizeof address.sun_path - 1);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

Expected<SocketProbe> probe_socket(const std::string& path) {
  auto address = unix_address(path);
  if (!address) return std::unexpected(std::move(address.error()));
  const UniqueFd probe(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!probe) return fail(ErrorCode::io, "cannot create a socket: {}", errno_text(errno));
  int rc = 0;
  do {
    rc = ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address);
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) {
    auto peer = peer_credentials(probe.get());
    return SocketProbe{true, peer ? peer->pid : 0};
  }
  // A full backlog (EAGAIN) still means a listener.
  if (errno == EAGAIN) return SocketProbe{true, 0};
  if (errno == ECONNREFUSED || errno == ENOENT) return SocketProbe{false, 0};
  return fail(ErrorCode::io, "cannot tell whether anything listens on {}: {}", path, errno_text(errno));
}

Expected<void> send_handoff(int socket_fd, std::span<const std::byte> bytes, std::span<const int> fds) {
  if (fds.size() > kMaxHandoffFds) return fail(ErrorCode::invalid_argument, "a hand-off carries at most {} descriptors", kMaxHandoffFds);
  iovec vector{const_cast<std::byte*>(bytes.data()), bytes.size()};
  msghdr message{};
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  alignas(cmsghdr) unsigned char control[CMSG_SPACE(sizeof(int) * kMaxHandoffFds)] = {};
  if (!fds.empty()) {
    message.msg_control = control;
    message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(header), fds.data(), sizeof(int) * fds.size());
  }
  for (;;) {
    const ssize_t sent = ::sendmsg(socket_fd, &message, MSG_NOSIGNAL);
    if (sent == static_cast<ssize_t>(bytes.size())) return {};
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EPIPE || errno == ECONNRESET))
      return fail(ErrorCode::peer_gone, "the peer closed the hand-off socket");
    return fail(ErrorCode::io, "cannot send on the hand-off socket: {}", sent < 0 ? std::strerror(errno) : "short send");
  }
}

Expected<ReceivedHandoff> receive_handoff(int socket_fd, std::span<std::byte> into,
                                          std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd watch{socket_fd, POLLIN, 0};
    const int ready = ::poll(&watch, 1, static_cast<int>(std::max<std::chrono::milliseconds::rep>(0, left.count())));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return fail(ErrorCode::io, "cannot wait on the hand-off socket: {}", std::strerror(errno));
    if (ready == 0) return fail(ErrorCode::timeout, "no hand-off message arrived in time");
    break;
  }
  iovec vector{into.data(), into.size()};
  msghdr message{};
  message.msg_iov = &vector;
  message.msg_iovlen = 1;
  alignas(cmsghdr) unsigned char control[CMSG_SPACE(sizeof(int) * kMaxHandoffFds)] = {};
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  ssize_t got = 0;
  do {
    got = ::recvmsg(socket_fd, &message, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    if (errno == ECONNRESET) return fail(ErrorCode::peer_gone, "the peer reset the hand-off socket");
    return fail(ErrorCode::io, "cannot receive on the hand-off socket: {}", std::strerror(errno));
  }
  if (got == 0) return fail(ErrorCode::peer_gone, "the peer closed the hand-off socket");
  ReceivedHandoff received;
  received.bytes = static_cast<std::size_t>(got);
  received.truncated = (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) != 0;
  for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr; header = CMSG_NXTHDR(&message, header)) {
    if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd = -1;
      std::memcpy(&fd, CMSG_DATA(header) + i * sizeof(int), sizeof fd);
      received.fds.emplace_back(fd);  // owned from here on, even if the message is refused
    }
  }
  return received;
}

bool peer_hung_up(int socket_fd) noexcept {
  pollfd watch{socket_fd, POLLRDHUP, 0};
  const int ready = ::poll(&watch, 1, 0);
  return ready > 0 && (watch.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

// =============================================================================================
// The engine's listening socket

Expected<HandoffListener> HandoffListener::open(const std::string& path, mode_t mode) {
  if (auto final_address = unix_address(path); !final_address) return std::unexpected(std::move(final_address.error()));
  UniqueFd listener(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener) return fail(ErrorCode::io, "cannot create the hand-off socket: {}", errno_text(errno));
  // A private name in the same directory (rename needs one file system), never one another
  // engine could be using: nothing is unlinked that this process did not bind.
  const std::string dir = path.substr(0, path.rfind('/') + 1);
  std::string staging;
  for (int attempt = 0;; ++attempt) {
    staging = fmt::format("{}.ipcfloor-{:x}-{:x}", dir, ::getpid(), (monotonic_ns() >> 4) & 0xffffffffU);
    auto address = unix_address(staging);
    if (!address) return std::unexpected(std::move(address.error()));
    if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address) == 0) break;
    if (errno != EADDRINUSE || attempt == 8) return fail(ErrorCode::io, "cannot bind {}: {}", staging, errno_text(errno));
  }
  const auto give_up = [&](std::string_view what) {
    const int error = errno;
    ::unlink(staging.c_str());
    return fail(ErrorCode::io, "cannot {} {}: {}", what, staging, errno_text(error));
  };
  struct stat info {};
  if (::chmod(staging.c_str(), mode) != 0 || ::lstat(staging.c_str(), &info) != 0)
    return give_up(fmt::format("make {}", mode_text(mode)));
  if (::listen(listener.get(), 64) != 0) return give_up("listen on");
  if (::rename(staging.c_str(), path.c_str()) != 0) return give_up(fmt::format("rename to {}", path));
  HandoffListener made;
  made.fd_ = std::move(listener);
  made.path_ = path;
  made.device_ = info.st_dev;
  made.inode_ = info.st_ino;
  return made;
}

HandoffListener::HandoffListener(HandoffListener&& other) noexcept
    : fd_(std::move(other.fd_)), path_(std::move(other.path_)), device_(other.device_),
      inode_(std::exchange(other.inode_, 0)) {}

HandoffListener& HandoffListener::operator=(HandoffListener&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::move(other.fd_);
    path_ = std::move(other.path_);
    device_ = other.device_;
    inode_ = std::exchange(other.inode_, 0);
  }
  return *this;
}

void HandoffListener::close() noexcept {
  // Unlinked while still listening: until the file is gone, a new engine's probe finds it live
  // and leaves it alone, so the file checked here is the file removed.
  struct stat info {};
  if (inode_ != 0 && ::lstat(path_.c_str(), &info) == 0 && info.st_ino == inode_ && info.st_dev == device_)
    ::unlink(path_.c_str());
  inode_ = 0;
  fd_.reset();
}

// =============================================================================================
// The client's side of the handshake

namespace {

bool trusted(std::span<const uid_t> trusted_uids, uid_t uid) {
  return std::find(trusted_uids.begin(), trusted_uids.end(), uid) != trusted_uids.end();
}

// What a client that met an engine of an untrusted user can do about it.
std::string trust_hint(uid_t owner) {
  return fmt::format("to use an engine that runs as uid {}, set {}={} (its operator lets your user in with `serve "
                     "--allow-uid` or `--allow-group`)", user_text(owner), kEngineUidVariable, owner);
}

// The socket file must be a trusted user's, with a mode an engine gives it, before we talk to
// whoever listens on it.
Expected<void> check_socket_file(const std::string& path, std::string_view name, std::span<const uid_t> trusted_uids) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT)
      return fail(ErrorCode::peer_gone, "no engine serves {}: there is no socket at {} (start one: ipcfloor serve --name {})",
                  name, path, name);
    return fail(ErrorCode::io, "cannot inspect {}: {}", path, errno_text(errno));
  }
  if (!S_ISSOCK(info.st_mode))
    return fail(ErrorCode::permission, "{} is not a socket (mode {:o}): no ipcfloor engine of this version serves {} "
                "(an older ipcfloor's segment file?)", path, info.st_mode, name);
  if (!trusted(trusted_uids, info.st_uid))
    return fail(ErrorCode::permission, "{} is owned by uid {} (mode {}); this client trusts only engines of {}: {}",
                path, user_text(info.st_uid), mode_text(info.st_mode), trusted_text(trusted_uids),
                trust_hint(info.st_uid));
  const mode_t mode = info.st_mode & 07777;
  if (mode != kPrivateSocketMode && mode != kSharedSocketMode)
    return fail(ErrorCode::permission, "{} has mode {}; an engine makes its socket 0600 (0666 when it admits other "
                "users), so something else changed it: not trusted", path, mode_text(mode));
  return {};
}

Expected<UniqueFd> connect_engine(const std::string& path, std::string_view name, std::span<const uid_t> trusted_uids,
                                  pid_t& engine_pid) {
  auto address = unix_address(path);
  if (!address) return std::unexpected(std::move(address.error()));
  UniqueFd connection(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!connection) return fail(ErrorCode::io, "cannot create a socket: {}", errno_text(errno));
  int rc = 0;
  do {
    rc = ::connect(connection.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno == ECONNREFUSED || errno == ENOENT)
      return fail(ErrorCode::peer_gone, "engine {} is gone: nobody listens on {} (the next `ipcfloor serve --name {}` "
                  "replaces the stale socket)", name, path, name);
    if (errno == EACCES)
      return fail(ErrorCode::permission, "permission denied connecting to {}: engine {} admits only its own user (its "
                  "socket is 0600); its operator lets others in with `serve --allow-uid` or `--allow-group`", path, name);
    return fail(ErrorCode::io, "cannot connect to {}: {}", path, errno_text(errno));
  }
  auto peer = peer_credentials(connection.get());
  if (!peer) return std::unexpected(std::move(peer.error()));
  if (!trusted(trusted_uids, peer->uid))
    return fail(ErrorCode::permission, "the process listening on {} (pid {}) runs as uid {}; this client trusts only "
                "engines of {}: {}", path, peer->pid, user_text(peer->uid), trusted_text(trusted_uids),
                trust_hint(peer->uid));
  engine_pid = peer->pid;
  return connection;
}

ErrorCode error_code_for(HandoffStatus status) noexcept {
  switch (status) {
    case HandoffStatus::no_free_lane:
    case HandoffStatus::lane_draining:
    case HandoffStatus::busy: return ErrorCode::busy;
    case HandoffStatus::version_mismatch: return ErrorCode::version_mismatch;
    case HandoffStatus::refused: return ErrorCode::permission;
    case HandoffStatus::stopping: return ErrorCode::peer_gone;
    case HandoffStatus::bad_request: return ErrorCode::protocol;
    case HandoffStatus::internal:
    case HandoffStatus::ok: break;
  }
  return ErrorCode::io;
}

// One request and its reply on a fresh connection. A refusal comes back as a Handoff whose
// reply says so; errors are for a connection that failed or ended without a well-formed reply.
Expected<Handoff> ask_once(UniqueFd connection, pid_t engine_pid, HandoffRole role,
                           std::chrono::steady_clock::time_point deadline, const std::string& path,
                           std::uint32_t reattaches) {
  Handoff handoff;
  handoff.connection = std::move(connection);
  handoff.engine_pid = engine_pid;
  const int fd = handoff.connection.get();
  const HandoffRequest request{kHandoffMagic, kHandoffVersion, static_cast<std::uint16_t>(role), kLayoutVersion,
                                reattaches};
  auto sent = send_handoff(fd, std::as_bytes(std::span(&request, 1)), {});
  // An engine that refuses at accept (out of descriptors) answers and closes before it reads: the
  // send then fails, but its answer is waiting and says why.
  if (!sent && sent.error().code != ErrorCode::peer_gone) return std::unexpected(std::move(sent.error()));
  HandoffReply& reply = handoff.reply;
  auto received = receive_handoff(fd, std::as_writable_bytes(std::span(&reply, 1)), deadline);
  if (!received && !sent) return std::unexpected(std::move(sent.error()));
  if (!received) {
    received.error().message = fmt::format("the engine on {} did not answer the hand-off: {}", path, received.error().message);
    return std::unexpected(std::move(received.error()));
  }
  // The version first: an engine of another version sends a reply of another size.
  constexpr std::size_t kVersionBytes = offsetof(HandoffReply, layout_version) + sizeof reply.layout_version;
  if (received->bytes < kVersionBytes || reply.magic != kHandoffMagic)
    return fail(ErrorCode::protocol, "the engine on {} sent a malformed hand-off reply ({} bytes)", path, received->bytes);
  if (reply.version != kHandoffVersion || reply.layout_version != kLayoutVersion)
    return fail(ErrorCode::version_mismatch, "the engine on {} speaks hand-off version {} with layout {}; this client "
                "speaks {} with layout {}: use the same ipcfloor version on both sides", path, reply.version,
                reply.layout_version, kHandoffVersion, kLayoutVersion);
  if (received->truncated || received->bytes != sizeof reply)
    return fail(ErrorCode::protocol, "the engine on {} sent a malformed hand-off reply ({} bytes)", path, received->bytes);
  reply.engine[kHandoffNameBytes - 1] = '\0';
  reply.message[kHandoffMessageBytes - 1] = '\0';
  handoff.fds = std::move(received->fds);
  return handoff;
}

}  // namespace

Expected<Handoff> request_handoff(const std::string& path, std::string_view name, HandoffRole role,
                                  std::chrono::steady_clock::time_point deadline, std::uint32_t reattaches) {
  auto busy_pause = kBusyFirstRetry;
  std::string why_retry;  // why the last attempt is being retried: the engine was busy
  const auto still_busy = [&](pid_t engine_pid, int attempts) {
    return fail(ErrorCode::busy, "engine {} (pid {}) is alive but busy: {} ({} tries until the timeout; it sheds "
                "idle connections when it has too many open); try again", name, engine_pid, why_retry, attempts);
  };
  auto trusted_uids = trusted_engine_uids();
  if (!trusted_uids) return std::unexpected(std::move(trusted_uids.error()));
  for (int attempt = 1;; ++attempt) {
    if (auto checked = check_socket_file(path, name, *trusted_uids); !checked)
      return std::unexpected(std::move(checked.error()));
    pid_t engine_pid = 0;
    auto connection = connect_engine(path, name, *trusted_uids, engine_pid);
    if (!connection) return std::unexpected(std::move(connection.error()));
    auto handoff = ask_once(std::move(*connection), engine_pid, role, deadline, path, reattaches);
    if (!handoff) {
      // A busy engine that keeps this try waiting past the deadline is still a busy engine.
      if (handoff.error().code == ErrorCode::timeout && !why_retry.empty()) return still_busy(engine_pid, attempt);
      if (handoff.error().code != ErrorCode::peer_gone) return std::unexpected(std::move(handoff.error()));
      // Ended without an answer. A live engine does that only to a connection it shed (at its
      // connection cap, or out of descriptors); a dead one stops listening.
      auto probe = probe_socket(path);
      if (!probe || !probe->listening)
        return fail(ErrorCode::peer_gone, "engine {} is gone (pid {}): it closed the hand-off on {} without answering "
                    "and nothing listens there now (it died or is stopping)", name, engine_pid, path);
      why_retry = "it closed the hand-off without answering";
    } else {
      const auto status = static_cast<HandoffStatus>(handoff->reply.status);
      if (status == HandoffStatus::ok && std::string_view(handoff->reply.engine) != name)
        return fail(ErrorCode::permission, "the engine on {} (pid {}) serves '{}', not '{}': the sockets in that "
                    "directory were moved or swapped (can another user write it? `ipcfloor doctor` checks); nothing "
                    "was mapped", path, engine_pid, handoff->reply.engine, name);
      if (status == HandoffStatus::ok) return handoff;
      const bool retry = status == HandoffStatus::lane_draining || status == HandoffStatus::busy;
      if (!retry || std::chrono::steady_clock::now() >= deadline)
        return fail(error_code_for(status), "engine {} (pid {}) refused the attach: {}{}{}", name, engine_pid,
                    to_string(status), handoff->reply.message[0] != '\0' ? ": " : "", handoff->reply.message);
      // A lane that is being freed will be free without anyone's help: a client that reconnects
      // right after another left, or after a crash, must not be told "busy".
      if (status == HandoffStatus::lane_draining) {
        std::this_thread::sleep_for(kLaneDrainingRetry);
        continue;
      }
      why_retry = handoff->reply.message;
    }
    if (std::chrono::steady_clock::now() >= deadline) return still_busy(engine_pid, attempt);
    std::this_thread::sleep_for(busy_pause);
    busy_pause = std::min(busy_pause * 2, kBusyLastRetry);
  }
}

void Lease::release() noexcept {
  if (!connection_) return;
  const ReleaseNotice notice{kHandoffMagic, kHandoffVersion, 1};
  (void)!::send(connection_.get(), &notice, sizeof notice, MSG_NOSIGNAL | MSG_DONTWAIT);
  connection_.reset();
}

}  // namespace ipcfloor
