// physical-floor: one cache line bounced between the two pinned cores. No software sits in the
// path: a store, the coherence traffic that carries it to the other core, and a store back.
// Every transport above it on the ladder pays this plus its own overhead.
//
// physical-floor-2line: the same with the request and the answer on two separate lines, as any
// request/response pair of rings has them (SPEC §3: a request ring and a response ring per
// lane). Still no software; the difference to physical-floor is what the hardware charges for
// writing a line the other core holds rather than the line it just handed back.

#include <atomic>
#include <thread>

#include "bench/transports.hpp"
#include "engine/affinity.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

namespace {

// `lines` = 1: ping and pong take turns on one line (odd values out, even values back).
// `lines` = 2: ping writes the request line, pong answers on the reply line.
Expected<std::vector<double>> bounce(const TransportContext& context, int lines) {
  struct alignas(128) Line {
    std::atomic<std::uint64_t> value{0};
  };
  Line request_line;
  Line reply_line;
  std::atomic<std::uint64_t>& request = request_line.value;
  std::atomic<std::uint64_t>& reply = lines == 1 ? request_line.value : reply_line.value;
  constexpr std::uint64_t kDone = ~std::uint64_t{0};
  Error pong_error{ErrorCode::io, ""};
  std::atomic<bool> pong_failed{false};

  std::thread pong([&] {
    if (auto pinned = pin_current_thread(context.server_cpu); !pinned) {
      pong_error = pinned.error();
      pong_failed.store(true, std::memory_order_release);  // release: publishes pong_error; pairs with acquire below
      reply.store(kDone, std::memory_order_release);       // release: unblocks ping; pairs with its acquire
      return;
    }
    std::uint64_t expect = 1;
    for (;;) {
      // acquire: pairs with ping's release store of the odd value.
      const std::uint64_t seen = request.load(std::memory_order_acquire);
      if (seen == kDone) return;
      if (seen == expect) {
        reply.store(expect + 1, std::memory_order_release);  // release: pairs with ping's acquire load
        expect += 2;
      } else {
        detail::cpu_relax();
      }
    }
  });

  if (auto pinned = pin_current_thread(context.client_cpu); !pinned) {
    request.store(kDone, std::memory_order_release);  // release: stops pong; pairs with its acquire
    pong.join();
    return std::unexpected(pinned.error());
  }
  std::vector<double> samples = reserved_samples(context);
  const std::size_t total = context.warmup + context.samples;
  for (std::size_t i = 0; i < total; ++i) {
    const std::uint64_t ping = 2 * i + 1;
    const std::uint64_t t0 = TscClock::now();
    request.store(ping, std::memory_order_release);  // release: pairs with pong's acquire load
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
  request.store(kDone, std::memory_order_release);  // release: stops pong; pairs with its acquire
  pong.join();
  if (pong_failed.load(std::memory_order_acquire)) return std::unexpected(pong_error);  // acquire: see above
  return samples;
}

}  // namespace

Expected<std::vector<double>> run_physical_floor(const TransportContext& context) { return bounce(context, 1); }

Expected<std::vector<double>> run_physical_floor_two_lines(const TransportContext& context) {
  return bounce(context, 2);
}

}  // namespace ipcfloor
