#pragma once
// Writing a file by name where another user may have planted something (a symlink at a
// predictable name, a directory they can write): every file the engine and the CLI create by
// name goes through here (the pid file, gen -o, bench --out and --hgrm, ipcfloor-mpi -o).
//
//   check_output_directory  the directory must be owned by this user or root, and writable by
//                           nobody else unless sticky (then nobody else may rename or remove
//                           what we put there). Anything else is refused: permission.
//   AtomicFile              a new file of an unpredictable name beside the target, made with
//                           O_CREAT|O_EXCL|O_NOFOLLOW relative to the directory opened once
//                           (never an existing file, never through a link), written, flushed
//                           to disk, then renamed over the target (a rename replaces a link at
//                           the target, it never follows one). Dropped without commit(), the
//                           temporary file is removed.
//   remove_if_unchanged     removes a file we wrote only while it is still that file (device
//                           and inode): a successor's file at the same name is left alone.
//
// Errors name the target path the caller was given, never the temporary one.
// Setup path: syscalls, allocation, Expected. Any thread.

#include <sys/stat.h>
#include <sys/types.h>

#include <span>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace ipcfloor {

// Which file a name pointed to when we wrote it.
struct FileIdentity {
  dev_t device = 0;
  ino_t inode = 0;
};

// Who besides this user could rename or replace what a directory holds, by its stat: nobody
// (ours or root's, and writable by others only when sticky), its owner (another uid), or others
// (writable by group or others without the sticky bit). Pure.
// `owners`, when given, are the uids trusted to own it instead of this user and root (a client
// that trusts an engine user, common/peer_policy.hpp's trusted_engine_uids(), which lists this
// user first; root is trusted always).
enum class DirectoryTrust : unsigned char { trusted, other_owner, others_write };
[[nodiscard]] DirectoryTrust directory_trust(const struct stat& info, std::span<const uid_t> owners = {}) noexcept;

// `dir_fd` is `dir` opened (O_DIRECTORY); `what` names the file for the message ("the pid file
// /run/x.pid"). permission when another user owns the directory or may write it without the
// sticky bit; io when it cannot be inspected.
[[nodiscard]] Expected<void> check_output_directory(int dir_fd, std::string_view dir, std::string_view what);

class AtomicFile {
 public:
  // Opens the target's directory, checks it (check_output_directory) and creates the temporary
  // file with `mode`. `what` names the file in errors ("the pid file"). Errors: invalid_argument
  // (no file name), io (the directory is missing, the OS refused), permission.
  [[nodiscard]] static Expected<AtomicFile> create(const std::string& path, std::string_view what, mode_t mode = 0644);

  AtomicFile(AtomicFile&& other) noexcept = default;
  AtomicFile& operator=(AtomicFile&& other) noexcept;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() { abandon(); }

  // The temporary file, open for writing (for fdopen on a dup, say).
  [[nodiscard]] int fd() const noexcept { return file_.get(); }
  // Writes all of `bytes`, retrying short writes. Errors name the target.
  [[nodiscard]] Expected<void> write(std::string_view bytes);
  // Flushes to disk, closes and renames over the target; what it now names. Once only.
  [[nodiscard]] Expected<FileIdentity> commit();
  // Removes the temporary file; idempotent (commit() and the destructor call it as needed).
  void abandon() noexcept;

 private:
  AtomicFile() = default;

  UniqueFd dir_;
  UniqueFd file_;
  std::string path_;       // the target, as given
  std::string name_;       // its file name in dir_
  std::string temporary_;  // the temporary file's name in dir_ (empty once gone)
  std::string what_;
};

// create(), write(bytes), commit().
[[nodiscard]] Expected<FileIdentity> write_file_atomically(const std::string& path, std::string_view bytes,
                                                           std::string_view what, mode_t mode = 0644);

// Removes `path` when it is still the file `identity` names, and (when `content` is not empty)
// still holds exactly `content`, at most 63 bytes (a pid, say). True when removed. A failure
// leaves the file.
bool remove_if_unchanged(const std::string& path, FileIdentity identity, std::string_view content = {}) noexcept;

}  // namespace ipcfloor
