#pragma once
// doctor's view of the systemd unit engines run under: the memory-lock limit the engine gets
// there, which is not the limit of the shell doctor runs in. systemd starts a service without
// PAM, so limits.conf does not apply: the limit is the unit's LimitMEMLOCK= (else the manager's
// DefaultLimitMEMLOCK), and it binds unless the unit's user is root or the unit grants
// CAP_IPC_LOCK (AmbientCapabilities=).
//
// Setup path: reads files and the user database, allocates. Any thread.

#include <cstdint>
#include <optional>
#include <string>

#include "app/host_check.hpp"

namespace ipcfloor {

// What a unit file (and its drop-ins in /etc/systemd/system/UNIT.d/*.conf, later ones winning)
// says about the engine's memory lock.
struct UnitMemlock {
  std::string path;                    // the unit file read
  std::string user = "root";           // User=, root when unset
  std::optional<std::string> limit;    // LimitMEMLOCK= as written (its soft part), unset when absent
  bool ipc_lock_capability = false;    // AmbientCapabilities= grants CAP_IPC_LOCK
};

// The installed template unit, `ipcfloor@.service`, in the first of the places systemd looks
// (/etc/systemd/system, /usr/local/lib/systemd/system, /usr/lib/systemd/system,
// /lib/systemd/system) that holds one; empty when none does.
[[nodiscard]] std::string installed_unit_path();

// Reads `path` and its drop-ins. nullopt when the file cannot be read.
[[nodiscard]] std::optional<UnitMemlock> read_unit_memlock(const std::string& path);

// A LimitMEMLOCK= value in bytes (systemd's spelling: a number with an optional K, M, G, T
// suffix of base 1024, or "infinity"; of "soft:hard", the soft part). nullopt for infinity;
// `ok` false when it is not such a value.
[[nodiscard]] std::optional<std::uint64_t> parse_memlock_limit(const std::string& text, bool& ok);

// "memlock_unit": whether the engine the unit at `path` starts can lock the `locked_bytes` it
// needs, naming the unit's user and limit, with the line to add when it cannot.
[[nodiscard]] HostCheck check_unit_memlock(const std::string& path, std::uint64_t locked_bytes);

}  // namespace ipcfloor
