#pragma once
// Leveled, timestamped log lines that never block the thread that writes them.
//
// Threads that keep the engine alive (the keeper with its heartbeat and hand-offs, the socket
// server's threads) log through here. A line is formatted by the caller, queued under a mutex
// that is held only to move a string, and written to its sink by a writer thread of its own. If
// the sink blocks (stderr on a pipe nobody reads) the queue fills and further lines are dropped
// and counted; the caller goes on. The serving thread does not log at all: it reports through
// its lock-free telemetry queue.
//
//   2026-12-04T01:22:31.123Z warn  serve: lane 2 (pid 4242): rejected request seq 17: too_costly
//
// Setup (log_configure, log_shutdown) belongs to main; log() may be called from any thread.

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#include "common/error.hpp"

namespace ipcfloor {

enum class LogLevel : std::uint8_t { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

// "debug", "info", "warn", "error", "off".
[[nodiscard]] std::string_view to_string(LogLevel level) noexcept;
[[nodiscard]] Expected<LogLevel> parse_log_level(std::string_view text);

// Lines below `level` are discarded before they are formatted. The sink is stderr unless told
// otherwise; lines are queued up to `capacity` and then dropped. Starts the writer thread on first
// use. Not thread-safe with concurrent log() calls: call it before the threads that log start.
void log_configure(LogLevel level, std::FILE* sink = stderr, std::size_t capacity = 4096);

[[nodiscard]] bool log_enabled(LogLevel level) noexcept;

// Queues one line (a newline is added). Never blocks on I/O; allocates the line.
void log_line(LogLevel level, std::string_view text);

template <class... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
  if (!log_enabled(level)) return;
  log_line(level, fmt::format(format, std::forward<Args>(args)...));
}

// Writes what is queued (waiting at most `timeout_ms` for a blocked sink) and stops the writer.
// For the end of main; later log() calls write nothing.
void log_shutdown(unsigned timeout_ms = 1000);

}  // namespace ipcfloor
