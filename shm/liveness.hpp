#pragma once
// Is the process on the other side of the segment still there? (docs/SPEC.md §8)
//
// A pid alone is not an identity: pids are reused. A process is identified by its pid together
// with its start time in clock ticks since boot (field 22 of /proc/PID/stat), which no later
// process with the same pid can share. Both the engine (about clients) and clients (about the
// engine) use these helpers, and a restarted engine uses them to tell a stale segment from a
// live one.
//
// All functions are noexcept, never allocate and may be called from any thread. They read
// /proc, so keep them off the request hot path (call them every heartbeat, not per frame).

#include <sys/types.h>

#include <cstdint>

namespace ipcfloor {

// Start time of `pid` in clock ticks since boot (field 22 of /proc/PID/stat); 0 when the
// process does not exist or /proc cannot be read.
[[nodiscard]] std::uint64_t process_start_ticks(pid_t pid) noexcept;

// True when `pid` names a running (not zombie) process and, when `start_ticks` is nonzero, that
// process started at `start_ticks` (so a recycled pid reads as dead). A process owned by
// another user counts as alive (kill() says EPERM). When /proc cannot be read the answer rests
// on kill() alone, which errs towards "alive": callers must never destroy a live peer's state.
[[nodiscard]] bool process_alive(pid_t pid, std::uint64_t start_ticks) noexcept;

// Whether an engine serves, by the one rule every reader applies (`status`, ipcfloor_up, the
// metrics endpoint, an observer that cannot see the engine's pid): its process is alive and its
// heartbeat is younger than three heartbeat intervals, and never less than a second, so that a
// keeper thread a loaded host delays for a moment is not taken for a dead engine.
struct EngineHealth {
  bool process_alive = false;
  std::uint64_t heartbeat_age_ns = 0;  // 0 when the heartbeat is from the future (another clock)
  std::uint64_t limit_ns = 0;          // the oldest heartbeat that still counts
  [[nodiscard]] bool heartbeat_fresh() const noexcept { return heartbeat_age_ns <= limit_ns; }
  [[nodiscard]] bool up() const noexcept { return process_alive && heartbeat_fresh(); }
};

// The heartbeat age past which an engine is not up: max(3 intervals, 1 s).
[[nodiscard]] std::uint64_t heartbeat_limit_ns(std::uint64_t interval_ns) noexcept;

// The rule above, on the heartbeat `heartbeat_ns` read at `now_ns` (both CLOCK_MONOTONIC).
[[nodiscard]] EngineHealth judge_engine_health(bool process_alive, std::uint64_t heartbeat_ns, std::uint64_t now_ns,
                                               std::uint64_t interval_ns) noexcept;

// CLOCK_MONOTONIC in nanoseconds. System-wide, so heartbeats written by one process can be
// compared with the clock of another.
[[nodiscard]] std::uint64_t monotonic_ns() noexcept;

// CLOCK_REALTIME in nanoseconds since the Unix epoch, for humans (start times in reports).
[[nodiscard]] std::uint64_t unix_ns() noexcept;

}  // namespace ipcfloor
