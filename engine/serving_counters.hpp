#pragma once
// What the serving thread counts and reports: requests and bad frames per lane and in all, each
// request's service time in the lane's histogram, quarantined lanes, and events for the keeper's
// log (through the telemetry queue, which never blocks and never allocates). The segment's
// counters are for people (`status`): written by this thread alone, with relaxed stores.
//
// Threads: serving thread only; noexcept, no allocation, no syscall, no lock.

#include <cstdint>

#include "engine/telemetry.hpp"
#include "shm/frames.hpp"
#include "shm/segment.hpp"

namespace ipcfloor {

class ServingCounters {
 public:
  // `segment` and `telemetry` must outlive the counters. `ns_per_tick`: the TSC's rate.
  ServingCounters(Segment& segment, TelemetryQueue& telemetry, double ns_per_tick) noexcept
      : segment_(segment), telemetry_(telemetry), ns_per_tick_(ns_per_tick) {}

  // One request of lane `index` answered with `status` (a bad frame when not ok: counted and
  // reported with its seq).
  void request(std::uint32_t index, Status status, std::uint64_t seq) noexcept;
  // Its service time, in TSC ticks, into the lane's histogram.
  void service(std::uint32_t index, std::uint64_t ticks) noexcept;
  // A service time under the histogram's first bound (an ECHO answered in place).
  void service_instant(std::uint32_t index) noexcept;
  // Lane `index` was quarantined.
  void lane_corrupt(std::uint32_t index) noexcept;
  // Stores the running request total into the segment (once per pass that answered something).
  void publish_requests() noexcept;

 private:
  void report(const TelemetryEvent& event) noexcept;

  Segment& segment_;
  TelemetryQueue& telemetry_;
  double ns_per_tick_;
  std::uint64_t requests_ = 0;       // mirrors header.requests
  std::uint64_t bad_frames_ = 0;     // mirrors header.bad_frames
  std::uint64_t lanes_corrupt_ = 0;  // mirrors header.lanes_corrupt
};

}  // namespace ipcfloor
