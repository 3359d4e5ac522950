#include "data/input_file.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <new>
#include <system_error>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

// Thread-safe, unlike std::strerror.
std::string os_reason(int err) { return std::system_category().message(err); }

// What a file that is not a regular file is, for the message that refuses it.
std::string_view kind_of(mode_t mode) {
  if (S_ISFIFO(mode)) return "a FIFO (named pipe): reading it waits for a writer, possibly forever";
  if (S_ISCHR(mode)) return "a character device (like /dev/zero or /dev/urandom): it may never end";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  return "not a regular file";
}

std::optional<std::size_t> read_number(const std::string& path, std::string_view field = {}) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string word;
  while (in >> word) {
    if (!field.empty() && word != field) continue;
    if (!field.empty() && !(in >> word)) return std::nullopt;
    if (word == "max") return std::nullopt;
    try {
      const std::size_t value = std::stoull(word);
      return field.empty() ? value : value * 1024;  // /proc/meminfo counts kB
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

// What is left under a cgroup's limit, from its limit and usage files; nullopt for no limit.
std::optional<std::size_t> room_under(const std::string& limit_file, const std::string& usage_file) {
  const auto limit = read_number(limit_file);
  const auto usage = read_number(usage_file);
  // cgroup v1 spells "no limit" as a number near 2^63.
  if (!limit || !usage || *limit >= (std::size_t{1} << 60)) return std::nullopt;
  return *limit > *usage ? *limit - *usage : 0;
}

// What is left under this process's cgroup memory limit: v2's memory.max, or v1's
// memory.limit_in_bytes (at the cgroup's own path, or at the mount's root inside a container
// whose cgroup namespace hides the path).
std::optional<std::size_t> cgroup_room() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) {
      const std::string dir = "/sys/fs/cgroup" + line.substr(3);
      if (auto room = room_under(dir + "/memory.max", dir + "/memory.current")) return room;
    }
    const auto memory = line.find(":memory:");
    if (memory != std::string::npos) {
      for (const std::string& dir : {"/sys/fs/cgroup/memory" + line.substr(memory + 8), std::string("/sys/fs/cgroup/memory")})
        if (auto room = room_under(dir + "/memory.limit_in_bytes", dir + "/memory.usage_in_bytes")) return room;
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::size_t> available_memory_bytes() {
  const auto meminfo = read_number("/proc/meminfo", "MemAvailable:");
  const auto cgroup = cgroup_room();
  if (meminfo && cgroup) return std::min(*meminfo, *cgroup);
  return meminfo ? meminfo : cgroup;
}

std::string byte_size_text(std::size_t bytes) {
  const auto scaled = [bytes](int shift) { return static_cast<double>(bytes) / static_cast<double>(std::size_t{1} << shift); };
  if (bytes >= (std::size_t{1} << 30)) return fmt::format("{:.1f} GiB", scaled(30));
  if (bytes >= (std::size_t{1} << 20)) return fmt::format("{:.1f} MiB", scaled(20));
  if (bytes >= (std::size_t{1} << 10)) return fmt::format("{:.1f} KiB", scaled(10));
  return fmt::format("{} bytes", bytes);
}

InputFile::InputFile(UniqueFd owned, int fd, std::string name, std::string_view what, std::optional<std::size_t> size)
    : owned_(std::move(owned)), fd_(fd), name_(std::move(name)), what_(what), size_(size), stdin_(!owned_) {}

Expected<InputFile> InputFile::open(const std::string& path, std::string_view what) {
  if (path == "-") {
    struct stat info {};
    std::optional<std::size_t> size;
    if (::fstat(STDIN_FILENO, &info) == 0 && S_ISREG(info.st_mode)) {
      const off_t at = ::lseek(STDIN_FILENO, 0, SEEK_CUR);
      size = static_cast<std::size_t>(info.st_size - std::min<off_t>(std::max<off_t>(at, 0), info.st_size));
    }
    return InputFile(UniqueFd(), STDIN_FILENO, "standard input", what, size);
  }
  if (path.empty()) return fail(ErrorCode::invalid_argument, "the {} path is empty", what);
  // stat first, so that nothing but a regular file is ever opened (opening a device can have
  // effects of its own); fstat after the open, so that a file swapped in between is caught too.
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    const int err = errno;
    if (err == EACCES) return fail(ErrorCode::permission, "{}: cannot read the {}: {}", path, what, os_reason(err));
    if (err == ENOENT || err == ENOTDIR)  // a wrong path is bad input (exit 3), like a bad file
      return fail(ErrorCode::invalid_argument, "{}: cannot read the {}: {}", path, what, os_reason(err));
    return fail(ErrorCode::io, "{}: cannot read the {}: {}", path, what, os_reason(err));
  }
  if (!S_ISREG(info.st_mode))
    return fail(ErrorCode::invalid_argument, "{}: the {} is {}; give a regular file, or '-' for standard input", path,
                what, kind_of(info.st_mode));
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) {
    const int err = errno;
    return fail(err == EACCES ? ErrorCode::permission : ErrorCode::io, "{}: cannot open the {}: {}", path, what,
                os_reason(err));
  }
  if (::fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode))
    return fail(ErrorCode::invalid_argument, "{}: the {} is {}; give a regular file, or '-' for standard input", path,
                what, kind_of(info.st_mode));
  const int raw = fd.get();
  return InputFile(std::move(fd), raw, path, what, static_cast<std::size_t>(info.st_size));
}

Expected<std::size_t> InputFile::read_all(std::size_t limit, const std::function<char*(std::size_t)>& room) {
  // An address-space limit (RLIMIT_AS) can refuse what the host would give: refused, not thrown.
  const auto grow = [](const std::function<char*(std::size_t)>& make, std::size_t bytes) -> char* {
    try {
      return make(bytes);
    } catch (const std::bad_alloc&) {
      return nullptr;
    }
  };
  const auto cannot_hold = [this](std::size_t bytes) {
    return fail(ErrorCode::resource, "{}: cannot allocate {} to read the {}; nothing was used", name_,
                byte_size_text(bytes), what_);
  };
  // The bound: `limit`, or less when the host has less memory to give. A buffer that grows as it
  // reads holds its old and its new copy at once, so it may take half of what is available.
  std::size_t bound = limit;
  std::string why = fmt::format("the most a {} may hold", what_);
  if (const auto available = available_memory_bytes()) {
    const std::size_t share = size_ ? *available : *available / 2;
    if (share < bound) {
      bound = share;
      why = "the memory this host has available";
    }
  }
  if (size_ && *size_ > bound)
    return fail(ErrorCode::invalid_argument, "{}: the {} is {} ({} bytes), more than {} ({})", name_, what_,
                byte_size_text(*size_), *size_, why, byte_size_text(bound));
  // A regular file is read in one call (+1 to see its end); anything else grows as it goes.
  std::size_t capacity = size_ ? *size_ + 1 : std::min(std::size_t{64} << 10, bound + 1);
  char* buffer = grow(room, capacity);
  if (buffer == nullptr) return cannot_hold(capacity);
  std::size_t used = 0;
  for (;;) {
    if (used == capacity) {
      if (used > bound)
        return fail(ErrorCode::invalid_argument, "{}: the {} gave more than {} ({}); nothing was used", name_, what_,
                    why, byte_size_text(bound));
      capacity = std::min(capacity * 2, bound + 1);
      buffer = grow(room, capacity);
      if (buffer == nullptr) return cannot_hold(capacity);
    }
    const ssize_t got = ::read(fd_, buffer + used, capacity - used);
    if (got < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) {  // a non-blocking standard input: wait for it
        pollfd ready{fd_, POLLIN, 0};
        (void)::poll(&ready, 1, -1);
        continue;
      }
      return fail(ErrorCode::io, "{}: cannot read the {}: {}", name_, what_, os_reason(err));
    }
    if (got == 0) break;
    used += static_cast<std::size_t>(got);
  }
  if (used > bound)
    return fail(ErrorCode::invalid_argument, "{}: the {} gave more than {} ({}); nothing was used", name_, what_, why,
                byte_size_text(bound));
  return used;
}

Expected<std::string> read_text_input(const std::string& path, std::string_view what, std::size_t limit) {
  auto input = InputFile::open(path, what);
  if (!input) return std::unexpected(input.error());
  std::string text;
  auto read = input->read_all(limit, [&text](std::size_t bytes) {
    text.resize(bytes);
    return text.data();
  });
  if (!read) return std::unexpected(read.error());
  text.resize(*read);
  return text;
}

}  // namespace ipcfloor
