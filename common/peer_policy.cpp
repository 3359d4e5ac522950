#include "common/peer_policy.hpp"

#include <grp.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

// A whole number in 0..2^32-2 (-1, the "no id" of chown, is never a user or group).
bool parse_id(std::string_view text, std::uint32_t& id) {
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc{} || end != text.data() + text.size() || text.empty()) return false;
  if (value >= std::numeric_limits<std::uint32_t>::max()) return false;
  id = static_cast<std::uint32_t>(value);
  return true;
}

// The NSS lookups' buffer: sysconf's suggestion, grown on ERANGE.
template <class Entry, class Lookup>
bool look_up(Lookup lookup, Entry& entry, std::vector<char>& buffer) {
  long suggested = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  buffer.resize(suggested > 0 ? static_cast<std::size_t>(suggested) : 4096);
  for (;;) {
    Entry* found = nullptr;
    const int error = lookup(&entry, buffer.data(), buffer.size(), &found);
    if (error == ERANGE && buffer.size() < (std::size_t{1} << 20)) {
      buffer.resize(buffer.size() * 2);
      continue;
    }
    return error == 0 && found != nullptr;
  }
}

std::string user_name(uid_t uid) {
  passwd entry{};
  std::vector<char> buffer;
  const auto by_uid = [uid](passwd* e, char* b, std::size_t n, passwd** f) { return ::getpwuid_r(uid, e, b, n, f); };
  return look_up(by_uid, entry, buffer) ? std::string(entry.pw_name) : std::string();
}

std::string group_name(gid_t gid) {
  group entry{};
  std::vector<char> buffer;
  const auto by_gid = [gid](group* e, char* b, std::size_t n, group** f) { return ::getgrgid_r(gid, e, b, n, f); };
  return look_up(by_gid, entry, buffer) ? std::string(entry.gr_name) : std::string();
}

// Whether one of the peer's supplementary groups (SO_PEERGROUPS, Linux 4.13) is in `wanted`;
// false when they cannot be read. A stack buffer holds 64 groups; more are read into the heap.
bool peer_in_groups(int fd, std::span<const gid_t> wanted) noexcept {
  const auto any_wanted = [wanted](std::span<const gid_t> groups) {
    return std::any_of(groups.begin(), groups.end(),
                       [wanted](gid_t g) { return std::find(wanted.begin(), wanted.end(), g) != wanted.end(); });
  };
  gid_t few[64];
  auto length = static_cast<socklen_t>(sizeof few);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, few, &length) == 0)
    return any_wanted(std::span<const gid_t>(few, length / sizeof(gid_t)));
  if (errno != ERANGE) return false;
  try {
    std::vector<gid_t> many(length / sizeof(gid_t) + 1);  // the kernel said how many
    length = static_cast<socklen_t>(many.size() * sizeof(gid_t));
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, many.data(), &length) != 0) return false;
    return any_wanted(std::span<const gid_t>(many.data(), length / sizeof(gid_t)));
  } catch (const std::bad_alloc&) {
    return false;
  }
}

}  // namespace

Expected<PeerCredentials> peer_credentials(int socket_fd) {
  ucred credentials{};
  socklen_t length = sizeof credentials;
  if (::getsockopt(socket_fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0)
    return fail(ErrorCode::io, "cannot read the peer's credentials (SO_PEERCRED): {}", std::strerror(errno));
  return PeerCredentials{credentials.pid, credentials.uid, credentials.gid};
}

std::string user_text(uid_t uid) {
  const std::string name = user_name(uid);
  return name.empty() ? fmt::format("{}", uid) : fmt::format("{} ({})", uid, name);
}

std::string group_text(gid_t gid) {
  const std::string name = group_name(gid);
  return name.empty() ? fmt::format("gid {}", gid) : fmt::format("{} (gid {})", name, gid);
}

namespace {

// An id by number, else by name through `by_name` (getpwnam_r or getgrnam_r) and `id_of`.
// `kind`: "uid" and "user", or "gid" and "group", for the error; `database`: getent's.
template <class Entry, class ByName, class IdOf>
Expected<std::uint32_t> resolve_id(std::string_view entry, std::string_view what, ByName by_name, IdOf id_of,
                                   std::string_view id_word, std::string_view name_word, std::string_view database) {
  std::uint32_t id = 0;
  if (parse_id(entry, id)) return id;
  Entry found{};
  std::vector<char> buffer;
  const std::string name(entry);
  const auto lookup = [&](Entry* e, char* b, std::size_t n, Entry** f) { return by_name(name.c_str(), e, b, n, f); };
  if (!entry.empty() && look_up(lookup, found, buffer)) return static_cast<std::uint32_t>(id_of(found));
  return fail(ErrorCode::invalid_argument, "{} '{}' is neither a {} (a whole number) nor a {} this host knows "
              "(getent {} {})", what, entry, id_word, name_word, database, entry);
}

}  // namespace

Expected<uid_t> resolve_user(std::string_view entry, std::string_view what) {
  return resolve_id<passwd>(entry, what, ::getpwnam_r, [](const passwd& p) { return p.pw_uid; }, "uid", "user",
                            "passwd");
}

Expected<gid_t> resolve_group(std::string_view entry, std::string_view what) {
  return resolve_id<group>(entry, what, ::getgrnam_r, [](const group& g) { return g.gr_gid; }, "gid", "group",
                           "group");
}

Expected<PeerPolicy> PeerPolicy::make(std::span<const std::string> users, std::span<const std::string> groups) {
  PeerPolicy policy;
  for (const std::string& entry : users) {
    auto uid = resolve_user(entry, "--allow-uid");
    if (!uid) return std::unexpected(std::move(uid.error()));
    if (*uid != ::geteuid() && std::find(policy.uids_.begin(), policy.uids_.end(), *uid) == policy.uids_.end())
      policy.uids_.push_back(*uid);
  }
  for (const std::string& entry : groups) {
    auto gid = resolve_group(entry, "--allow-group");
    if (!gid) return std::unexpected(std::move(gid.error()));
    if (std::find(policy.gids_.begin(), policy.gids_.end(), *gid) == policy.gids_.end()) policy.gids_.push_back(*gid);
  }
  return policy;
}

bool PeerPolicy::admits(int fd, const PeerCredentials& peer) const noexcept {
  if (peer.uid == ::geteuid()) return true;
  if (std::find(uids_.begin(), uids_.end(), peer.uid) != uids_.end()) return true;
  if (gids_.empty()) return false;
  if (std::find(gids_.begin(), gids_.end(), peer.gid) != gids_.end()) return true;
  return peer_in_groups(fd, gids_);
}

std::string PeerPolicy::describe() const {
  std::string text = fmt::format("uid {}", user_text(::geteuid()));
  if (!admits_others()) return text + " only";
  std::vector<std::string> parts{text};
  for (const uid_t uid : uids_) parts.push_back(fmt::format("uid {}", user_text(uid)));
  for (const gid_t gid : gids_) parts.push_back(fmt::format("group {}", group_text(gid)));
  text.clear();
  for (std::size_t i = 0; i < parts.size(); ++i)
    text += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return text + " only";
}

Expected<std::vector<uid_t>> trusted_engine_uids() {
  std::vector<uid_t> trusted{::geteuid()};
  const char* variable = std::getenv(kEngineUidVariable);
  if (variable == nullptr) return trusted;
  std::string_view rest(variable);
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    std::string_view entry = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (entry.empty()) continue;
    auto uid = resolve_user(entry, kEngineUidVariable);
    if (!uid) return std::unexpected(std::move(uid.error()));
    if (std::find(trusted.begin(), trusted.end(), *uid) == trusted.end()) trusted.push_back(*uid);
  }
  return trusted;
}

std::string trusted_text(std::span<const uid_t> trusted) {
  std::string text;
  for (std::size_t i = 0; i < trusted.size(); ++i)
    text += fmt::format("{}uid {}", i == 0 ? "" : i + 1 == trusted.size() ? " and " : ", ", user_text(trusted[i]));
  if (trusted.size() > 1) text += fmt::format(" ({} names the others)", kEngineUidVariable);
  return text;
}

}  // namespace ipcfloor
