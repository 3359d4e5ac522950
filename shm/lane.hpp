#pragma once
// Who holds a lane, and every change of that. This is the one module that writes a lane's owner
// word (LaneControl::owner) and rings or waits on the engine's doorbell; the client, the engine's
// serving thread and its keeper thread all go through it, so the ownership protocol can be read
// in one place:
//
//   free ──try_claim_lane (client, CAS)────────────▶ claimed(pid)
//   claimed(pid) ──release_lane (the owner)─────────▶ releasing(pid)
//   claimed(pid) ──reclaim_if_owner_dead (keeper, CAS, only while pid is dead)──▶ reclaiming(pid)
//   releasing | reclaiming | anything else ──free_lane (serving thread, after it reset the
//                                              rings)──▶ free
//
// Only the serving thread frees a lane, and only after it has restarted both rings, so a client
// that wins the claim CAS always finds empty, consistent rings (the CAS acquires the release
// store in free_lane). A word no client ever writes (an unknown state) is taken back the same
// way: nobody could claim the lane otherwise.
//
// Threads: try_claim_lane and reclaim_if_owner_dead read /proc (setup / keeper paths). The
// rest are single atomic operations plus, for the doorbell in block mode, one futex call.

#include <atomic>
#include <cstdint>
#include <string_view>

#include "shm/layout.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

// One load of a lane's owner word, split.
struct LaneOwner {
  LaneState state;
  std::int32_t pid;
};

// acquire: sees the lane's rings as the last writer of the owner word left them.
[[nodiscard]] LaneOwner load_lane_owner(const LaneControl& lane) noexcept;

// "free", "claimed", "releasing", "reclaiming", or "unknown" for a scribbled word.
[[nodiscard]] std::string_view to_string(LaneState state) noexcept;

enum class ClaimOutcome : std::uint8_t {
  claimed,  // the lane is now ours
  held,     // a live client holds it
  freeing,  // not free yet, but it will be without anyone's help (released, or its owner died)
};

// Client: claims `lane` for `pid` if it is free (CAS free -> claimed), then records the pid's
// start time (so the engine can tell a reused pid apart) and bumps the claim generation. Reads
// /proc: setup path.
[[nodiscard]] ClaimOutcome try_claim_lane(LaneControl& lane, std::int32_t pid) noexcept;

// Client: hands its lane back; the serving thread drains and frees it. The client's last ring
// writes happen before the engine sees the release.
void release_lane(LaneControl& lane, std::int32_t pid) noexcept;

// Engine keeper thread: when `lane` is claimed by a process that is gone, marks it reclaiming
// (only if the word did not change meanwhile) and returns true. Reads /proc.
[[nodiscard]] bool reclaim_if_owner_dead(LaneControl& lane) noexcept;

// Engine serving thread, after it restarted both rings of the lane: marks it free for the next
// client.
void free_lane(LaneControl& lane) noexcept;

// The doorbell a block-mode engine sleeps on when no lane has work. Clients ring it after they
// publish a request or release their lane; the keeper rings it after a reclaim and at shutdown.
// Only for a block-mode engine: callers know the mode from their own validated copy, never from
// the header, which a peer can rewrite. One locked RMW; a futex wake only when the engine sleeps.
void ring_engine_doorbell(SegmentHeader& header) noexcept;

// Engine serving thread: waits, in `mode`, until `ready()` or `deadline`. In block mode it
// sleeps on the doorbell; spin and backoff never touch it.
template <class Ready>
[[nodiscard]] WaitStatus wait_engine_doorbell(SegmentHeader& header, WaitMode mode, Ready& ready,
                                              WaitDeadline deadline) noexcept {
  return detail::wait_until(ready, mode, {header.doorbell, header.engine_sleeping}, deadline);
}

}  // namespace ipcfloor
