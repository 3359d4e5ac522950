#pragma once
// The shared-memory segment's versioned layout (docs/SPEC.md §2). Every offset is fixed at creation
// and recorded in the header, so both processes find every region without pointers, Boost
// allocators or locks. Attachers check magic, version and sizes before they trust any of it.
//
//   offset 0                     +--------------------------------------------------+
//                                | SegmentHeader (4 KiB)                            |
//                                |   identity line: magic, state, version, sizes,   |
//                                |     offsets, backing, engine pid/start, series   |
//                                |     metadata and checksum, fee                   |
//                                |   heartbeat line   (engine writes, 128 B apart)  |
//                                |   doorbell line    (block-mode engine wake-up)   |
//                                |   counters line    (engine writes)               |
//   lanes_offset (4 KiB)         +--------------------------------------------------+
//                                | lane 0  (lane_stride bytes, 4 KiB multiple)      |
//                                |   +0     LaneControl   owner (state|pid), gen    |
//                                |   +128   RingControl   request ring  (3 x 128 B) |
//                                |   +512   RingControl   response ring (3 x 128 B) |
//                                |   +1024  RequestSlot  [ring_capacity] x 64 B     |
//                                |   +...   ResponseSlot [ring_capacity] x 64 B     |
//                                +--------------------------------------------------+
//                                | lane 1 ... lane N-1                              |
//   bulk_offset (4 KiB)          +--------------------------------------------------+
//                                | bulk 0  (bulk_stride bytes, 4 KiB multiple)      |
//                                |   lane 0's scratch for ECHO_BULK: the client     |
//                                |   writes, the engine copies within it            |
//                                | bulk 1 ... bulk N-1                              |
//   series_offset (4 KiB or      +--------------------------------------------------+
//    2 MiB aligned)              | close[n_bars] f64, read-only after preload       |
//                                +--------------------------------------------------+
//   segment_bytes (rounded up to the page size: 4 KiB, or 2 MiB on hugetlbfs)

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "shm/frames.hpp"
#include "shm/spsc_ring.hpp"

namespace ipcfloor {

inline constexpr std::uint64_t kSegmentMagic = 0x524F4F4C46435049ULL;  // "IPCFLOOR" little-endian
// 2: slots carry the ring's publication stamp (offset 12), per-lane bulk regions.
inline constexpr std::uint32_t kLayoutVersion = 2;
inline constexpr std::size_t kHeaderBytes = 4096;
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::uint32_t kDefaultLanes = 4;
inline constexpr std::uint32_t kMaxLanes = 64;
// Slots per ring. Small on purpose: with one request in flight the round trip grows with the
// number of distinct lines a ring walks through (the curve is in docs/RESULTS.md, "The ring
// against the floor"). Eight slots still let a pipelining client keep eight frames in flight; a deeper pipeline is
// `serve --ring-capacity`.
inline constexpr std::uint32_t kDefaultRingCapacity = 8;
inline constexpr std::uint32_t kMaxRingCapacity = 1U << 24;
inline constexpr std::size_t kSeriesNameBytes = 96;
// Room for the echo curve's largest payload both ways: 150,000 f64 in, 150,000 f64 out.
inline constexpr std::size_t kDefaultBulkBytes = std::size_t{5} << 19;  // 2.5 MiB per lane
inline constexpr std::size_t kMaxBulkBytes = std::size_t{1} << 30;      // per lane

// Published last, with a release store: an attacher that reads `ready` with acquire sees the
// whole header and every region as the creator wrote them.
enum class SegmentState : std::uint32_t { building = 0, ready = 1, stopping = 2 };
enum class Backing : std::uint32_t { none = 0, tmpfs_4k = 1, hugetlbfs_2m = 2 };
enum class LaneState : std::uint32_t {
  free = 0,        // any client may claim it (CAS free -> claimed)
  claimed = 1,     // owned by owner_pid
  releasing = 2,   // the owner closed it; the engine drains and frees it
  reclaiming = 3,  // the owner died; the engine drains and frees it
};

struct alignas(kRingLineBytes) SegmentHeader {
  // --- identity line(s): written once by the creator before `state` turns ready ---
  std::uint64_t magic;
  std::atomic<std::uint32_t> state;  // SegmentState
  std::uint32_t layout_version;
  std::uint64_t segment_bytes;
  std::uint32_t header_bytes;
  std::uint32_t lane_count;
  std::uint32_t ring_capacity;
  std::uint32_t backing;            // Backing
  std::uint32_t locked;             // 1 when the whole mapping is mlock'ed
  std::uint32_t wait_mode;          // the engine's WaitMode
  std::int32_t engine_pid;
  std::uint32_t engine_uid;
  std::uint64_t engine_start_ticks;  // /proc/PID/stat starttime: tells a reused pid apart
  std::uint64_t engine_start_unix_ns;
  std::uint64_t heartbeat_interval_ns;
  std::uint64_t lanes_offset;
  std::uint64_t lane_stride;
  std::uint64_t bulk_offset;
  std::uint64_t bulk_stride;  // bytes of one lane's bulk region (0: no bulk regions)
  std::uint64_t series_offset;
  std::uint64_t series_bytes;
  std::uint64_t n_bars;
  std::uint64_t series_checksum;  // FNV-1a 64 over the series bytes
  double fee;
  double series_first;
  double series_last;
  char series_name[kSeriesNameBytes];  // NUL-terminated description of the data source

  // --- heartbeat line: the engine's reporter thread bumps it every heartbeat_interval_ns ---
  alignas(kRingLineBytes) std::atomic<std::uint64_t> heartbeat_ns;  // CLOCK_MONOTONIC
  // --- doorbell line: in block mode the engine sleeps on it, a client bumps it to wake it ---
  alignas(kRingLineBytes) std::atomic<std::uint32_t> doorbell;
  std::atomic<std::uint32_t> engine_sleeping;
  // --- counters line: written by the engine's serving thread only ---
  alignas(kRingLineBytes) std::atomic<std::uint64_t> requests;
  std::atomic<std::uint64_t> bad_frames;
  std::atomic<std::uint64_t> lanes_reclaimed;
  std::atomic<std::uint64_t> lanes_released;
  // Lanes found holding impossible ring positions or an impossible owner word. Appended to the
  // counters line (nothing moved): a reader of an older segment sees the creator's zero.
  std::atomic<std::uint64_t> lanes_corrupt;
};

struct alignas(kRingLineBytes) LaneControl {
  // LaneState in the low 32 bits, the owner's pid in the high 32: one word, so a claim
  // publishes "claimed" and "by whom" in a single CAS and a client that dies right after its
  // claim still leaves a pid behind for the engine to check.
  std::atomic<std::uint64_t> owner;
  std::atomic<std::uint64_t> owner_start_ticks;  // with the pid: tells a reused pid apart
  std::atomic<std::uint64_t> generation;         // bumped by every claim
  std::atomic<std::uint64_t> requests;           // served on this lane (engine writes)
  std::atomic<std::uint64_t> bad_frames;         // rejected on this lane (engine writes)
};

[[nodiscard]] constexpr std::uint64_t pack_owner(LaneState state, std::int32_t pid) noexcept {
  return (std::uint64_t{static_cast<std::uint32_t>(pid)} << 32) | static_cast<std::uint32_t>(state);
}
[[nodiscard]] constexpr LaneState owner_state(std::uint64_t owner) noexcept {
  return static_cast<LaneState>(owner & 0xffff'ffffULL);
}
[[nodiscard]] constexpr std::int32_t owner_pid(std::uint64_t owner) noexcept {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(owner >> 32));
}

inline constexpr std::size_t kLaneControlOffset = 0;
inline constexpr std::size_t kLaneRequestRingOffset = 128;
inline constexpr std::size_t kLaneResponseRingOffset = 512;
inline constexpr std::size_t kLaneSlotsOffset = 1024;

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared 64-bit atomics must be lock-free");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "shared 32-bit atomics must be lock-free");
static_assert(std::atomic<std::int32_t>::is_always_lock_free, "shared pid atomics must be lock-free");
static_assert(std::is_standard_layout_v<SegmentHeader>, "SegmentHeader offsets must be well defined");
static_assert(std::is_standard_layout_v<LaneControl>, "LaneControl offsets must be well defined");
static_assert(sizeof(SegmentHeader) <= kHeaderBytes, "SegmentHeader fits its 4 KiB page");
static_assert(offsetof(SegmentHeader, magic) == 0, "magic opens the segment");
static_assert(offsetof(SegmentHeader, state) == 8, "state follows magic");
static_assert(offsetof(SegmentHeader, layout_version) == 12, "version sits at a fixed offset for every version");
static_assert(offsetof(SegmentHeader, heartbeat_ns) % kRingLineBytes == 0 &&
                  offsetof(SegmentHeader, heartbeat_ns) - offsetof(SegmentHeader, series_name) >= kSeriesNameBytes,
              "the heartbeat has its own 128-byte line");
static_assert(offsetof(SegmentHeader, doorbell) - offsetof(SegmentHeader, heartbeat_ns) >= kRingLineBytes,
              "the doorbell line is 128 bytes from the heartbeat line");
static_assert(offsetof(SegmentHeader, requests) - offsetof(SegmentHeader, doorbell) >= kRingLineBytes,
              "the counters line is 128 bytes from the doorbell line");
static_assert(offsetof(SegmentHeader, lanes_corrupt) + sizeof(std::uint64_t) - offsetof(SegmentHeader, requests) <=
                  kRingLineBytes,
              "every counter stays on the counters line");
static_assert(sizeof(LaneControl) <= kLaneRequestRingOffset, "LaneControl fits before the request ring");
static_assert(kLaneRequestRingOffset % alignof(RingControl) == 0 && kLaneResponseRingOffset % alignof(RingControl) == 0,
              "ring control blocks are 128-byte aligned in a lane");
static_assert(kLaneResponseRingOffset - kLaneRequestRingOffset >= sizeof(RingControl),
              "the request ring's control block ends before the response ring's");
static_assert(kLaneSlotsOffset - kLaneResponseRingOffset >= sizeof(RingControl),
              "the response ring's control block ends before the slots");
static_assert(kLaneSlotsOffset % alignof(RequestSlot) == 0, "slots start on a cache line");

constexpr std::size_t round_up(std::size_t value, std::size_t multiple) noexcept {
  return (value + multiple - 1) / multiple * multiple;
}

// Where everything goes for a given configuration. Pure arithmetic, shared by creator and
// attacher so neither can disagree with the other about an offset.
struct SegmentGeometry {
  std::size_t lanes_offset;
  std::size_t lane_stride;
  std::size_t bulk_offset;
  std::size_t bulk_stride;
  std::size_t series_offset;
  std::size_t series_bytes;
  std::size_t segment_bytes;
};

// `bulk_bytes` is per lane and rounded up to 4 KiB; callers bound it by kMaxBulkBytes.
[[nodiscard]] constexpr SegmentGeometry compute_geometry(std::uint32_t lanes, std::uint32_t ring_capacity,
                                                         std::size_t n_bars, std::size_t page_bytes,
                                                         std::size_t bulk_bytes = kDefaultBulkBytes) noexcept {
  SegmentGeometry g{};
  g.lanes_offset = kHeaderBytes;
  g.lane_stride = round_up(kLaneSlotsOffset + std::size_t{ring_capacity} * (sizeof(RequestSlot) + sizeof(ResponseSlot)),
                           4096);
  // Bulk regions sit apart from the rings: a multi-megabyte copy streams through its own pages
  // and never evicts or shares a line with the slots the serving thread polls.
  g.bulk_offset = g.lanes_offset + std::size_t{lanes} * g.lane_stride;
  g.bulk_stride = round_up(bulk_bytes, 4096);
  // The series starts on its own page (a huge page on hugetlbfs) so it can be scanned linearly.
  g.series_offset = round_up(g.bulk_offset + std::size_t{lanes} * g.bulk_stride, page_bytes);
  g.series_bytes = n_bars * sizeof(double);
  g.segment_bytes = round_up(g.series_offset + g.series_bytes, page_bytes);
  return g;
}

// Typed views of one lane inside a mapped segment (process-local addresses).
struct LaneView {
  LaneControl* control;
  RingControl* request_ring;
  RingControl* response_ring;
  RequestSlot* request_slots;
  ResponseSlot* response_slots;
};

// From offsets the caller validated (Segment keeps private copies: see Segment::lane_count).
[[nodiscard]] inline LaneView lane_view(std::byte* base, std::size_t lanes_offset, std::size_t lane_stride,
                                        std::uint32_t ring_capacity, std::uint32_t lane) noexcept {
  std::byte* at = base + lanes_offset + std::size_t{lane} * lane_stride;
  return LaneView{
      reinterpret_cast<LaneControl*>(at + kLaneControlOffset),
      reinterpret_cast<RingControl*>(at + kLaneRequestRingOffset),
      reinterpret_cast<RingControl*>(at + kLaneResponseRingOffset),
      reinterpret_cast<RequestSlot*>(at + kLaneSlotsOffset),
      reinterpret_cast<ResponseSlot*>(at + kLaneSlotsOffset + std::size_t{ring_capacity} * sizeof(RequestSlot)),
  };
}

// From the header as it is now. Only for a header nobody else can write yet (e.g. the creator
// before publication); anyone else uses Segment::lane.
[[nodiscard]] inline LaneView lane_view(std::byte* base, const SegmentHeader& header, std::uint32_t lane) noexcept {
  return lane_view(base, header.lanes_offset, header.lane_stride, header.ring_capacity, lane);
}

}  // namespace ipcfloor
