#include "shm/handoff.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace ipcfloor {

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
  }
  return "unknown";
}

std::string handoff_socket_path(std::string_view dir, std::string_view name) {
  std::string base(dir);
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  return fmt::format("{}/{}", base, name);
}

std::string handoff_lock_path(std::string_view dir, std::string_view name) {
  return handoff_socket_path(dir, name) + ".lock";
}

Expected<PeerCredentials> peer_credentials(int socket_fd) {
  ucred credentials{};
  socklen_t length = sizeof credentials;
  if (::getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0)
    return fail(ErrorCode::io, "cannot read the peer's credentials (SO_PEERCRED): {}", std::strerror(errno));
  return PeerCredentials{credentials.pid, credentials.uid, credentials.gid};
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

}  // namespace ipcfloor
