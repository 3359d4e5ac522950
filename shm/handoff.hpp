#pragma once
// How a client gets hold of an engine's memory: the hand-off over a Unix-domain socket.
//
// The engine holds its name with a NameClaim (shm/name_claim.hpp) and listens on a
// SOCK_SEQPACKET socket at DIR/NAME (mode 0600; DIR: shm/socket_dir.hpp). A client
// connects, sends one HandoffRequest, and receives one HandoffReply with the descriptors of the
// sealed memfds attached (SCM_RIGHTS): the read-only data object, and for a lane client its lane
// object. The client maps them and closes them (see Attachment). A lane client's connection then
// stays open and is the lane's lease:
//   - the kernel tells the engine (EOF) the moment the client's process is gone, however it died
//     and whatever PID namespace it lives in; nothing a client writes into memory counts;
//   - the engine's identity comes from SO_PEERCRED on the same socket, not from a pid field;
//   - a client leaving on purpose sends a ReleaseNotice first, so the engine can tell a release
//     from a death.
// An observer needs nothing after its reply and closes its connection at once; the engine closes
// any connection idle past its patience, and at its connection cap the longest idle one that is
// not a lease (HandoffStatus::busy tells such a peer to ask again).
//
// Roles in this unit: the wire structs; the engine's listening socket (HandoffListener); the
// client's side of the handshake (request_handoff) and its lease (Lease).
//
// All functions are setup-path calls (syscalls, allocation, Expected) unless marked noexcept.

#include <sys/types.h>
#include <sys/un.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/error.hpp"
#include "common/peer_policy.hpp"
#include "common/unique_fd.hpp"

namespace ipcfloor {

inline constexpr std::uint32_t kHandoffMagic = 0x464F4849;  // "IHOF" little-endian
// 2: the reply names the engine that answers (HandoffReply::engine).
inline constexpr std::uint16_t kHandoffVersion = 2;
inline constexpr std::size_t kHandoffMessageBytes = 240;  // room for one error sentence
inline constexpr std::size_t kHandoffNameBytes = 208;     // an engine name (at most 200 bytes) and its NUL
inline constexpr std::size_t kMaxHandoffFds = 2;

// Wire values: never renumber, only append.
enum class HandoffRole : std::uint16_t {
  lane = 1,      // a client: claims a lane; gets the data object and its lane object
  observer = 2,  // `status` and monitors: gets the data object only, claims nothing
};

// Wire values: never renumber, only append.
enum class HandoffStatus : std::uint16_t {
  ok = 0,
  no_free_lane = 1,      // every lane is held by a live client
  version_mismatch = 2,  // the request's protocol or layout version is not the engine's
  refused = 3,           // the peer's uid may not use this engine
  stopping = 4,          // the engine is shutting down
  internal = 5,          // the engine failed to prepare the lane (message says why)
  bad_request = 6,       // the request was malformed
  lane_draining = 7,     // no lane is free yet, but one is being freed: retry shortly
  busy = 8,              // the engine is at its connection cap and closed this idle connection: retry
};

struct HandoffRequest {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t role;            // HandoffRole
  std::uint32_t layout_version;  // the segment layout the client understands
  // How many times this client re-attached after an engine it used went away (0 for a first
  // attach): the client's own word, recorded in its lane's status for people, never trusted.
  std::uint32_t reattaches;
};

struct HandoffReply {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t status;          // HandoffStatus
  std::uint32_t layout_version;  // the engine's
  std::uint32_t lane;            // the lane granted (lane role)
  std::uint64_t generation;      // how many clients this lane has had, this one included
  std::uint64_t data_bytes;      // size of the data object (first descriptor)
  std::uint64_t lane_bytes;      // size of the lane object (second descriptor), 0 for observers
  // NUL-terminated: the name this engine serves. A client checks it against the name it asked
  // for, so sockets moved or swapped in a directory another user may write are found out.
  char engine[kHandoffNameBytes];
  char message[kHandoffMessageBytes];  // NUL-terminated; why, when status is not ok
};

// Sent by a client before it closes the connection on purpose.
struct ReleaseNotice {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t kind;  // 1: release
};

static_assert(std::is_trivially_copyable_v<HandoffRequest> && sizeof(HandoffRequest) == 16,
              "HandoffRequest is 16 plain bytes on the wire");
static_assert(std::is_trivially_copyable_v<HandoffReply> &&
                  sizeof(HandoffReply) == 40 + kHandoffNameBytes + kHandoffMessageBytes,
              "HandoffReply is 488 plain bytes on the wire");
static_assert(std::is_trivially_copyable_v<ReleaseNotice> && sizeof(ReleaseNotice) == 8,
              "ReleaseNotice is 8 plain bytes on the wire");

[[nodiscard]] std::string_view to_string(HandoffStatus status) noexcept;

// DIR/NAME.
[[nodiscard]] std::string handoff_socket_path(std::string_view dir, std::string_view name);

// sockaddr_un for a socket file at `path`; invalid_argument when it does not fit (107 bytes).
[[nodiscard]] Expected<sockaddr_un> unix_address(const std::string& path);

// Whether anything listens on the socket file at `path`, found with one non-blocking connect
// that is closed at once. `pid` is the listener's (SO_PEERCRED) when the connect went through,
// else 0. Errors: io for anything but "nobody listens" (ECONNREFUSED, ENOENT) or "listening".
struct SocketProbe {
  bool listening = false;
  pid_t pid = 0;
};
[[nodiscard]] Expected<SocketProbe> probe_socket(const std::string& path);

// Sends `bytes` as one datagram with `fds` attached (SCM_RIGHTS). Never raises SIGPIPE.
[[nodiscard]] Expected<void> send_handoff(int socket_fd, std::span<const std::byte> bytes, std::span<const int> fds);

struct ReceivedHandoff {
  std::size_t bytes = 0;        // bytes of the datagram copied into the caller's buffer
  std::vector<UniqueFd> fds;    // descriptors that came with it (close-on-exec)
  bool truncated = false;       // the datagram or its descriptors did not fit
};

// Receives one datagram into `into`, waiting until `deadline` at most. ErrorCode::timeout when
// nothing arrives in time, peer_gone on EOF.
[[nodiscard]] Expected<ReceivedHandoff> receive_handoff(int socket_fd, std::span<std::byte> into,
                                                        std::chrono::steady_clock::time_point deadline);

// True when the peer of a connected socket has hung up (EOF or error pending). One poll(2) with
// a zero timeout: for slow paths only.
[[nodiscard]] bool peer_hung_up(int socket_fd) noexcept;

// ---------------------------------------------------------------------------------------------
// The engine's side

// The engine's listening socket at DIR/NAME. Move-only.
class HandoffListener {
 public:
  // Binds a socket under a private name in DIR, gives it `mode` (0600; 0666 when the engine
  // admits other users, PeerPolicy::socket_mode), listens, then renames it over `path`: a client
  // never finds DIR/NAME with the wrong mode or not yet listening, and a dead engine's socket
  // there is replaced in one step. The caller holds the name (NameClaim) and has checked that
  // nothing listens at `path`. Errors: invalid_argument (path too long), io.
  [[nodiscard]] static Expected<HandoffListener> open(const std::string& path, mode_t mode = 0600);

  HandoffListener() = default;
  HandoffListener(HandoffListener&& other) noexcept;
  HandoffListener& operator=(HandoffListener&& other) noexcept;
  HandoffListener(const HandoffListener&) = delete;
  HandoffListener& operator=(const HandoffListener&) = delete;
  ~HandoffListener() { close(); }

  [[nodiscard]] int fd() const noexcept { return fd_.get(); }
  // Removes DIR/NAME if it is still the socket this listener bound (device and inode: a
  // successor's socket is never touched), then stops listening. Idempotent.
  void close() noexcept;

 private:
  UniqueFd fd_;
  std::string path_;
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

// ---------------------------------------------------------------------------------------------
// The client's side

// An accepted hand-off, as the client received it.
struct Handoff {
  UniqueFd connection;
  HandoffReply reply{};
  std::vector<UniqueFd> fds;  // the data object, then (lane role) the lane object
  pid_t engine_pid = 0;       // SO_PEERCRED, in this process's pid namespace
};

// The handshake with engine `name` at `path`: checks that the socket file is owned by a user this
// client trusts (its own, or one $IPCFLOOR_ENGINE_UID names: common/peer_policy.hpp) and is 0600
// or 0666 (refusing anything else untouched), connects, checks that the listening process runs as
// a trusted user too (SO_PEERCRED), asks for
// `role` and returns the accepted reply with its descriptors, once the reply names engine `name`
// (another name: permission, the sockets were moved or swapped). Asks again, until `deadline`, while
// the engine says a lane is being freed or that it is busy, and when a live engine closed the
// connection without an answer (it sheds idle connections at its cap).
// Errors: peer_gone (nobody listens, the engine is stopping, or it died during the handshake),
// busy (every lane is held by a live client; or the engine stayed busy until the deadline),
// permission, version_mismatch, protocol (a malformed reply), timeout, io.
// `reattaches` goes in the request (HandoffRequest::reattaches).
[[nodiscard]] Expected<Handoff> request_handoff(const std::string& path, std::string_view name, HandoffRole role,
                                                std::chrono::steady_clock::time_point deadline,
                                                std::uint32_t reattaches = 0);

// A lane client's end of its hand-off connection: the lease on its lane, which the engine
// reclaims the moment the connection ends. Move-only; the destructor releases.
class Lease {
 public:
  Lease() = default;
  explicit Lease(UniqueFd connection) noexcept : connection_(std::move(connection)) {}
  Lease(Lease&& other) noexcept = default;
  Lease& operator=(Lease&& other) noexcept {
    if (this != &other) {
      release();
      connection_ = std::move(other.connection_);
    }
    return *this;
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
  ~Lease() { release(); }

  [[nodiscard]] explicit operator bool() const noexcept { return static_cast<bool>(connection_); }
  // True when the engine's end is gone (it died or closed it). One poll(2): slow paths only.
  [[nodiscard]] bool engine_hung_up() const noexcept { return !connection_ || peer_hung_up(connection_.get()); }
  // Tells the engine the lane is handed back on purpose (a ReleaseNotice, never blocking; an
  // engine that misses it counts a death instead), then closes the connection. Idempotent.
  void release() noexcept;
  // Closes this process's copy of the connection without a ReleaseNotice: what a forked child
  // does with a lease its parent still holds (the engine keeps serving the parent). Idempotent.
  void abandon() noexcept { connection_.reset(); }

 private:
  UniqueFd connection_;
};

}  // namespace ipcfloor
