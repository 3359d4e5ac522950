#include "common/atomic_file.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <string>
#include <system_error>
#include <utility>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

// Thread-safe, unlike std::strerror.
std::string os_reason(int err) { return std::system_category().message(err); }

// The directory part and the file name of `path` ("." for a bare name).
std::pair<std::string, std::string> split_path(const std::string& path) {
  const std::size_t slash = path.rfind('/');
  if (slash == std::string::npos) return {".", path};
  return {slash == 0 ? "/" : path.substr(0, slash), path.substr(slash + 1)};
}

// 16 hex digits from the kernel's random pool: a name nobody can plant a link at beforehand.
std::string random_suffix() {
  std::array<unsigned char, 8> bytes{};
  std::size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // cannot happen on Linux >= 3.17; the O_EXCL retry still holds
    got += static_cast<std::size_t>(n);
  }
  std::string text;
  for (const unsigned char b : bytes) text += fmt::format("{:02x}", b);
  return text;
}

}  // namespace

DirectoryTrust directory_trust(const struct stat& info, std::span<const uid_t> owners) noexcept {
  const bool owner_trusted = info.st_uid == 0 || (owners.empty() ? info.st_uid == ::geteuid()
                                                                 : std::find(owners.begin(), owners.end(), info.st_uid) !=
                                                                       owners.end());
  if (!owner_trusted) return DirectoryTrust::other_owner;
  if ((info.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (info.st_mode & S_ISVTX) == 0) return DirectoryTrust::others_write;
  return DirectoryTrust::trusted;
}

Expected<void> check_output_directory(int dir_fd, std::string_view dir, std::string_view what) {
  struct stat info {};
  if (::fstat(dir_fd, &info) != 0)
    return fail(ErrorCode::io, "cannot create {}: cannot inspect its directory {}: {}", what, dir, os_reason(errno));
  const DirectoryTrust trust = directory_trust(info);
  if (trust == DirectoryTrust::other_owner)
    return fail(ErrorCode::permission,
                "refusing to create {}: its directory {} belongs to uid {}, who could replace or redirect it; use a "
                "directory of uid {} or root",
                what, dir, info.st_uid, ::geteuid());
  if (trust == DirectoryTrust::others_write)
    return fail(ErrorCode::permission,
                "refusing to create {}: its directory {} (mode {:04o}) may be written by other users and has no "
                "sticky bit, so they could replace or redirect it; use a directory only you can write (or a sticky "
                "one such as /tmp)",
                what, dir, info.st_mode & 07777);
  return {};
}

Expected<AtomicFile> AtomicFile::create(const std::string& path, std::string_view what, mode_t mode) {
  AtomicFile made;
  made.path_ = path;
  made.what_ = fmt::format("{} {}", what, path);
  auto [dir, name] = split_path(path);
  if (name.empty() || name == "." || name == "..")
    return fail(ErrorCode::invalid_argument, "cannot write {}: the path names no file", made.what_);
  made.name_ = std::move(name);
  made.dir_.reset(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!made.dir_) {
    const int err = errno;
    if (err == ENOENT || err == ENOTDIR)
      return fail(ErrorCode::io, "cannot write {}: its directory {} does not exist", made.what_, dir);
    return fail(ErrorCode::io, "cannot write {}: cannot open its directory {}: {}", made.what_, dir, os_reason(err));
  }
  if (auto safe = check_output_directory(made.dir_.get(), dir, made.what_); !safe) return std::unexpected(safe.error());
  for (int attempt = 0;; ++attempt) {
    std::string temporary = fmt::format(".{}.{}.tmp", made.name_, random_suffix());
    made.file_.reset(::openat(made.dir_.get(), temporary.c_str(),
                              O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
    if (made.file_) {
      made.temporary_ = std::move(temporary);
      break;
    }
    if (errno != EEXIST || attempt == 8)
      return fail(ErrorCode::io, "cannot write {}: cannot create a file in {}: {}", made.what_, dir, os_reason(errno));
  }
  // The mode asked for, whatever the umask took away: a pid file others may read, say.
  if (::fchmod(made.file_.get(), mode) != 0)
    return fail(ErrorCode::io, "cannot write {}: {}", made.what_, os_reason(errno));
  return made;
}

AtomicFile& AtomicFile::operator=(AtomicFile&& other) noexcept {
  if (this != &other) {
    abandon();
    dir_ = std::move(other.dir_);
    file_ = std::move(other.file_);
    path_ = std::move(other.path_);
    name_ = std::move(other.name_);
    temporary_ = std::exchange(other.temporary_, std::string());
    what_ = std::move(other.what_);
  }
  return *this;
}

Expected<void> AtomicFile::write(std::string_view bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(file_.get(), bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return fail(ErrorCode::io, "cannot write {}: {}", what_, os_reason(errno));
    done += static_cast<std::size_t>(wrote);
  }
  return {};
}

Expected<FileIdentity> AtomicFile::commit() {
  if (temporary_.empty()) return fail(ErrorCode::io, "cannot write {}: it was already written or abandoned", what_);
  struct stat info {};
  // Without fsync the rename can reach the disk before the data, and a power cut would leave an
  // empty file under the final name.
  if (::fsync(file_.get()) != 0 || ::fstat(file_.get(), &info) != 0 || ::close(file_.release()) != 0) {
    const int err = errno;
    abandon();
    return fail(ErrorCode::io, "cannot write {}: {}", what_, os_reason(err));
  }
  if (::renameat(dir_.get(), temporary_.c_str(), dir_.get(), name_.c_str()) != 0) {
    const int err = errno;
    abandon();
    return fail(ErrorCode::io, "cannot write {}: cannot move it into place: {}", what_, os_reason(err));
  }
  temporary_.clear();
  dir_.reset();
  return FileIdentity{info.st_dev, info.st_ino};
}

void AtomicFile::abandon() noexcept {
  file_.reset();
  if (!temporary_.empty() && dir_) (void)::unlinkat(dir_.get(), temporary_.c_str(), 0);
  temporary_.clear();
}

Expected<FileIdentity> write_file_atomically(const std::string& path, std::string_view bytes, std::string_view what,
                                             mode_t mode) {
  auto file = AtomicFile::create(path, what, mode);
  if (!file) return std::unexpected(std::move(file.error()));
  if (auto written = file->write(bytes); !written) return std::unexpected(std::move(written.error()));
  return file->commit();
}

bool remove_if_unchanged(const std::string& path, FileIdentity identity, std::string_view content) noexcept {
  const UniqueFd file(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat info {};
  if (!file || ::fstat(file.get(), &info) != 0 || info.st_dev != identity.device || info.st_ino != identity.inode)
    return false;
  if (!content.empty()) {
    char held[64];
    if (content.size() >= sizeof held) return false;
    const ssize_t got = ::read(file.get(), held, sizeof held);
    if (got < 0 || std::string_view(held, static_cast<std::size_t>(got)) != content) return false;
  }
  return ::unlink(path.c_str()) == 0;
}

}  // namespace ipcfloor
