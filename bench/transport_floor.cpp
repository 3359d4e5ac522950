// physical-floor: one cache line bounced between the two pinned cores. No software sits in the
// path: a store, the coherence traffic that carries it to the other core, and a store back.
// Every transport above it on the ladder pays this plus its own overhead.
//
// physical-floor-again: physical-floor once more in the same round, on another line. Nothing
// differs but the moment and the address, so its ratio to physical-floor is what a per-round ratio
// drifts by when nothing at all changed: the noise any "within x of the floor in every round" claim
// has to fit inside.
//
// physical-floor-2line: the same with the request and the answer on two separate lines, as any
// request/response pair of rings has them (docs/SPEC.md §2: a request ring and a response ring per
// lane). Still no software; the difference to physical-floor is what the hardware charges for
// writing a line the other core holds rather than the line it just handed back.
//
// physical-floor-ring: the request and the answer on two arrays of `ring_capacity` (the ring's
// slot count) contiguous 64-byte lines, each round trip on the next line of each array, as the
// segment's request and response rings move through their slots. Still no software: a store and a poll
// per side, as above. The difference to physical-floor-2line is what the hardware charges for
// moving to a new pair of lines every round trip instead of reusing one pair; the difference
// between shm-ring-spin and this rung is what the ring's software and the process boundary add.

#include <atomic>
#include <cstddef>
#include <memory>
#include <thread>

#include "bench/rung_timing.hpp"
#include "bench/transports.hpp"
#include "common/affinity.hpp"
#include "shm/layout.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

namespace {

constexpr std::uint64_t kDone = ~std::uint64_t{0};

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
  BounceLines(std::size_t count, std::size_t reply_offset, std::size_t skip = 0)
      : count_(count),
        storage_(std::make_unique<BounceLine[]>(skip + count + reply_offset)),
        first_(storage_.get() + skip),
        reply_offset_(reply_offset) {}

  [[nodiscard]] std::size_t count() const noexcept { return count_; }
  // `slot` < count(); each side walks it with next() so that no division lands in the timed path.
  [[nodiscard]] std::atomic<std::uint64_t>& request(std::size_t slot) noexcept { return first_[slot].value; }
  [[nodiscard]] std::atomic<std::uint64_t>& reply(std::size_t slot) noexcept {
    return first_[reply_offset_ + slot].value;
  }
  [[nodiscard]] std::size_t next(std::size_t slot) const noexcept { return slot + 1 == count_ ? 0 : slot + 1; }

 private:
  std::size_t count_;
  std::unique_ptr<BounceLine[]> storage_;
  BounceLine* first_;
  std::size_t reply_offset_;
};

// Round trip i stores 2i+1 on its request line and waits for 2i+2 on its reply line. Every
// value is new, so a line revisited a lap later never shows a stale value that matches.
Expected<std::vector<double>> bounce(const TransportContext& context, BounceLines& lines) {
  Error pong_error{ErrorCode::io, ""};
  std::atomic<bool> pong_failed{false};

  std::thread pong([&] {
    if (auto pinned = pin_current_thread(context.server_cpu); !pinned) {
      pong_error = pinned.error();
      // release: publishes pong_error; pairs with the acquire load of pong_failed at the end of bounce().
      pong_failed.store(true, std::memory_order_release);
      // release: unblocks ping; pairs with the acquire load of the reply line in bounce()'s loop.
      lines.reply(0).store(kDone, std::memory_order_release);
      return;
    }
    std::size_t slot = 0;
    for (std::uint64_t expect = 1;; expect += 2, slot = lines.next(slot)) {
      std::atomic<std::uint64_t>& request = lines.request(slot);
      std::atomic<std::uint64_t>& reply = lines.reply(slot);
      for (;;) {
        // acquire: pairs with the release store of the odd value in bounce()'s loop (or of kDone in stop_pong).
        const std::uint64_t seen = request.load(std::memory_order_acquire);
        if (seen == kDone) return;
        if (seen == expect) break;
        cpu_relax();
      }
      // release: pairs with the acquire load of the reply line in bounce()'s loop.
      reply.store(expect + 1, std::memory_order_release);
    }
  });

  std::size_t slot = 0;
  const auto stop_pong = [&] {
    // release: stops pong, which polls the request line of the next round trip; pairs with the
    // acquire load of the request line in the pong lambda.
    lines.request(slot).store(kDone, std::memory_order_release);
    pong.join();
  };
  std::uint64_t ping = 0;
  std::atomic<std::uint64_t>* request = nullptr;
  std::atomic<std::uint64_t>* reply = nullptr;
  auto samples = time_round_trips(context, RoundTrip{
      .prepare = [&](std::size_t i) {
        ping = 2 * i + 1;
        request = &lines.request(slot);
        reply = &lines.reply(slot);
      },
      .exchange = [&](std::size_t) {
        // release: pairs with the acquire load of the request line in the pong lambda.
        request->store(ping, std::memory_order_release);
        // acquire: pairs with the pong lambda's release store of ping + 1 (or of kDone).
        std::uint64_t seen = 0;
        while ((seen = reply->load(std::memory_order_acquire)) != ping + 1) {
          if (seen == kDone) break;
          cpu_relax();
        }
        return seen;
      },
      .check = [&](std::size_t, std::uint64_t seen) -> Expected<Answer> {
        if (seen == kDone) return Answer::peer_gone;  // pong could not pin; it says why below
        slot = lines.next(slot);                      // the next round trip's lines
        return Answer::answered;
      },
  });
  stop_pong();
  if (!samples) return samples;
  // acquire: pairs with the pong lambda's release store of pong_failed; the join in stop_pong orders it too.
  if (pong_failed.load(std::memory_order_acquire)) return std::unexpected(pong_error);
  return samples;
}

}  // namespace

Expected<std::vector<double>> run_physical_floor(const TransportContext& context) {
  BounceLines lines(1, 0);
  return bounce(context, lines);
}

Expected<std::vector<double>> run_physical_floor_again(const TransportContext& context) {
  BounceLines lines(1, 0, 8);  // 512 bytes on: another line, outside the first one's prefetch pair
  return bounce(context, lines);
}

Expected<std::vector<double>> run_physical_floor_two_lines(const TransportContext& context) {
  BounceLines lines(1, 2);
  return bounce(context, lines);
}

Expected<std::vector<double>> run_physical_floor_rotating(const TransportContext& context, std::size_t lines_per_array) {
  if (lines_per_array == 0) return fail(ErrorCode::invalid_argument, "a rotating bounce needs at least one line per array");
  BounceLines lines(lines_per_array, lines_per_array);
  return bounce(context, lines);
}

Expected<std::vector<double>> run_physical_floor_ring(const TransportContext& context) {
  return run_physical_floor_rotating(context, context.ring_capacity);
}

}  // namespace ipcfloor
