#pragma once
// What the serving thread holds of each lane: the handles into the lane's object (its rings, its
// exchange line, its signal ring), taken up when the keeper activates the lane and let go when
// the keeper drains it (engine/engine_lanes.hpp has the phases), and which lanes are served now.
// A lane whose client wrote something impossible is quarantined here: never read out of bounds,
// never served again until its connection ends, and its client is told.
//
// Threads: serving thread only; noexcept, no allocation, no lock. scan() and lanes_changed() read
// the keeper's table through its acquire loads; nothing else here is shared.

#include <atomic>
#include <cstdint>
#include <optional>

#include "engine/engine_lanes.hpp"
#include "engine/serving_counters.hpp"
#include "shm/exchange.hpp"
#include "shm/segment.hpp"
#include "shm/spsc_ring.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

// One lane as the serving thread holds it while the keeper has it active.
struct ServedLane {
  std::uint64_t generation = 0;  // of the object the handles point into; 0: none held
  LaneView view{};
  std::optional<RingConsumer<RequestSlot>> requests;
  std::optional<RingProducer<ResponseSlot>> responses;
  std::optional<RingProducer<SignalSlot>> signals;  // live mode only
  std::optional<ExchangeServer> exchange;
  std::uint64_t signals_dropped = 0;  // since the last signal delivered on this lane
  // Ring answers started but not published: positions [published, taken) of the lane's window.
  std::uint64_t taken = 0;      // requests taken from the ring (its consumer position)
  std::uint64_t published = 0;  // answers committed to the response ring
  bool call_at_worker = false;  // the exchange line's request is being computed elsewhere
};

class ServingLanes {
 public:
  // `segment`, `shared` and `counters` must outlive this.
  ServingLanes(Segment& segment, EngineLanes& shared, ServingCounters& counters, WaitMode mode) noexcept;

  // True when the keeper changed a lane's phase since the last call (one acquire load).
  [[nodiscard]] bool lanes_changed() noexcept;
  // Takes up newly active lanes and lets go of draining ones (their phase turns drained). Returns
  // the lanes let go of in this scan, a bit per lane, for the parts that keep state per lane.
  std::uint64_t scan() noexcept;
  // Stops serving a lane whose client wrote something impossible, counts it, and tells the
  // client (its response ring and exchange line read corrupt).
  void quarantine(std::uint32_t index) noexcept;

  // The lanes served now (active and not quarantined), a bit per lane.
  [[nodiscard]] std::uint64_t active() const noexcept { return active_; }
  [[nodiscard]] bool served(std::uint32_t index) const noexcept { return (active_ >> index & 1U) != 0; }
  [[nodiscard]] ServedLane& operator[](std::uint32_t index) noexcept { return lanes_[index]; }
  [[nodiscard]] std::uint32_t count() const noexcept { return count_; }
  // True when some held lane has a request waiting, or the keeper changed a lane. For the idle
  // check of a backoff or block engine.
  [[nodiscard]] bool have_requests() noexcept;
  // The doorbells of the lanes served now, into `out` (kMaxLanes entries); returns how many.
  std::size_t doorbells(DoorbellLine** out) noexcept;

 private:
  // Builds the handles for the object the keeper installed. False if it cannot.
  bool take_up(std::uint32_t index, const EngineLane& shared) noexcept;

  Segment& segment_;
  EngineLanes& shared_;
  ServingCounters& counters_;
  WaitMode mode_;
  ServedLane lanes_[kMaxLanes];
  std::uint32_t count_;
  std::uint32_t capacity_;  // slots per ring, from the segment's own geometry
  // Lanes served now, as of the last scan: passes between scans poll only these, so the hot loop
  // touches no line of an idle lane.
  std::uint64_t active_ = 0;
  // Lanes whose client wrote something impossible: never served again until the keeper drains
  // them (the client's connection ends).
  std::uint64_t quarantined_ = 0;
  std::uint32_t keeper_seen_ = 0;  // keeper_word at the last lanes_changed
  std::uint32_t scans_ = 0;        // counts scans, to sample the rings' fill every so many
};

}  // namespace ipcfloor
