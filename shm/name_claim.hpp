#pragma once
// Who holds an engine name: one engine per (uid, socket directory, name), decided by the kernel.
//
// The claim is an abstract Unix socket (Linux's namespace of socket addresses that are not
// files) bound to an address made of the uid, the socket directory's device and inode, and the
// name. Bind is atomic, the kernel frees the address the moment the owner's last descriptor
// closes (however it dies, SIGKILL included), and nothing in the file system stands for it, so
// no `rm` can make a live engine's name look free. The engine is not dumpable, so no other
// process of the uid can reach the socket through /proc/PID/fd either.
//
// The directory's identity is part of the address: two engines may serve the same name from two
// directories (`serve --socket-dir`), and two spellings of one directory are one directory.
//
// What the claim does not cover, and what take() therefore checks on the socket file DIR/NAME:
//   - abstract addresses live in a network namespace: an engine in another one that shares DIR
//     holds no claim here, but its socket answers a connect, so it is found live and left alone;
//   - a socket file of ours that nobody listens on belongs to a dead engine: it is reported, and
//     the new engine's socket replaces it (HandoffListener renames over it; nothing is unlinked);
//   - anything else at DIR/NAME (another uid's socket, a file, a FIFO) is refused untouched.
// Another uid in the same network namespace can bind our address first (abstract addresses carry
// no permissions). The engine then refuses to start, saying the name is held and how to find by
// whom; it never takes over what it cannot prove dead.
//
// Setup path only: syscalls, allocation, Expected. Safe from any thread.

#include <sys/types.h>

#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace ipcfloor {

// The abstract address (without its leading NUL) that claims `name` for `uid` in the directory
// with this device and inode: "ipcfloor/UID/DEV.INO/NAME", with NAME replaced by its FNV-1a 64
// hash when the whole would not fit a socket address. Pure.
[[nodiscard]] std::string claim_address(uid_t uid, dev_t dir_device, ino_t dir_inode, std::string_view name);

// What take() found at DIR/NAME before the engine's own socket goes there.
enum class SocketFileState : std::uint8_t {
  absent,  // nothing: a first start or a clean stop
  stale,   // a socket of ours nobody listens on: a dead engine's; replaced when the engine binds
};

class NameClaim {
 public:
  // Claims `name` in `dir` (an existing directory) for this process's uid and looks at DIR/NAME.
  // Errors: busy (a live engine holds the name, here or, through DIR/NAME, in another network
  // namespace; the message names its pid when its socket answers), permission (DIR/NAME is not
  // an ipcfloor socket of this uid), io. A stale socket is reported in `warnings`.
  [[nodiscard]] static Expected<NameClaim> take(std::string_view name, std::string_view dir,
                                                std::vector<std::string>& warnings);

  // An empty claim: holds nothing. What a moved-from claim becomes.
  NameClaim() = default;

  [[nodiscard]] SocketFileState socket_file() const noexcept { return socket_file_; }
  [[nodiscard]] const std::string& address() const noexcept { return address_; }
  // Gives the name up now (the destructor does it too).
  void release() noexcept { socket_.reset(); }

 private:
  UniqueFd socket_;  // bound to the abstract address; closing it frees the name
  std::string address_;
  SocketFileState socket_file_ = SocketFileState::absent;
};

// What is at DIR/NAME (`path`), judged without touching it: absent or stale, or the error that
// keeps an engine from starting there: busy (something listens on it), permission (it is not an
// ipcfloor socket of this uid: a file, or another user's socket squatting the name), io. What
// NameClaim::take and `doctor` decide by.
[[nodiscard]] Expected<SocketFileState> inspect_socket_file(const std::string& path, std::string_view name);

// For callers holding the claim: removes DIR/NAME when it is still the stale socket take() found
// (same device and inode, still nobody listening). Never removes anything else. Setup path.
[[nodiscard]] Expected<void> remove_stale_socket_file(const std::string& path);

}  // namespace ipcfloor
