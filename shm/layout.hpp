#pragma once
// The engine's shared memory, layout version kLayoutVersion (below): one read-only data object
// for everyone, one object per lane for that lane's client alone. Both are sealed memfds the engine hands over on
// its Unix socket (shm/handoff.hpp); no client can resize either, and none can write the data.
// Every offset is fixed at creation and recorded in the data header, so each side finds every
// region without pointers, allocators or locks. Each side checks sizes against what it was
// told before it trusts any of it.
//
//   DATA OBJECT (engine writes; clients map it PROT_READ; sealed against resize and writes)
//   offset 0             +--------------------------------------------------------------+
//                        | DataHeader (16 KiB)                                          |
//                        |   identity: magic, state, version, sizes and offsets, lane   |
//                        |     geometry, backing, engine pid/uid/start, series metadata |
//                        |     and checksum, fee, the bound on work per frame, live:    |
//                        |     capacity_bars and signal_capacity, the series table      |
//                        |     (offset, bars, checksum, name of each), the strategy     |
//                        |     table (name, parameter names, live or not)               |
//                        |   placement: the serving cpu and up to 32 cpus nearest it    |
//                        |   heartbeat line   (the keeper thread, every interval)       |
//                        |   counters line    (the serving thread: requests, bad frames,|
//                        |     lanes reclaimed/released/corrupt, jobs taken back)       |
//                        |   live line        (the serving thread: bars published,      |
//                        |     signals sent and dropped, a bar waiting on a worker)     |
//                        |   workers line     (the keeper: count, stalled, jobs, bounds,|
//                        |     each worker's cpu)                                       |
//                        |   journal line     (the journal's writer: state, records,    |
//                        |     bytes, last fsync, refusals; its path and start facts)   |
//   lane_status_offset   +--------------------------------------------------------------+
//    (16 KiB)            | LaneStatus[lane_count], 1 KiB each (engine writes): state,   |
//                        |   verified owner pid and uid, its re-attaches, claims,       |
//                        |   requests, bad frames, ring fill, signals dropped, service  |
//                        |   time: histogram, sum                                       |
//   series_offset        +--------------------------------------------------------------+
//    (a page: 4 KiB or   | close[capacity_bars] f64: the n_bars preloaded, then (live)  |
//     2 MiB)             |   the appended ones; bars_published says how many are valid  |
//   extra_series_offset  +--------------------------------------------------------------+
//    (64 B boundary)     | series 1, 2, ... of the series table, each on a 64 B boundary|
//   column region        +--------------------------------------------------------------+
//    (64 B boundary)     | each series' other columns, series 0 first, in the order     |
//                        |   open, high, low, volume: `bars` f64 each (preloaded bars   |
//                        |   only), on a 64 B boundary; the table's column_offset[]     |
//                        +--------------------------------------------------------------+
//   data_bytes (a multiple of the page size)
//
//   LANE OBJECT (its client and the engine map it read-write; sealed against resize; a fresh
//   object for every client, so nothing one client wrote survives into the next one's lane)
//   +0       LaneHeader (128 B): magic, version, lane, generation, ring, signal and bulk geometry
//   +128     DoorbellLine (128 B): a block-mode engine sleeps on it, the client rings it
//   +256     CallArea (128 B): the single-flight exchange line and its wait line
//   +512     RingControl of the request ring  (client -> engine, 3 x 128 B)
//   +896     RingControl of the response ring (engine -> client, 3 x 128 B)
//   +1280    RingControl of the signal ring   (engine -> subscriber, 3 x 128 B; live only)
//   +1664    CallExtras (192 B): the exchange's options line and answer record
//   +1920    RequestSlot[ring_capacity] x 64 B, then ResponseSlot[ring_capacity] x 64 B,
//            then RequestOptions[ring_capacity] x 64 B and AnswerRecord[ring_capacity] x 128 B
//            (each beside the ring slot of the same index), then SignalSlot[signal_capacity]
//            x 64 B (none unless live)
//   bulk_offset (4 KiB)  the lane's bulk region for ECHO_BULK (bulk_bytes, 4 KiB multiple)
//   lane_bytes (a multiple of 4 KiB)
//
// The engine never reads back what lives in a lane object to decide anything but that lane's
// own requests: its geometry comes from private copies, ring positions are bounds-checked, the
// exchange stamp must be the one expected. A client can only spoil its own answers.

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common/bars.hpp"
#include "ipcfloor/strategy.h"
#include "shm/exchange.hpp"
#include "shm/frames.hpp"
#include "shm/service_histogram.hpp"
#include "shm/spsc_ring.hpp"

namespace ipcfloor {

inline constexpr std::uint64_t kDataMagic = 0x524F4F4C46435049ULL;  // "IPCFLOOR" little-endian
inline constexpr std::uint64_t kLaneMagic = 0x454E414C46435049ULL;  // "IPCFLANE" little-endian
// 3: a read-only data object and one sealed object per lane, handed over on a Unix socket; the
//    single-flight exchange in each lane; per-lane status in the data object.
// 4: live mode: room for capacity_bars with a published count, and a signal ring in each lane.
// 5: one frame shape: an answer's head (seq, opcode, status, stamp) has its request's layout, and the
//    exchange line holds the request and then its answer in it.
// 6: strategies: a strategy table in the header (a request's flags' high byte indexes it), a
//    signal's two values are its strategy's; the placement block: the serving thread's cpu and
//    the cpus nearest it, for clients to pin to; each lane's summed service time (the
//    histogram's _sum); the header grows to 16 KiB.
// 7: answers with statistics and requests with options: an options line beside every request
//    slot and the exchange line, a 128-byte answer record beside every response slot and the
//    exchange line (STATS, TRADES, a strategy's own refusal sentence); a series' columns (open,
//    high, low, volume) and a strategy's required columns and trade reports in the tables.
inline constexpr std::uint32_t kLayoutVersion = 7;
inline constexpr std::size_t kHeaderBytes = 16384;
inline constexpr std::size_t kCacheLine = 64;
inline constexpr std::size_t kLaneStatusBytes = 1024;
inline constexpr std::uint32_t kDefaultLanes = 4;
inline constexpr std::uint32_t kMaxLanes = 64;
// Slots per ring. Small on purpose: with one request in flight the round trip grows with the
// number of distinct lines a ring walks through (the curve is in docs/RESULTS.md, "The ring
// against the floor"). Eight slots still let a pipelining client keep eight frames in flight; a
// deeper pipeline is `serve --ring-capacity`.
inline constexpr std::uint32_t kDefaultRingCapacity = 8;
inline constexpr std::uint32_t kMaxRingCapacity = 1U << 24;
// Signal slots per lane in live mode: room for a burst of bars x subscriptions while the
// subscriber is descheduled; past it frames are dropped and counted, never waited for.
inline constexpr std::uint32_t kDefaultSignalCapacity = 1024;
inline constexpr std::size_t kSeriesNameBytes = 96;
// Series one segment may hold (serve --data a --data b ...); a frame names one by index.
inline constexpr std::uint32_t kMaxSeries = 16;
inline constexpr std::size_t kSeriesKeyBytes = 64;
// Workers whose cpu the header records (a larger pool records its first ones).
inline constexpr std::size_t kMaxWorkerCpus = 256;
// Cpus the placement block lists as nearest the serving thread (a larger host lists its nearest ones).
inline constexpr std::size_t kMaxNearCpus = 32;
// Room for the journal's path in the header (a longer one is cut there; the engine logs it whole).
inline constexpr std::size_t kJournalPathBytes = 256;
// Room for the echo curve's largest payload both ways: 150,000 f64 in, 150,000 f64 out.
inline constexpr std::size_t kDefaultBulkBytes = std::size_t{5} << 19;  // 2.5 MiB per lane
inline constexpr std::size_t kMaxBulkBytes = std::size_t{1} << 30;      // per lane

// One series of the segment as the series table records it. Entry 0 is the main series (the one
// at series_offset, which live mode appends to); the others follow its room, each on a 64-byte
// boundary, in the order given.
// The columns a series may have besides close (open, high, low, volume: IPCFLOOR_COLUMN_* bits
// 1..4), each `bars` long, in the column region after the series' closes (series_columns_bytes).
inline constexpr std::size_t kOtherColumns = 4;
inline constexpr std::uint32_t kAllColumns = IPCFLOOR_COLUMN_CLOSE | IPCFLOOR_COLUMN_OPEN | IPCFLOOR_COLUMN_HIGH |
                                            IPCFLOOR_COLUMN_LOW | IPCFLOOR_COLUMN_VOLUME;
struct SeriesEntry {
  std::uint64_t offset;    // bytes from the start of the data object
  std::uint64_t bars;      // preloaded bars (entry 0 may grow: bars_published)
  std::uint64_t checksum;  // FNV-1a 64 over those bars
  double first;
  double last;
  char name[kSeriesKeyBytes];  // NUL-terminated: a file's name without extension, or "default"
  std::uint32_t columns;       // IPCFLOOR_COLUMN_* bits of the columns it has (close always)
  std::uint32_t columns_reserved;
  // Open, high, low, volume (bit k + 1 of `columns`): bytes from the start of the data object of
  // `bars` values each; 0 where the series has no such column. Preloaded only: a live APPEND
  // carries a close alone, so it is refused on a series with columns besides close.
  std::uint64_t column_offset[kOtherColumns];
};

// One strategy the engine serves, as clients see it: a request names it by its index in the
// table (the high byte of its flags); index 0 is the built-in HMA/HMA3.
inline constexpr std::size_t kMaxStrategies = IPCFLOOR_MAX_STRATEGIES;
inline constexpr std::size_t kStrategyNameBytes = IPCFLOOR_STRATEGY_NAME_MAX + 1;
struct StrategyEntry {
  char name[kStrategyNameBytes];                                        // NUL-terminated
  char param_names[IPCFLOOR_STRATEGY_MAX_PARAMS][kStrategyNameBytes];  // the first param_count are set
  char value_names[2][kStrategyNameBytes];                              // live only
  std::int64_t example[IPCFLOOR_STRATEGY_MAX_PARAMS];                   // a combo it accepts
  std::uint32_t param_count;
  std::uint32_t live;              // 1: it has a per-bar step (SUBSCRIBE works)
  std::uint32_t required_columns;  // IPCFLOOR_COLUMN_* bits it needs besides close
  std::uint32_t abi_version;       // 2: it reports trades (STATS, TRADES); 1: it does not
  std::uint8_t sha256[32];         // of the file it was loaded from; all zero for the built-in
};

// Published last, with a release store: a reader that sees `ready` (acquire) sees the whole
// header and series as the engine wrote them.
enum class SegmentState : std::uint32_t { building = 0, ready = 1, stopping = 2 };
enum class Backing : std::uint32_t { none = 0, memfd_4k = 1, memfd_huge_2m = 2 };
// A lane as the engine sees it; mirrored into LaneStatus::state for `status`.
enum class LaneState : std::uint32_t {
  free = 0,         // waiting for a client, with a fresh lane object
  claimed = 1,      // handed to the client whose connection is its lease
  draining = 2,     // the client left (released or died); the serving thread lets go of it
  quarantined = 3,  // its client wrote impossible ring positions or stamps; never served again
};

struct alignas(kRingLineBytes) DataHeader {
  // --- identity: written once by the engine before `state` turns ready ---
  std::uint64_t magic;
  std::atomic<std::uint32_t> state;  // SegmentState
  std::uint32_t layout_version;
  std::uint64_t data_bytes;
  std::uint32_t header_bytes;
  std::uint32_t lane_count;
  std::uint32_t ring_capacity;
  std::uint32_t backing;    // Backing of the data object
  std::uint32_t locked;     // 1 when the data object cannot be swapped out
  std::uint32_t wait_mode;  // the engine's WaitMode
  std::int32_t engine_pid;  // as the engine sees itself (for people; clients trust the socket)
  std::uint32_t engine_uid;
  std::uint64_t engine_start_ticks;
  std::uint64_t engine_start_unix_ns;
  std::uint64_t heartbeat_interval_ns;
  std::uint64_t lane_status_offset;
  std::uint64_t lane_bytes;        // size of every lane object
  std::uint64_t lane_bulk_offset;  // where the bulk region starts inside a lane object
  std::uint64_t lane_bulk_bytes;   // its size (0: no bulk regions)
  std::uint64_t series_offset;
  std::uint64_t series_bytes;
  std::uint64_t n_bars;           // preloaded bars (the checksum covers these)
  std::uint64_t capacity_bars;    // room for this many (== n_bars unless live)
  std::uint32_t live;             // 1: serve --live (APPEND and SUBSCRIBE are served)
  std::uint32_t signal_capacity;  // SignalSlots per lane (0 unless live)
  std::uint64_t series_checksum;  // FNV-1a 64 over the n_bars preloaded closes
  std::uint64_t max_frame_cost;   // a BACKTEST whose strategy's cost is higher is refused too_costly
  double fee;
  double bars_per_year;           // what a STATS without that option annualises by (serve --bars-per-year)
  double series_first;
  double series_last;
  char series_name[kSeriesNameBytes];  // NUL-terminated description of the data source
  std::uint32_t series_count;          // entries of series_table in use, 1..kMaxSeries
  std::uint32_t series_reserved;
  SeriesEntry series_table[kMaxSeries];
  std::uint32_t strategy_count;  // entries of strategy_table in use, 1..kMaxStrategies
  std::uint32_t strategy_reserved;
  StrategyEntry strategy_table[kMaxStrategies];
  // --- placement: where the serving thread runs and the allowed cpus nearest it, nearest first
  // (common/placement.hpp: by the floor matrix under serve --cpu auto, else by the declared
  // topology), so that a client can pin itself beside it (ipcfloor_pin_near_engine) ---
  std::int32_t serving_cpu;              // -1: not said
  std::uint32_t near_cpu_count;          // entries of near_cpus in use, 0..kMaxNearCpus
  std::uint16_t near_cpus[kMaxNearCpus];

  // --- heartbeat line: the keeper thread stores CLOCK_MONOTONIC every heartbeat_interval_ns ---
  alignas(kRingLineBytes) std::atomic<std::uint64_t> heartbeat_ns;
  // --- counters line: the serving thread writes them, relaxed; readers tolerate staleness ---
  alignas(kRingLineBytes) std::atomic<std::uint64_t> requests;
  std::atomic<std::uint64_t> bad_frames;
  std::atomic<std::uint64_t> lanes_reclaimed;  // a client died holding a lane
  std::atomic<std::uint64_t> lanes_released;   // a client handed its lane back
  std::atomic<std::uint64_t> lanes_corrupt;    // a client wrote impossible positions or stamps
  std::atomic<std::uint64_t> jobs_reclaimed;   // jobs taken back from stalled workers and computed elsewhere
  // --- live line: the serving thread appends a bar, then publishes the count ---
  alignas(kRingLineBytes) std::atomic<std::uint64_t> bars_published;
  std::atomic<std::uint64_t> signals_sent;     // SignalSlots delivered, all lanes
  std::atomic<std::uint64_t> signals_dropped;  // SignalSlots dropped on full signal rings
  std::atomic<std::uint32_t> live_bar_waiting;  // 1: a bar's share waits for a stalled worker (live requests wait)
  // --- workers line: the keeper writes it at start (count, cpus, inline limit) and every
  // heartbeat (stalled, jobs); relaxed, for people (status, doctor) ---
  alignas(kRingLineBytes) std::atomic<std::uint32_t> workers;  // compute workers (serve --workers)
  std::atomic<std::uint32_t> workers_stalled;                 // of them, stuck on a job now
  std::atomic<std::uint64_t> worker_jobs;                     // jobs the workers finished
  std::atomic<std::uint64_t> inline_cost;    // a BACKTEST cheaper than this is computed by the serving thread
  std::atomic<std::uint64_t> max_bar_cost;   // live: bound on one bar's work over every subscription
  std::uint16_t worker_cpus[kMaxWorkerCpus];  // the first `workers` entries: each worker's cpu
  // --- serving line: the keeper writes at start which strategies run at a worker only (timed at
  // load far slower per work unit than their cost says) and every heartbeat whether the serving
  // thread has been inside one request past its limit; relaxed, for people (status, metrics).
  // Appended after every field above, so a client of this layout that predates them reads 0 ---
  alignas(kRingLineBytes) std::atomic<std::uint32_t> strategies_at_workers;  // bit i: strategy i
  std::atomic<std::uint32_t> serving_stuck_strategy;  // the strategy of the request it is stuck in
  std::atomic<std::uint64_t> serving_stuck_ns;        // 0, or how long the serving thread has been in it
  std::atomic<std::uint64_t> serving_stalls;          // requests that held it past the limit, since start
  std::uint32_t strategy_slowdown[kMaxStrategies];    // run()'s time per unit at load over the built-in's, rounded
  // --- journal line (serve --live --journal DIR): the engine writes the facts of its start
  // before `ready`; the journal's writer thread the rest after each batch; relaxed, for people
  // (status, metrics) ---
  alignas(kRingLineBytes) std::atomic<std::uint32_t> journal_state;  // 0 none, 1 ok, 2 disk full, 3 failed
  std::uint32_t journal_fsync;                                        // 0 every, 1 interval, 2 none
  std::atomic<std::uint64_t> journal_records;             // bar records in the journal now
  std::atomic<std::uint64_t> journal_bytes;               // its size now
  std::atomic<std::uint64_t> journal_last_fsync_unix_ns;  // the last fdatasync that returned (0: none yet)
  std::atomic<std::uint64_t> journal_refused;             // APPENDs answered journal_full or journal_failed
  std::uint64_t journal_interval_ms;                      // --fsync interval:MS
  std::uint64_t journal_replayed;                         // bars replayed from it at this start
  std::uint64_t journal_torn_bytes;                       // a torn last record dropped at this start (bytes)
  std::uint64_t journal_starts;                           // engine starts it records, this one included
  char journal_path[kJournalPathBytes];                   // NUL-terminated; empty without a journal
};

// One lane as the engine reports it. Only the engine writes it; `status` reads it.
struct alignas(kRingLineBytes) LaneStatus {
  std::atomic<std::uint32_t> state;  // LaneState
  std::int32_t owner_pid;            // from SO_PEERCRED when the lane was handed over; 0 if free
  std::uint32_t owner_uid;
  // How many times its client re-attached after an engine it used went away (the client says so
  // in its hand-off request; 0 for a first attach).
  std::uint32_t reattaches;
  // 1 when the lane's current object is locked in RAM (mlock; a lane object never uses huge
  // pages). Written by the keeper each time it makes the object.
  std::atomic<std::uint32_t> object_locked;
  std::atomic<std::uint64_t> generation;       // lane objects handed out so far
  std::atomic<std::uint64_t> claimed_unix_ns;  // when the current owner got it
  // The serving thread's counters for this lane, on their own line: it writes them per request.
  alignas(kCacheLine) std::atomic<std::uint64_t> requests;
  std::atomic<std::uint64_t> bad_frames;
  std::atomic<std::uint64_t> ring_fill;  // request frames waiting, sampled now and then
  // Live mode: signals this lane's subscriber lost because its signal ring was full. A
  // subscriber that stops hearing compares it with the drops its frames told it of.
  std::atomic<std::uint64_t> signals_dropped;
  // The service time of every timed request, summed in ns (a request answered in place, under
  // the first bucket's bound without reading the clock, adds 0): the histogram's sum.
  std::atomic<std::uint64_t> service_ns_sum;
  // Service time per request (shm/service_histogram.hpp), counts per bucket since start.
  alignas(kRingLineBytes) std::atomic<std::uint64_t> service_ns[kServiceBuckets];
};

// The first line of a lane object. The engine writes it before the hand-over and never reads it
// back; a client checks it against the hand-off reply.
struct alignas(kRingLineBytes) LaneHeader {
  std::uint64_t magic;  // kLaneMagic
  std::uint32_t layout_version;
  std::uint32_t lane;
  std::uint64_t generation;
  std::uint32_t ring_capacity;
  std::uint32_t signal_capacity;
  std::uint64_t lane_bytes;
  std::uint64_t bulk_offset;
  std::uint64_t bulk_bytes;
};

// The block-mode engine's wake-up for one lane: it announces its sleep in `engine_sleeping`
// and waits for `doorbell` to change; the lane's client bumps it after publishing a request.
// Spin and backoff engines never touch it.
struct alignas(kRingLineBytes) DoorbellLine {
  std::atomic<std::uint32_t> doorbell;
  std::atomic<std::uint32_t> engine_sleeping;
};

inline constexpr std::size_t kLaneHeaderOffset = 0;
inline constexpr std::size_t kLaneDoorbellOffset = 128;
inline constexpr std::size_t kLaneCallOffset = 256;
inline constexpr std::size_t kLaneRequestRingOffset = 512;
inline constexpr std::size_t kLaneResponseRingOffset = 896;
inline constexpr std::size_t kLaneSignalRingOffset = 1280;
inline constexpr std::size_t kLaneCallExtrasOffset = 1664;
inline constexpr std::size_t kLaneSlotsOffset = 1920;

// The exchange's options line and answer record (the rings have theirs beside their slots). Only
// a request with options, and an answer with a record, touch them: a plain call's round trip
// moves the exchange line alone.
struct alignas(kCacheLine) CallExtras {
  RequestOptions options;
  AnswerRecord record;
};

static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "shared 64-bit atomics must be lock-free");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "shared 32-bit atomics must be lock-free");
static_assert(std::is_standard_layout_v<DataHeader>, "DataHeader offsets must be well defined");
static_assert(std::is_standard_layout_v<LaneStatus>, "LaneStatus offsets must be well defined");
static_assert(std::is_trivially_copyable_v<LaneHeader> && std::is_standard_layout_v<LaneHeader>,
              "LaneHeader is plain data");
static_assert(std::is_standard_layout_v<DoorbellLine>, "DoorbellLine offsets must be well defined");
static_assert(sizeof(DataHeader) <= kHeaderBytes, "DataHeader fits its 16 KiB");
static_assert(std::is_trivially_copyable_v<StrategyEntry> && sizeof(StrategyEntry) == 384,
              "StrategyEntry is plain data of a fixed size: clients read the table as the engine wrote it");
static_assert(std::is_trivially_copyable_v<SeriesEntry> && sizeof(SeriesEntry) == 144,
              "SeriesEntry is plain data of a fixed size");
static_assert(offsetof(SeriesEntry, name) == 40 && offsetof(SeriesEntry, columns) == 104 &&
                  offsetof(SeriesEntry, column_offset) == 112,
              "a series entry's columns follow its name: clients read the table as the engine wrote it");
static_assert(offsetof(DataHeader, magic) == 0, "magic opens the data object");
static_assert(offsetof(DataHeader, state) == 8, "state follows magic");
static_assert(offsetof(DataHeader, layout_version) == 12, "the version sits at the same offset in every version");
static_assert(offsetof(DataHeader, heartbeat_ns) % kRingLineBytes == 0 &&
                  offsetof(DataHeader, heartbeat_ns) - offsetof(DataHeader, series_name) >= kSeriesNameBytes,
              "the heartbeat has its own 128-byte line");
static_assert(offsetof(DataHeader, requests) - offsetof(DataHeader, heartbeat_ns) >= kRingLineBytes,
              "the counters line is 128 bytes from the heartbeat line");
static_assert(offsetof(DataHeader, lanes_corrupt) + sizeof(std::uint64_t) - offsetof(DataHeader, requests) <= kCacheLine,
              "every counter stays on the counters line");
static_assert(offsetof(DataHeader, journal_state) % kRingLineBytes == 0 &&
                  offsetof(DataHeader, journal_state) - offsetof(DataHeader, workers) >= kRingLineBytes,
              "the journal line has 128 bytes of its own, apart from the workers line the keeper writes");
static_assert(sizeof(LaneStatus) == kLaneStatusBytes, "LaneStatus is 1 KiB: ownership, counters, histogram");
static_assert(offsetof(LaneStatus, service_ns) % kRingLineBytes == 0,
              "the histogram starts on its own 128-byte line");
static_assert(offsetof(LaneStatus, requests) == kCacheLine,
              "the per-request counters sit on their own line, apart from the ownership fields");
static_assert(sizeof(LaneHeader) <= kLaneDoorbellOffset - kLaneHeaderOffset, "LaneHeader fits before the doorbell");
static_assert(sizeof(DoorbellLine) == kRingLineBytes, "the doorbell has a 128-byte line of its own");
static_assert(kLaneCallOffset - kLaneDoorbellOffset >= sizeof(DoorbellLine), "the doorbell ends before the exchange");
static_assert(kLaneCallOffset % alignof(CallArea) == 0, "the exchange starts on a 128-byte line");
static_assert(kLaneRequestRingOffset - kLaneCallOffset >= sizeof(CallArea), "the exchange ends before the rings");
static_assert(kLaneRequestRingOffset % alignof(RingControl) == 0 && kLaneResponseRingOffset % alignof(RingControl) == 0,
              "ring control blocks are 128-byte aligned in a lane");
static_assert(kLaneResponseRingOffset - kLaneRequestRingOffset >= sizeof(RingControl),
              "the request ring's control block ends before the response ring's");
static_assert(kLaneSignalRingOffset - kLaneResponseRingOffset >= sizeof(RingControl),
              "the response ring's control block ends before the signal ring's");
static_assert(kLaneSignalRingOffset % alignof(RingControl) == 0, "the signal ring's control block is 128-byte aligned");
static_assert(kLaneCallExtrasOffset - kLaneSignalRingOffset >= sizeof(RingControl),
              "the signal ring's control block ends before the exchange's extras");
static_assert(sizeof(CallExtras) == 192 && kLaneSlotsOffset - kLaneCallExtrasOffset >= sizeof(CallExtras),
              "the exchange's extras end before the slots");
static_assert(kLaneSlotsOffset % kRingLineBytes == 0, "the slots start on a 128-byte line");
static_assert(offsetof(DataHeader, bars_published) - offsetof(DataHeader, requests) >= kRingLineBytes &&
                  offsetof(DataHeader, bars_published) % kRingLineBytes == 0,
              "the published bar count has a 128-byte line of its own, apart from the counters");
static_assert(kLaneSlotsOffset % alignof(RequestSlot) == 0, "slots start on a cache line");
static_assert(offsetof(DataHeader, strategies_at_workers) % kRingLineBytes == 0 &&
                  offsetof(DataHeader, strategies_at_workers) > offsetof(DataHeader, worker_cpus),
              "the serving line comes after every earlier field, on a line of its own");

// The placement block's cpus nearest the serving thread, nearest first; the count is bounded by
// the array whatever the header says (attach refuses a larger one). Allocates.
[[nodiscard]] inline std::vector<int> near_cpus_of(const DataHeader& header) {
  const std::size_t count = std::min<std::size_t>(header.near_cpu_count, kMaxNearCpus);
  return std::vector<int>(header.near_cpus, header.near_cpus + count);
}

constexpr std::size_t round_up(std::size_t value, std::size_t multiple) noexcept {
  return (value + multiple - 1) / multiple * multiple;
}

// Where everything goes for one configuration. Pure arithmetic, shared by the engine and its
// clients so that neither can disagree with the other about an offset.
struct SegmentGeometry {
  std::size_t lane_status_offset;
  std::size_t series_offset;
  std::size_t series_bytes;
  std::size_t data_bytes;
  std::size_t extra_series_offset;  // where the series after the main one start
  std::size_t lane_signal_slots_offset;
  std::size_t lane_bulk_offset;
  std::size_t lane_bulk_bytes;
  std::size_t lane_bytes;
};

// `bulk_bytes` is per lane and rounded up to 4 KiB; callers bound it by kMaxBulkBytes.
// `data_page_bytes` is the data object's page size (4 KiB or 2 MiB).
// Bytes one more series takes after the main one's room: its bars, to a 64-byte boundary.
[[nodiscard]] constexpr std::size_t extra_series_bytes(std::size_t bars) noexcept {
  return (bars * sizeof(double) + 63) / 64 * 64;
}

// Bytes the columns besides close of one series of `bars` bars take in the column region: each
// column to a 64-byte boundary. `columns`: IPCFLOOR_COLUMN_* bits (close is not counted).
[[nodiscard]] constexpr std::size_t series_columns_bytes(std::size_t bars, std::uint32_t columns) noexcept {
  std::size_t count = 0;
  for (std::size_t k = 1; k <= kOtherColumns; ++k) count += (columns >> k) & 1U;
  return count * extra_series_bytes(bars);
}

// `capacity_bars` is the room for the main series (its preloaded bars, plus the appended ones when
// live); `signal_capacity` the SignalSlots per lane (0 unless live); `extra_bytes` the sum of
// extra_series_bytes over the other series and of series_columns_bytes over every series (the
// column region follows the other series).
[[nodiscard]] constexpr SegmentGeometry compute_geometry(std::uint32_t lanes, std::uint32_t ring_capacity,
                                                         std::size_t capacity_bars, std::size_t data_page_bytes,
                                                         std::size_t bulk_bytes = kDefaultBulkBytes,
                                                         std::uint32_t signal_capacity = 0,
                                                         std::size_t extra_bytes = 0) noexcept {
  SegmentGeometry g{};
  g.lane_status_offset = kHeaderBytes;
  // The series starts on its own page (a huge page when the object has them) so it is scanned
  // linearly and never shares a line with anything the engine writes.
  g.series_offset = round_up(g.lane_status_offset + std::size_t{lanes} * kLaneStatusBytes, data_page_bytes);
  g.series_bytes = capacity_bars * sizeof(double);
  g.extra_series_offset = round_up(g.series_offset + g.series_bytes, 64);
  g.data_bytes = round_up(g.extra_series_offset + extra_bytes, data_page_bytes);
  // The bulk region sits apart from the rings: a multi-megabyte copy streams through its own
  // pages and never evicts or shares a line with the slots the serving thread polls.
  g.lane_signal_slots_offset =
      kLaneSlotsOffset + std::size_t{ring_capacity} * (sizeof(RequestSlot) + sizeof(ResponseSlot) +
                                                       sizeof(RequestOptions) + sizeof(AnswerRecord));
  g.lane_bulk_offset = round_up(g.lane_signal_slots_offset + std::size_t{signal_capacity} * sizeof(SignalSlot), 4096);
  g.lane_bulk_bytes = round_up(bulk_bytes, 4096);
  g.lane_bytes = g.lane_bulk_offset + g.lane_bulk_bytes;
  return g;
}

// The bars of one series of the data object mapped at `base`: its closes and each other column
// `entry` records (the caller checked the offsets: check_data).
[[nodiscard]] inline Bars series_bars(const SeriesEntry& entry, const std::byte* base) noexcept {
  const auto at = [base](std::uint64_t offset) { return reinterpret_cast<const double*>(base + offset); };
  Bars bars(std::span<const double>(at(entry.offset), static_cast<std::size_t>(entry.bars)));
  const double** const slot[kOtherColumns] = {&bars.open, &bars.high, &bars.low, &bars.volume};
  for (std::size_t k = 0; k < kOtherColumns; ++k)
    if ((entry.columns >> (k + 1)) & 1U) *slot[k] = at(entry.column_offset[k]);
  return bars;
}

// Typed views of one mapped lane object (process-local addresses). Built from geometry the
// viewer validated or computed itself, never from the object's own header.
struct LaneView {
  LaneHeader* header;
  DoorbellLine* doorbell;
  CallArea* call;
  RingControl* request_ring;
  RingControl* response_ring;
  RingControl* signal_ring;
  CallExtras* call_extras;
  RequestSlot* request_slots;
  ResponseSlot* response_slots;
  RequestOptions* request_options;  // beside request_slots, same index
  AnswerRecord* answer_records;     // beside response_slots, same index
  SignalSlot* signal_slots;  // null when the lane has no signal ring (not live)
  std::uint32_t signal_capacity;
  std::byte* bulk;
  std::size_t bulk_bytes;
};

[[nodiscard]] inline LaneView lane_view(std::byte* base, std::uint32_t ring_capacity, const SegmentGeometry& g,
                                        std::uint32_t signal_capacity) noexcept {
  const std::size_t slots = std::size_t{ring_capacity};
  std::byte* const requests = base + kLaneSlotsOffset;
  std::byte* const responses = requests + slots * sizeof(RequestSlot);
  std::byte* const options = responses + slots * sizeof(ResponseSlot);
  std::byte* const records = options + slots * sizeof(RequestOptions);
  return LaneView{
      reinterpret_cast<LaneHeader*>(base + kLaneHeaderOffset),
      reinterpret_cast<DoorbellLine*>(base + kLaneDoorbellOffset),
      reinterpret_cast<CallArea*>(base + kLaneCallOffset),
      reinterpret_cast<RingControl*>(base + kLaneRequestRingOffset),
      reinterpret_cast<RingControl*>(base + kLaneResponseRingOffset),
      reinterpret_cast<RingControl*>(base + kLaneSignalRingOffset),
      reinterpret_cast<CallExtras*>(base + kLaneCallExtrasOffset),
      reinterpret_cast<RequestSlot*>(requests),
      reinterpret_cast<ResponseSlot*>(responses),
      reinterpret_cast<RequestOptions*>(options),
      reinterpret_cast<AnswerRecord*>(records),
      signal_capacity == 0 ? nullptr : reinterpret_cast<SignalSlot*>(base + g.lane_signal_slots_offset),
      signal_capacity,
      base + g.lane_bulk_offset,
      g.lane_bulk_bytes,
  };
}

}  // namespace ipcfloor
