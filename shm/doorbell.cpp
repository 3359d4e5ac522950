#include "shm/doorbell.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

namespace ipcfloor {
namespace {

std::uint64_t address_of(std::atomic<std::uint32_t>& word) noexcept {
  // futex(2) takes the address of a plain 32-bit int; std::atomic<uint32_t> has exactly that
  // representation (pinned in spsc_ring.hpp).
  return reinterpret_cast<std::uint64_t>(&word);
}

}  // namespace

void wake_serving_thread(std::atomic<std::uint32_t>& keeper_word) noexcept {
  // release: publishes whatever the keeper changed before waking; pairs with the acquire load
  // in DoorbellWaiter::wait.
  keeper_word.fetch_add(1, std::memory_order_release);
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&keeper_word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr,
            nullptr, 0);
}

void DoorbellWaiter::sleep(std::span<DoorbellLine* const> lines, const std::uint32_t* seqs,
                           std::atomic<std::uint32_t>& keeper_word, WaitDeadline deadline) noexcept {
  if (!waitv_missing_) {
    futex_waitv waiters[kMaxLanes + 1] = {};
    std::size_t count = 0;
    for (DoorbellLine* line : lines) {
      // Shared (no FUTEX_PRIVATE_FLAG): the client that rings it is another process.
      waiters[count] = futex_waitv{seqs[count], address_of(line->doorbell), FUTEX_32, 0};
      ++count;
    }
    waiters[count] = futex_waitv{seqs[count], address_of(keeper_word), FUTEX_32 | FUTEX_PRIVATE_FLAG, 0};
    ++count;
    const auto since_epoch = deadline.time_since_epoch();
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
    const timespec until{static_cast<time_t>(seconds.count()),
                         static_cast<long>(std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch - seconds).count())};
    // The deadline is absolute on CLOCK_MONOTONIC, steady_clock's clock, so a retry after EINTR
    // does not stretch the wait. EAGAIN (a word changed), EINTR and ETIMEDOUT all send the caller
    // back to re-check.
    const long rc = ::syscall(__NR_futex_waitv, waiters, count, 0, &until, CLOCK_MONOTONIC);
    if (rc >= 0 || errno == EAGAIN || errno == EINTR || errno == ETIMEDOUT) return;
    if (errno == ENOSYS) waitv_missing_ = true;
  }
  const auto left = deadline - WaitClock::now();
  detail::sleep_for(left < kBackoffMaxSleep ? std::chrono::duration_cast<std::chrono::nanoseconds>(left)
                                             : kBackoffMaxSleep);
}

}  // namespace ipcfloor
