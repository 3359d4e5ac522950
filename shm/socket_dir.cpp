#include "shm/socket_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <span>

#include <fmt/format.h>

#include "common/atomic_file.hpp"
#include "common/peer_policy.hpp"
#include "common/unique_fd.hpp"

namespace ipcfloor {
namespace {

std::string without_trailing_slashes(std::string_view dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  return std::string(dir);
}

// Who may own a socket directory and the folders above it, for a message.
std::string owners_text(std::span<const uid_t> owners) {
  if (owners.empty()) return fmt::format("uid {} or root", ::geteuid());
  return trusted_text(owners) + " or root";
}

// The folders above `dir`, checked as check_output_directory checks a folder (ours or root's, and
// writable by others only when sticky): whoever may rename one of them may swap `dir` for another.
// `owners`: directory_trust's (empty: this user and root).
Expected<void> check_ancestors(const std::string& dir, std::span<const uid_t> owners = {}) {
  for (std::string folder = dir; folder != "/";) {
    const std::size_t slash = folder.rfind('/');
    folder = slash == 0 ? std::string("/") : folder.substr(0, slash);
    const UniqueFd opened(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!opened) return fail(ErrorCode::io, "cannot open {}, above the socket directory {}: {}", folder, dir, std::strerror(errno));
    struct stat info {};
    if (::fstat(opened.get(), &info) != 0)
      return fail(ErrorCode::io, "cannot inspect {}, above the socket directory {}: {}", folder, dir, std::strerror(errno));
    switch (directory_trust(info, owners)) {
      case DirectoryTrust::trusted: break;
      case DirectoryTrust::other_owner:
        return fail(ErrorCode::permission,
                    "the socket directory {} is inside {}, which belongs to uid {}: that user could swap the socket "
                    "directory for another one; use a directory whose every folder above belongs to {}",
                    dir, folder, info.st_uid, owners_text(owners));
      case DirectoryTrust::others_write:
        return fail(ErrorCode::permission,
                    "the socket directory {} is inside {} (mode {:04o}), which other users may write without the "
                    "sticky bit: they could swap the socket directory for another one; use a directory under folders "
                    "only you (or root) can write",
                    dir, folder, info.st_mode & 07777);
    }
  }
  return {};
}

// /dev/shm/ipcfloor-UID, where anyone may make it first: true when it is there and not a
// directory of this user.
bool squatted(const std::string& dir) {
  struct stat info {};
  return ::lstat(dir.c_str(), &info) == 0 && (!S_ISDIR(info.st_mode) || info.st_uid != ::geteuid());
}

}  // namespace

std::string shm_socket_dir() { return fmt::format("/dev/shm/ipcfloor-{}", ::geteuid()); }

std::string private_socket_dir() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && runtime[0] == '/') return without_trailing_slashes(runtime) + "/ipcfloor";
  const std::string shm = shm_socket_dir();
  const char* home = std::getenv("HOME");
  if (squatted(shm) && home != nullptr && home[0] == '/' && std::string_view(home) != "/")
    return without_trailing_slashes(home) + "/.ipcfloor";
  return shm;
}

std::string default_socket_dir() {
  const char* dir = std::getenv(kSocketDirVariable);
  return dir != nullptr && dir[0] != '\0' ? std::string(dir) : private_socket_dir();
}

Expected<void> check_socket_dir(std::string_view dir) {
  if (dir.empty() || dir.front() != '/')
    return fail(ErrorCode::invalid_argument, "socket directory '{}' is not an absolute path", dir);
  const std::string path(dir);
  const UniqueFd opened(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!opened) {
    if (errno == ENOENT || errno == ENOTDIR)
      return fail(ErrorCode::invalid_argument, "socket directory {} does not exist or is not a directory", dir);
    return fail(ErrorCode::io, "cannot open the socket directory {}: {}", dir, std::strerror(errno));
  }
  if (auto safe = check_output_directory(opened.get(), dir, fmt::format("engine sockets in {}", dir)); !safe) return safe;
  return check_ancestors(without_trailing_slashes(dir));
}

Expected<void> check_socket_dir_if_present(std::string_view dir) {
  struct stat info {};
  if (dir.empty() || dir.front() != '/' || ::stat(std::string(dir).c_str(), &info) != 0) return {};
  // A client trusts the engine users it trusts with their sockets (shm/handoff.hpp) with the
  // directory too: a service engine's RuntimeDirectory belongs to its user.
  auto owners = trusted_engine_uids();
  if (!owners) return std::unexpected(std::move(owners.error()));
  if (!S_ISDIR(info.st_mode))
    return fail(ErrorCode::invalid_argument, "socket directory {} does not exist or is not a directory", dir);
  switch (directory_trust(info, *owners)) {
    case DirectoryTrust::trusted: break;
    case DirectoryTrust::other_owner:
      return fail(ErrorCode::permission,
                  "refusing the socket directory {}: it belongs to uid {}, who could replace or redirect the engine's "
                  "socket; this client trusts {}. If that user runs the engine you mean (a service user), trust it "
                  "with {}={}",
                  dir, info.st_uid, trusted_text(*owners), kEngineUidVariable, info.st_uid);
    case DirectoryTrust::others_write:
      return fail(ErrorCode::permission,
                  "refusing the socket directory {} (mode {:04o}): other users may write it and it has no sticky bit, "
                  "so they could replace or redirect the engine's socket",
                  dir, info.st_mode & 07777);
  }
  return check_ancestors(without_trailing_slashes(dir), *owners);
}

Expected<void> prepare_socket_dir(std::string_view dir) {
  const std::string path = without_trailing_slashes(dir);
  if (path == private_socket_dir()) {
    if (::mkdir(path.c_str(), 0700) != 0 && errno != EEXIST)
      return fail(ErrorCode::io, "cannot make the private socket directory {}: {}", path, std::strerror(errno));
    struct stat info {};
    if (::lstat(path.c_str(), &info) != 0)
      return fail(ErrorCode::io, "cannot inspect the private socket directory {}: {}", path, std::strerror(errno));
    if (!S_ISDIR(info.st_mode) || info.st_uid != ::geteuid())
      return fail(ErrorCode::permission,
                  "the private socket directory {} is {} owned by uid {}, not a directory of uid {}: another user "
                  "made it first. Fix: have root remove it (sudo rm -r {}), or set XDG_RUNTIME_DIR to a directory "
                  "of yours (where pam_systemd puts /run/user/{}), or {}=DIR for the engine and its clients{}",
                  path, S_ISDIR(info.st_mode) ? "a directory" : S_ISLNK(info.st_mode) ? "a link" : "a file",
                  info.st_uid, ::geteuid(), path, ::geteuid(), kSocketDirVariable,
                  path == shm_socket_dir() ? "; with HOME set, $HOME/.ipcfloor is used instead" : "");
  }
  return check_socket_dir(path);
}

}  // namespace ipcfloor
