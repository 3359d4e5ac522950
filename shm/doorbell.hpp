#pragma once
// How a block-mode engine sleeps while no lane has work, and how a client wakes it. Each lane
// object has its own DoorbellLine (shm/layout.hpp), so a client can ring, and scribble on, only
// its own: nothing it writes can keep the engine from hearing another lane's client.
//
// The protocol is the wait strategies' block protocol (shm/wait_strategy.hpp), once per lane:
//
//   engine (DoorbellWaiter::wait)                 client (ring_doorbell), after publishing
//   A1 engine_sleeping.exchange(1) on each line   P1 the publishing release store(s)
//   A2 seq_i = doorbell_i.load(acquire)           P2 engine_sleeping.fetch_add(0) acq_rel
//   A3 re-check ready()                           P3 if P2 read 1: doorbell.fetch_add(1) release,
//   A4 if not: futex_waitv on every doorbell_i           then FUTEX_WAKE(doorbell)
//      (and the engine's private word) == seq_i
//   A5 engine_sleeping.exchange(0) on each line
//
// On one line, A1, A5 and P2 are RMWs of one word and so totally ordered: either P2 sees the 1
// and wakes the engine, or A1 reads P2's write, which makes P1 visible to A3. futex_waitv
// compares every word atomically with its seq before it sleeps, so a bump between A2 and A4
// returns at once. One engine-private word beside the doorbells wakes the serving thread from
// inside the engine: the keeper bumps it for a new lane, a lane that left, or shutdown, and a
// block-mode worker bumps it when its answer is ready (engine/worker_pool.hpp).
//
// futex_waitv needs Linux 5.16. Where it is missing the waiter naps in short sleeps instead,
// which costs latency in block mode only.

#include <atomic>
#include <cstdint>
#include <span>

#include "shm/layout.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

// Client, after publishing a request to a block-mode engine. One RMW on its own lane's line;
// one FUTEX_WAKE only when the engine announced that it sleeps.
inline void ring_doorbell(DoorbellLine& line) noexcept {
  detail::notify_channel({line.doorbell, line.engine_sleeping});
}

// The keeper or a worker thread (same process as the waiter): wakes a serving thread sleeping in
// DoorbellWaiter::wait, whichever lanes it watches.
void wake_serving_thread(std::atomic<std::uint32_t>& keeper_word) noexcept;

// Serving thread. Holds no resources; a type so that the futex_waitv probe runs once.
class DoorbellWaiter {
 public:
  // Waits until `ready()`, a doorbell of `lines` or `keeper_word` changes, or `deadline`.
  // `lines` holds at most kMaxLanes lines. Makes syscalls: only for a block-mode engine.
  template <class Ready>
  WaitStatus wait(std::span<DoorbellLine* const> lines, std::atomic<std::uint32_t>& keeper_word, Ready& ready,
                  WaitDeadline deadline) noexcept {
    if (ready()) return WaitStatus::ready;
    if (WaitClock::now() >= deadline) return WaitStatus::timeout;
    for (DoorbellLine* line : lines) {
      // acq_rel (A1): announces the sleep; pairs with the client's RMW in ring_doorbell (P2).
      line->engine_sleeping.exchange(1, std::memory_order_acq_rel);
    }
    std::uint32_t seqs[kMaxLanes + 1];
    std::size_t count = 0;
    for (DoorbellLine* line : lines) {
      // acquire (A2): pairs with the release bump in ring_doorbell (P3).
      seqs[count++] = line->doorbell.load(std::memory_order_acquire);
    }
    // acquire: pairs with the release bump in wake_serving_thread.
    seqs[count] = keeper_word.load(std::memory_order_acquire);
    const bool now_ready = ready();  // A3
    if (!now_ready) sleep(lines, seqs, keeper_word, deadline);
    for (DoorbellLine* line : lines) {
      // acq_rel (A5): withdraws the announcement, in the same modification order as A1 and P2.
      line->engine_sleeping.exchange(0, std::memory_order_acq_rel);
    }
    return now_ready || ready() ? WaitStatus::ready : WaitStatus::timeout;
  }

 private:
  // A4: futex_waitv on every line's doorbell (shared) and the keeper's word (private).
  void sleep(std::span<DoorbellLine* const> lines, const std::uint32_t* seqs, std::atomic<std::uint32_t>& keeper_word,
             WaitDeadline deadline) noexcept;

  bool waitv_missing_ = false;  // ENOSYS seen once: nap instead
};

}  // namespace ipcfloor
