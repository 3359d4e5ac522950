#include "bench/helper_files.hpp"

#include <unistd.h>

#include <filesystem>
#include <system_error>

namespace ipcfloor {

Expected<std::string> helper_dir() {
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return fail(ErrorCode::io, "cannot tell where this ipcfloor lives: /proc/self/exe: {}", error.message());
  return (exe.parent_path() / IPCFLOOR_BIN_TO_DATA).lexically_normal().string();
}

Expected<std::string> helper_file(std::string_view relative, std::string_view what) {
  auto dir = helper_dir();
  if (!dir) return dir;
  const std::string path = (std::filesystem::path(*dir) / relative).string();
  std::error_code error;
  if (std::filesystem::exists(path, error)) return path;
  return fail(ErrorCode::resource,
              "{} is missing: {} does not exist. ipcfloor runs its Python helpers from {} (share/ipcfloor beside "
              "bin/ipcfloor); install ipcfloor whole with `cmake --install BUILD --prefix PREFIX` (or copy the whole "
              "prefix, not bin/ipcfloor alone), or run the ipcfloor of a build tree",
              what, path, *dir);
}

Expected<void> check_python(const std::string& python) {
  if (::access(python.c_str(), X_OK) == 0) return {};
  return fail(ErrorCode::resource,
              "the Python interpreter {} is missing: apt-get install python3 python3-numpy python3-numba "
              "python3-matplotlib (tools/setup does), or name another with --python",
              python);
}

}  // namespace ipcfloor
