#pragma once
// The shared-memory engine as one object: the segment, the serving thread pinned to its core,
// and the duties of the thread that keeps it alive (the keeper: heartbeat, reclaiming the lanes
// of dead clients, handing telemetry to whoever prints it). `ipcfloor serve` runs one; tests and
// embedders can run one in process.
//
// Threads: start() returns once the serving thread serves. beat(), drain_telemetry() and
// stop() belong to one keeper thread (the caller's). The serving thread never does I/O; it
// reports through a lock-free queue that drain_telemetry() empties.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "engine/shm_server.hpp"
#include "engine/telemetry.hpp"
#include "shm/segment.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

struct ShmEngineConfig {
  SegmentConfig segment;  // name, lanes, rings, backing, series; wait_mode is set from `wait`
  WaitMode wait = WaitMode::spin;
  int cpu = 0;            // the serving thread's core
  bool fifo = false;      // SCHED_FIFO for the serving thread
  int fifo_priority = 50;
};

class ShmEngine {
 public:
  // Creates the segment, builds the server and starts the serving thread pinned to
  // config.cpu. Setup path: allocates; errors are the segment's, the pinning's or the server's.
  // warnings() lists every fallback taken (backing, mlock, FIFO, a core that is not isolated).
  [[nodiscard]] static Expected<std::unique_ptr<ShmEngine>> start(ShmEngineConfig config);

  ShmEngine(const ShmEngine&) = delete;
  ShmEngine& operator=(const ShmEngine&) = delete;
  ~ShmEngine();  // stop(), then removes the segment

  // Keeper: one heartbeat. Stores the time in the header and marks the lanes of dead clients
  // for reclaiming. Reads /proc; never blocks on I/O.
  void beat() noexcept;

  // Keeper: hands every queued telemetry event to `sink`, oldest first. Returns how many.
  template <class Sink>
  std::size_t drain_telemetry(Sink&& sink) {
    std::size_t drained = 0;
    TelemetryEvent event{};
    while (telemetry_.try_dequeue(event)) {
      sink(event);
      ++drained;
    }
    return drained;
  }

  // Keeper: tells clients the engine is stopping, stops the serving thread and joins it. The
  // thread finishes the frame it is serving first. Idempotent.
  void stop() noexcept;

  [[nodiscard]] const Segment& segment() const noexcept { return segment_; }
  [[nodiscard]] const std::vector<std::string>& warnings() const noexcept { return warnings_; }
  [[nodiscard]] WaitMode wait_mode() const noexcept { return wait_; }
  [[nodiscard]] int cpu() const noexcept { return cpu_; }

 private:
  ShmEngine(Segment segment, WaitMode wait, int cpu);

  Segment segment_;
  WaitMode wait_;
  int cpu_;
  TelemetryQueue telemetry_{kTelemetryQueueCapacity};
  std::unique_ptr<ShmServer> server_;
  std::atomic<bool> stop_{false};
  std::thread serving_;
  std::vector<std::string> warnings_;
};

}  // namespace ipcfloor
