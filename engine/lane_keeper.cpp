#include "engine/lane_keeper.hpp"

#include <fmt/format.h>

#include "engine/telemetry.hpp"
#include "shm/liveness.hpp"

namespace ipcfloor {

Expected<void> LaneKeeper::make_objects(std::vector<std::string>& warnings) {
  std::uint32_t unlocked_lanes = 0;
  std::string lane_warning;
  for (std::uint32_t i = 0; i < segment_.lane_count(); ++i) {
    auto object = segment_.make_lane_object(i, ++generations_[i]);
    if (!object) return std::unexpected(object.error());
    if (!object->warnings().empty()) {
      ++unlocked_lanes;
      if (lane_warning.empty()) lane_warning = object->warnings().front();
    }
    lanes_.lanes[i].view = object->view();
    lanes_.lanes[i].generation = object->generation();
    // relaxed: a report for people (status).
    segment_.lane_status(i).object_locked.store(object->locked() ? 1 : 0, std::memory_order_relaxed);
    objects_[i].emplace(std::move(*object));
  }
  if (unlocked_lanes > 0)
    warnings.push_back(unlocked_lanes == segment_.lane_count()
                           ? fmt::format("{} (and the same for every lane object)", lane_warning)
                           : fmt::format("{} (and the same for {} of {} lane objects)", lane_warning,
                                         unlocked_lanes, segment_.lane_count()));
  return {};
}

LaneKeeper::Grant LaneKeeper::claim(pid_t pid, uid_t uid, std::uint32_t reattaches) noexcept {
  bool draining = false;
  for (std::uint32_t i = 0; i < segment_.lane_count(); ++i) {
    EngineLane& lane = lanes_.lanes[i];
    const LanePhase phase = load_phase(lane);
    if (phase == LanePhase::draining || phase == LanePhase::drained) draining = true;
    if (phase != LanePhase::free || !objects_[i]) continue;
    const LaneObject& object = *objects_[i];
    // The owner and the phase are recorded before the client hears of the lane, so that it (or
    // `status`) never sees its own lane as free once its attach returned.
    LaneStatus& status = segment_.lane_status(i);
    status.owner_pid = pid;
    status.owner_uid = uid;
    status.reattaches = reattaches;
    // relaxed (all): a report for people; the lane table decides what is served.
    status.generation.store(object.generation(), std::memory_order_relaxed);
    status.claimed_unix_ns.store(unix_ns(), std::memory_order_relaxed);
    status.state.store(static_cast<std::uint32_t>(LaneState::claimed), std::memory_order_relaxed);
    set_phase(lane, LanePhase::active);
    announce_lane_change(lanes_, wait_);
    events_.note({EngineEvent::Kind::lane_claimed, 0, i, pid, 0, {}});
    return {HandoffStatus::ok, i, object.generation(), object.fd(), {}};
  }
  if (draining) return {HandoffStatus::lane_draining, 0, 0, -1, "a lane is being freed"};
  return {HandoffStatus::no_free_lane, 0, 0, -1,
          fmt::format("all {} lanes are taken; start the engine with more --lanes", segment_.lane_count())};
}

void LaneKeeper::release(std::uint32_t lane, bool on_purpose, pid_t pid) noexcept {
  DataHeader& header = segment_.header();
  relaxed_increment(on_purpose ? header.lanes_released : header.lanes_reclaimed);
  // relaxed: a report for people.
  segment_.lane_status(lane).state.store(static_cast<std::uint32_t>(LaneState::draining), std::memory_order_relaxed);
  set_phase(lanes_.lanes[lane], LanePhase::draining);
  announce_lane_change(lanes_, wait_);
  events_.note({on_purpose ? EngineEvent::Kind::lane_released : EngineEvent::Kind::lane_reclaimed, 0, lane, pid, 0, {}});
}

bool LaneKeeper::prepare(std::uint32_t lane) noexcept {
  Expected<LaneObject> object = std::unexpected(Error{ErrorCode::io, ""});
  try {
    object = segment_.make_lane_object(lane, generations_[lane] + 1);
  } catch (...) {
    object = std::unexpected(Error{ErrorCode::resource, "out of memory"});
  }
  if (!object) {
    events_.note({EngineEvent::Kind::warning, 0, lane, 0, 0,
                  fmt::format("cannot make a fresh object for lane {}: {}; retrying", lane, object.error().message)});
    return false;
  }
  ++generations_[lane];
  EngineLane& shared = lanes_.lanes[lane];
  shared.view = object->view();
  shared.generation = object->generation();
  // relaxed: a report for people (status).
  segment_.lane_status(lane).object_locked.store(object->locked() ? 1 : 0, std::memory_order_relaxed);
  objects_[lane].emplace(std::move(*object));
  segment_.lane_status(lane).owner_pid = 0;
  segment_.lane_status(lane).owner_uid = 0;
  segment_.lane_status(lane).reattaches = 0;
  // relaxed: a report for people.
  segment_.lane_status(lane).state.store(static_cast<std::uint32_t>(LaneState::free), std::memory_order_relaxed);
  set_phase(shared, LanePhase::free);
  return true;
}

void LaneKeeper::replace_drained() noexcept {
  for (std::uint32_t i = 0; i < segment_.lane_count(); ++i) {
    if (load_phase(lanes_.lanes[i]) != LanePhase::drained) continue;
    // The serving thread let go (phase drained, acquired): nothing points into the old object.
    objects_[i].reset();
    (void)prepare(i);
  }
}

bool LaneKeeper::replacing() const noexcept {
  for (std::uint32_t i = 0; i < segment_.lane_count(); ++i) {
    const LanePhase phase = load_phase(lanes_.lanes[i]);
    if (phase == LanePhase::draining || phase == LanePhase::drained) return true;
  }
  return false;
}

}  // namespace ipcfloor
