#pragma once
// The engine's shared memory as process-local objects (docs/SPEC.md §2, §8; the layout is
// shm/layout.hpp, the hand-off shm/handoff.hpp, the name shm/name_claim.hpp):
//
//   Segment      the engine's side: holds the name (NameClaim), the listening socket DIR/NAME
//                (HandoffListener) and the data object, mapped read-write and sealed against
//                everyone else. Makes a fresh lane object whenever a lane needs one.
//   LaneObject   one lane object as one side maps it.
//   Attachment   a client's (or an observer's) side: the data object mapped read-only and, for a
//                client, its lane object and the connection that is its lease (Lease).
//
// Creation (engine)
//   - Checks that the host can back every size asked for (shm/memory_budget.hpp) before
//     anything is allocated: a size it cannot back is refused, never OOM-killed.
//   - Claims the name: held by a live engine, the name is refused (busy); a socket a dead engine
//     left at DIR/NAME is reported with a warning and replaced when the listener opens.
//   - Builds the data object (huge pages per HugePagesMode, locked per MlockMode), writes the
//     header, lane table and series, publishes `ready` with a release store, then seals it so
//     that nobody else can map it writable, shrink or grow it.
//   - Opens the listener last: whoever can connect finds the data complete.
// Attach (client, `status`)
//   - The handshake (request_handoff): DIR/NAME must be a socket owned by our uid, mode 0600;
//     the engine at the other end must have our uid (SO_PEERCRED). Anything else is refused
//     untouched.
//   - Checks each received object's size and seals before mapping it, then closes its
//     descriptor: a client keeps no descriptor of either object, so no other process of its uid
//     can open them through /proc/PID/fd. Checks magic, version, state, geometry and the series
//     checksum.
//   - A lane client keeps its connection (its lease); an observer needs nothing more and closes
//     it at once.
//
// Threads: create/attach/make_lane_object/remove_stale are setup calls (they allocate, make
// syscalls, return Expected). The accessors are noexcept, allocation-free and safe from any
// thread.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/bars.hpp"
#include "common/checksum.hpp"
#include "common/error.hpp"
#include "common/peer_policy.hpp"
#include "common/unique_fd.hpp"
#include "shm/handoff.hpp"
#include "shm/layout.hpp"
#include "shm/memory_budget.hpp"
#include "shm/name_claim.hpp"
#include "shm/shared_object.hpp"
#include "shm/socket_dir.hpp"

namespace ipcfloor {

// "none", "memfd_4k", "memfd_huge_2m", "unknown": stable names for reports and JSON.
[[nodiscard]] std::string_view backing_name(Backing backing) noexcept;

// What is locked in RAM and what is not, in one sentence for the log and `status`: the data
// object (huge pages count as locked: they are never swapped out) and how many of the lane
// objects. Allocates.
[[nodiscard]] std::string memory_lock_text(bool data_locked, Backing backing, std::uint32_t lanes_locked,
                                           std::uint32_t lanes);

// True for a name create/attach accept: 1..200 of [A-Za-z0-9._-], and not "." or "..".
[[nodiscard]] bool valid_segment_name(std::string_view name) noexcept;

inline constexpr std::size_t kMaxSegmentNameBytes = 200;

struct SegmentConfig {
  std::string name;  // the engine listens on DIR/NAME
  std::uint32_t lanes = kDefaultLanes;                 // 1..kMaxLanes
  std::uint32_t ring_capacity = kDefaultRingCapacity;  // power of two >= 2
  std::size_t bulk_bytes = kDefaultBulkBytes;          // per lane, 0..kMaxBulkBytes, rounded up to 4 KiB
  HugePagesMode hugepages = HugePagesMode::automatic;
  MlockMode mlock = MlockMode::automatic;
  // At least one bar; its closes and every other column it has are copied into the data object
  // (a span of closes converts to close-only bars). Each other column is as long as the closes.
  Bars series;
  std::string series_name;         // description, truncated into header.series_name
  std::string series_key = "default";  // the main series' name in the series table
  // More series after the main one (up to kMaxSeries in all), each copied in; a frame names one
  // by its index (1, 2, ... in this order). Live mode appends to the main series only.
  struct NamedSeries {
    std::string key;
    Bars bars;  // its closes and other columns, as `series`
  };
  std::vector<NamedSeries> more_series;
  double fee = 0.0;
  double bars_per_year = kDefaultBarsPerYear;  // what a STATS without the option annualises by
  // The strategies the engine serves, in index order (the built-in one first), recorded for
  // clients: a request names one by its index. Empty: the built-in one alone is recorded.
  std::vector<StrategyEntry> strategies;
  std::uint32_t wait_mode = 0;  // the engine's WaitMode, recorded for clients
  std::uint64_t heartbeat_interval_ns = 10'000'000;
  std::uint64_t max_frame_cost = 0;  // recorded for clients; 0: unbounded
  // The placement block: the serving thread's cpu (-1: not said) and the cpus nearest it, nearest
  // first; the first kMaxNearCpus are recorded, each in 0..65535.
  int serving_cpu = -1;
  std::vector<int> near_cpus;
  // Live mode: room for this many bars in all (0 or fewer than the series: just the series), and
  // a signal ring of this many slots (a power of two) in every lane.
  bool live = false;
  std::size_t capacity_bars = 0;
  std::uint32_t signal_capacity = 0;
  // Live mode: bars an earlier engine appended (its journal's, replayed), written after the
  // preloaded ones and published with them. The checksum and the series table cover the
  // preloaded bars only. They must fit the room (capacity_bars).
  std::span<const double> replayed;
  // The journal, recorded in the header's journal line for `status` (path empty: none).
  struct JournalFacts {
    std::string path;
    std::uint32_t fsync = 0;  // 0 every, 1 interval, 2 none
    std::uint64_t interval_ms = 0;
    std::uint64_t records = 0;     // bar records it holds
    std::uint64_t bytes = 0;       // its size
    std::uint64_t torn_bytes = 0;  // a torn last record dropped at this start
    std::uint64_t starts = 0;      // engine starts it records, this one included
  };
  JournalFacts journal;
  // Where the socket DIR/NAME lives (shm/socket_dir.hpp: by default the user's private
  // directory; create() makes it when missing and refuses one another user could write).
  // Attachers must be given the same directory. The name is held per directory: two engines may
  // serve one name from two directories.
  std::string socket_dir = default_socket_dir();
  // Who besides the engine's own user may attach (serve --allow-uid, --allow-group): the socket is
  // 0666 when anyone is, and the hand-off admits each connection by it (common/peer_policy.hpp).
  PeerPolicy peers;
};

// What both sides know about one segment: its name and socket, and the geometry and sizes its
// data header records (computed by the engine, checked by every attacher). Plain values, so the
// objects that hold them move by default.
struct SegmentFacts {
  std::string name;
  std::string socket_path;
  SegmentGeometry geometry{};
  Backing backing = Backing::none;
  std::uint32_t lane_count = 0;
  std::uint32_t ring_capacity = 0;
  std::size_t n_bars = 0;         // preloaded bars of the main series
  std::size_t capacity_bars = 0;  // room for the main series: the preloaded bars, or live capacity
  std::uint32_t signal_capacity = 0;
};

// What `config` allocates, part by part, with the options that size each part: the data object
// (left out when `data_on_huge_pages`: the huge page pool is not counted in MemAvailable), and
// one lane object per lane plus one to replace a lane's. Pure; for check_memory_budget.
[[nodiscard]] std::vector<MemoryNeed> segment_memory_needs(const SegmentConfig& config, bool data_on_huge_pages);

// One lane object as one side maps it. Move-only.
class LaneObject {
 public:
  [[nodiscard]] const LaneView& view() const noexcept { return view_; }
  [[nodiscard]] std::uint32_t lane() const noexcept { return lane_; }
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }
  // The engine's descriptor, to send; -1 on a client's side, which keeps none.
  [[nodiscard]] int fd() const noexcept { return object_.fd(); }
  [[nodiscard]] std::size_t size() const noexcept { return object_.size(); }
  [[nodiscard]] std::span<std::byte> bulk() const noexcept { return {view_.bulk, view_.bulk_bytes}; }
  // The fallbacks taken when the object was made (an mlock that RLIMIT_MEMLOCK refused).
  [[nodiscard]] const std::vector<std::string>& warnings() const noexcept { return object_.warnings(); }
  // Whether its pages are locked in RAM (the mlock succeeded).
  [[nodiscard]] bool locked() const noexcept { return object_.locked(); }

 private:
  friend class Segment;
  friend class Attachment;
  LaneObject(SharedObject object, const LaneView& view, std::uint32_t lane, std::uint64_t generation) noexcept
      : object_(std::move(object)), view_(view), lane_(lane), generation_(generation) {}

  SharedObject object_;
  LaneView view_;
  std::uint32_t lane_;
  std::uint64_t generation_;
};

// The engine's side. Move-only; on destruction removes its socket (only if DIR/NAME is still the
// socket it bound), then gives up the name.
class Segment {
 public:
  // Errors:
  //   invalid_argument  bad name, lanes, capacity, bulk size, directory, or an empty series
  //   busy              a live engine holds NAME in this directory
  //   permission        DIR/NAME is not an ipcfloor socket of ours
  //   resource          the host cannot back the sizes asked for (the message names the option
  //                     and the limit); huge pages or mlock required but missing
  //   io                any other OS failure
  // On success warnings() lists every fallback taken and every stale socket replaced.
  [[nodiscard]] static Expected<Segment> create(const SegmentConfig& config);

  // Whether the host can back what create() makes for `config`, and `more` besides (what the
  // caller will allocate around it), checked against its stated limits before anything is
  // allocated: resource, naming the option to lower and the limit, when it cannot. create()
  // checks its own part the same way. Reads /proc and /sys (read_host_memory).
  [[nodiscard]] static Expected<void> check_memory(const SegmentConfig& config, std::span<const MemoryNeed> more = {});

  // Removes the socket a dead engine left at DIR/NAME. busy when a live engine holds the name;
  // success when nothing is there. Never removes a socket something listens on.
  [[nodiscard]] static Expected<void> remove_stale(std::string_view name, std::string_view socket_dir);

  Segment(Segment&& other) noexcept = default;
  Segment& operator=(Segment&& other) noexcept = default;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment() = default;

  // A fresh, zeroed, sealed lane object for `lane`, its header written: one per client, so no
  // state survives from the last one. Setup path (the keeper thread).
  [[nodiscard]] Expected<LaneObject> make_lane_object(std::uint32_t lane, std::uint64_t generation) const;

  // Engine side, on shutdown: tells attachers the engine is going away.
  void mark_stopping() noexcept;
  // Engine side, last: leaves the data object mapped when this Segment goes (a compute thread
  // that could not be stopped may still read the series). Nothing may use this Segment after.
  void keep_data_mapped() noexcept { data_.keep_mapped(); }

  [[nodiscard]] DataHeader& header() const noexcept { return *reinterpret_cast<DataHeader*>(data_.data()); }
  [[nodiscard]] LaneStatus& lane_status(std::uint32_t lane) const noexcept {
    return reinterpret_cast<LaneStatus*>(data_.data() + facts_.geometry.lane_status_offset)[lane];
  }
  [[nodiscard]] std::span<const double> series() const noexcept {
    return {reinterpret_cast<const double*>(data_.data() + facts_.geometry.series_offset), facts_.n_bars};
  }
  // The whole room for the series, writable: the serving thread appends live bars here (then
  // publishes header().bars_published). Nobody else writes it.
  [[nodiscard]] std::span<double> series_room() noexcept {
    return {reinterpret_cast<double*>(data_.data() + facts_.geometry.series_offset), facts_.capacity_bars};
  }
  [[nodiscard]] std::uint32_t signal_capacity() const noexcept { return facts_.signal_capacity; }
  // The series table: how many, and series `index` (< series_count) as preloaded.
  [[nodiscard]] std::uint32_t series_count() const noexcept { return header().series_count; }
  [[nodiscard]] std::span<const double> series_at(std::uint32_t index) const noexcept {
    const SeriesEntry& entry = header().series_table[index];
    return {reinterpret_cast<const double*>(data_.data() + entry.offset), static_cast<std::size_t>(entry.bars)};
  }
  // Series `index` (< series_count) as preloaded, with every column it has.
  [[nodiscard]] Bars bars_at(std::uint32_t index) const noexcept {
    return series_bars(header().series_table[index], data_.data());
  }
  [[nodiscard]] const SegmentGeometry& geometry() const noexcept { return facts_.geometry; }
  [[nodiscard]] std::uint32_t lane_count() const noexcept { return facts_.lane_count; }
  [[nodiscard]] std::uint32_t ring_capacity() const noexcept { return facts_.ring_capacity; }
  [[nodiscard]] Backing backing() const noexcept { return facts_.backing; }
  [[nodiscard]] bool locked() const noexcept { return data_.locked(); }
  [[nodiscard]] std::size_t size() const noexcept { return data_.size(); }
  [[nodiscard]] int data_fd() const noexcept { return data_.fd(); }
  [[nodiscard]] int listen_fd() const noexcept { return listener_.fd(); }
  [[nodiscard]] const std::string& name() const noexcept { return facts_.name; }
  [[nodiscard]] const std::string& socket_path() const noexcept { return facts_.socket_path; }
  // Who may attach: SegmentConfig::peers.
  [[nodiscard]] const PeerPolicy& peers() const noexcept { return peers_; }
  [[nodiscard]] const std::vector<std::string>& warnings() const noexcept { return warnings_; }

 private:
  Segment() = default;

  SharedObject data_;
  // Destroyed in reverse order: the socket file goes while the name is still held, so no engine
  // that starts meanwhile can have put its own socket there.
  NameClaim claim_;
  HandoffListener listener_;
  SegmentFacts facts_;
  MlockMode mlock_ = MlockMode::automatic;
  PeerPolicy peers_;
  std::vector<std::string> warnings_;
};

struct AttachOptions {
  std::string socket_dir = default_socket_dir();
  HandoffRole role = HandoffRole::lane;
  // Hash every series against the checksums its header records (reads all of them). Off for a
  // report of the engine's state (`status`), which reads no series: it trusts the recorded ones.
  bool verify_series = true;
  // Bound on the whole attach, including waiting for a lane that is being freed or for a busy
  // engine to take the hand-off.
  std::chrono::nanoseconds timeout = std::chrono::seconds(5);
  // Told to the engine for its status: how many times this client re-attached (HandoffRequest).
  std::uint32_t reattaches = 0;
};

// A client's or an observer's side. Move-only; its destructor hands the lane back.
class Attachment {
 public:
  // Errors: peer_gone (no engine at NAME, or it is stopping), busy (every lane is held by a live
  // client, or the engine stayed too busy to answer within the timeout), permission (DIR/NAME or
  // the engine is not ours), version_mismatch, protocol (the engine sent something malformed),
  // timeout, invalid_argument (bad name), io.
  [[nodiscard]] static Expected<Attachment> attach(std::string_view name, const AttachOptions& options = {});

  Attachment(Attachment&& other) noexcept = default;
  Attachment& operator=(Attachment&& other) noexcept = default;
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  ~Attachment() = default;  // the lease goes first: the lane is handed back

  // Read-only: the data object is mapped PROT_READ.
  [[nodiscard]] const DataHeader& header() const noexcept { return *reinterpret_cast<const DataHeader*>(data_.data()); }
  [[nodiscard]] const LaneStatus& lane_status(std::uint32_t lane) const noexcept {
    return reinterpret_cast<const LaneStatus*>(data_.data() + facts_.geometry.lane_status_offset)[lane];
  }
  [[nodiscard]] std::span<const double> series() const noexcept {
    return {reinterpret_cast<const double*>(data_.data() + facts_.geometry.series_offset), facts_.n_bars};
  }
  // The bars published so far: the preloaded ones and, live, the appended ones. Each bar is
  // written before the count that covers it is published, so none is ever torn.
  [[nodiscard]] std::span<const double> published_series() const noexcept {
    // acquire: pairs with the release store of bars_published that the engine makes after
    // writing each appended bar into Segment::series_room().
    const std::uint64_t bars = header().bars_published.load(std::memory_order_acquire);
    return {reinterpret_cast<const double*>(data_.data() + facts_.geometry.series_offset),
            static_cast<std::size_t>(std::min<std::uint64_t>(bars, header().capacity_bars))};
  }
  [[nodiscard]] std::uint32_t signal_capacity() const noexcept { return facts_.signal_capacity; }
  // The series table, checked at attach (offsets, sizes, checksums): how many series the engine
  // holds, each one's bars and its name. Index 0 is the main series.
  [[nodiscard]] std::uint32_t series_count() const noexcept { return header().series_count; }
  [[nodiscard]] std::span<const double> series_at(std::uint32_t index) const noexcept {
    const SeriesEntry& entry = header().series_table[index];
    return {reinterpret_cast<const double*>(data_.data() + entry.offset), static_cast<std::size_t>(entry.bars)};
  }
  [[nodiscard]] std::string_view series_key(std::uint32_t index) const noexcept {
    return header().series_table[index].name;  // NUL-terminated: checked at attach
  }
  // Series `index` with every column it has, read-only (the offsets were checked at attach).
  // Index 0 is the main series as preloaded; its published bars are published_bars().
  [[nodiscard]] Bars bars_at(std::uint32_t index) const noexcept {
    return series_bars(header().series_table[index], data_.data());
  }
  // The main series' bars published so far (published_series()) with its other columns. A
  // series with columns besides close never grows (APPEND is refused on it); should the count
  // pass the preloaded bars anyway, the columns are left out rather than read past their end.
  [[nodiscard]] Bars published_bars() const noexcept {
    const std::span<const double> close = published_series();
    Bars bars = bars_at(0);
    if (close.size() > bars.size()) return Bars(close);
    return bars.first(close.size());
  }
  // The strategy table, checked at attach (names terminated): how many strategies the engine
  // serves, each one's entry, and the index of the one named `name` (nullopt: none).
  [[nodiscard]] std::uint32_t strategy_count() const noexcept { return header().strategy_count; }
  [[nodiscard]] const StrategyEntry& strategy_at(std::uint32_t index) const noexcept {
    return header().strategy_table[index];
  }
  [[nodiscard]] std::optional<std::uint32_t> find_strategy(std::string_view name) const noexcept {
    for (std::uint32_t i = 0; i < strategy_count(); ++i)
      if (name == strategy_at(i).name) return i;
    return std::nullopt;
  }
  [[nodiscard]] const SegmentGeometry& geometry() const noexcept { return facts_.geometry; }
  [[nodiscard]] std::uint32_t lane_count() const noexcept { return facts_.lane_count; }
  [[nodiscard]] std::uint32_t ring_capacity() const noexcept { return facts_.ring_capacity; }
  [[nodiscard]] Backing backing() const noexcept { return facts_.backing; }
  [[nodiscard]] std::size_t size() const noexcept { return data_.size(); }
  [[nodiscard]] const std::string& name() const noexcept { return facts_.name; }
  [[nodiscard]] const std::string& socket_path() const noexcept { return facts_.socket_path; }
  // The engine's pid in this process's pid namespace (SO_PEERCRED); 0 when it is not visible.
  [[nodiscard]] pid_t engine_pid() const noexcept { return engine_pid_; }

  // The lane (lane role only; empty for observers).
  [[nodiscard]] bool has_lane() const noexcept { return lane_.has_value(); }
  [[nodiscard]] const LaneObject& lane() const noexcept { return *lane_; }

  // True when the engine is gone. A lane client asks its lease (the engine's end of the
  // connection closed: it died or closed it). An observer keeps no connection: it asks whether
  // the engine's process (pid and start time, taken at attach) still runs, or, when that pid is
  // not visible from here, whether its heartbeat is fresh (judge_engine_health). For slow paths
  // only (one poll(2), or a read of /proc).
  [[nodiscard]] bool engine_hung_up() const noexcept;

  // Tells the engine the lane is handed back on purpose, then closes the connection (the lease).
  // The mappings stay until destruction, but the engine no longer serves them. Idempotent.
  void release() noexcept { lease_.release(); }
  // Closes this process's copy of the connection without telling the engine: a forked child's
  // way out of its parent's lane (Lease::abandon). The mappings stay until destruction.
  void abandon() noexcept { lease_.abandon(); }
  // Closes the connection without a notice (its engine is gone) and unmaps the lane object,
  // keeping only the data object mapped: what a client keeps of an engine that went away, so that
  // views of its series stay valid. lane() may not be called after. Idempotent.
  void drop_lane() noexcept {
    lease_.abandon();
    lane_.reset();
  }

 private:
  Attachment() = default;

  SharedObject data_;
  std::optional<LaneObject> lane_;
  SegmentFacts facts_;
  pid_t engine_pid_ = 0;
  std::uint64_t engine_start_ticks_ = 0;  // of engine_pid_, at attach: a recycled pid reads as gone
  Lease lease_;  // last: destroyed first, so the lane is handed back before anything is unmapped
};

}  // namespace ipcfloor
