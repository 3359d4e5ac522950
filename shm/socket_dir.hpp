#pragma once
// Where engines' sockets live, and whether a directory is safe to hold one.
//
// The default directory is private to the user, as $XDG_RUNTIME_DIR is, so that no other user
// can place something at an engine's name (squat it) or swap two engines' sockets:
//   $IPCFLOOR_SOCKET_DIR when it is set and not empty (a systemd unit's RuntimeDirectory, say);
//   else $XDG_RUNTIME_DIR/ipcfloor when XDG_RUNTIME_DIR is an absolute path;
//   else /dev/shm/ipcfloor-UID (UID: the effective uid), unless another user made that first
//   (anyone may write /dev/shm): then $HOME/.ipcfloor, which no one else can make.
// Every command of the CLI, the C ABI (ipcfloor_default_socket_dir), the C++ facade and Python
// (through the C ABI) take the default from default_socket_dir(), so one rule and one variable
// move them all.
//
// A directory is safe for an engine's socket when it and every folder above it are owned by this
// user or root and, if other users may write them, sticky (sshd's StrictModes): then nobody else
// may rename or remove the socket we put there, nor swap the directory for another holding an
// engine of the same name (and a client checks that the socket it finds is ours,
// shm/handoff.hpp). `serve` refuses any other directory, `doctor` fails it in the same words and
// a client refuses to attach there (check_socket_dir).
//
// Setup path: reads the environment (not safe against a concurrent setenv), makes syscalls,
// allocates. Any thread.

#include <string>
#include <string_view>

#include "common/error.hpp"

namespace ipcfloor {

inline constexpr const char* kSocketDirVariable = "IPCFLOOR_SOCKET_DIR";

// The directory a command, a client or an engine uses when it is not told one (above).
[[nodiscard]] std::string default_socket_dir();

// The user's private directory: default_socket_dir() without $IPCFLOOR_SOCKET_DIR.
[[nodiscard]] std::string private_socket_dir();
// /dev/shm/ipcfloor-UID, the private directory without XDG_RUNTIME_DIR unless squatted.
[[nodiscard]] std::string shm_socket_dir();

// Whether `dir` may hold this user's engine sockets (above). invalid_argument when it is not an
// absolute path or not an existing directory; permission naming the owner or the mode when
// another user could replace what we put there; io when it cannot be inspected.
[[nodiscard]] Expected<void> check_socket_dir(std::string_view dir);

// A client's check before it attaches, when `dir` exists (a missing directory is the attach's own
// error: nobody listens there): check_socket_dir's rule, with the engine users the client trusts
// (common/peer_policy.hpp's trusted_engine_uids(): this user, and $IPCFLOOR_ENGINE_UID's) trusted
// to own the directory and the folders above it besides root.
[[nodiscard]] Expected<void> check_socket_dir_if_present(std::string_view dir);

// check_socket_dir, after making private_socket_dir() (mode 0700) when `dir` is that directory
// and it does not exist yet. That directory must then be a real directory (not a link) owned by
// this user. What `serve` calls before it claims a name.
[[nodiscard]] Expected<void> prepare_socket_dir(std::string_view dir);

}  // namespace ipcfloor
