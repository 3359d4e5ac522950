#pragma once
// The serving loop: one thread, pinned to its own core, polls every active lane's exchange line
// and request ring, answers in place or through the lane's response ring, and lets go of lanes
// the keeper drains. A lane whose client wrote impossible ring positions or an impossible
// exchange stamp is counted in header.lanes_corrupt, never read out of bounds, and quarantined:
// its client is told (its response ring and exchange line read corrupt) and nothing of it is
// served again. Which lanes exist and where their memory is comes from the engine-private lane
// table (engine/engine_lanes.hpp), never from anything a client can write.
//
// Threads: run()/poll_once() belong to the serving thread only. In spin mode they make no
// syscall, no heap allocation and take no lock; telemetry goes out through a lock-free queue.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "engine/engine_lanes.hpp"
#include "engine/live_book.hpp"
#include "engine/telemetry.hpp"
#include "kernel/kernel.hpp"
#include "shm/doorbell.hpp"
#include "shm/exchange.hpp"
#include "shm/segment.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

class ShmServer {
 public:
  // Setup path: sizes the kernel workspace (allocates). `segment`, `lanes` and `telemetry` must
  // outlive the server. `max_frame_cost` bounds one BACKTEST's work (0: unbounded).
  // `ns_per_tick` converts the TSC into ns for the service-time histogram.
  // `live` (serve --live): APPEND, SUBSCRIBE and SNAPSHOT are served with a LiveBook of these
  // limits; without it they are answered not_live.
  [[nodiscard]] static Expected<std::unique_ptr<ShmServer>> make(Segment& segment, EngineLanes& lanes, WaitMode mode,
                                                                 TelemetryQueue& telemetry,
                                                                 std::uint64_t max_frame_cost, double ns_per_tick,
                                                                 std::optional<LiveBookLimits> live = std::nullopt);

  // Serves until `stop` turns true (checked between frames and passes, or at least every
  // kIdleSleepBound while idle in backoff/block mode). Serving thread only.
  void run(const std::atomic<bool>& stop) noexcept;

  // One pass over the active lanes; returns the number of requests answered. Serving thread only.
  std::size_t poll_once() noexcept;

  // True when some lane has a request or the keeper changed a lane. Serving thread only.
  [[nodiscard]] bool has_work() noexcept;

 private:
  // What the serving thread holds of one lane while the keeper has it active.
  struct Lane {
    std::uint64_t generation = 0;  // of the object the handles point into; 0: none held
    LaneView view{};
    std::optional<RingConsumer<RequestSlot>> requests;
    std::optional<RingProducer<ResponseSlot>> responses;
    std::optional<RingProducer<SignalSlot>> signals;  // live mode only
    std::optional<ExchangeServer> exchange;
    std::uint64_t signals_dropped = 0;  // since the last signal delivered on this lane
  };

  ShmServer(Segment& segment, EngineLanes& lanes, WaitMode mode, TelemetryQueue& telemetry,
            std::uint64_t max_frame_cost, double ns_per_tick, std::size_t workspace_bars);
  // Reads the keeper's phases: takes up newly active lanes, lets go of draining ones.
  void scan_lanes() noexcept;
  // Builds the handles for the object the keeper installed. Returns false if it cannot.
  bool take_up(std::uint32_t index, Lane& lane, const EngineLane& shared) noexcept;
  std::size_t serve_call(std::uint32_t index, Lane& lane) noexcept;
  std::size_t serve_ring(std::uint32_t index, Lane& lane) noexcept;
  // Answers one request: the live opcodes here, everything else through dispatch_request.
  Status serve_request(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept;
  Status append_bar(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept;
  Status subscribe(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept;
  Status snapshot(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept;
  // Puts one signal on a lane's signal ring, or counts it dropped when the ring is full.
  void push_signal(std::uint32_t index, std::uint32_t subscription, const LiveBar& state, std::uint64_t tick,
                   std::uint16_t flags) noexcept;
  // Stops serving a lane whose client wrote something impossible, and tells that client.
  void quarantine_lane(std::uint32_t index, Lane& lane) noexcept;
  void count_request(std::uint32_t index, Status status, std::uint64_t seq) noexcept;
  // Adds one service time, measured in TSC ticks, to the lane's histogram.
  void record_service(std::uint32_t index, std::uint64_t ticks) noexcept;
  void report(const TelemetryEvent& event) noexcept;

  Segment& segment_;
  DataHeader& header_;
  EngineLanes& shared_;
  WaitMode mode_;
  TelemetryQueue& telemetry_;
  std::span<const double> close_;  // the main series' bars published so far (all of them unless live)
  std::span<const double> series_[kMaxSeries];  // the segment's series; [0] is close_, kept equal
  std::uint32_t series_count_ = 1;
  double fee_;
  std::unique_ptr<LiveBook> live_;  // null unless live
  std::span<double> room_;          // the series' whole room (live: where bars are appended)
  std::uint64_t published_ = 0;     // mirrors header_.bars_published; only this thread writes it
  int writer_lane_ = -1;            // the lane whose client appends; -1 until one does
  std::uint64_t signals_sent_ = 0;     // mirrors header_.signals_sent
  std::uint64_t signals_dropped_ = 0;  // mirrors header_.signals_dropped
  std::uint64_t max_frame_cost_;
  double ns_per_tick_;
  KernelWorkspace workspace_;
  Lane lanes_[kMaxLanes];
  DoorbellWaiter doorbells_;
  std::uint32_t lane_count_;
  // Lanes the serving thread holds (active and not quarantined), as of the last scan. Passes
  // between scans poll only these, so the hot loop touches no line of an idle lane; a new
  // client waits at most one scan period.
  std::uint64_t active_ = 0;
  // Lanes whose client wrote something impossible: never served again until the keeper drains
  // them (the client's connection ends).
  std::uint64_t quarantined_ = 0;
  std::uint32_t passes_since_scan_ = 0;
  std::uint32_t scans_ = 0;  // counts scans, to sample the rings' fill every so many
  std::uint32_t capacity_;  // slots per ring, from the segment's own geometry
  std::uint64_t requests_ = 0;       // mirrors header_.requests; only this thread writes it
  std::uint64_t bad_frames_ = 0;     // mirrors header_.bad_frames; only this thread writes it
  std::uint64_t lanes_corrupt_ = 0;  // mirrors header_.lanes_corrupt; only this thread writes it
};

}  // namespace ipcfloor
