#include "kernel/series_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <filesystem>
#include <system_error>

#include <fmt/format.h>

#include "kernel/series_formats.hpp"

namespace ipcfloor {
namespace series_formats {
namespace {

// Quoted file text in messages is cut to this many characters so one bad row cannot flood
// the terminal.
constexpr std::size_t kMaxSnippet = 60;

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(),
                    [](char x, char y) { return ascii_lower(x) == ascii_lower(y); });
}

std::string snippet(std::string_view text) {
  std::string out;
  const bool cut = text.size() > kMaxSnippet;
  if (cut) text = text.substr(0, kMaxSnippet);
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  if (cut) out += "...";
  return out;
}

}  // namespace series_formats

namespace {

using series_formats::FileBytes;
using series_formats::iequals;
using series_formats::kBytesPerBar;
using series_formats::snippet;

// Thread-safe, unlike std::strerror.
std::string os_reason(int err) { return std::system_category().message(err); }

class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Closes now so the caller can see close()'s error, which can report a failed write-back.
  int close_now() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

Expected<FileBytes> read_whole_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return fail(ErrorCode::io, "{}: cannot open the series file: {}", path, os_reason(err));
  }
  FdGuard guard(fd);
  // Size the buffer from fstat so a regular file is read in one call; +1 so end of file is
  // seen without growing. Pipes and the like grow as they go.
  std::size_t capacity = 64 * 1024;
  struct stat info {};
  if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size > 0) {
    capacity = static_cast<std::size_t>(info.st_size) + 1;
  }
  FileBytes file;
  file.storage.resize((capacity + kBytesPerBar - 1) / kBytesPerBar);
  std::size_t& used = file.size;
  for (;;) {
    if (used == file.storage.size() * kBytesPerBar) file.storage.resize(file.storage.size() * 2);
    char* const buffer = reinterpret_cast<char*>(file.storage.data());
    const ssize_t got = ::read(fd, buffer + used, file.storage.size() * kBytesPerBar - used);
    if (got < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return fail(ErrorCode::io, "{}: cannot read the series file: {}", path, os_reason(err));
    }
    if (got == 0) break;
    used += static_cast<std::size_t>(got);
  }
  return file;
}

Expected<void> write_file_atomically(const std::string& path, std::string_view bytes) {
  namespace fs = std::filesystem;
  // Unique per process and call, hidden, and in the target's directory so rename() is atomic.
  static std::atomic<unsigned> counter{0};
  const fs::path target(path);
  const fs::path temp = target.parent_path() /
                        fmt::format(".{}.tmp-{}-{}", target.filename().string(), ::getpid(),
                                    counter.fetch_add(1, std::memory_order_relaxed));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    return fail(ErrorCode::io, "{}: cannot create a temporary file next to it ({}): {}", path,
                temp.string(), os_reason(err));
  }
  FdGuard guard(fd);
  const auto abandon = [&](std::string_view what, int err) {
    ::unlink(temp.c_str());
    return fail(ErrorCode::io, "{}: {}: {}", path, what, os_reason(err));
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return abandon("cannot write the series", err);
    }
    done += static_cast<std::size_t>(wrote);
  }
  // Without fsync the rename can reach the disk before the data, and a power cut would leave
  // an empty file under the final name.
  if (::fsync(fd) != 0) return abandon("cannot flush the series to disk", errno);
  if (guard.close_now() != 0) return abandon("cannot write the series", errno);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    return abandon("cannot move the written series into place", errno);
  }
  return {};
}

}  // namespace

Expected<SeriesFormat> format_from_path(std::string_view path) {
  const std::size_t slash = path.find_last_of('/');
  const std::string_view name = (slash == std::string_view::npos) ? path : path.substr(slash + 1);
  const std::size_t dot = name.find_last_of('.');
  if (dot == std::string_view::npos || dot == 0) {
    return fail(ErrorCode::invalid_argument,
                "{}: no file extension to tell the series format; use .csv, .f64 (or .bin, "
                ".raw) or .npy",
                path);
  }
  const std::string_view extension = name.substr(dot);
  if (iequals(extension, ".csv")) return SeriesFormat::csv;
  if (iequals(extension, ".f64") || iequals(extension, ".bin") || iequals(extension, ".raw")) {
    return SeriesFormat::f64;
  }
  if (iequals(extension, ".npy")) return SeriesFormat::npy;
  return fail(ErrorCode::invalid_argument,
              "{}: unknown series format '{}'; use .csv, .f64 (or .bin, .raw) or .npy", path,
              snippet(extension));
}

Expected<void> validate_series(std::span<const double> close, std::string_view source) {
  for (std::size_t i = 0; i < close.size(); ++i) {
    // Written so NaN fails: every comparison with NaN is false.
    if (!(std::isfinite(close[i]) && close[i] > 0.0)) {
      return fail(ErrorCode::bad_data, "{}: bar {} is {}; every close must be finite and positive",
                  source, i, close[i]);
    }
  }
  if (close.size() < 2) {
    return fail(ErrorCode::bad_data, "{}: the series has {} bar{}; it needs at least 2", source,
                close.size(), close.size() == 1 ? "" : "s");
  }
  return {};
}

Expected<std::vector<double>> load_series(const std::string& path) {
  const auto format = format_from_path(path);
  if (!format) return std::unexpected(format.error());
  auto file = read_whole_file(path);
  if (!file) return std::unexpected(file.error());
  if (file->size == 0) return fail(ErrorCode::bad_data, "{}: the file is empty", path);

  Expected<std::vector<double>> close;
  switch (*format) {
    case SeriesFormat::csv: close = series_formats::parse_csv(file->view(), path); break;
    case SeriesFormat::f64: close = series_formats::take_raw(*file, path); break;
    case SeriesFormat::npy: close = series_formats::take_npy(*file, path); break;
  }
  if (!close) return close;
  if (auto valid = validate_series(*close, path); !valid) return std::unexpected(valid.error());
  return close;
}

Expected<void> save_series(const std::string& path, std::span<const double> close) {
  const auto format = format_from_path(path);
  if (!format) return std::unexpected(format.error());
  std::string bytes;
  switch (*format) {
    case SeriesFormat::csv: series_formats::append_csv(bytes, close); break;
    case SeriesFormat::f64: series_formats::append_le_f64(bytes, close); break;
    case SeriesFormat::npy: series_formats::append_npy(bytes, close); break;
  }
  return write_file_atomically(path, bytes);
}

}  // namespace ipcfloor
