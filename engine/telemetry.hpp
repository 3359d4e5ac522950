#pragma once
// What the serving thread tells the outside world. Events leave the hot thread through a
// pre-sized moodycamel ReaderWriterQueue (single producer: the serving thread; single consumer:
// the keeper thread), so the hot thread never does I/O or allocates to report something.

#include <atomic>
#include <cstdint>

#include "common/rw_queue.hpp"

namespace ipcfloor {

struct TelemetryEvent {
  enum class Kind : std::uint8_t {
    bad_frame,     // a request was rejected; `status` says why
    ring_corrupt,  // a client wrote impossible ring positions or an impossible exchange stamp;
                   // its lane is quarantined until its connection ends
  };
  Kind kind;
  std::uint16_t status;  // Status for bad_frame
  std::uint32_t lane;
  std::int32_t pid;      // the lane owner's pid, when known
  std::uint64_t seq;     // the request's seq for bad_frame
};

inline constexpr std::size_t kTelemetryQueueCapacity = 4096;

// Adds one to a counter only the calling thread writes (the segment's counters, for people): a
// load and a store, no locked instruction on the hot path.
inline void relaxed_increment(std::atomic<std::uint64_t>& counter) noexcept {
  // relaxed: one writer; readers (status, tests) tolerate staleness and publish nothing through it.
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}
using TelemetryQueue = moodycamel::ReaderWriterQueue<TelemetryEvent>;

}  // namespace ipcfloor
