#include "shm/lane.hpp"

#include "shm/liveness.hpp"

namespace ipcfloor {

LaneOwner load_lane_owner(const LaneControl& lane) noexcept {
  // acquire: pairs with the client's acq_rel CAS in try_claim_lane and release store in
  // release_lane, with the keeper's CAS in reclaim_if_owner_dead and with the release store in
  // free_lane, so the lane's rings are seen as whoever changed the owner word left them.
  const std::uint64_t owner = lane.owner.load(std::memory_order_acquire);
  return LaneOwner{owner_state(owner), owner_pid(owner)};
}

std::string_view to_string(LaneState state) noexcept {
  switch (state) {
    case LaneState::free: return "free";
    case LaneState::claimed: return "claimed";
    case LaneState::releasing: return "releasing";
    case LaneState::reclaiming: return "reclaiming";
  }
  return "unknown";
}

ClaimOutcome try_claim_lane(LaneControl& lane, std::int32_t pid) noexcept {
  std::uint64_t expected = pack_owner(LaneState::free, 0);
  // acq_rel: acquire pairs with the release store of `free` in free_lane (the rings were reset
  // before we use them); release publishes our pid to the engine. On failure, acquire:
  // `expected` then holds the owner word as its last writer published it.
  if (!lane.owner.compare_exchange_strong(expected, pack_owner(LaneState::claimed, pid), std::memory_order_acq_rel,
                                          std::memory_order_acquire)) {
    const LaneState state = owner_state(expected);
    if (state == LaneState::releasing || state == LaneState::reclaiming) return ClaimOutcome::freeing;
    // relaxed: a zero or stale value makes process_alive fall back to the pid alone.
    const std::uint64_t ticks = lane.owner_start_ticks.load(std::memory_order_relaxed);
    if (state == LaneState::claimed && !process_alive(owner_pid(expected), ticks)) return ClaimOutcome::freeing;
    return ClaimOutcome::held;
  }
  // relaxed: read by the keeper only to tell a reused pid apart; a zero read there falls back
  // to the pid alone.
  lane.owner_start_ticks.store(process_start_ticks(pid), std::memory_order_relaxed);
  // relaxed: a statistic, shown by `ipcfloor status`.
  lane.generation.fetch_add(1, std::memory_order_relaxed);
  return ClaimOutcome::claimed;
}

void release_lane(LaneControl& lane, std::int32_t pid) noexcept {
  // release: our last ring writes happen before the engine drains the lane; pairs with the
  // acquire load in load_lane_owner (ShmServer::scan_lanes).
  lane.owner.store(pack_owner(LaneState::releasing, pid), std::memory_order_release);
}

bool reclaim_if_owner_dead(LaneControl& lane) noexcept {
  // acquire: pairs with the client's acq_rel claim CAS, so its start-ticks store is visible.
  std::uint64_t owner = lane.owner.load(std::memory_order_acquire);
  if (owner_state(owner) != LaneState::claimed) return false;
  // relaxed: written once by the client right after its claim; zero just means "pid only".
  const std::uint64_t ticks = lane.owner_start_ticks.load(std::memory_order_relaxed);
  if (process_alive(owner_pid(owner), ticks)) return false;
  // acq_rel: only if the lane is still claimed by that pid (it may have released meanwhile);
  // the release half pairs with the serving thread's acquire in load_lane_owner.
  return lane.owner.compare_exchange_strong(owner, pack_owner(LaneState::reclaiming, owner_pid(owner)),
                                            std::memory_order_acq_rel, std::memory_order_relaxed);
}

void free_lane(LaneControl& lane) noexcept {
  // relaxed: a statistic; the release store below publishes it with the rest.
  lane.owner_start_ticks.store(0, std::memory_order_relaxed);
  // release: publishes the reset rings; pairs with the acquire of the claim CAS in try_claim_lane.
  lane.owner.store(pack_owner(LaneState::free, 0), std::memory_order_release);
}

void ring_engine_doorbell(SegmentHeader& header) noexcept {
  detail::notify_channel({header.doorbell, header.engine_sleeping});
}

}  // namespace ipcfloor
