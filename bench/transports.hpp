#pragma once
// The transports of the floor ladder (SPEC §8.1). Each one measures the round trip of a
// 48-byte request and its reply, one sample at a time, with both sides pinned, after a warm-up.
// Each lives in its own bench/transport_*.cpp and registers in bench/ladder.cpp.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "bench/latency.hpp"
#include "shm/error.hpp"

namespace ipcfloor {

struct TransportContext {
  std::size_t samples = 100'000;
  std::size_t warmup = 10'000;
  int client_cpu = 0;       // this process's measuring thread
  int server_cpu = 1;       // the peer thread or engine serving thread
  std::string binary;       // the ipcfloor executable, for transports that spawn an engine
  const TscClock* clock = nullptr;
};

// Round-trip samples in nanoseconds, one per request. The error says why the transport could
// not run (e.g. its package is missing); the ladder reports it and goes on.
using TransportRun = std::function<Expected<std::vector<double>>(const TransportContext&)>;

struct Transport {
  std::string name;         // e.g. "shm-ring-spin"
  std::string description;  // one line for the report
  TransportRun run;
};

// Registered transports, in ladder order (fastest expected first).
[[nodiscard]] const std::vector<Transport>& all_transports();

// Implementations.
[[nodiscard]] Expected<std::vector<double>> run_physical_floor(const TransportContext& context);
[[nodiscard]] Expected<std::vector<double>> run_shm_ring(const TransportContext& context, const char* wait_mode);

}  // namespace ipcfloor
