#pragma once
// How a ring side waits for the other (docs/SPEC.md §3): for data (consumer) or for space (producer).
//
//  spin    PAUSE-loop on the ring's readiness test: the latency floor. No allocation; the deadline
//          is read from the vDSO clock once every kSpinsPerClockCheck polls. A wait that outlasts
//          kSpinAlone (an answer that is compute, not transport) yields the cpu once per
//          clock check, so an engine worker that shares the waiter's cpu runs at once instead of
//          at the scheduler's next tick.
//  backoff spin kBackoffSpins polls, then sched_yield kBackoffYields times, then nanosleep from
//          kBackoffFirstSleep doubling up to kBackoffMaxSleep: cheap on a busy or idle host.
//  block   futex(FUTEX_WAIT) on a 32-bit word in the shared RingControl (shared, not
//          FUTEX_PRIVATE: the two sides are different processes). The side that makes progress
//          calls notify_* after it, which costs one locked RMW and makes the FUTEX_WAKE syscall
//          only when the peer announced that it sleeps.
//
// Every wait is bounded: it takes a deadline and returns ready or timeout, never waits forever.
// "ready" means the next try_* call will not report empty/full (it may report corrupt).
//
// Block-mode protocol, consumer waiting for data (the producer-waits-for-space direction is the
// same with space_word / producer_sleeping / consumed):
//
//   waiter (consumer)                           publisher (producer)
//   A1 consumer_sleeping.exchange(1) acq_rel    P1 commit: slot stamp, then `produced`,
//                                                  both release stores (RingProducer::commit)
//   A2 seq = data_word.load() acquire           P2 consumer_sleeping.fetch_add(0) acq_rel
//   A3 re-check readable(): the next slot's     P3 if P2 read 1: data_word.fetch_add(1) release
//      stamp (acquire), and on an empty poll                then FUTEX_WAKE(data_word)
//      sometimes `produced` (RingConsumer::has_data)
//   A4 if still empty: FUTEX_WAIT(data_word, seq)
//   A5 consumer_sleeping.exchange(0) acq_rel
//
// Since layout v2 a consumer learns of a frame from the stamp in the frame's own slot; the
// producer position only serves bounds checks. The argument is the same either way: A3 reads
// what P1 stored.
//
// A1, A5 and P2 are all RMWs on one word, so they are totally ordered and each reads the one
// before it. If P2 comes first, A1 reads P2's write and synchronises with it: P1 happens before
// A3, so the re-check sees the stamp and the waiter does not sleep. If A1 comes first, P2 reads 1
// and P3 bumps the word: either A2 already read the bumped value (then P3 synchronises with A2,
// P1 happens before A3, no sleep), or A2 read the old value and the kernel's FUTEX_WAIT compares
// it atomically against the bumped word (EAGAIN) or is queued before FUTEX_WAKE finds it. No
// wakeup is lost, and a publisher that finds no sleeper makes no syscall. A stale 1 (the waiter
// already awake) costs one harmless extra FUTEX_WAKE. RMWs rather than seq_cst fences keep the
// proof in one modification order and keep ThreadSanitizer (which ignores fences) exact.
//
// Both sides of a ring must agree on `block`: a block-mode waiter whose peer never calls notify_*
// still wakes at its deadline, but only then.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>

#include "common/error.hpp"
#include "shm/spsc_ring.hpp"

namespace ipcfloor {

enum class WaitMode : std::uint8_t { spin, backoff, block };

enum class WaitStatus : std::uint8_t {
  ready,    // the awaited condition holds (or the ring turned corrupt: the try_* call says so)
  timeout,  // the deadline passed first
};

using WaitClock = std::chrono::steady_clock;
using WaitDeadline = WaitClock::time_point;

inline constexpr std::uint32_t kSpinsPerClockCheck = 256;
inline constexpr std::chrono::nanoseconds kSpinAlone{20'000};
inline constexpr std::uint32_t kBackoffSpins = 1024;
inline constexpr std::uint32_t kBackoffYields = 16;
inline constexpr std::chrono::nanoseconds kBackoffFirstSleep{2'000};
inline constexpr std::chrono::nanoseconds kBackoffMaxSleep{64'000};

// "spin", "backoff", "block".
[[nodiscard]] constexpr std::string_view to_string(WaitMode mode) noexcept {
  switch (mode) {
    case WaitMode::spin: return "spin";
    case WaitMode::backoff: return "backoff";
    case WaitMode::block: return "block";
  }
  return "unknown";
}

// Parses a --wait value. Setup path: the error message allocates.
[[nodiscard]] Expected<WaitMode> parse_wait_mode(std::string_view text);

// One polite busy-wait step: lets the sibling hyperthread run and avoids the memory-order
// pipeline flush when the awaited line finally changes. For every spin loop in the project.
inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

namespace detail {

// Thin syscall wrappers, out of line (shm/wait_strategy.cpp). None of them allocates.
// Sleeps while `word` holds `expected`, until woken or `deadline` (CLOCK_MONOTONIC, absolute).
// Returns at once if the word differs; may return spuriously. Callers re-check their condition.
void futex_wait_until(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                      WaitDeadline deadline) noexcept;
// Wakes every process sleeping on `word`.
void futex_wake_all(std::atomic<std::uint32_t>& word) noexcept;
void yield_thread() noexcept;
void sleep_for(std::chrono::nanoseconds duration) noexcept;

// The two shared words one wait direction uses.
struct WaitChannel {
  std::atomic<std::uint32_t>& word;      // the futex word the waiter sleeps on
  std::atomic<std::uint32_t>& sleeping;  // 1 while the waiter may be asleep
};

// No clock read before the first kSpinsPerClockCheck polls: a transport-speed answer pays none.
template <class Ready>
[[nodiscard]] WaitStatus spin_until(Ready& ready, WaitDeadline deadline) noexcept {
  WaitDeadline first_check{};
  for (;;) {
    for (std::uint32_t i = 0; i < kSpinsPerClockCheck; ++i) {
      if (ready()) return WaitStatus::ready;
      cpu_relax();
    }
    const WaitDeadline now = WaitClock::now();
    if (now >= deadline) return ready() ? WaitStatus::ready : WaitStatus::timeout;
    if (first_check == WaitDeadline{}) {
      first_check = now;
    } else if (now - first_check >= kSpinAlone) {
      yield_thread();
    }
  }
}

template <class Ready>
[[nodiscard]] WaitStatus backoff_until(Ready& ready, WaitDeadline deadline) noexcept {
  for (std::uint32_t i = 0; i < kBackoffSpins; ++i) {
    if (ready()) return WaitStatus::ready;
    cpu_relax();
  }
  std::chrono::nanoseconds pause = kBackoffFirstSleep;
  for (std::uint32_t round = 0;; ++round) {
    if (ready()) return WaitStatus::ready;
    const WaitDeadline now = WaitClock::now();
    if (now >= deadline) return WaitStatus::timeout;
    if (round < kBackoffYields) {
      yield_thread();
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now);
    sleep_for(left < pause ? left : pause);
    if (pause < kBackoffMaxSleep) pause *= 2;
  }
}

template <class Ready>
[[nodiscard]] WaitStatus block_until(Ready& ready, WaitChannel channel,
                                     WaitDeadline deadline) noexcept {
  for (;;) {
    if (ready()) return WaitStatus::ready;
    if (WaitClock::now() >= deadline) return WaitStatus::timeout;
    // acq_rel (A1): announces the sleep; pairs with the publisher's RMW in notify_channel (P2).
    channel.sleeping.exchange(1, std::memory_order_acq_rel);
    // acquire (A2): pairs with the release bump in notify_channel (P3); read before the re-check
    // so a bump after it makes FUTEX_WAIT return at once.
    const std::uint32_t seq = channel.word.load(std::memory_order_acquire);
    const bool now_ready = ready();  // A3: RingConsumer::readable, the slot stamp with acquire
    if (!now_ready) futex_wait_until(channel.word, seq, deadline);
    // acq_rel (A5): withdraws the announcement; an RMW so it stays in the single modification
    // order with A1 and notify_channel's P2.
    channel.sleeping.exchange(0, std::memory_order_acq_rel);
    if (now_ready) return WaitStatus::ready;
  }
}

// The publisher half of the protocol: call after the release store that made progress.
inline void notify_channel(WaitChannel channel) noexcept {
  // acq_rel (P2): an RMW, never a plain load, so it is ordered against the waiter's announce (A1
  // in block_until); its release half carries the caller's position store to the waiter.
  if (channel.sleeping.fetch_add(0, std::memory_order_acq_rel) == 0) return;
  // release (P3): pairs with the waiter's acquire load of the word (A2 in block_until).
  channel.word.fetch_add(1, std::memory_order_release);
  futex_wake_all(channel.word);
}

template <class Ready>
[[nodiscard]] WaitStatus wait_until(Ready& ready, WaitMode mode, WaitChannel channel,
                                    WaitDeadline deadline) noexcept {
  switch (mode) {
    case WaitMode::spin: return spin_until(ready, deadline);
    case WaitMode::backoff: return backoff_until(ready, deadline);
    case WaitMode::block: return block_until(ready, channel, deadline);
  }
  return spin_until(ready, deadline);
}

}  // namespace detail

// Spins, then yields, then sleeps in short naps until ready() or `deadline`: for a waiter that
// watches several things at once (the engine over its lanes) in backoff mode. No allocation.
template <class Ready>
[[nodiscard]] WaitStatus wait_with_backoff(Ready& ready, WaitDeadline deadline) noexcept {
  return detail::backoff_until(ready, deadline);
}

// Consumer thread only: waits until the ring holds data (or is corrupt), or the deadline passes.
// spin mode: no syscall, no allocation.
template <RingSlot Slot>
[[nodiscard]] WaitStatus wait_readable(RingConsumer<Slot>& consumer, WaitMode mode,
                                       WaitDeadline deadline) noexcept {
  auto ready = [&consumer]() noexcept { return consumer.readable(); };
  RingControl& control = consumer.control();
  return detail::wait_until(ready, mode, {control.data_word, control.consumer_sleeping}, deadline);
}

// Producer thread only: waits until the ring has a free slot, or the deadline passes. A corrupt
// ring never frees up: this then returns timeout, and producer.corrupt() says why.
// spin mode: no syscall, no allocation.
template <RingSlot Slot>
[[nodiscard]] WaitStatus wait_writable(RingProducer<Slot>& producer, WaitMode mode,
                                       WaitDeadline deadline) noexcept {
  auto ready = [&producer]() noexcept { return producer.writable(); };
  RingControl& control = producer.control();
  return detail::wait_until(ready, mode, {control.space_word, control.producer_sleeping},
                            deadline);
}

// Producer thread only, after commit()/try_push(): wakes a consumer sleeping in block mode.
// A no-op (no atomic, no syscall) unless `mode` is block.
template <RingSlot Slot>
void notify_readable(RingProducer<Slot>& producer, WaitMode mode) noexcept {
  if (mode != WaitMode::block) return;
  RingControl& control = producer.control();
  detail::notify_channel({control.data_word, control.consumer_sleeping});
}

// Consumer thread only, after release()/try_pop(): wakes a producer sleeping in block mode.
// A no-op (no atomic, no syscall) unless `mode` is block.
template <RingSlot Slot>
void notify_writable(RingConsumer<Slot>& consumer, WaitMode mode) noexcept {
  if (mode != WaitMode::block) return;
  RingControl& control = consumer.control();
  detail::notify_channel({control.space_word, control.producer_sleeping});
}

}  // namespace ipcfloor
