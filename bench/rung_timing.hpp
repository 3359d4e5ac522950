#pragma once
// The timing skeleton of every ladder rung (bench/transport_*.cpp): pin the measuring thread to
// the client cpu, run context.warmup untimed round trips, then context.samples timed ones, each
// timed on its own by two ordered TSC reads around its exchange alone, and return the samples in
// ns. A rung file holds only what is its own, as the three parts of a RoundTrip:
//   prepare(i)      untimed, before the clock starts: fill request i (payload, deadlines, pipes).
//                   Returns void, or Expected<void> when it can fail (the error ends the run).
//   exchange(i)     timed: send request i and wait for its answer. Returns what came back (a
//                   status, the reply's length, ...) by value: the TSC read is a compiler barrier
//                   for memory, so a result written through a reference would add a store to
//                   the timed window, where a returned one stays in a register.
//   check(i, got)   untimed, after the clock stops: Expected<Answer>. An error when answer i is
//                   not request i's ends the run with it; Answer::peer_gone (the peer can no
//                   longer answer) ends it with the samples so far, and the rung, which knows
//                   why (its peer could not pin, ...), reports it.
// The physical floor's bounce (transport_floor.cpp) runs on it too, and stays callable for any
// pair of cpus through run_physical_floor (bench/transports.hpp).
//
// Setup path: allocates the sample vector up front; the loop itself allocates nothing unless a
// part does. Runs on the calling thread, which it leaves pinned to context.client_cpu.

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "bench/transports.hpp"
#include "common/affinity.hpp"
#include "common/error.hpp"
#include "common/tsc_clock.hpp"

namespace ipcfloor {

// What check() makes of a round trip.
enum class Answer {
  answered,   // request i's answer: its sample counts (after the warm-up)
  peer_gone,  // no answer will come: the run ends with the samples so far
};

template <class Prepare, class Exchange, class Check>
struct RoundTrip {
  Prepare prepare;
  Exchange exchange;
  Check check;
};

template <class Prepare, class Exchange, class Check>
[[nodiscard]] Expected<std::vector<double>> time_round_trips(const TransportContext& context,
                                                             RoundTrip<Prepare, Exchange, Check> trip) {
  if (context.clock == nullptr) return fail(ErrorCode::invalid_argument, "the ladder passed no TscClock");
  if (auto pinned = pin_current_thread(context.client_cpu); !pinned) return std::unexpected(pinned.error());
  std::vector<double> samples = reserved_samples(context);
  const std::size_t total = context.warmup + context.samples;
  for (std::size_t i = 0; i < total; ++i) {
    if constexpr (std::is_void_v<decltype(trip.prepare(i))>) {
      trip.prepare(i);
    } else {
      if (auto prepared = trip.prepare(i); !prepared) return std::unexpected(prepared.error());
    }
    const std::uint64_t t0 = TscClock::now();
    const auto got = trip.exchange(i);
    const std::uint64_t t1 = TscClock::now();
    const Expected<Answer> answer = trip.check(i, got);
    if (!answer) return std::unexpected(answer.error());
    if (*answer == Answer::peer_gone) break;
    if (i >= context.warmup) samples.push_back(context.clock->to_ns(t1 - t0));
  }
  return samples;
}

}  // namespace ipcfloor
