#pragma once
// `ipcfloor bench live`: live mode's tick-to-signal time, per sample, from the writer's clock
// reading just before it publishes an APPEND to the subscriber's receipt of the signals of that
// bar (one-way, both ends in this process, the engine in its own), for 1, 8 and 80 subscribed
// combos, beside the physical floor measured in the same run, and once more with the signal work
// at the engine's workers; and the bar rate at which the signals stop keeping up.

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ipcfloor {

struct LiveBenchOptions {
  std::size_t samples = 20'000;                       // timed bars per combo count
  std::size_t warmup = 2'000;                         // untimed bars before them
  std::vector<std::size_t> combo_counts = {1, 8, 80};
  // Run once more on an engine that hands every bar's signal work to its workers (--inline-cost
  // 1), with this many combos: what the hand-over costs tick to signal. 0: not run.
  std::size_t worker_combos = 80;
  std::size_t throughput_bars = 40'000;               // bars sent back to back per combo count
  std::size_t preload_bars = 20'000;                  // the engine's series before the first append
  int client_cpu = -1;                                // writer and subscriber (one thread)
  int server_cpu = -1;                                // the engine's serving thread
  std::string binary;                                 // empty: this executable
};

// Every signal is checked: its bar, subscription and tick must be the ones expected, and no frame
// may be lost in the latency runs. Setup path: allocates, spawns an engine.
[[nodiscard]] Expected<nlohmann::json> run_live_bench(const LiveBenchOptions& options);
void print_live_bench(const nlohmann::json& report);

}  // namespace ipcfloor
