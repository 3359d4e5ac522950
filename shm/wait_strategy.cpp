// The syscalls behind the backoff and block wait strategies, kept out of the header so that
// <linux/futex.h> and <sched.h> do not leak into every ring user.

#include "shm/wait_strategy.hpp"

#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <ctime>

namespace ipcfloor {

Expected<WaitMode> parse_wait_mode(std::string_view text) {
  for (const WaitMode mode : {WaitMode::spin, WaitMode::backoff, WaitMode::block}) {
    if (text == to_string(mode)) return mode;
  }
  return fail(ErrorCode::invalid_argument,
              "unknown wait mode '{}' (expected spin, backoff or block)", text);
}

namespace detail {
namespace {

// futex(2) takes the address of a plain 32-bit int; std::atomic<uint32_t> has exactly that
// representation (pinned in spsc_ring.hpp).
std::uint32_t* futex_address(std::atomic<std::uint32_t>& word) noexcept {
  return reinterpret_cast<std::uint32_t*>(&word);
}

timespec to_timespec(std::chrono::nanoseconds ns) noexcept {
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(ns);
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(seconds.count());
  ts.tv_nsec = static_cast<long>((ns - seconds).count());
  return ts;
}

}  // namespace

void futex_wait_until(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                      WaitDeadline deadline) noexcept {
  // FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC deadline (steady_clock's clock), so a
  // retry after EINTR does not stretch the wait. No FUTEX_PRIVATE_FLAG: the word is in a
  // MAP_SHARED mapping and the waker is another process.
  if (deadline.time_since_epoch().count() <= 0) return;
  const timespec until = to_timespec(deadline.time_since_epoch());
  const long rc = ::syscall(SYS_futex, futex_address(word), FUTEX_WAIT_BITSET, expected, &until,
                            nullptr, FUTEX_BITSET_MATCH_ANY);
  // EAGAIN (word already changed), EINTR and ETIMEDOUT all send the caller back to re-check.
  // Anything else means futex is unusable here: sleep briefly so the caller's loop degrades to
  // backoff instead of a hot spin.
  if (rc != 0 && errno != EAGAIN && errno != EINTR && errno != ETIMEDOUT) {
    sleep_for(kBackoffMaxSleep);
  }
}

void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept {
  // Shared (non-private) wake, matching the shared wait above.
  ::syscall(SYS_futex, futex_address(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void yield_thread() noexcept { ::sched_yield(); }

void sleep_for(std::chrono::nanoseconds duration) noexcept {
  if (duration.count() <= 0) return;
  const timespec ts = to_timespec(duration);
  ::nanosleep(&ts, nullptr);  // an early return on a signal is fine: callers re-check and loop
}

}  // namespace detail
}  // namespace ipcfloor
