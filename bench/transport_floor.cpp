// physical-floor: one cache line bounced between the two pinned cores. No software sits in the
// path: a store, the coherence traffic that carries it to the other core, and a store back.
// Every transport above it on the ladder pays this plus its own overhead.

#include <atomic>
#include <thread>

#include "bench/transports.hpp"
#include "engine/affinity.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

Expected<std::vector<double>> run_physical_floor(const TransportContext& context) {
  struct alignas(128) Line {
    std::atomic<std::uint64_t> value{0};
  };
  Line line;
  constexpr std::uint64_t kDone = ~std::uint64_t{0};
  Error pong_error{ErrorCode::io, ""};
  std::atomic<bool> pong_failed{false};

  std::thread pong([&] {
    if (auto pinned = pin_current_thread(context.server_cpu); !pinned) {
      pong_error = pinned.error();
      pong_failed.store(true, std::memory_order_release);  // release: publishes pong_error; pairs with acquire below
      line.value.store(kDone, std::memory_order_release);  // release: unblocks ping; pairs with its acquire
      return;
    }
    std::uint64_t expect = 1;
    for (;;) {
      // acquire: pairs with ping's release store of the odd value.
      const std::uint64_t seen = line.value.load(std::memory_order_acquire);
      if (seen == kDone) return;
      if (seen == expect) {
        line.value.store(expect + 1, std::memory_order_release);  // release: pairs with ping's acquire load
        expect += 2;
      } else {
        detail::cpu_relax();
      }
    }
  });

  if (auto pinned = pin_current_thread(context.client_cpu); !pinned) {
    line.value.store(kDone, std::memory_order_release);  // release: stops pong; pairs with its acquire
    pong.join();
    return std::unexpected(pinned.error());
  }
  std::vector<double> samples = reserved_samples(context);
  const std::size_t total = context.warmup + context.samples;
  for (std::size_t i = 0; i < total; ++i) {
    const std::uint64_t ping = 2 * i + 1;
    const std::uint64_t t0 = TscClock::now();
    line.value.store(ping, std::memory_order_release);  // release: pairs with pong's acquire load
    // acquire: pairs with pong's release store of ping + 1.
    std::uint64_t seen = 0;
    while ((seen = line.value.load(std::memory_order_acquire)) != ping + 1) {
      if (seen == kDone) break;
      detail::cpu_relax();
    }
    const std::uint64_t t1 = TscClock::now();
    if (seen == kDone) break;
    if (i >= context.warmup) samples.push_back(context.clock->to_ns(t1 - t0));
  }
  line.value.store(kDone, std::memory_order_release);  // release: stops pong; pairs with its acquire
  pong.join();
  if (pong_failed.load(std::memory_order_acquire)) return std::unexpected(pong_error);  // acquire: see above
  return samples;
}

}  // namespace ipcfloor
