#pragma once
// The transports of the floor ladder (docs/SPEC.md §7.1). Each one measures the round trip of a
// 48-byte request and its reply, one sample at a time, with both sides pinned, after a warm-up.
// Each lives in its own bench/transport_*.cpp and registers in bench/ladder.cpp.

#include <sched.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bench/latency.hpp"
#include "bench/suite_common.hpp"
#include "common/combo.hpp"
#include "common/error.hpp"
#include "shm/layout.hpp"
#include "shm/frames.hpp"

namespace ipcfloor {

// What a rung may say about one round besides its samples: the physical floor names the bounce
// style that was the lowest and each style's p50~ (interpolated median) in that round.
struct RoundNote {
  std::string best;
  std::vector<std::pair<std::string, double>> styles;
};

struct TransportContext {
  std::size_t samples = 100'000;
  std::size_t warmup = 10'000;
  int client_cpu = 0;       // this process's measuring thread
  int server_cpu = 1;       // the peer thread or engine serving thread
  std::string binary;       // the ipcfloor executable, for transports that spawn an engine
  std::uint32_t ring_capacity = kDefaultRingCapacity;  // shm-ring-* engines; lines of physical-floor-ring
  const TscClock* clock = nullptr;
  std::vector<std::string> engine_strategies;  // shm-* engines load these (serve --strategy FILE.so)
  RoundNote* note = nullptr;  // when set, a rung that has something to say about its round says it here
};

// The context of rungs run from `where`: this many samples and warm-up round trips, timed by
// `clock` (which must outlive it); the default ring capacity.
[[nodiscard]] inline TransportContext transport_context(const SuitePlacement& where, std::size_t samples,
                                                        std::size_t warmup, const TscClock& clock) {
  TransportContext context;
  context.samples = samples;
  context.warmup = warmup;
  context.client_cpu = where.client_cpu;
  context.server_cpu = where.server_cpu;
  context.binary = where.binary;
  context.clock = &clock;
  return context;
}

// Round-trip samples in nanoseconds, one per request. The error says why the transport could
// not run (e.g. its package is missing); the ladder reports it and goes on.
using TransportRun = std::function<Expected<std::vector<double>>(const TransportContext&)>;

struct Transport {
  std::string name;         // e.g. "shm-ring-spin"
  std::string description;  // one line for the report
  TransportRun run;
  // Measured in every round of the ladder (a share of the samples each time), so that it sees
  // the same moments of the host as the floor. False for a rung so slow that the host's drift
  // cannot matter and repeating its start-up would dominate the run (spawn): one round only.
  bool interleaved = true;
};

// The 48-byte payload of round trip `seq`. Every field is derived from the sequence number, so
// a reply that answers another request, or garbles any of the 48 bytes, fails the comparison.
[[nodiscard]] constexpr Combo ladder_payload(std::uint64_t seq) noexcept {
  const auto s = static_cast<std::int64_t>(seq);
  return Combo{.h = s, .L = ~s, .s = s ^ 0x5a5a'5a5a'5a5a'5a5a, .p3 = -s, .p2 = s + 1, .p = s ^ 0x7fff'0000'ffff'0000};
}

// An ECHO request slot, seq and payload zero, for a rung to fill in per round trip. No
// allocation; any thread.
[[nodiscard]] constexpr RequestSlot ladder_echo_request() noexcept {
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::echo);
  return request;
}

// An empty sample vector with room for context.samples, so the timed loop never allocates.
// Setup path: allocates; any thread.
[[nodiscard]] inline std::vector<double> reserved_samples(const TransportContext& context) {
  std::vector<double> samples;
  samples.reserve(context.samples);
  return samples;
}

// Opens the calling thread's cpu mask to every online cpu (the kernel keeps it within the
// cgroup's cpuset). A thread or process inherits its creator's mask, and an earlier rung leaves
// the measuring thread pinned to client_cpu, where pin_current_thread would refuse any other
// cpu. A transport calls this before it starts its peer; each side then pins itself.
inline void unpin_current_thread() noexcept {
  cpu_set_t all;
  CPU_ZERO(&all);
  for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN) && c < CPU_SETSIZE; ++c) CPU_SET(static_cast<int>(c), &all);
  (void)sched_setaffinity(0, sizeof all, &all);  // best effort: pinning reports what is still refused
}

// Registered transports, in ladder order (fastest expected first).
[[nodiscard]] const std::vector<Transport>& all_transports();

// Implementations. Each times its round trips with time_round_trips (bench/rung_timing.hpp),
// except iceoryx, whose samples come back from its own executable.
// The cache-line bounce between context.client_cpu and context.server_cpu, any pair of cpus the
// process may use: the ladder's floor. Each call bounces every style (the exchange line's one
// line, a ring's request and response lines, a ring's rotating lines; each with the answering side
// polling after 1, 4 or 16 PAUSEs) and returns the samples of the one with the lowest p50~,
// naming it in context.note: the least a request and its reply can cost here, whichever way the
// call and the rings move their lines.
[[nodiscard]] Expected<std::vector<double>> run_physical_floor(const TransportContext& context);
[[nodiscard]] Expected<std::vector<double>> run_physical_floor_again(const TransportContext& context);
[[nodiscard]] Expected<std::vector<double>> run_physical_floor_two_lines(const TransportContext& context);
// The bounce on two arrays of context.ring_capacity lines, one line of each per round trip.
[[nodiscard]] Expected<std::vector<double>> run_physical_floor_ring(const TransportContext& context);
// The same with `lines_per_array` lines (>= 1; tests use a few to wrap around quickly).
[[nodiscard]] Expected<std::vector<double>> run_physical_floor_rotating(const TransportContext& context,
                                                                        std::size_t lines_per_array);
// The segment's single-flight exchange (ShmClient::call) and its rings with one frame in flight.
[[nodiscard]] Expected<std::vector<double>> run_shm_call(const TransportContext& context, const char* wait_mode);
[[nodiscard]] Expected<std::vector<double>> run_shm_ring(const TransportContext& context, const char* wait_mode);
// One combo of the built-in strategy through the exchange line, as a BACKTEST or (stats) a STATS.
[[nodiscard]] Expected<std::vector<double>> run_shm_combo(const TransportContext& context, bool stats);
[[nodiscard]] Expected<std::vector<double>> run_inproc_call(const TransportContext& context);
[[nodiscard]] Expected<std::vector<double>> run_moodycamel_thread(const TransportContext& context);
[[nodiscard]] Expected<std::vector<double>> run_boost_message_queue(const TransportContext& context);
// Samples and warm-up are capped (kSpawnMaxSamples, kSpawnMaxWarmup): each call starts a
// process, 1 to 10+ ms depending on the host.
[[nodiscard]] Expected<std::vector<double>> run_spawn(const TransportContext& context);
[[nodiscard]] Expected<std::vector<double>> run_zeromq_ipc(const TransportContext& context);
[[nodiscard]] Expected<std::vector<double>> run_iceoryx(const TransportContext& context);

inline constexpr std::size_t kSpawnMaxSamples = 2000;
inline constexpr std::size_t kSpawnMaxWarmup = 50;

}  // namespace ipcfloor
