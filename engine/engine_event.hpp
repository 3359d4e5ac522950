#pragma once
// What the engine's threads have to say, for the caller to log: the serving thread's reports
// (through the telemetry queue) and the keeper's own (through an KeeperEvents), in one shape.

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <string>
#include <utility>

namespace ipcfloor {

struct EngineEvent {
  enum class Kind : std::uint8_t {
    bad_frame,       // a request was rejected; `status` says why (from the serving thread)
    lane_corrupt,    // a client wrote impossible positions or stamps; its lane is quarantined
    lane_claimed,    // a client got a lane
    lane_released,   // a client handed its lane back
    lane_reclaimed,  // a client died holding its lane
    refused,         // a connection was refused; `text` says why
    warning,         // the keeper could not do something it will retry; `text` says what
  };
  Kind kind;
  std::uint16_t status = 0;  // Status for bad_frame
  std::uint32_t lane = 0;
  std::int32_t pid = 0;      // the client's pid (SO_PEERCRED), when known
  std::uint64_t seq = 0;     // the request's seq for bad_frame
  std::string text;
};

// The keeper's own reports, oldest first. Keeper thread only.
class KeeperEvents {
 public:
  // Never throws: out of memory for a report loses the report (the segment's counters still count).
  void note(EngineEvent event) noexcept {
    try {
      events_.push_back(std::move(event));
    } catch (...) {
    }
  }
  // Moves every report to `sink(const EngineEvent&)`, oldest first; returns how many.
  template <class Sink>
  std::size_t drain(Sink&& sink) {
    std::size_t drained = 0;
    while (!events_.empty()) {
      sink(events_.front());
      events_.pop_front();
      ++drained;
    }
    return drained;
  }

 private:
  std::deque<EngineEvent> events_;
};

}  // namespace ipcfloor
