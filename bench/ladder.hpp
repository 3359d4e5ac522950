#pragma once
// `ipcfloor bench ladder`: the floor ladder (docs/SPEC.md §7.1), every transport's RTT for a 48-byte
// request and its reply, measured in one run so that ratios between rungs are meaningful.

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "shm/layout.hpp"

namespace ipcfloor {

struct LadderOptions {
  std::vector<std::string> transports;  // empty: all registered
  std::size_t samples = 100'000;        // per transport, over all rounds
  std::size_t warmup = 10'000;          // per transport and round (each round starts its peers afresh)
  // The transports run in turn, `rounds` times over, each round taking samples / rounds of
  // each. A 2-vCPU VM's core-to-core path changes under the guest (the host moves vCPUs), so one
  // long block per transport can put the floor and the ring at different moments; interleaved
  // rounds put every rung through the same mix, and the per-round ratios show the spread.
  std::size_t rounds = 5;
  int client_cpu = -1;  // -1: the first allowed cpu
  int server_cpu = -1;  // -1: the last allowed cpu
  // The saved floor matrix the report takes the pair's floor from; empty: the default one
  // (bench/floor_matrix.hpp), if any.
  std::string topology;
  std::string binary;   // empty: this executable
  // Strategies the shm-* engines load (serve --strategy FILE.so): the blocking call and the rings
  // with a researcher's strategies in the engine, ECHO still their frame.
  std::vector<std::string> strategies;
  // Slots per ring of the shm-ring-* engines (serve --ring-capacity) and lines per array of
  // physical-floor-ring, so that the rotating floor walks as many lines as the ring does.
  std::uint32_t ring_capacity = kDefaultRingCapacity;
};

// Runs each transport in turn, in interleaved rounds. A transport that cannot run is reported in
// the JSON with its reason ("skipped") rather than failing the run; an unknown transport name
// is an error. Percentiles are over the pooled samples of all rounds.
// JSON: {"suite":"ladder","host":{...},"config":{...},"pair":{client_cpu,server_cpu,relation,...},
//        "results":[{name,kind,p50,...,max,samples,round_p50:[...]}],
//        "skipped":[{name,reason}], "ratios":{...},
//        "round_ratios":{"shm-call-spin/physical-floor":[per-round p50 ratio, ...], ...}}
// "floor_check":{checked, trustworthy, floor_p50, round_spread, below:[{name,ratio}], note}: a rung
// whose p50~ is below the physical floor's by more than the floor's round-to-round spread ((max -
// min) / median of its per-round p50s) makes the run's ratios to the floor untrustworthy; `note`
// then says so, naming the rungs.
[[nodiscard]] Expected<nlohmann::json> run_ladder(const LadderOptions& options);

// The floor check of run_ladder's "results" (each row's name, p50_interp and round_p50). Pure.
[[nodiscard]] nlohmann::json check_floor(const nlohmann::json& results);

// A table for people: percentiles in ns and each transport's p50 as a multiple of the floor.
void print_ladder(const nlohmann::json& report);

}  // namespace ipcfloor
