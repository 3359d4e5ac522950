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

#include <cstddef>

#include "bench/pair_bounce.hpp"
#include "bench/transports.hpp"

namespace ipcfloor {

namespace {

// The ladder's cores and counts as the bounce takes them (bench/pair_bounce.hpp: the same bounce
// the floor matrix times between every pair of cpus).
Expected<std::vector<double>> bounce(const TransportContext& context, BounceLines& lines) {
  BounceSides sides;
  sides.client_cpu = context.client_cpu;
  sides.server_cpu = context.server_cpu;
  sides.warmup = context.warmup;
  sides.samples = context.samples;
  sides.clock = context.clock;
  return bounce_lines(sides, lines);
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
