#include "shm/name_claim.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include <fmt/format.h>

#include "common/checksum.hpp"
#include "shm/handoff.hpp"

namespace ipcfloor {
namespace {

std::string errno_text(int error) { return std::strerror(error); }

// The sentence for a name whose claim another process holds.
Error held_by_a_live_process(std::string_view name, std::string_view dir, const std::string& address) {
  const std::string path = handoff_socket_path(dir, name);
  auto probe = probe_socket(path);
  if (probe && probe->listening && probe->pid > 0)
    return Error{ErrorCode::busy, fmt::format("engine {} is running (pid {}): it holds the name in {}; stop it first "
                                              "or choose another --name", name, probe->pid, dir)};
  return Error{ErrorCode::busy,
               fmt::format("engine {} is running: a live process holds the name in {} (abstract socket @{}), but {} "
                           "does not answer (removed by hand?); stop that process (`ss -xp | grep {}` names it) or "
                           "choose another --name", name, dir, address, path, address)};
}

}  // namespace

std::string claim_address(uid_t uid, dev_t dir_device, ino_t dir_inode, std::string_view name) {
  const std::string prefix = fmt::format("ipcfloor/{}/{:x}.{:x}/", uid, dir_device, dir_inode);
  // One byte of sun_path is the leading NUL that makes the address abstract.
  constexpr std::size_t kRoom = sizeof(sockaddr_un::sun_path) - 1;
  if (prefix.size() + name.size() <= kRoom) return prefix + std::string(name);
  return fmt::format("{}#{:016x}", prefix, fnv1a64(std::as_bytes(std::span(name.data(), name.size()))));
}

Expected<NameClaim> NameClaim::take(std::string_view name, std::string_view dir, std::vector<std::string>& warnings) {
  struct stat dir_info {};
  if (::stat(std::string(dir).c_str(), &dir_info) != 0 || !S_ISDIR(dir_info.st_mode))
    return fail(ErrorCode::invalid_argument, "socket directory {} does not exist or is not a directory", dir);
  NameClaim claim;
  claim.address_ = claim_address(::geteuid(), dir_info.st_dev, dir_info.st_ino, name);
  claim.socket_ = UniqueFd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!claim.socket_) return fail(ErrorCode::io, "cannot create the socket that claims {}: {}", name, errno_text(errno));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path + 1, claim.address_.data(), claim.address_.size());  // sun_path[0] = 0: abstract
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + claim.address_.size());
  if (::bind(claim.socket_.get(), reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    if (errno == EADDRINUSE) return std::unexpected(held_by_a_live_process(name, dir, claim.address_));
    return fail(ErrorCode::io, "cannot claim {} (abstract socket @{}): {}", name, claim.address_, errno_text(errno));
  }
  const std::string path = handoff_socket_path(dir, name);
  auto found = inspect_socket_file(path, name);
  if (!found) return std::unexpected(std::move(found.error()));
  claim.socket_file_ = *found;
  if (*found == SocketFileState::stale)
    warnings.push_back(fmt::format("replacing the stale socket of a dead engine {} ({})", name, path));
  return claim;
}

Expected<SocketFileState> inspect_socket_file(const std::string& path, std::string_view name) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return SocketFileState::absent;
    return fail(ErrorCode::io, "cannot inspect {}: {}", path, errno_text(errno));
  }
  if (!S_ISSOCK(info.st_mode))
    return fail(ErrorCode::permission, "{} exists and is not an ipcfloor socket (mode {:o}; an older ipcfloor's "
                "segment file?); remove it or choose another --name", path, info.st_mode);
  if (info.st_uid != ::geteuid())
    return fail(ErrorCode::permission, "{} is a socket of uid {}, not {}: another user holds engine {}'s name in a "
                "directory others may write; ipcfloor only replaces its own sockets: use the private default directory "
                "(unset IPCFLOOR_SOCKET_DIR and --socket-dir) or another --name", path, info.st_uid, ::geteuid(), name);
  auto probe = probe_socket(path);
  if (!probe) return std::unexpected(std::move(probe.error()));
  if (probe->listening)
    return fail(ErrorCode::busy, "engine {} is running{}: something listens on {} though no engine of this network "
                "namespace holds the name (an engine in another namespace sharing the directory?); stop it first or "
                "choose another --name", name, probe->pid > 0 ? fmt::format(" (pid {})", probe->pid) : "", path);
  return SocketFileState::stale;
}

Expected<void> remove_stale_socket_file(const std::string& path) {
  struct stat before {};
  if (::lstat(path.c_str(), &before) != 0) return {};
  if (!S_ISSOCK(before.st_mode) || before.st_uid != ::geteuid())
    return fail(ErrorCode::permission, "{} is not an ipcfloor socket of uid {}; left untouched", path, ::geteuid());
  auto probe = probe_socket(path);
  if (!probe) return std::unexpected(std::move(probe.error()));
  if (probe->listening) return fail(ErrorCode::busy, "something listens on {}; left untouched", path);
  // Still the file that was probed: a successor that renamed its socket in keeps it.
  struct stat now {};
  if (::lstat(path.c_str(), &now) != 0 || now.st_ino != before.st_ino || now.st_dev != before.st_dev) return {};
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return fail(ErrorCode::io, "cannot remove the stale socket {}: {}", path, errno_text(errno));
  return {};
}

}  // namespace ipcfloor
