#pragma once
// What the serving thread tells the outside world. Events leave the hot thread through a
// pre-sized moodycamel ReaderWriterQueue (single producer: the serving thread; single consumer:
// the reporter thread), so the hot thread never does I/O or allocates to report something.

#include <cstdint>

#include "engine/rw_queue.hpp"

namespace ipcfloor {

struct TelemetryEvent {
  enum class Kind : std::uint8_t {
    bad_frame,       // a request was rejected; `status` says why
    lane_released,   // a client closed its lane; the engine drained it
    lane_reclaimed,  // a dead client's lane was drained and freed
    ring_corrupt,    // a peer wrote impossible ring positions; the lane is quarantined until its
                     // owner releases it or dies, then restarted
    owner_corrupt,   // a lane's owner word held a state no client writes; the lane was reset
  };
  Kind kind;
  std::uint16_t status;  // Status for bad_frame
  std::uint32_t lane;
  std::int32_t pid;      // the lane owner's pid, when known
  std::uint64_t seq;     // the request's seq for bad_frame
};

inline constexpr std::size_t kTelemetryQueueCapacity = 4096;
using TelemetryQueue = moodycamel::ReaderWriterQueue<TelemetryEvent>;

}  // namespace ipcfloor
