#pragma once
// `ipcfloor bench throughput`: how many requests per second the engine answers, not how fast one
// comes back. One client thread keeps a fixed number of ECHO frames in flight through one lane
// (1, 8, a ring's capacity, and 1 through the exchange line), then a ring's capacity in each of 1,
// 2 and 4 lanes, and the same 48-byte frames pipelined over the Unix socket. Then the 80-combo
// grid as BACKTEST frames streamed through one lane, against in-process run_sweep on one thread
// (the engine serves on one thread) and against the socket, interleaved repeat by repeat. Last,
// the workers section (bench/scaling_bench.hpp): a row per worker count against in-process and
// socket sweeps on as many threads, a blocking call while another lane streams, and a client
// attaching mid-stream.
//
// Rates are samples too: each window of completed requests is timed on its own and the report
// gives percentiles over windows (nearest rank, bench/percentile.hpp), alongside each request's
// RTT (submit to answer, its own clock reads) as percentiles. Setup path: allocates, returns
// Expected; a wrong answer is an error.
//
// One lane streams with pipelined_sweep (clients/pipelined_sweep.hpp), the loop of every client,
// its depth capped at the row's frames in flight; so does the grid. The several-lane rows cannot:
// pipelined_sweep serves one lane and waits for that lane's next answer, and one thread waiting
// on one lane lets every other lane's ring drain. Their loop submits to each lane in turn and
// reads whichever lane has answers (poll), never waiting on one.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/scaling_bench.hpp"
#include "common/error.hpp"

namespace ipcfloor {

struct ThroughputOptions {
  std::size_t windows = 20;              // timed windows per scenario, each a rate sample
  std::size_t window_requests = 20'000;  // completed requests per window
  std::size_t grid_repeats = 7;          // whole-grid samples per way
  std::uint32_t ring_capacity = 0;       // slots per ring for the engine; 0: serve's default
  int client_cpu = -1;                   // -1: first allowed cpu
  int server_cpu = -1;                   // -1: last allowed cpu
  std::string binary;                    // empty: this executable
  bool with_workers = true;              // the workers section (bench/scaling_bench.hpp)
  ScalingOptions workers;
};

[[nodiscard]] Expected<nlohmann::json> run_throughput(const ThroughputOptions& options);
void print_throughput(const nlohmann::json& report);

}  // namespace ipcfloor
