#pragma once
// Telling whoever started `ipcfloor serve` that it serves: one machine-readable line on stdout,
// an optional pid file, and systemd's readiness protocol when run as a Type=notify service.
//
// Setup path: called by the keeper thread at start and at stop. Allocates, makes syscalls.

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ipcfloor {

// Prints `ready {...}` (one line of JSON after the word) on stdout and flushes it, so a script
// can wait for the line instead of polling.
void print_ready_line(const nlohmann::json& facts);

// Writes the pid to `path` atomically (a temporary file renamed over it). Errors name the path.
[[nodiscard]] Expected<void> write_pidfile(const std::string& path);

// Sends `state` ("READY=1\nSTATUS=...", "STOPPING=1") to $NOTIFY_SOCKET when systemd set one;
// does nothing otherwise. The protocol is one datagram on a Unix socket (sd_notify(3)).
void notify_systemd(std::string_view state) noexcept;

}  // namespace ipcfloor
