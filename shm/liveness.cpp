#include "shm/liveness.hpp"

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace ipcfloor {
namespace {

struct ProcStat {
  char state;               // field 3: R, S, D, Z, X, ...
  std::uint64_t start_ticks;  // field 22
};

// Reads /proc/PID/stat into a stack buffer: no allocation, so it is safe anywhere.
bool read_proc_stat(pid_t pid, ProcStat& out) noexcept {
  char path[32];
  std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  // The line is ~300 bytes; comm is at most 16 bytes (64 on recent kernels) inside the line.
  char buffer[1024];
  std::size_t used = 0;
  for (;;) {
    const ssize_t got = ::read(fd, buffer + used, sizeof buffer - 1 - used);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    used += static_cast<std::size_t>(got);
    if (used == sizeof buffer - 1) break;
  }
  ::close(fd);
  buffer[used] = '\0';
  // comm (field 2) is in parentheses and may itself hold spaces and ')': the fields we want
  // follow the LAST ')'.
  const char* cursor = std::strrchr(buffer, ')');
  if (cursor == nullptr) return false;
  ++cursor;
  // Fields after comm: 3 = state, ..., 22 = starttime. Walk space-separated tokens.
  std::uint64_t start_ticks = 0;
  char state = '?';
  for (int field = 3; field <= 22; ++field) {
    while (*cursor == ' ') ++cursor;
    if (*cursor == '\0') return false;
    if (field == 3) state = *cursor;
    if (field == 22) {
      for (; *cursor >= '0' && *cursor <= '9'; ++cursor) {
        start_ticks = start_ticks * 10 + static_cast<std::uint64_t>(*cursor - '0');
      }
      break;
    }
    while (*cursor != ' ' && *cursor != '\0') ++cursor;
  }
  out = ProcStat{state, start_ticks};
  return true;
}

std::uint64_t clock_ns(clockid_t clock) noexcept {
  timespec now{};
  ::clock_gettime(clock, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(now.tv_nsec);
}

}  // namespace

std::uint64_t process_start_ticks(pid_t pid) noexcept {
  if (pid <= 0) return 0;
  ProcStat stat{};
  return read_proc_stat(pid, stat) ? stat.start_ticks : 0;
}

bool process_alive(pid_t pid, std::uint64_t start_ticks) noexcept {
  if (pid <= 0) return false;
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  ProcStat stat{};
  if (!read_proc_stat(pid, stat)) {
    // kill() just saw the pid; either it exited since, or /proc is unreadable. Ask once more
    // so the race reads as dead, and otherwise trust kill().
    return ::kill(pid, 0) == 0 || errno == EPERM;
  }
  // A zombie has exited; only its exit status waits for its parent. It serves nobody.
  if (stat.state == 'Z' || stat.state == 'X' || stat.state == 'x') return false;
  return start_ticks == 0 || stat.start_ticks == start_ticks;
}

std::uint64_t heartbeat_limit_ns(std::uint64_t interval_ns) noexcept {
  constexpr std::uint64_t kStaleHeartbeats = 3;
  constexpr std::uint64_t kAtLeastNs = 1'000'000'000;
  return interval_ns > kAtLeastNs / kStaleHeartbeats ? kStaleHeartbeats * interval_ns : kAtLeastNs;
}

EngineHealth judge_engine_health(bool process_alive, std::uint64_t heartbeat_ns, std::uint64_t now_ns,
                                 std::uint64_t interval_ns) noexcept {
  return EngineHealth{process_alive, now_ns > heartbeat_ns ? now_ns - heartbeat_ns : 0, heartbeat_limit_ns(interval_ns)};
}

std::uint64_t monotonic_ns() noexcept { return clock_ns(CLOCK_MONOTONIC); }

std::uint64_t unix_ns() noexcept { return clock_ns(CLOCK_REALTIME); }

}  // namespace ipcfloor
