#include "engine/serving_counters.hpp"

#include "shm/service_histogram.hpp"

namespace ipcfloor {

void ServingCounters::report(const TelemetryEvent& event) noexcept {
  // try_enqueue never allocates; a full queue drops the event (the shared counters still count).
  (void)telemetry_.try_enqueue(event);
}

void ServingCounters::request(std::uint32_t index, Status status, std::uint64_t seq) noexcept {
  ++requests_;
  LaneStatus& lane = segment_.lane_status(index);
  relaxed_increment(lane.requests);
  if (status == Status::ok) return;
  ++bad_frames_;
  relaxed_increment(lane.bad_frames);
  // relaxed: only this thread writes the segment-wide counter.
  segment_.header().bad_frames.store(bad_frames_, std::memory_order_relaxed);
  report(TelemetryEvent{TelemetryEvent::Kind::bad_frame, static_cast<std::uint16_t>(status), index, lane.owner_pid, seq});
}

void ServingCounters::service(std::uint32_t index, std::uint64_t ticks) noexcept {
  const auto ns = static_cast<std::uint64_t>(static_cast<double>(ticks) * ns_per_tick_);
  LaneStatus& lane = segment_.lane_status(index);
  relaxed_increment(lane.service_ns[service_bucket(ns)]);
  // relaxed: one writer (this thread); `status` reads it as a snapshot, like the buckets.
  lane.service_ns_sum.store(lane.service_ns_sum.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
}

void ServingCounters::service_instant(std::uint32_t index) noexcept {
  relaxed_increment(segment_.lane_status(index).service_ns[0]);
}

void ServingCounters::lane_corrupt(std::uint32_t index) noexcept {
  ++lanes_corrupt_;
  // relaxed: a counter only this thread writes; readers (status, tests) tolerate staleness.
  segment_.header().lanes_corrupt.store(lanes_corrupt_, std::memory_order_relaxed);
  LaneStatus& lane = segment_.lane_status(index);
  // relaxed: a report for people; the lane table, not this word, decides what is served.
  lane.state.store(static_cast<std::uint32_t>(LaneState::quarantined), std::memory_order_relaxed);
  report(TelemetryEvent{TelemetryEvent::Kind::ring_corrupt, 0, index, lane.owner_pid, 0});
}

void ServingCounters::publish_requests() noexcept {
  // relaxed: only this thread writes it.
  segment_.header().requests.store(requests_, std::memory_order_relaxed);
}

}  // namespace ipcfloor
