#include "shm/socket_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "common/atomic_file.hpp"
#include "common/unique_fd.hpp"

namespace ipcfloor {
namespace {

std::string without_trailing_slashes(std::string_view dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.remove_suffix(1);
  return std::string(dir);
}

}  // namespace

std::string private_socket_dir() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  if (runtime != nullptr && runtime[0] == '/') return without_trailing_slashes(runtime) + "/ipcfloor";
  return fmt::format("/dev/shm/ipcfloor-{}", ::geteuid());
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
  return check_output_directory(opened.get(), dir, fmt::format("engine sockets in {}", dir));
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
                  "the private socket directory {} is {} owned by uid {}, not a directory of uid {}: another user may "
                  "have made it first; remove it, or name another with {} or XDG_RUNTIME_DIR",
                  path, S_ISDIR(info.st_mode) ? "a directory" : S_ISLNK(info.st_mode) ? "a link" : "a file",
                  info.st_uid, ::geteuid(), kSocketDirVariable);
  }
  return check_socket_dir(path);
}

}  // namespace ipcfloor
