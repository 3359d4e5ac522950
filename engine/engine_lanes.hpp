#pragma once
// Who holds each lane, as the engine alone knows it: engine-private memory that no client can
// reach. The keeper thread (ShmEngine) hands lanes out and takes them back; the serving thread
// (ShmServer) serves the lanes the keeper activated. The table is the only thing they share
// about lanes, and this is every transition of a lane's phase:
//
//   free ──(keeper: handed to a client, fresh object installed)──────────▶ active
//   active ──(keeper: the client's connection ended, released or dead)──▶ draining
//   draining ──(serving thread: no longer touches the lane's memory)───▶ drained
//   drained ──(keeper: old object unmapped, a fresh one made)─────────────▶ free
//
// A quarantine (a client wrote impossible ring positions or stamps) is the serving thread's own
// decision: it stops serving the lane but leaves the phase active, so the lane is not handed to
// anyone else until its client's connection ends.
//
// The keeper writes a lane's `view` and `generation` only while the phase is free or drained,
// when the serving thread does not look at them, and publishes them with the release store of
// `active`; the serving thread reads them after an acquire load of `active`.

#include <array>
#include <atomic>
#include <cstdint>

#include "shm/doorbell.hpp"
#include "shm/layout.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

enum class LanePhase : std::uint32_t { free = 0, active = 1, draining = 2, drained = 3 };

struct alignas(kRingLineBytes) EngineLane {
  std::atomic<std::uint32_t> phase{static_cast<std::uint32_t>(LanePhase::free)};
  LaneView view{};
  std::uint64_t generation = 0;
};

struct EngineLanes {
  std::array<EngineLane, kMaxLanes> lanes;
  // Bumped by the keeper after every phase change it makes (announce_lane_change), and by the
  // workers when an answer is ready in block mode: the serving thread scans the lane table when it
  // moves, and a block-mode serving thread sleeps on it (shm/doorbell.hpp).
  alignas(kRingLineBytes) std::atomic<std::uint32_t> keeper_word{0};
};

[[nodiscard]] inline LanePhase load_phase(const EngineLane& lane) noexcept {
  // acquire: pairs with the release stores in set_phase, so a lane seen active comes with the
  // view and generation the keeper installed, and one seen drained with the serving thread's
  // last access to its memory behind it.
  return static_cast<LanePhase>(lane.phase.load(std::memory_order_acquire));
}

// Keeper, after set_phase(active) or set_phase(draining): makes the serving thread scan the lane
// table on its next pass, whatever it is doing (in block mode, wakes it).
inline void announce_lane_change(EngineLanes& lanes, WaitMode mode) noexcept {
  if (mode == WaitMode::block) {
    wake_serving_thread(lanes.keeper_word);
    return;
  }
  // release: orders the phase change before the bump; pairs with the acquire load in
  // ShmServer::lanes_changed.
  lanes.keeper_word.fetch_add(1, std::memory_order_release);
}

inline void set_phase(EngineLane& lane, LanePhase phase) noexcept {
  // release: publishes the writes before it (the keeper's view/generation, the serving thread's
  // last touch of the lane); pairs with the acquire in load_phase.
  lane.phase.store(static_cast<std::uint32_t>(phase), std::memory_order_release);
}

}  // namespace ipcfloor
