#pragma once
// One cache line bounced between two pinned threads, one round trip per sample: the ladder's
// physical-floor rungs and the floor matrix of `ipcfloor topology` are this measurement. No
// software sits in the path: a store, the coherence traffic that carries it to the other core, a
// store back. Round trip i stores 2i+1 on its request line and waits for 2i+2 on its reply line;
// every value is new, so a line revisited a lap later never shows a stale value that matches.
//
// Setup path: allocates and starts a thread. The timed loop neither allocates nor makes a
// system call.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "common/error.hpp"
#include "common/tsc_clock.hpp"

namespace ipcfloor {

// One 64-byte line, as a ring slot is.
struct alignas(64) BounceLine {
  std::atomic<std::uint64_t> value{0};
};
static_assert(sizeof(BounceLine) == 64, "a bounce line is one cache line, like a ring slot");

// Where round trip `i` puts its request and finds its answer: line `i % count` of the request
// array and of the reply array. Shapes: one line for both (reply_offset 0); one fixed request
// line and one fixed reply line 128 bytes apart, so that the adjacent-line prefetcher does not
// pair them (count 1, reply_offset 2); or two arrays of `count` lines (reply_offset = count).
class BounceLines {
 public:
  // Setup path: allocates. `count` >= 1. `skip` unused lines come first, so that a second
  // bounce started right after a first one does not get the same line back from the allocator.
  BounceLines(std::size_t count, std::size_t reply_offset, std::size_t skip = 0);

  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  // `slot` < count(); each side walks it with next() so that no division lands in the timed path.
  [[nodiscard]] std::atomic<std::uint64_t>& request(std::size_t slot) noexcept { return first_[slot].value; }
  [[nodiscard]] std::atomic<std::uint64_t>& reply(std::size_t slot) noexcept {
    return first_[reply_offset_ + slot].value;
  }
  [[nodiscard]] std::size_t next(std::size_t slot) const noexcept { return slot + 1 == count_ ? 0 : slot + 1; }
  // Ends a bounce stuck waiting (its other side never scheduled) from any thread: every line
  // reads kBounceDone, which both sides take as the end. Samples taken so far are kept.
  void abort() noexcept;

 private:
  std::size_t count_;
  std::unique_ptr<BounceLine[]> storage_;
  BounceLine* first_;
  std::size_t reply_offset_;
  std::size_t lines_;
};

// The value that ends a bounce on either side's line.
inline constexpr std::uint64_t kBounceDone = ~std::uint64_t{0};

struct BounceSides {
  int client_cpu = 0;  // the calling thread, which times each round trip
  int server_cpu = 1;  // a thread of the bounce's own, which answers
  std::size_t warmup = 0;
  std::size_t samples = 0;
  const TscClock* clock = nullptr;  // must outlive the call
  // No round trip starts once the counter has passed this tick: a bound on the bounce's time
  // that costs nothing in the timed path (it is compared after each sample's second reading).
  std::uint64_t stop_tick = std::numeric_limits<std::uint64_t>::max();
  // PAUSEs the answering side spends between two polls of its request line (>= 1). One is the
  // tightest poll; on some hosts that poll delays the very store it waits for (the line is taken
  // back for each read while the other core tries to write it), and an engine, which polls its
  // lanes in passes, never polls that tightly: a bounce that answers every few PAUSEs can be
  // faster (docs/RESULTS.md, "The physical floor as a lower bound").
  unsigned answer_poll_pauses = 1;
};

// Pins the calling thread to sides.client_cpu and a new thread to sides.server_cpu, then
// bounces: sides.warmup untimed round trips, then up to sides.samples timed ones (fewer when
// stop_tick or abort() ends it), each in ns. Errors: either side could not be pinned.
[[nodiscard]] Expected<std::vector<double>> bounce_lines(const BounceSides& sides, BounceLines& lines);

}  // namespace ipcfloor
