// physical-floor: one cache line bounced between the two pinned cores. No software sits in the
// path: a store, the coherence traffic that carries it to the other core, and a store back.
// Every transport above it on the ladder pays this plus its own overhead.
//
// physical-floor-2line: the same with the request and the answer on two separate lines, as any
// request/response pair of rings has them (SPEC §3: a request ring and a response ring per
// lane). Still no software; the difference to physical-floor is what the hardware charges for
// writing a line the other core holds rather than the line it just handed back.
//
// physical-floor-ring: the request and the answer on two arrays of `ring_capacity` (the ring's
// slot count) contiguous 64-byte lines, each round trip on the next line of each array, as the segment's
// request and response rings move through their slots. Still no software: a store and a poll
// per side, as above. The difference to physical-floor-2line is what the hardware charges for
// moving to a new pair of lines every round trip instead of reusing one pair; the difference
// between shm-ring-spin and this rung is what the ring's software and the process boundary add.

#include <atomic>
#include <cstddef>
#include <memory>
#include <thread>

#include "bench/transports.hpp"
#include "engine/affinity.hpp"
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

// Where round trip `i` puts its request and finds its answer. Shapes: one line for both; one
// fixed request line and one fixed reply line (128 bytes apart, so that the adjacent-line
// prefetcher does not pair them); or two arrays of `count` lines walked one line per round trip.
class BounceLines {
 public:
  // Setup path: allocates the arrays. `count` >= 1; `shared` puts the reply on the request line.
  BounceLines(std::size_t count, bool shared, std::size_t reply_offset_lines)
      : count_(count),
        storage_(std::make_unique<BounceLine[]>(shared ? count : count + reply_offset_lines)),
        reply_offset_(shared ? 0 : reply_offset_lines) {}

  [[nodiscard]] std::atomic<std::uint64_t>& request(std::uint64_t i) noexcept { return storage_[i % count_].value; }
  [[nodiscard]] std::atomic<std::uint64_t>& reply(std::uint64_t i) noexcept {
    return storage_[reply_offset_ + i % count_].value;
  }

 private:
  std::size_t count_;
  std::unique_ptr<BounceLine[]> storage_;
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
      pong_failed.store(true, std::memory_order_release);  // release: publishes pong_error; pairs with acquire below
      lines.reply(0).store(kDone, std::memory_order_release);  // release: unblocks ping; pairs with its acquire
      return;
    }
    for (std::uint64_t i = 0;; ++i) {
      const std::uint64_t expect = 2 * i + 1;
      std::atomic<std::uint64_t>& request = lines.request(i);
      for (;;) {
        // acquire: pairs with ping's release store of the odd value (or of kDone).
        const std::uint64_t seen = request.load(std::memory_order_acquire);
        if (seen == kDone) return;
        if (seen == expect) break;
        detail::cpu_relax();
      }
      lines.reply(i).store(expect + 1, std::memory_order_release);  // release: pairs with ping's acquire load
    }
  });

  const std::size_t total = context.warmup + context.samples;
  const auto stop_pong = [&](std::uint64_t next) {
    // release: stops pong, which polls the request line of round trip `next`; pairs with its acquire.
    lines.request(next).store(kDone, std::memory_order_release);
    pong.join();
  };
  if (auto pinned = pin_current_thread(context.client_cpu); !pinned) {
    stop_pong(0);
    return std::unexpected(pinned.error());
  }
  std::vector<double> samples = reserved_samples(context);
  std::uint64_t i = 0;
  for (; i < total; ++i) {
    const std::uint64_t ping = 2 * i + 1;
    std::atomic<std::uint64_t>& reply = lines.reply(i);
    const std::uint64_t t0 = TscClock::now();
    lines.request(i).store(ping, std::memory_order_release);  // release: pairs with pong's acquire load
    // acquire: pairs with pong's release store of ping + 1.
    std::uint64_t seen = 0;
    while ((seen = reply.load(std::memory_order_acquire)) != ping + 1) {
      if (seen == kDone) break;
      detail::cpu_relax();
    }
    const std::uint64_t t1 = TscClock::now();
    if (seen == kDone) break;
    if (i >= context.warmup) samples.push_back(context.clock->to_ns(t1 - t0));
  }
  stop_pong(i);
  if (pong_failed.load(std::memory_order_acquire)) return std::unexpected(pong_error);  // acquire: see above
  return samples;
}

}  // namespace

Expected<std::vector<double>> run_physical_floor(const TransportContext& context) {
  BounceLines lines(1, true, 0);
  return bounce(context, lines);
}

Expected<std::vector<double>> run_physical_floor_two_lines(const TransportContext& context) {
  BounceLines lines(1, false, 2);
  return bounce(context, lines);
}

Expected<std::vector<double>> run_physical_floor_rotating(const TransportContext& context, std::size_t lines_per_array) {
  if (lines_per_array == 0) return fail(ErrorCode::invalid_argument, "a rotating bounce needs at least one line per array");
  BounceLines lines(lines_per_array, false, lines_per_array);
  return bounce(context, lines);
}

Expected<std::vector<double>> run_physical_floor_ring(const TransportContext& context) {
  return run_physical_floor_rotating(context, context.ring_capacity);
}

}  // namespace ipcfloor
