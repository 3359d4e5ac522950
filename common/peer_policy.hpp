#pragma once
// Who is on the other end of a Unix socket, and who may be.
//
// The engine's side: a PeerPolicy says which peers besides the engine's own user may use its
// sockets (`serve --allow-uid USER` and `--allow-group GROUP`, each repeatable). Each connection
// is judged on the kernel's word, never on anything the peer sends: SO_PEERCRED for its uid and
// primary gid, SO_PEERGROUPS for its supplementary groups, as they were when it connected. The
// hand-off server (engine/) and the socket baseline (socket_server/) admit by the same policy. A
// socket that admits others is mode 0666 (the policy, not the file mode, decides); one that does
// not stays 0600.
//
// The client's side: a client talks to an engine only when the socket file's owner and the
// listening process (SO_PEERCRED) are a user it trusts: its own effective uid, and those
// IPCFLOOR_ENGINE_UID names. The variable is the client's own, so a third user can neither set it
// nor, without being one of those users, own a socket file or a listening socket of theirs:
// impersonating the engine needs the engine user's (or root's) privileges.
//
// Setup path: allocates, reads the user and group databases (NSS). admits() allocates only for a
// peer in more than 64 groups. Any thread.

#include <sys/types.h>

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace ipcfloor {

struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
  gid_t gid = 0;
};

// SO_PEERCRED of a connected Unix socket: the kernel's word on who is at the other end (for a
// listening peer, who called listen()).
[[nodiscard]] Expected<PeerCredentials> peer_credentials(int socket_fd);

// "1001 (alice)", or "1001" when the user database has no name for it.
[[nodiscard]] std::string user_text(uid_t uid);
// "quants (gid 1005)", or "gid 1005".
[[nodiscard]] std::string group_text(gid_t gid);

// A user by name or number (a whole number in 0..2^32-2): invalid_argument naming `what` and
// the entry when it is neither.
[[nodiscard]] Expected<uid_t> resolve_user(std::string_view entry, std::string_view what);
[[nodiscard]] Expected<gid_t> resolve_group(std::string_view entry, std::string_view what);

class PeerPolicy {
 public:
  // The engine's own effective uid alone.
  PeerPolicy() = default;
  // The own uid, and the users and groups named (numbers or names). invalid_argument naming the
  // option (`--allow-uid`, `--allow-group`) and the entry that is neither.
  [[nodiscard]] static Expected<PeerPolicy> make(std::span<const std::string> users,
                                                 std::span<const std::string> groups);

  // True when anyone but the own uid may use the sockets: they are then made mode 0666.
  [[nodiscard]] bool admits_others() const noexcept { return !uids_.empty() || !gids_.empty(); }
  // The file mode of a socket under this policy.
  [[nodiscard]] mode_t socket_mode() const noexcept { return admits_others() ? 0666 : 0600; }
  // Whether the peer on the connected socket `fd`, whose SO_PEERCRED is `peer`, may use it: the
  // own effective uid, an allowed uid, or a member of an allowed group (primary or
  // supplementary). A peer whose groups cannot be read is judged by its uid and primary gid.
  [[nodiscard]] bool admits(int fd, const PeerCredentials& peer) const noexcept;
  // Who may connect, for refusals and logs: "uid 0 (root) only", or "uid 999 (ipcfloor), uid 1001
  // (alice) and group quants (gid 1005) only" (a group: its members).
  [[nodiscard]] std::string describe() const;

 private:
  std::vector<uid_t> uids_;  // besides the own one
  std::vector<gid_t> gids_;
};

// The client's trust in an engine's user.
inline constexpr const char* kEngineUidVariable = "IPCFLOOR_ENGINE_UID";

// The uids whose engines this process talks to: its own effective uid first, then each entry of
// $IPCFLOOR_ENGINE_UID (comma separated; user names or numbers). invalid_argument naming the
// variable and the entry that is neither.
[[nodiscard]] Expected<std::vector<uid_t>> trusted_engine_uids();

// "uid 0 (root)" or "uid 0 (root) and uid 999 (ipcfloor), which IPCFLOOR_ENGINE_UID names".
[[nodiscard]] std::string trusted_text(std::span<const uid_t> trusted);

}  // namespace ipcfloor
