#pragma once
// Telling whoever started `ipcfloor serve` that it serves: one machine-readable line on stdout,
// an optional pid file, and systemd's readiness protocol when run as a Type=notify service.
//
// Setup path: called by the keeper thread at start and at stop. Allocates, makes syscalls.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/atomic_file.hpp"
#include "common/error.hpp"

namespace ipcfloor {

// Prints `ready {...}` (one line of JSON after the word) on stdout and flushes it, so a script
// can wait for the line instead of polling.
void print_ready_line(const nlohmann::json& facts);

// The pid file this engine wrote: where, what it holds, and which file it was.
struct PidFile {
  std::string path;
  std::string content;  // "PID\n"
  FileIdentity identity;
};

// Writes the pid to `path` atomically (common/atomic_file.hpp: never through a link, never in a
// directory another user may write without the sticky bit). Errors name `path`.
[[nodiscard]] Expected<PidFile> write_pidfile(const std::string& path);

// Removes the pid file at exit only while it is still ours: the file we wrote, holding our pid.
// Another engine's pid file at the same path (it was given the same --pidfile) stays.
void remove_pidfile(const PidFile& pidfile) noexcept;

// Sends `state` ("READY=1\nSTATUS=...", "STOPPING=1") to $NOTIFY_SOCKET when systemd set one;
// does nothing otherwise. The protocol is one datagram on a Unix socket (sd_notify(3)).
void notify_systemd(std::string_view state) noexcept;

}  // namespace ipcfloor
