#pragma once
// How a client gets hold of an engine's memory: the hand-off over a Unix-domain socket.
//
// The engine listens on a SOCK_SEQPACKET socket at DIR/NAME (mode 0600; DIR is /dev/shm unless
// told otherwise) and holds an exclusive flock on DIR/NAME.lock for as long as it lives. A
// client connects, sends one HandoffRequest, and receives one HandoffReply with the descriptors
// of the sealed memfds attached (SCM_RIGHTS): the read-only data object, and for a lane client
// its lane object. The connection then stays open and is the lane's lease:
//   - the kernel tells the engine (EOF) the moment the client's process is gone, however it died
//     and whatever PID namespace it lives in; nothing a client writes into memory counts;
//   - the engine's identity comes from SO_PEERCRED on the same socket, not from a pid field;
//   - a client leaving on purpose sends a ReleaseNotice first, so the engine can tell a release
//     from a death.
// The lock file, not a pid, tells a live engine from a stale socket: the kernel drops the flock
// when the engine dies, so a new engine in any namespace sees it free only then.
//
// All functions are setup-path calls: they make syscalls, may allocate, return Expected.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace ipcfloor {

inline constexpr std::uint32_t kHandoffMagic = 0x464F4849;  // "IHOF" little-endian
inline constexpr std::uint16_t kHandoffVersion = 1;
inline constexpr std::size_t kHandoffMessageBytes = 240;  // room for one error sentence
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
};

struct HandoffRequest {
  std::uint32_t magic;
  std::uint16_t version;
  std::uint16_t role;            // HandoffRole
  std::uint32_t layout_version;  // the segment layout the client understands
  std::uint32_t reserved;        // 0
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
static_assert(std::is_trivially_copyable_v<HandoffReply> && sizeof(HandoffReply) == 40 + kHandoffMessageBytes,
              "HandoffReply is 280 plain bytes on the wire");
static_assert(std::is_trivially_copyable_v<ReleaseNotice> && sizeof(ReleaseNotice) == 8,
              "ReleaseNotice is 8 plain bytes on the wire");

[[nodiscard]] std::string_view to_string(HandoffStatus status) noexcept;

// DIR/NAME and DIR/NAME.lock.
[[nodiscard]] std::string handoff_socket_path(std::string_view dir, std::string_view name);
[[nodiscard]] std::string handoff_lock_path(std::string_view dir, std::string_view name);

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// SO_PEERCRED of a connected Unix socket: the kernel's word on who is at the other end.
[[nodiscard]] Expected<PeerCredentials> peer_credentials(int socket_fd);

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

}  // namespace ipcfloor
