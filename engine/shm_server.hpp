#pragma once
// The serving loop: one thread, pinned to its own core, polls every lane's request ring,
// answers through the lane's response ring, and drains lanes whose client left or died.
// A lane whose rings hold impossible positions (a corrupt or hostile client) is counted in
// header.lanes_corrupt, never read out of bounds, and quarantined: its client is told (its
// response ring reads corrupt) and the lane is restarted once that client releases it or dies.
// Geometry comes from the Segment's validated private copy, never from the writable header.
//
// Threads: run()/poll_once() belong to the serving thread only. In spin mode they make no
// syscall, no heap allocation and take no lock; telemetry goes out through a lock-free queue.

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernel/kernel.hpp"
#include "engine/telemetry.hpp"
#include "shm/segment.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

class ShmServer {
 public:
  // Setup path: builds the ring handles of every lane and the kernel workspace (allocates).
  // `segment` and `telemetry` must outlive the server.
  [[nodiscard]] static Expected<std::unique_ptr<ShmServer>> make(Segment& segment, WaitMode mode,
                                                                 TelemetryQueue& telemetry);

  // Serves until `stop` turns true (checked between passes, or at most every
  // kIdleSleepBound while idle in backoff/block mode). Serving thread only.
  void run(const std::atomic<bool>& stop) noexcept;

  // One pass over all lanes; returns the number of requests answered. Serving thread only.
  std::size_t poll_once() noexcept;

  // True when some lane has a request or a lane change waiting. Serving thread only.
  [[nodiscard]] bool has_work() noexcept;

 private:
  struct Lane {
    LaneView view;
    RingConsumer<RequestSlot> requests;
    RingProducer<ResponseSlot> responses;
    std::span<std::byte> bulk;  // the lane's ECHO_BULK region (from the validated geometry)
  };

  ShmServer(Segment& segment, WaitMode mode, TelemetryQueue& telemetry, std::vector<Lane> lanes);
  void scan_lanes() noexcept;
  std::size_t serve_lane(std::uint32_t index, Lane& lane) noexcept;
  // Restarts both rings empty, counts the lane released or reclaimed (`why`) and frees it.
  void reset_lane(std::uint32_t index, Lane& lane, LaneState why, std::int32_t pid) noexcept;
  // Stops serving a lane with impossible ring positions while its owner still holds it.
  void quarantine_lane(std::uint32_t index, Lane& lane, std::int32_t pid) noexcept;
  // header.lanes_corrupt += 1 and a telemetry event of `kind` (ring_corrupt or owner_corrupt).
  void count_corrupt_lane(std::uint32_t index, std::int32_t pid, TelemetryEvent::Kind kind) noexcept;
  void report(const TelemetryEvent& event) noexcept;

  Segment& segment_;
  SegmentHeader& header_;
  WaitMode mode_;
  TelemetryQueue& telemetry_;
  std::span<const double> close_;
  double fee_;
  KernelWorkspace workspace_;
  std::vector<Lane> lanes_;
  // Lanes with a client, as of the last scan. Passes between scans poll only these, so the hot
  // loop touches no line of an idle lane; a new client waits at most one scan period.
  std::uint64_t active_ = 0;
  // Lanes whose rings turned out impossible while their owner still holds them: never served,
  // never handed to another client, restarted by reset_lane once the owner releases or dies.
  std::uint64_t quarantined_ = 0;
  std::uint32_t passes_since_scan_ = 0;
  std::uint32_t capacity_;  // slots per ring, from the validated geometry (never the header)
  std::int32_t owner_pids_[kMaxLanes] = {};  // pid of each active lane's owner, for telemetry
  std::uint64_t requests_ = 0;    // mirrors header_.requests; only this thread writes it
  std::uint64_t bad_frames_ = 0;  // mirrors header_.bad_frames; only this thread writes it
  std::uint64_t lanes_corrupt_ = 0;  // mirrors header_.lanes_corrupt; only this thread writes it
};

}  // namespace ipcfloor
