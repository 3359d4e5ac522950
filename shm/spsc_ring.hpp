#pragma once
// The lock-free single-producer/single-consumer ring that joins two processes through shared
// memory (docs/SPEC.md §3).
//
// Split in two:
//  - RingControl and the slot array live in the shared segment at fixed offsets. They hold only
//    integers (positions, futex words), never pointers, because each process maps the segment
//    at its own address.
//  - RingProducer / RingConsumer are process-local handles built from this process's addresses.
//    Each handle belongs to exactly one thread at a time; exactly one producer handle and one
//    consumer handle may exist per ring, across all processes.
//
// Positions are monotonically increasing 64-bit counts of frames produced / consumed. The slot
// of position p is p & (capacity - 1); the fill level is produced - consumed in unsigned
// arithmetic, which stays right across the 2^64 wrap. A peer that breaks
// 0 <= produced - consumed <= capacity is corrupt or hostile: the handle latches `corrupt` and
// stops trusting the ring instead of handing out slots it has no right to.
//
// The commit is two release stores: first the slot's own `stamp` (ring_stamp(position)), then
// the producer position. A consumer waits on the stamp of the slot it reads next, so a frame
// crosses between cores as one cache line: the payload and its "ready" flag arrive together.
// Waiting on the position instead costs a second serial miss (the position's line, then the
// slot's). The position stays the ring's authority for fill level, bounds checks and restarts;
// the consumer loads it only when the stamp says "not yet", to notice a producer that wrote an
// impossible one, and then not on every poll: on the first empty poll after a frame and every
// kEmptyPollsPerBoundsCheck polls after that. A hostile position is noticed within that many
// empty polls of being written; probe_corrupt() checks at once.
//
// Hot-path calls never allocate, never throw and make no syscalls.

#include <atomic>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

#include "common/error.hpp"

namespace ipcfloor {

// A consumer that finds its next slot unstamped bounds-checks the producer position on that
// first empty poll after a frame, then once every this many empty polls. Loading the position on
// every poll keeps a second line in flight beside the slot's: the producer's position store
// invalidates it once per frame and the re-fetch queues behind the slot's own transfer.
inline constexpr std::uint32_t kEmptyPollsPerBoundsCheck = 64;

// Two 64-byte lines: the adjacent-line prefetcher pulls lines in pairs, so a value that must not
// share a line with another needs 128 bytes of its own to avoid false sharing.
inline constexpr std::size_t kRingLineBytes = 128;

// The shared part of one ring. Zero-filled memory is a valid empty ring at position 0;
// init_ring starts it elsewhere.
struct alignas(kRingLineBytes) RingControl {
  // Producer line: written only by the producer, read by the consumer when it looks empty.
  alignas(kRingLineBytes) std::atomic<std::uint64_t> produced;
  // Consumer line: written only by the consumer, read by the producer when it looks full.
  alignas(kRingLineBytes) std::atomic<std::uint64_t> consumed;
  // Wait line, used only by the `block` wait strategy (shm/wait_strategy.hpp documents the
  // protocol). Spin-mode sides never touch it, so it costs them nothing.
  alignas(kRingLineBytes) std::atomic<std::uint32_t> data_word;  // futex: bumped when data lands
  std::atomic<std::uint32_t> space_word;         // futex: bumped when space frees
  std::atomic<std::uint32_t> consumer_sleeping;  // 1 while the consumer may sleep on data_word
  std::atomic<std::uint32_t> producer_sleeping;  // 1 while the producer may sleep on space_word
};

// RingControl is shared memory: its layout is a contract between two processes.
// std::atomic is not trivially copyable, so pin standard layout (well-defined offsets) instead.
static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "64-bit ring positions must be lock-free to work across processes");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free,
              "32-bit futex words must be lock-free to work across processes");
static_assert(sizeof(std::atomic<std::uint64_t>) == 8 && sizeof(std::atomic<std::uint32_t>) == 4,
              "atomics in shared memory have the size of their plain integer");
static_assert(std::is_standard_layout_v<RingControl>, "RingControl offsets must be well defined");
static_assert(offsetof(RingControl, produced) == 0, "producer position opens the control block");
static_assert(offsetof(RingControl, consumed) - offsetof(RingControl, produced) >= kRingLineBytes,
              "producer and consumer positions sit on separate 128-byte lines");
static_assert(offsetof(RingControl, data_word) - offsetof(RingControl, consumed) >= kRingLineBytes,
              "the futex wait line is separate from the consumer line");
static_assert(offsetof(RingControl, space_word) == offsetof(RingControl, data_word) + 4,
              "RingControl.space_word follows data_word on the wait line");
static_assert(offsetof(RingControl, consumer_sleeping) == offsetof(RingControl, data_word) + 8,
              "RingControl.consumer_sleeping sits on the wait line");
static_assert(offsetof(RingControl, producer_sleeping) == offsetof(RingControl, data_word) + 12,
              "RingControl.producer_sleeping sits on the wait line");
static_assert(sizeof(RingControl) == 3 * kRingLineBytes, "RingControl is three 128-byte lines");
static_assert(alignof(RingControl) == kRingLineBytes, "RingControl starts on a 128-byte line");

// A slot type the ring can carry: copied as bytes, no pointers by contract, with a 32-bit
// `stamp` that belongs to the ring (users never write it; see copy_slot_payload).
template <class Slot>
concept RingSlot = std::is_trivially_copyable_v<Slot> && std::is_standard_layout_v<Slot> &&
                   std::is_same_v<decltype(Slot::stamp), std::uint32_t> && alignof(Slot) >= 4;

// The stamp that marks the slot of `position` as published. Always odd, so the zero of fresh or
// cleared memory never reads as published; the position's low 31 bits tell one lap from the
// previous one for every capacity the ring accepts (< 2^31).
[[nodiscard]] constexpr std::uint32_t ring_stamp(std::uint64_t position) noexcept {
  return static_cast<std::uint32_t>(position << 1) | 1U;
}

// Copies every byte of `src` except the ring-owned `stamp` into `dst`: the consumer may be
// reading dst.stamp atomically right now, so a plain write of it would be a data race.
template <RingSlot Slot>
inline void copy_slot_payload(Slot& dst, const Slot& src) noexcept {
  constexpr std::size_t at = offsetof(Slot, stamp);
  constexpr std::size_t after = at + sizeof(std::uint32_t);
  auto* out = reinterpret_cast<unsigned char*>(&dst);
  const auto* in = reinterpret_cast<const unsigned char*>(&src);
  if constexpr (at > 0) std::memcpy(out, in, at);
  if constexpr (after < sizeof(Slot)) std::memcpy(out + after, in + after, sizeof(Slot) - after);
}

// Zeroes every slot's stamp, so no stale stamp can pass for a frame at any future position of a
// restarted ring. Setup / reset only: nobody may be producing into these slots meanwhile.
template <RingSlot Slot>
inline void clear_ring_stamps(Slot* slots, std::uint32_t capacity) noexcept {
  for (std::uint32_t i = 0; i < capacity; ++i) {
    // relaxed: whoever hands the reset ring on orders these before its next producer and
    // consumer: a thread start, a descriptor hand-off, or a release store such as set_phase's
    // (engine/engine_lanes.hpp), paired with the acquire load that reads it.
    std::atomic_ref<std::uint32_t>(slots[i].stamp).store(0, std::memory_order_relaxed);
  }
}

// True for a capacity the ring accepts: a power of two, at least 2.
[[nodiscard]] constexpr bool valid_ring_capacity(std::uint64_t capacity) noexcept {
  return capacity >= 2 && (capacity & (capacity - 1)) == 0;
}

// Resets a ring to empty at `start` (any value, e.g. near 2^64 to exercise the wrap).
// Setup only: no producer or consumer handle may be live on this ring while it runs; the
// segment publishes the result to the other process with its own release store.
inline void init_ring(RingControl& control, std::uint64_t start = 0) noexcept {
  // relaxed (all): no handle runs concurrently; whoever hands the ring on orders these before
  // the acquire loads in RingProducer::make and RingConsumer::make, as in clear_ring_stamps.
  control.produced.store(start, std::memory_order_relaxed);
  control.consumed.store(start, std::memory_order_relaxed);
  control.data_word.store(0, std::memory_order_relaxed);
  control.space_word.store(0, std::memory_order_relaxed);
  control.consumer_sleeping.store(0, std::memory_order_relaxed);
  control.producer_sleeping.store(0, std::memory_order_relaxed);
}

// Starts the lifetime of a RingControl in raw (e.g. freshly mapped) memory and initialises it.
// `memory` must be aligned to alignof(RingControl). Setup only; the creating process calls it.
inline RingControl* construct_ring(void* memory, std::uint64_t start = 0) noexcept {
  auto* control = ::new (memory) RingControl{};
  init_ring(*control, start);
  return control;
}

namespace detail {

// Shared setup checks for both handles; allocates only on failure (the Error's message).
// Takes untyped addresses: a misaligned pointer must be reported, not dereferenced. Callers
// test for null themselves first, so the compiler sees that early return.
template <class Slot>
[[nodiscard]] Expected<void> check_ring_args(const void* control, const void* slots,
                                             std::uint32_t capacity) {
  if (reinterpret_cast<std::uintptr_t>(control) % alignof(RingControl) != 0) {
    return fail(ErrorCode::invalid_argument, "ring control block at {} is not {}-byte aligned",
                control, alignof(RingControl));
  }
  if (reinterpret_cast<std::uintptr_t>(slots) % alignof(Slot) != 0) {
    return fail(ErrorCode::invalid_argument, "ring slot array at {} is not {}-byte aligned",
                slots, alignof(Slot));
  }
  if (!valid_ring_capacity(capacity)) {
    return fail(ErrorCode::invalid_argument,
                "ring capacity {} is not a power of two of at least 2", capacity);
  }
  return {};
}

}  // namespace detail

enum class PopStatus : std::uint8_t {
  ok,       // a frame was read
  empty,    // nothing to read now
  corrupt,  // the producer position is impossible; nothing was or will be read
};

// The producing end of a ring. One thread owns it; it writes slots and publishes them.
template <RingSlot Slot>
class RingProducer {
 public:
  // Builds a handle on a ring initialised by init_ring/construct_ring (or zero-filled).
  // Setup path: returns an Error (allocating its message) for null or misaligned pointers, a
  // capacity that is not a power of two >= 2, or positions that are already inconsistent.
  [[nodiscard]] static Expected<RingProducer> make(RingControl* control, Slot* slots,
                                                   std::uint32_t capacity) {
    if (control == nullptr || slots == nullptr) {
      return fail(ErrorCode::invalid_argument, "ring control block and slots must be non-null");
    }
    if (auto checked = detail::check_ring_args<Slot>(control, slots, capacity); !checked) {
      return std::unexpected(std::move(checked.error()));
    }
    // acquire (both): on a re-attach, pairs with the last release stores of the positions, in
    // RingProducer::commit (`produced`) and RingConsumer::release (`consumed`). The ring's
    // initial state comes with its mapping: the descriptor hand-off orders it for a client, and
    // the release in set_phase (engine/engine_lanes.hpp) for the engine's serving thread.
    const std::uint64_t produced = control->produced.load(std::memory_order_acquire);
    const std::uint64_t consumed = control->consumed.load(std::memory_order_acquire);
    if (produced - consumed > capacity) {
      return fail(ErrorCode::protocol,
                  "ring positions are inconsistent (produced {}, consumed {}, capacity {})",
                  produced, consumed, capacity);
    }
    return RingProducer(control, slots, capacity, produced, consumed);
  }

  // Like make(), but trusts only this side's own position (`produced`): the peer's position is
  // checked when first needed, so a peer that has already scribbled on it makes the handle latch
  // corrupt() then instead of failing here. For a side that must come up whatever a peer did
  // before it (the engine, whose segment is attachable before its server exists). The first
  // try_claim reloads `consumed`. Errors only for null or misaligned pointers, bad capacities.
  [[nodiscard]] static Expected<RingProducer> adopt(RingControl* control, Slot* slots,
                                                    std::uint32_t capacity) {
    if (control == nullptr || slots == nullptr) {
      return fail(ErrorCode::invalid_argument, "ring control block and slots must be non-null");
    }
    if (auto checked = detail::check_ring_args<Slot>(control, slots, capacity); !checked) {
      return std::unexpected(std::move(checked.error()));
    }
    // acquire: pairs with the release store of `produced` in RingProducer::commit, from this
    // side's earlier life; the initial state comes with the mapping, as in make().
    const std::uint64_t produced = control->produced.load(std::memory_order_acquire);
    // A cached consumer a full ring behind: the fast check says full, so the real one is loaded
    // (and bounds-checked) before any slot is handed out.
    return RingProducer(control, slots, capacity, produced, produced - capacity);
  }

  // Copies `slot` into the ring and publishes it. False when the ring is full or corrupt()
  // (nothing written). Loads the consumer position only when the cached one says full.
  [[nodiscard]] bool try_push(const Slot& slot) noexcept {
    Slot* const target = try_claim();
    if (target == nullptr) return false;
    copy_slot_payload(*target, slot);
    commit();
    return true;
  }

  // Zero-copy write, step 1: the next free slot, or nullptr when full or corrupt(). The slot is
  // not visible to the consumer until commit(). Calling it again before commit() returns the
  // same slot. Write every field but `stamp` (the consumer is polling it): assign fields, or
  // fill a local slot and copy_slot_payload it over.
  [[nodiscard]] Slot* try_claim() noexcept {
    if (!has_space()) return nullptr;
    claimed_ = true;
    return &slots_[head_ & mask_];
  }

  // Zero-copy write, step 2: publishes the slot returned by the last try_claim().
  void commit() noexcept {
    assert(claimed_ && "RingProducer::commit without a successful try_claim");
    claimed_ = false;
    // release: publishes the slot's payload; pairs with the acquire load of the stamp in
    // RingConsumer::has_data (reached from try_peek/try_pop/readable).
    std::atomic_ref<std::uint32_t>(slots_[head_ & mask_].stamp).store(ring_stamp(head_), std::memory_order_release);
    ++head_;
    // release: publishes the position after the stamp; pairs with the acquire loads of
    // `produced` in RingConsumer::has_data's bounds check, make()/adopt() and probe_corrupt().
    control_->produced.store(head_, std::memory_order_release);
    // No prefetch-for-write of the next slot: the consumer polls that slot next, so taking its
    // line early only makes it travel once more per frame (docs/DESIGN.md, "The rings").
  }

  // True when at least one slot is free; refreshes the cached consumer position only when the
  // cache says full. Also the predicate that the wait strategies poll.
  [[nodiscard]] bool writable() noexcept { return has_space(); }

  // Frames published so far by this ring (monotonic, wraps at 2^64).
  [[nodiscard]] std::uint64_t position() const noexcept { return head_; }

  // Frames published but not yet consumed, as seen now; clamped to capacity. Loads the
  // consumer's line, so keep it off the hot path.
  [[nodiscard]] std::size_t size_approx() const noexcept {
    // relaxed: an estimate only; no slot is written on its strength.
    const std::uint64_t used = head_ - control_->consumed.load(std::memory_order_relaxed);
    return static_cast<std::size_t>(used > mask_ + 1 ? mask_ + 1 : used);
  }

  // Restarts this handle at `position` once init_ring(control(), position) has restarted the
  // shared ring, and clears the corrupt latch. For a side that takes a ring back from a peer
  // that left or misbehaved: unlike make() it cannot fail, so it never allocates. A peer still
  // writing afterwards is caught by the usual bounds checks.
  void restart(std::uint64_t position) noexcept {
    head_ = position;
    cached_tail_ = position;
    corrupt_ = false;
    claimed_ = false;
  }

  [[nodiscard]] std::uint32_t capacity() const noexcept {
    return static_cast<std::uint32_t>(mask_ + 1);
  }
  // Latched once the consumer position was seen outside [produced - capacity, produced].
  [[nodiscard]] bool corrupt() const noexcept { return corrupt_; }
  [[nodiscard]] RingControl& control() const noexcept { return *control_; }

 private:
  RingProducer(RingControl* control, Slot* slots, std::uint32_t capacity, std::uint64_t head,
               std::uint64_t tail) noexcept
      : control_(control), slots_(slots), mask_(capacity - 1ULL), head_(head), cached_tail_(tail) {}

  bool has_space() noexcept {
    if (head_ - cached_tail_ <= mask_) return true;
    if (corrupt_) return false;
    // acquire: pairs with the release in RingConsumer::release, so the consumer has finished
    // reading a slot before this producer overwrites it.
    cached_tail_ = control_->consumed.load(std::memory_order_acquire);
    const std::uint64_t used = head_ - cached_tail_;
    if (used > mask_ + 1) {
      corrupt_ = true;
      cached_tail_ = head_ - (mask_ + 1);  // keep the fast check saying full
      return false;
    }
    return used <= mask_;
  }

  RingControl* control_;
  Slot* slots_;
  std::uint64_t mask_;
  std::uint64_t head_;         // this producer's position: only this thread writes `produced`
  std::uint64_t cached_tail_;  // last consumer position seen
  bool corrupt_ = false;
  bool claimed_ = false;
};

// The consuming end of a ring. One thread owns it; it reads published slots and frees them.
template <RingSlot Slot>
class RingConsumer {
 public:
  // Same contract as RingProducer::make.
  [[nodiscard]] static Expected<RingConsumer> make(RingControl* control, const Slot* slots,
                                                   std::uint32_t capacity) {
    if (control == nullptr || slots == nullptr) {
      return fail(ErrorCode::invalid_argument, "ring control block and slots must be non-null");
    }
    if (auto checked = detail::check_ring_args<Slot>(control, slots, capacity); !checked) {
      return std::unexpected(std::move(checked.error()));
    }
    // acquire (both): as in RingProducer::make, pairs with the release stores in
    // RingConsumer::release (`consumed`) and RingProducer::commit (`produced`).
    const std::uint64_t consumed = control->consumed.load(std::memory_order_acquire);
    const std::uint64_t produced = control->produced.load(std::memory_order_acquire);
    if (produced - consumed > capacity) {
      return fail(ErrorCode::protocol,
                  "ring positions are inconsistent (produced {}, consumed {}, capacity {})",
                  produced, consumed, capacity);
    }
    return RingConsumer(control, slots, capacity, consumed);
  }

  // The consumer-side twin of RingProducer::adopt: trusts only `consumed`; `produced` is
  // bounds-checked the first time a try_peek finds the next slot unpublished.
  [[nodiscard]] static Expected<RingConsumer> adopt(RingControl* control, const Slot* slots,
                                                    std::uint32_t capacity) {
    if (control == nullptr || slots == nullptr) {
      return fail(ErrorCode::invalid_argument, "ring control block and slots must be non-null");
    }
    if (auto checked = detail::check_ring_args<Slot>(control, slots, capacity); !checked) {
      return std::unexpected(std::move(checked.error()));
    }
    // acquire: pairs with the release store of `consumed` in RingConsumer::release, from this
    // side's earlier life; the initial state comes with the mapping, as in RingProducer::make.
    const std::uint64_t consumed = control->consumed.load(std::memory_order_acquire);
    return RingConsumer(control, slots, capacity, consumed);
  }

  // Zero-copy read, step 1: the oldest published slot, or nullptr when empty or corrupt() (tell
  // them apart with corrupt()). The slot stays valid and unchanged until release(). Reads the
  // slot's stamp; when it says "not yet", bounds-checks the producer position on the first such
  // poll after a frame and then every kEmptyPollsPerBoundsCheck polls.
  [[nodiscard]] const Slot* try_peek() noexcept {
    if (!has_data()) return nullptr;
    peeked_ = true;
    return &slots_[tail_ & mask_];
  }

  // Zero-copy read, step 2: hands the slot returned by the last try_peek() back to the producer.
  void release() noexcept {
    assert(peeked_ && "RingConsumer::release without a successful try_peek");
    peeked_ = false;
    ++tail_;
    empty_polls_to_check_ = 0;  // the next empty poll checks the producer position
    // release: the reads of the slot happen before the producer may reuse it; pairs with the
    // acquire of `consumed` in RingProducer::has_space.
    control_->consumed.store(tail_, std::memory_order_release);
  }

  // Copies the oldest published slot into `out` and frees it. On empty or corrupt, `out` is
  // left untouched.
  [[nodiscard]] PopStatus try_pop(Slot& out) noexcept {
    const Slot* const slot = try_peek();
    if (slot == nullptr) return corrupt_ ? PopStatus::corrupt : PopStatus::empty;
    out = *slot;
    release();
    return PopStatus::ok;
  }

  // True when try_peek would not return empty (data is there, or the ring is corrupt). The wait
  // strategies poll it.
  [[nodiscard]] bool readable() noexcept { return has_data() || corrupt_; }

  // Loads the producer position and latches corrupt() if it is impossible; returns corrupt().
  // For a slow path that must notice a poisoned ring while stamped frames it has not read yet
  // keep readable() true (e.g. a client blocked on its request ring).
  // Reads no slot. Not for the hot path: it always loads the producer's line.
  [[nodiscard]] bool probe_corrupt() noexcept {
    if (corrupt_) return true;
    // acquire: pairs with the release in RingProducer::commit, as in has_data.
    const std::uint64_t head = control_->produced.load(std::memory_order_acquire);
    if (impossible_head(head)) corrupt_ = true;
    return corrupt_;
  }

  // Frames consumed so far from this ring (monotonic, wraps at 2^64).
  [[nodiscard]] std::uint64_t position() const noexcept { return tail_; }

  // Frames published but not yet consumed, as seen now; clamped to capacity.
  [[nodiscard]] std::size_t size_approx() const noexcept {
    // relaxed: an estimate only; no slot is read on its strength.
    const std::uint64_t used = control_->produced.load(std::memory_order_relaxed) - tail_;
    return static_cast<std::size_t>(used > mask_ + 1 ? mask_ + 1 : used);
  }

  // The consumer-side twin of RingProducer::restart.
  void restart(std::uint64_t position) noexcept {
    tail_ = position;
    corrupt_ = false;
    peeked_ = false;
    empty_polls_to_check_ = 0;
  }

  [[nodiscard]] std::uint32_t capacity() const noexcept {
    return static_cast<std::uint32_t>(mask_ + 1);
  }
  // Latched once the producer position was seen outside [consumed - 1, consumed + capacity].
  [[nodiscard]] bool corrupt() const noexcept { return corrupt_; }
  [[nodiscard]] RingControl& control() const noexcept { return *control_; }

 private:
  RingConsumer(RingControl* control, const Slot* slots, std::uint32_t capacity, std::uint64_t tail) noexcept
      : control_(control), slots_(slots), mask_(capacity - 1ULL), tail_(tail) {}

  bool has_data() noexcept {
    if (corrupt_) return false;
    // The slot is only ever read here, but atomic_ref needs a mutable object: the const is this
    // handle's promise not to write, not the memory's.
    auto& stamp = const_cast<std::uint32_t&>(slots_[tail_ & mask_].stamp);
    // acquire: pairs with the release store of the stamp in RingProducer::commit, so the slot's
    // payload is visible before it is read.
    if (std::atomic_ref<std::uint32_t>(stamp).load(std::memory_order_acquire) == ring_stamp(tail_)) return true;
    if (empty_polls_to_check_ != 0) {
      --empty_polls_to_check_;
      return false;
    }
    empty_polls_to_check_ = kEmptyPollsPerBoundsCheck - 1;
    // acquire: pairs with the release of `produced` in RingProducer::commit. Only a bounds
    // check: a producer whose position is impossible is corrupt or hostile.
    const std::uint64_t head = control_->produced.load(std::memory_order_acquire);
    if (impossible_head(head)) corrupt_ = true;
    return false;
  }

  // The producer position may trail this consumer by one: the commit stores the stamp before
  // the position, and this side may already have consumed the stamped frame. It can be no
  // further behind (having seen stamp p with acquire, we see at least the position store that
  // preceded it, p) and no more than a ring ahead. Anything else is corruption.
  [[nodiscard]] bool impossible_head(std::uint64_t head) const noexcept {
    return head - (tail_ - 1) > mask_ + 2;
  }

  RingControl* control_;
  const Slot* slots_;
  std::uint64_t mask_;
  std::uint64_t tail_;  // this consumer's position: only this thread writes `consumed`
  std::uint32_t empty_polls_to_check_ = 0;  // empty polls left before the next bounds check
  bool corrupt_ = false;
  bool peeked_ = false;
};

}  // namespace ipcfloor
