#include "engine/serving_lanes.hpp"

#include <bit>

namespace ipcfloor {
namespace {

// Scans between two samples of each ring's fill for `status`: loading the client's position
// line more often would make it travel beside the slots it publishes.
constexpr std::uint32_t kScansPerFillSample = 256;

}  // namespace

ServingLanes::ServingLanes(Segment& segment, EngineLanes& shared, ServingCounters& counters, WaitMode mode) noexcept
    : segment_(segment),
      shared_(shared),
      counters_(counters),
      mode_(mode),
      count_(segment.lane_count()),
      capacity_(segment.ring_capacity()) {}

bool ServingLanes::take_up(std::uint32_t index, const EngineLane& shared) noexcept {
  const LaneView& view = shared.view;
  ServedLane& lane = lanes_[index];
  // adopt, not make: a client may already have written its positions; impossible ones must
  // quarantine the lane, not fail here. Errors only for misaligned pointers or bad capacities,
  // which the engine's own geometry rules out; should one appear, the lane is not served.
  auto requests = RingConsumer<RequestSlot>::adopt(view.request_ring, view.request_slots, capacity_);
  auto responses = RingProducer<ResponseSlot>::adopt(view.response_ring, view.response_slots, capacity_);
  if (!requests || !responses) return false;
  lane = ServedLane{};
  lane.view = view;
  lane.generation = shared.generation;
  lane.requests.emplace(*requests);
  lane.responses.emplace(*responses);
  if (view.signal_slots != nullptr) {
    auto signals = RingProducer<SignalSlot>::adopt(view.signal_ring, view.signal_slots, view.signal_capacity);
    if (!signals) return false;
    lane.signals.emplace(*signals);
  }
  lane.exchange.emplace(view.call);
  lane.taken = lane.requests->position();
  lane.published = lane.responses->position();
  quarantined_ &= ~(std::uint64_t{1} << index);
  return true;
}

bool ServingLanes::lanes_changed() noexcept {
  // acquire: pairs with the release bump in announce_lane_change, so the phase the keeper stored
  // before it is seen by the scan that follows.
  const std::uint32_t now = shared_.keeper_word.load(std::memory_order_acquire);
  if (now == keeper_seen_) return false;
  keeper_seen_ = now;
  return true;
}

std::uint64_t ServingLanes::scan() noexcept {
  const bool sample_fill = ++scans_ % kScansPerFillSample == 0;
  std::uint64_t active = 0;
  std::uint64_t let_go = 0;
  for (std::uint32_t i = 0; i < count_; ++i) {
    EngineLane& shared = shared_.lanes[i];
    ServedLane& lane = lanes_[i];
    const std::uint64_t bit = std::uint64_t{1} << i;
    switch (load_phase(shared)) {
      case LanePhase::active:
        if (lane.generation != shared.generation && !take_up(i, shared)) {
          quarantined_ |= bit;
          lane.generation = shared.generation;
        }
        if ((quarantined_ & bit) == 0) {
          active |= bit;
          // relaxed: a report for people.
          if (sample_fill) segment_.lane_status(i).ring_fill.store(lane.requests->size_approx(), std::memory_order_relaxed);
        }
        break;
      case LanePhase::draining:
        // Its client is gone: drop the handles, so nothing of this thread points into the old
        // object once the keeper unmaps it.
        lane = ServedLane{};
        quarantined_ &= ~bit;
        let_go |= bit;
        set_phase(shared, LanePhase::drained);
        break;
      case LanePhase::free:
      case LanePhase::drained:
        break;
    }
  }
  active_ = active;
  return let_go;
}

void ServingLanes::quarantine(std::uint32_t index) noexcept {
  const std::uint64_t bit = std::uint64_t{1} << index;
  active_ &= ~bit;
  if ((quarantined_ & bit) != 0) return;
  quarantined_ |= bit;
  counters_.lane_corrupt(index);
  ServedLane& lane = lanes_[index];
  // Tell the client instead of leaving it to time out: an impossible response position makes its
  // consumer latch corrupt, and the poison stamp ends a pending call the same way. The object is
  // the client's own; the keeper replaces it once the client's connection ends.
  // relaxed: publishes no payload; the client's acquire load of `produced` only checks bounds.
  lane.view.response_ring->produced.store(lane.responses->position() + capacity_ + 1, std::memory_order_relaxed);
  notify_readable(*lane.responses, mode_);
  lane.exchange->poison();
  lane.exchange->notify(mode_);
}

bool ServingLanes::have_requests() noexcept {
  for (std::uint32_t i = 0; i < count_; ++i) {
    const EngineLane& shared = shared_.lanes[i];
    const LanePhase phase = load_phase(shared);
    if (phase == LanePhase::draining) return true;
    if (phase != LanePhase::active) continue;
    ServedLane& lane = lanes_[i];
    if (lane.generation != shared.generation) return true;  // a new client to take up
    // A quarantined lane's corrupt ring always reads "readable": it must not keep us awake.
    if ((quarantined_ & (std::uint64_t{1} << i)) != 0) continue;
    if ((!lane.call_at_worker && lane.exchange->readable()) || lane.requests->readable()) return true;
  }
  return false;
}

std::size_t ServingLanes::doorbells(DoorbellLine** out) noexcept {
  std::size_t count = 0;
  for (std::uint64_t held = active_; held != 0; held &= held - 1) out[count++] = lanes_[std::countr_zero(held)].view.doorbell;
  return count;
}

}  // namespace ipcfloor
