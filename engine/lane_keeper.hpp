#pragma once
// The keeper's side of the lane table (engine/engine_lanes.hpp): each lane's object (its rings,
// exchange line and bulk region, shm/segment.hpp) and generation, handing a free lane to a client,
// taking it back when the client's connection ends, and giving a drained lane a fresh object
// before anyone else gets it. The serving thread sees the same table through lanes().
//
// Threads: everything here belongs to the keeper thread, except lanes(), which the serving thread
// reads through its acquire loads (load_phase). Nothing blocks; make_objects() allocates.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "engine/engine_event.hpp"
#include "engine/engine_lanes.hpp"
#include "shm/handoff.hpp"
#include "shm/segment.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

class LaneKeeper {
 public:
  // What a client asking for a lane gets: ok with the lane, its generation and its object's
  // descriptor; or no_free_lane / lane_draining with a message for the client.
  struct Grant {
    HandoffStatus status = HandoffStatus::no_free_lane;
    std::uint32_t lane = 0;
    std::uint64_t generation = 0;
    int object_fd = -1;
    std::string message;
  };

  // `segment` and `events` must outlive the keeper. No object exists until make_objects().
  LaneKeeper(Segment& segment, WaitMode wait, KeeperEvents& events) noexcept
      : segment_(segment), wait_(wait), events_(events) {}
  LaneKeeper(const LaneKeeper&) = delete;
  LaneKeeper& operator=(const LaneKeeper&) = delete;

  // Setup: every lane's first object. Appends one warning, naming how many objects it concerns,
  // when some could not be locked in memory.
  [[nodiscard]] Expected<void> make_objects(std::vector<std::string>& warnings);

  // Hands the first free lane to the client `pid`/`uid`: records it as the owner, turns the lane
  // active and tells the serving thread. Once granted, the lane goes through draining when
  // release() is called, whatever the client did with the reply.
  // `reattaches` is the client's word on its re-attaches, recorded for status.
  [[nodiscard]] Grant claim(pid_t pid, uid_t uid, std::uint32_t reattaches = 0) noexcept;
  // The connection that held `lane` ended (`on_purpose`: the client said it leaves). The lane
  // drains: the serving thread lets go of it, then replace_drained() gives it a fresh object.
  void release(std::uint32_t lane, bool on_purpose, pid_t pid) noexcept;
  // Lanes the serving thread let go of get a fresh object (retried later when one cannot be made).
  void replace_drained() noexcept;
  // True while some lane waits for the serving thread or for its fresh object: the keeper should
  // come back soon.
  [[nodiscard]] bool replacing() const noexcept;

  [[nodiscard]] EngineLanes& lanes() noexcept { return lanes_; }

 private:
  [[nodiscard]] bool prepare(std::uint32_t lane) noexcept;

  Segment& segment_;
  WaitMode wait_;
  KeeperEvents& events_;
  EngineLanes lanes_;
  std::optional<LaneObject> objects_[kMaxLanes];  // the keeper's mapping of each lane object
  std::uint64_t generations_[kMaxLanes] = {};
};

}  // namespace ipcfloor
