#pragma once
// `ipcfloor serve`: preload the series, create the segment, pin the serving thread, keep the
// heartbeat, reclaim dead clients' lanes, report telemetry, and stop cleanly on SIGINT/SIGTERM.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/kernel.hpp"
#include "engine/series_source.hpp"
#include "shm/segment.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

struct ServeOptions {
  std::string name = "ipcfloor";
  SeriesSource source;
  std::optional<int> cpu;  // unset: the last cpu this process may use
  bool fifo = false;       // SCHED_FIFO for the serving thread
  int fifo_priority = 50;
  std::uint32_t lanes = kDefaultLanes;
  std::uint32_t ring_capacity = kDefaultRingCapacity;
  double fee = kDefaultFee;
  WaitMode wait = WaitMode::spin;
  HugePagesMode hugepages = HugePagesMode::automatic;
  MlockMode mlock = MlockMode::automatic;
  std::chrono::milliseconds heartbeat{10};
  std::string tmpfs_dir = std::string(kDefaultTmpfsDir);
  bool quiet = false;  // only errors and warnings on stderr
};

// Runs until SIGINT or SIGTERM. Returns the process exit code; errors are printed to stderr.
[[nodiscard]] int run_serve(const ServeOptions& options);

}  // namespace ipcfloor
