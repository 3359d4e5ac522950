#include "engine/shm_server.hpp"

#include <bit>
#include <chrono>
#include <utility>

#include "engine/dispatch.hpp"
#include "shm/lane.hpp"

namespace ipcfloor {
namespace {

// Idle passes before a backoff/block engine starts to back off or sleep: long enough that a
// client pipelining requests never finds the engine asleep between two of them.
constexpr std::uint32_t kIdlePassesBeforeWait = 4096;
// A sleeping engine wakes at least this often to look at the stop flag.
constexpr std::chrono::milliseconds kIdleSleepBound{50};
// Passes between two scans of every lane's owner word (a pass over one active lane takes tens
// of ns, so a scan happens every few microseconds).
constexpr std::uint32_t kPassesPerScan = 128;

}  // namespace

Expected<std::unique_ptr<ShmServer>> ShmServer::make(Segment& segment, WaitMode mode,
                                                     TelemetryQueue& telemetry) {
  std::vector<Lane> lanes;
  lanes.reserve(segment.lane_count());
  for (std::uint32_t i = 0; i < segment.lane_count(); ++i) {
    const LaneView view = segment.lane(i);
    // adopt, not make: the segment is attachable before this server exists, so a client may
    // already have written its positions; impossible ones must quarantine that lane, not stop
    // the engine from starting.
    auto requests = RingConsumer<RequestSlot>::adopt(view.request_ring, view.request_slots, segment.ring_capacity());
    if (!requests) return std::unexpected(requests.error());
    auto responses = RingProducer<ResponseSlot>::adopt(view.response_ring, view.response_slots, segment.ring_capacity());
    if (!responses) return std::unexpected(responses.error());
    lanes.push_back(Lane{view, *requests, *responses, segment.bulk(i)});
  }
  return std::unique_ptr<ShmServer>(new ShmServer(segment, mode, telemetry, std::move(lanes)));
}

ShmServer::ShmServer(Segment& segment, WaitMode mode, TelemetryQueue& telemetry, std::vector<Lane> lanes)
    : segment_(segment),
      header_(segment.header()),
      mode_(mode),
      telemetry_(telemetry),
      close_(segment.series()),
      fee_(segment.header().fee),
      workspace_(segment.series().size()),
      lanes_(std::move(lanes)),
      capacity_(segment.ring_capacity()) {}

void ShmServer::report(const TelemetryEvent& event) noexcept {
  // try_enqueue never allocates; a full queue drops the event (the shared counters still count).
  (void)telemetry_.try_enqueue(event);
}

void ShmServer::reset_lane(std::uint32_t index, Lane& lane, LaneState why, std::int32_t pid) noexcept {
  // The client is gone (closed or dead), so both ring ends are this thread's now. Restart both
  // rings empty at their current write positions: unread requests and unread responses of the
  // old client are dropped, and a new client starts from a clean, consistent state.
  // relaxed (both): no client can touch the lane until the release store of `free` below.
  // Any value will do for the request position, even one a corrupt peer wrote: the restarted
  // ring is empty at it.
  const std::uint64_t request_head = lane.view.request_ring->produced.load(std::memory_order_relaxed);
  const std::uint64_t response_head = lane.responses.position();
  init_ring(*lane.view.request_ring, request_head);
  init_ring(*lane.view.response_ring, response_head);
  // A client killed between its stamp and its position store leaves a stamped slot at
  // request_head; stale stamps must not pass for the next client's frames (nor ours for its).
  clear_ring_stamps(lane.view.request_slots, capacity_);
  clear_ring_stamps(lane.view.response_slots, capacity_);
  // restart, not make(): it cannot fail (so it never allocates), even if a hostile process
  // scribbles on the rings again right now; the handles' bounds checks catch that later.
  lane.requests.restart(request_head);
  lane.responses.restart(response_head);
  quarantined_ &= ~(std::uint64_t{1} << index);
  if (why == LaneState::reclaiming) {
    // relaxed: counter only this thread writes; readers (status) tolerate staleness.
    header_.lanes_reclaimed.store(header_.lanes_reclaimed.load(std::memory_order_relaxed) + 1,
                                  std::memory_order_relaxed);
  } else {
    // relaxed: as above.
    header_.lanes_released.store(header_.lanes_released.load(std::memory_order_relaxed) + 1,
                                 std::memory_order_relaxed);
  }
  free_lane(*lane.view.control);
  report(TelemetryEvent{why == LaneState::reclaiming ? TelemetryEvent::Kind::lane_reclaimed
                                                     : TelemetryEvent::Kind::lane_released,
                        0, index, pid, 0});
}

void ShmServer::count_corrupt_lane(std::uint32_t index, std::int32_t pid, TelemetryEvent::Kind kind) noexcept {
  ++lanes_corrupt_;
  // relaxed: counter only this thread writes; readers (status, tests) tolerate staleness.
  header_.lanes_corrupt.store(lanes_corrupt_, std::memory_order_relaxed);
  report(TelemetryEvent{kind, 0, index, pid, 0});
}

void ShmServer::quarantine_lane(std::uint32_t index, Lane& lane, std::int32_t pid) noexcept {
  const std::uint64_t bit = std::uint64_t{1} << index;
  active_ &= ~bit;
  if ((quarantined_ & bit) != 0) return;
  quarantined_ |= bit;
  count_corrupt_lane(index, pid, TelemetryEvent::Kind::ring_corrupt);
  // Tell the client instead of leaving it to time out: an impossible response position makes
  // its consumer latch corrupt, so its next poll or wait returns CallStatus::corrupt. The owner
  // keeps the lane (a live process that may still write into it must not share it with a new
  // client); reset_lane restarts both rings once the owner releases or dies.
  // relaxed: publishes no payload; the client's acquire load of `produced` only checks bounds.
  lane.view.response_ring->produced.store(lane.responses.position() + capacity_ + 1, std::memory_order_relaxed);
  notify_readable(lane.responses, mode_);
}

void ShmServer::scan_lanes() noexcept {
  passes_since_scan_ = 0;
  std::uint64_t active = 0;
  for (std::uint32_t i = 0; i < lanes_.size(); ++i) {
    Lane& lane = lanes_[i];
    const LaneOwner owner = load_lane_owner(*lane.view.control);
    if (owner.state == LaneState::releasing || owner.state == LaneState::reclaiming) {
      reset_lane(i, lane, owner.state, owner.pid);  // nobody is left to read answers
    } else if (owner.state == LaneState::claimed) {
      if ((quarantined_ & (std::uint64_t{1} << i)) == 0) active |= std::uint64_t{1} << i;
      owner_pids_[i] = owner.pid;
    } else if (owner.state != LaneState::free) {
      // No client ever stores such a state: the owner word was scribbled on. Nobody could
      // claim the lane in this state, so take it back rather than lose it for good.
      count_corrupt_lane(i, owner.pid, TelemetryEvent::Kind::owner_corrupt);
      reset_lane(i, lane, LaneState::reclaiming, owner.pid);
    }
  }
  active_ = active;
}

std::size_t ShmServer::serve_lane(std::uint32_t index, Lane& lane) noexcept {
  const std::int32_t pid = owner_pids_[index];
  std::size_t served = 0;
  // Bounded per pass so one busy lane cannot starve the others.
  for (std::uint32_t burst = 0; burst < capacity_; ++burst) {
    const RequestSlot* shared = lane.requests.try_peek();
    if (shared == nullptr) {
      if (lane.requests.corrupt()) quarantine_lane(index, lane, pid);
      break;
    }
    ResponseSlot* out = lane.responses.try_claim();
    if (out == nullptr) {
      // Full: the client is not reading its answers, so serve the others. Or the client wrote
      // an impossible `consumed`: the lane can never move again.
      if (lane.responses.corrupt()) quarantine_lane(index, lane, pid);
      break;
    }
    const RequestSlot request = *shared;  // private copy: the client may still scribble on it
    const Status status = dispatch_request(request, close_, fee_, workspace_, *out, lane.bulk);
    lane.responses.commit();
    notify_readable(lane.responses, mode_);
    lane.requests.release();
    ++served;
    ++requests_;
    // relaxed: per-lane counter, only this thread writes it; status reads tolerate staleness.
    lane.view.control->requests.store(lane.view.control->requests.load(std::memory_order_relaxed) + 1,
                                      std::memory_order_relaxed);
    if (status != Status::ok) {
      ++bad_frames_;
      // relaxed: as above.
      lane.view.control->bad_frames.store(lane.view.control->bad_frames.load(std::memory_order_relaxed) + 1,
                                          std::memory_order_relaxed);
      // relaxed: only this thread writes the segment-wide counter.
      header_.bad_frames.store(bad_frames_, std::memory_order_relaxed);
      report(TelemetryEvent{TelemetryEvent::Kind::bad_frame, static_cast<std::uint16_t>(status), index, pid,
                            request.seq});
    }
  }
  if (served != 0) header_.requests.store(requests_, std::memory_order_relaxed);  // relaxed: only we write it
  return served;
}

std::size_t ShmServer::poll_once() noexcept {
  if (++passes_since_scan_ >= kPassesPerScan) scan_lanes();
  std::size_t served = 0;
  for (std::uint64_t pending = active_; pending != 0; pending &= pending - 1) {
    const auto i = static_cast<std::uint32_t>(std::countr_zero(pending));
    served += serve_lane(i, lanes_[i]);
  }
  return served;
}

bool ShmServer::has_work() noexcept {
  for (std::uint32_t i = 0; i < lanes_.size(); ++i) {
    Lane& lane = lanes_[i];
    const LaneState state = load_lane_owner(*lane.view.control).state;
    if (state == LaneState::releasing || state == LaneState::reclaiming) return true;
    if (state == LaneState::claimed) {
      // A quarantined lane's corrupt ring always reads "readable": it must not keep us awake.
      if ((quarantined_ & (std::uint64_t{1} << i)) == 0 && lane.requests.readable()) return true;
    } else if (state != LaneState::free) {
      return true;  // a scribbled owner word: scan_lanes takes the lane back
    }
  }
  return false;
}

void ShmServer::run(const std::atomic<bool>& stop) noexcept {
  std::uint32_t idle = 0;
  // relaxed: a plain flag; nothing is published through it.
  while (!stop.load(std::memory_order_relaxed)) {
    if (poll_once() != 0) {
      idle = 0;
      continue;
    }
    if (mode_ == WaitMode::spin || ++idle < kIdlePassesBeforeWait) {
      cpu_relax();
      continue;
    }
    auto ready = [this, &stop]() noexcept {
      return has_work() || stop.load(std::memory_order_relaxed);  // relaxed: plain flag
    };
    const auto deadline = WaitClock::now() + kIdleSleepBound;
    (void)wait_engine_doorbell(header_, mode_, ready, deadline);
  }
}

}  // namespace ipcfloor
