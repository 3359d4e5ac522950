#include "app/readiness.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "common/atomic_file.hpp"
#include "common/unique_fd.hpp"

namespace ipcfloor {

void print_ready_line(const nlohmann::json& facts) {
  fmt::print(stdout, "ready {}\n", facts.dump());
  std::fflush(stdout);
}

Expected<PidFile> write_pidfile(const std::string& path) {
  PidFile pidfile{path, fmt::format("{}\n", ::getpid()), {}};
  // Readable by all (0644), as pid files are; created so that nothing planted at any name can
  // redirect it (common/atomic_file.hpp).
  auto written = write_file_atomically(path, pidfile.content, "the pid file", 0644);
  if (!written) return std::unexpected(std::move(written.error()));
  pidfile.identity = *written;
  return pidfile;
}

void remove_pidfile(const PidFile& pidfile) noexcept {
  (void)remove_if_unchanged(pidfile.path, pidfile.identity, pidfile.content);
}

void notify_systemd(std::string_view state) noexcept {
  const char* socket_path = std::getenv("NOTIFY_SOCKET");
  if (socket_path == nullptr || socket_path[0] == '\0') return;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::size_t length = std::strlen(socket_path);
  if (length >= sizeof address.sun_path) return;
  std::memcpy(address.sun_path, socket_path, length);
  if (address.sun_path[0] == '@') address.sun_path[0] = '\0';  // abstract namespace
  UniqueFd fd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!fd) return;
  const auto size = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + length);
  (void)::sendto(fd.get(), state.data(), state.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&address), size);
}

}  // namespace ipcfloor
