#include "app/readiness.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "common/unique_fd.hpp"

namespace ipcfloor {

void print_ready_line(const nlohmann::json& facts) {
  fmt::print(stdout, "ready {}\n", facts.dump());
  std::fflush(stdout);
}

Expected<void> write_pidfile(const std::string& path) {
  const std::string temporary = fmt::format("{}.{}.tmp", path, ::getpid());
  std::FILE* file = std::fopen(temporary.c_str(), "w");
  if (file == nullptr) return fail(ErrorCode::io, "cannot write the pid file {}: {}", temporary, std::strerror(errno));
  const bool written = std::fprintf(file, "%d\n", static_cast<int>(::getpid())) > 0;
  const bool closed = std::fclose(file) == 0;
  if (!written || !closed || std::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    std::remove(temporary.c_str());
    return fail(ErrorCode::io, "cannot write the pid file {}: {}", path, std::strerror(error));
  }
  return {};
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
