#pragma once
// What a command reads from the file system: a regular file, or standard input when the path is
// "-". Anything else a path can name is refused before a byte is read, with what it is: a FIFO
// (whose open or read can wait forever for a writer), a device such as /dev/zero or
// /dev/urandom (endless), a socket or a directory. Every read is bounded: a regular file larger
// than the bound is refused from its size before anything is allocated, and standard input is
// refused as soon as it gives more than the bound. The series files and the combo files go
// through here.
//
// Setup path: opens, reads and allocates; returns Expected. Reentrant, any thread.

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace ipcfloor {

// The memory this process may still take without the OOM killer stepping in: the smaller of
// MemAvailable (/proc/meminfo) and what is left under the cgroup's memory.max. nullopt when
// neither can be read.
[[nodiscard]] std::optional<std::size_t> available_memory_bytes();

// The whole of `path` (or standard input for "-") as text, at most `limit` bytes: InputFile::open
// and read_all into a string, with their errors. `what` names the input in messages.
[[nodiscard]] Expected<std::string> read_text_input(const std::string& path, std::string_view what, std::size_t limit);

class InputFile {
 public:
  // Opens `path` ("-": standard input, which stays open when this object goes) for reading.
  // `what` names the input in messages ("series file", "combo file"). Never blocks: a FIFO is
  // opened non-blocking and refused. Errors: invalid_argument (no such file, or not a regular
  // file, naming what it is), permission (EACCES), io (anything else the OS refuses).
  [[nodiscard]] static Expected<InputFile> open(const std::string& path, std::string_view what);

  // The path, or "standard input".
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] bool is_stdin() const noexcept { return stdin_; }
  // A regular file's size in bytes when opened; nullopt for standard input.
  [[nodiscard]] std::optional<std::size_t> size() const noexcept { return size_; }

  // Reads everything, at most `limit` bytes (also bounded by available_memory_bytes()). `room(n)`
  // must return a buffer of at least n bytes that keeps the bytes read so far at its start (a
  // growing vector's data()); it may throw std::bad_alloc. Returns the bytes read. A buffer that
  // grows (standard input) is bounded by half the available memory, since it briefly holds two
  // copies. Errors: invalid_argument naming the bound and the size (a regular file is refused from
  // its size before room() is called), resource when room() cannot allocate, io.
  [[nodiscard]] Expected<std::size_t> read_all(std::size_t limit, const std::function<char*(std::size_t)>& room);

 private:
  InputFile(UniqueFd owned, int fd, std::string name, std::string_view what, std::optional<std::size_t> size);

  UniqueFd owned_;  // the file's descriptor; empty for standard input
  int fd_ = -1;
  std::string name_;
  std::string what_;
  std::optional<std::size_t> size_;
  bool stdin_ = false;
};

// "1.5 GiB", "64 MiB", "12 KiB", "300 bytes": sizes in messages.
[[nodiscard]] std::string byte_size_text(std::size_t bytes);

}  // namespace ipcfloor
