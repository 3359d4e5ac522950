#include "bench/pair_bounce.hpp"

#include <algorithm>
#include <thread>

#include "common/affinity.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

BounceLines::BounceLines(std::size_t count, std::size_t reply_offset, std::size_t skip)
    : count_(count),
      storage_(std::make_unique<BounceLine[]>(skip + count + reply_offset)),
      first_(storage_.get() + skip),
      reply_offset_(reply_offset),
      lines_(count + reply_offset) {}

void BounceLines::abort() noexcept {
  for (std::size_t i = 0; i < lines_; ++i)
    // release: pairs with the acquire loads of both sides' wait loops in bounce_lines.
    first_[i].value.store(kBounceDone, std::memory_order_release);
}

namespace {

// The answering side: waits for each odd value on its request line and answers with the next
// even one on the reply line, until a request line reads kBounceDone.
void answer(BounceLines& lines, unsigned poll_pauses) noexcept {
  std::size_t slot = 0;
  for (std::uint64_t expect = 1;; expect += 2, slot = lines.next(slot)) {
    std::atomic<std::uint64_t>& request = lines.request(slot);
    std::atomic<std::uint64_t>& reply = lines.reply(slot);
    for (;;) {
      // acquire: pairs with the release store of the odd value in bounce_lines (or of kBounceDone).
      const std::uint64_t seen = request.load(std::memory_order_acquire);
      if (seen == kBounceDone) return;
      if (seen == expect) break;
      for (unsigned k = 0; k < poll_pauses; ++k) cpu_relax();
    }
    // release: pairs with the acquire load of the reply line in bounce_lines.
    reply.store(expect + 1, std::memory_order_release);
  }
}

}  // namespace

Expected<std::vector<double>> bounce_lines(const BounceSides& sides, BounceLines& lines) {
  Error pong_error{ErrorCode::io, ""};
  std::atomic<bool> pong_failed{false};
  std::thread pong([&] {
    if (auto pinned = pin_current_thread(sides.server_cpu); !pinned) {
      pong_error = pinned.error();
      // release: publishes pong_error; pairs with the acquire load of pong_failed at the end.
      pong_failed.store(true, std::memory_order_release);
      // release: unblocks the timing side; pairs with the acquire load of the reply line below.
      lines.reply(0).store(kBounceDone, std::memory_order_release);
      return;
    }
    answer(lines, std::max(1U, sides.answer_poll_pauses));
  });

  std::size_t slot = 0;
  const auto stop_pong = [&] {
    // release: stops the answering side, which polls the request line of the next round trip;
    // pairs with the acquire load of the request line in answer().
    lines.request(slot).store(kBounceDone, std::memory_order_release);
    pong.join();
  };
  if (auto pinned = pin_current_thread(sides.client_cpu); !pinned) {
    stop_pong();
    return std::unexpected(pinned.error());
  }
  std::vector<double> samples;
  samples.reserve(sides.samples);
  const std::size_t total = sides.warmup + sides.samples;
  for (std::size_t i = 0; i < total; ++i, slot = lines.next(slot)) {
    const std::uint64_t ping = 2 * i + 1;
    std::atomic<std::uint64_t>& request = lines.request(slot);
    std::atomic<std::uint64_t>& reply = lines.reply(slot);
    const std::uint64_t t0 = TscClock::now();
    // release: pairs with the acquire load of the request line in answer().
    request.store(ping, std::memory_order_release);
    // acquire: pairs with answer()'s release store of ping + 1 (or a store of kBounceDone).
    std::uint64_t seen = 0;
    while ((seen = reply.load(std::memory_order_acquire)) != ping + 1) {
      if (seen == kBounceDone) break;
      cpu_relax();
    }
    const std::uint64_t t1 = TscClock::now();
    if (seen == kBounceDone) break;
    if (i >= sides.warmup) samples.push_back(sides.clock->to_ns(t1 - t0));
    if (t1 >= sides.stop_tick) break;
  }
  stop_pong();
  // acquire: pairs with the answering thread's release store of pong_failed; the join orders it too.
  if (pong_failed.load(std::memory_order_acquire)) return std::unexpected(pong_error);
  return samples;
}

}  // namespace ipcfloor
