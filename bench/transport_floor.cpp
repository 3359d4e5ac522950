// physical-floor: a cache line bounced between the two pinned cores. No software sits in the
// path: a store, the coherence traffic that carries it to the other core, and a store back.
// Every transport above it on the ladder pays this plus its own overhead, so it must be the least
// a request and its reply can cost here, whichever way a transport moves its lines. It is the
// best, round by round, of the bounce styles the product's transports use:
//   - the shape: one line (the exchange line of a blocking call: request and answer in one line),
//     two lines (a ring's request slot and response slot), or a ring's rotating lines;
//   - the answering side's poll: after 1, 4 or 16 PAUSEs. The tightest poll is not the fastest on
//     every host: on a 2-vCPU AMD EPYC VM it took the line back for each read while the other core
//     was writing it, and answered a round trip 0.68x faster with 4 PAUSEs between reads
//     (docs/RESULTS.md, "The physical floor as a lower bound"). The engine polls its lanes in
//     passes, never that tightly.
// The round's samples are the lowest style's, by its interpolated median; context.note names it.
//
// physical-floor-again: physical-floor once more in the same round, on other lines. Nothing
// differs but the moment and the address, so its ratio to physical-floor is what a per-round ratio
// drifts by when nothing at all changed: the noise any "within x of the floor in every round" claim
// has to fit inside.
//
// physical-floor-2line: the best of the two-line styles alone, as any request/response pair of
// rings has them (docs/SPEC.md §2: a request ring and a response ring per lane). Still no
// software; the difference to the one-line styles is what the hardware charges for writing a line
// the other core holds rather than the line it just handed back.
//
// physical-floor-ring: the best of the rotating styles alone: the request and the answer on two
// arrays of `ring_capacity` (the ring's slot count) contiguous 64-byte lines, each round trip on
// the next line of each array, as the segment's request and response rings move through their
// slots. Still no software: a store and a poll per side, as above. The difference between
// shm-ring-spin and this rung is what the ring's software and the process boundary add.

#include <cstddef>
#include <limits>
#include <span>
#include <string>

#include <fmt/format.h>

#include "bench/pair_bounce.hpp"
#include "bench/transports.hpp"

namespace ipcfloor {

namespace {

// A line shape of the bounce: `count` request lines and the reply lines `reply_offset` on.
struct BounceShape {
  const char* name;
  std::size_t count;         // 0: the context's ring capacity
  std::size_t reply_offset;  // 0: one line for both; kRotating: count lines on
};
constexpr std::size_t kRotating = ~std::size_t{0};
constexpr BounceShape kOneLine{"one line", 1, 0};
constexpr BounceShape kTwoLines{"two lines", 1, 2};  // 128 bytes apart: not one prefetch pair
constexpr BounceShape kRingLines{"ring lines", 0, kRotating};
// The answering side's PAUSEs between polls, for every shape.
constexpr unsigned kAnswerPolls[] = {1, 4, 16};

// The ladder's cores and counts as the bounce takes them (bench/pair_bounce.hpp: the same bounce
// the floor matrix times between every pair of cpus).
Expected<std::vector<double>> bounce(const TransportContext& context, BounceLines& lines, unsigned poll_pauses) {
  BounceSides sides;
  sides.client_cpu = context.client_cpu;
  sides.server_cpu = context.server_cpu;
  sides.warmup = context.warmup;
  sides.samples = context.samples;
  sides.clock = context.clock;
  sides.answer_poll_pauses = poll_pauses;
  return bounce_lines(sides, lines);
}

// Every style of `shapes`, in turn; the samples of the one with the lowest p50~, named in
// context.note with each style's p50~. `skip` lines first (another address than a first call).
Expected<std::vector<double>> best_bounce(const TransportContext& context, std::span<const BounceShape> shapes,
                                          std::size_t skip = 0) {
  std::vector<double> best;
  double best_p50 = std::numeric_limits<double>::infinity();
  RoundNote note;
  for (const BounceShape& shape : shapes) {
    const std::size_t count = shape.count != 0 ? shape.count : context.ring_capacity;
    if (count == 0) return fail(ErrorCode::invalid_argument, "a rotating bounce needs at least one line per array");
    const std::size_t reply_offset = shape.reply_offset == kRotating ? count : shape.reply_offset;
    for (const unsigned pauses : kAnswerPolls) {
      BounceLines lines(count, reply_offset, skip);
      auto samples = bounce(context, lines, pauses);
      if (!samples) return samples;
      std::vector<double> sorted = *samples;
      const double p50 = summarize("floor", "rtt", sorted, context.clock->step_ns()).p50_interp;
      std::string style = fmt::format("{}, answer polls every {} PAUSE{}", shape.name, pauses, pauses == 1 ? "" : "s");
      note.styles.emplace_back(style, p50);
      if (p50 < best_p50) {
        best_p50 = p50;
        best = std::move(*samples);
        note.best = std::move(style);
      }
    }
  }
  if (context.note != nullptr) *context.note = std::move(note);
  return best;
}

}  // namespace

Expected<std::vector<double>> run_physical_floor(const TransportContext& context) {
  constexpr BounceShape kShapes[] = {kOneLine, kTwoLines, kRingLines};
  return best_bounce(context, kShapes);
}

Expected<std::vector<double>> run_physical_floor_again(const TransportContext& context) {
  constexpr BounceShape kShapes[] = {kOneLine, kTwoLines, kRingLines};
  // 512 bytes on: other lines, outside the first call's prefetch pairs.
  return best_bounce(context, kShapes, 8);
}

Expected<std::vector<double>> run_physical_floor_two_lines(const TransportContext& context) {
  constexpr BounceShape kShapes[] = {kTwoLines};
  return best_bounce(context, kShapes);
}

Expected<std::vector<double>> run_physical_floor_rotating(const TransportContext& context, std::size_t lines_per_array) {
  if (lines_per_array == 0) return fail(ErrorCode::invalid_argument, "a rotating bounce needs at least one line per array");
  BounceLines lines(lines_per_array, lines_per_array);
  return bounce(context, lines, 1);
}

Expected<std::vector<double>> run_physical_floor_ring(const TransportContext& context) {
  constexpr BounceShape kShapes[] = {kRingLines};
  return best_bounce(context, kShapes);
}

}  // namespace ipcfloor
