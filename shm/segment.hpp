#pragma once
// The engine's shared memory as process-local objects (docs/SPEC.md §2, §8; the layout is
// shm/layout.hpp, the hand-off shm/handoff.hpp):
//
//   Segment      the engine's side: owns the name (DIR/NAME.lock held with flock, the listening
//                socket DIR/NAME) and the data object, mapped read-write and sealed against
//                everyone else. Makes a fresh lane object whenever a lane needs one.
//   LaneObject   one lane object as one side maps it.
//   Attachment   a client's (or an observer's) side: the connection that is its lease, the data
//                object mapped read-only and, for a client, its lane object.
//
// Creation (engine)
//   - Takes DIR/NAME.lock with flock: held by a live engine, the name is refused (busy); free,
//     any socket left at DIR/NAME is stale and is removed (with a warning). The kernel drops the
//     lock when an engine dies, so this holds across PID namespaces and reused pids.
//   - Builds the data object (huge pages per HugePagesMode, locked per MlockMode), writes the
//     header, lane table and series, publishes `ready` with a release store, then seals it so
//     that nobody else can map it writable, shrink or grow it.
//   - Binds and listens on DIR/NAME (mode 0600) last: whoever can connect finds it complete.
// Attach (client, `status`)
//   - DIR/NAME must be a socket owned by our uid, mode 0600; the engine at the other end must
//     have our uid (SO_PEERCRED). Anything else is refused untouched.
//   - Receives the descriptors, checks each object's size and seals before mapping it, checks
//     magic, version, state, geometry and the series checksum.
//
// Threads: create/attach/make_lane_object/remove are setup calls (they allocate, make syscalls,
// return Expected). The accessors are noexcept, allocation-free and safe from any thread.

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

#include "common/checksum.hpp"
#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "shm/handoff.hpp"
#include "shm/layout.hpp"
#include "shm/shared_object.hpp"

namespace ipcfloor {

// "none", "memfd_4k", "memfd_huge_2m", "unknown": stable names for reports and JSON.
[[nodiscard]] std::string_view backing_name(Backing backing) noexcept;

// True for a name create/attach accept: 1..200 of [A-Za-z0-9._-], and not "." or "..".
[[nodiscard]] bool valid_segment_name(std::string_view name) noexcept;

inline constexpr std::string_view kDefaultSocketDir = "/dev/shm";
inline constexpr std::size_t kMaxSegmentNameBytes = 200;

struct SegmentConfig {
  std::string name;  // the engine listens on DIR/NAME
  std::uint32_t lanes = kDefaultLanes;                 // 1..kMaxLanes
  std::uint32_t ring_capacity = kDefaultRingCapacity;  // power of two >= 2
  std::size_t bulk_bytes = kDefaultBulkBytes;          // per lane, 0..kMaxBulkBytes, rounded up to 4 KiB
  HugePagesMode hugepages = HugePagesMode::automatic;
  MlockMode mlock = MlockMode::automatic;
  std::span<const double> series;  // at least one bar; copied into the data object
  std::string series_name;         // description, truncated into header.series_name
  std::string series_key = "default";  // the main series' name in the series table
  // More series after the main one (up to kMaxSeries in all), each copied in; a frame names one
  // by its index (1, 2, ... in this order). Live mode appends to the main series only.
  struct NamedSeries {
    std::string key;
    std::span<const double> close;
  };
  std::vector<NamedSeries> more_series;
  double fee = 0.0;
  std::uint32_t wait_mode = 0;  // the engine's WaitMode, recorded for clients
  std::uint64_t heartbeat_interval_ns = 10'000'000;
  std::uint64_t max_frame_cost = 0;  // recorded for clients; 0: unbounded
  // Live mode: room for this many bars in all (0 or fewer than the series: just the series), and
  // a signal ring of this many slots (a power of two) in every lane.
  bool live = false;
  std::size_t capacity_bars = 0;
  std::uint32_t signal_capacity = 0;
  // Where DIR/NAME and DIR/NAME.lock live. Anything other than /dev/shm is for tests and for
  // users who keep runtime files elsewhere: attachers must be given the same directory.
  std::string socket_dir = std::string(kDefaultSocketDir);
};

// One lane object as one side maps it. Move-only.
class LaneObject {
 public:
  [[nodiscard]] const LaneView& view() const noexcept { return view_; }
  [[nodiscard]] std::uint32_t lane() const noexcept { return lane_; }
  [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }
  [[nodiscard]] int fd() const noexcept { return object_.fd(); }
  [[nodiscard]] std::size_t size() const noexcept { return object_.size(); }
  [[nodiscard]] std::span<std::byte> bulk() const noexcept { return {view_.bulk, view_.bulk_bytes}; }
  // The fallbacks taken when the object was made (an mlock that RLIMIT_MEMLOCK refused).
  [[nodiscard]] const std::vector<std::string>& warnings() const noexcept { return object_.warnings(); }

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

// The engine's side. Move-only; removes its socket and lock file on destruction.
class Segment {
 public:
  // Errors:
  //   invalid_argument  bad name, lanes, capacity, bulk size, directory, or an empty series
  //   busy              a live engine holds NAME
  //   permission        DIR/NAME or DIR/NAME.lock is not ours, or not what ipcfloor makes
  //   resource          huge pages or mlock required but missing, no memory
  //   io                any other OS failure
  // On success warnings() lists every fallback taken and every stale socket removed.
  [[nodiscard]] static Expected<Segment> create(const SegmentConfig& config);

  // Removes a socket and lock file a dead engine left at DIR/NAME. busy when a live engine
  // holds the name; success when nothing is there.
  [[nodiscard]] static Expected<void> remove_stale(std::string_view name,
                                                   std::string_view socket_dir = kDefaultSocketDir);

  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  // A fresh, zeroed, sealed lane object for `lane`, its header written: one per client, so no
  // state survives from the last one. Setup path (the keeper thread).
  [[nodiscard]] Expected<LaneObject> make_lane_object(std::uint32_t lane, std::uint64_t generation) const;

  // Engine side, on shutdown: tells attachers the engine is going away.
  void mark_stopping() noexcept;

  [[nodiscard]] DataHeader& header() const noexcept { return *reinterpret_cast<DataHeader*>(data_.data()); }
  [[nodiscard]] LaneStatus& lane_status(std::uint32_t lane) const noexcept {
    return reinterpret_cast<LaneStatus*>(data_.data() + geometry_.lane_status_offset)[lane];
  }
  [[nodiscard]] std::span<const double> series() const noexcept {
    return {reinterpret_cast<const double*>(data_.data() + geometry_.series_offset), n_bars_};
  }
  // The whole room for the series, writable: the serving thread appends live bars here (then
  // publishes header().bars_published). Nobody else writes it.
  [[nodiscard]] std::span<double> series_room() noexcept {
    return {reinterpret_cast<double*>(data_.data() + geometry_.series_offset), capacity_bars_};
  }
  [[nodiscard]] std::uint32_t signal_capacity() const noexcept { return signal_capacity_; }
  // The series table: how many, and series `index` (< series_count) as preloaded.
  [[nodiscard]] std::uint32_t series_count() const noexcept { return header().series_count; }
  [[nodiscard]] std::span<const double> series_at(std::uint32_t index) const noexcept {
    const SeriesEntry& entry = header().series_table[index];
    return {reinterpret_cast<const double*>(data_.data() + entry.offset), static_cast<std::size_t>(entry.bars)};
  }
  [[nodiscard]] const SegmentGeometry& geometry() const noexcept { return geometry_; }
  [[nodiscard]] std::uint32_t lane_count() const noexcept { return lane_count_; }
  [[nodiscard]] std::uint32_t ring_capacity() const noexcept { return ring_capacity_; }
  [[nodiscard]] Backing backing() const noexcept { return backing_; }
  [[nodiscard]] bool locked() const noexcept { return data_.locked(); }
  [[nodiscard]] std::size_t size() const noexcept { return data_.size(); }
  [[nodiscard]] int data_fd() const noexcept { return data_.fd(); }
  [[nodiscard]] int listen_fd() const noexcept { return listener_.get(); }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const std::string& socket_path() const noexcept { return socket_path_; }
  [[nodiscard]] const std::vector<std::string>& warnings() const noexcept { return warnings_; }

 private:
  Segment() = default;
  void close() noexcept;

  SharedObject data_;
  UniqueFd lock_;
  UniqueFd listener_;
  std::string name_;
  std::string socket_path_;
  std::string lock_path_;
  dev_t socket_device_ = 0;  // identity of the socket we bound: never unlink a successor's
  ino_t socket_inode_ = 0;
  std::vector<std::string> warnings_;
  SegmentGeometry geometry_{};
  Backing backing_ = Backing::none;
  std::uint32_t lane_count_ = 0;
  std::uint32_t ring_capacity_ = 0;
  std::size_t n_bars_ = 0;
  std::size_t capacity_bars_ = 0;
  std::uint32_t signal_capacity_ = 0;
  MlockMode mlock_ = MlockMode::automatic;
};

struct AttachOptions {
  std::string socket_dir = std::string(kDefaultSocketDir);
  HandoffRole role = HandoffRole::lane;
  // Bound on the whole attach, including waiting for a lane that is being freed.
  std::chrono::nanoseconds timeout = std::chrono::seconds(5);
};

// A client's or an observer's side. Move-only; its destructor hands the lane back.
class Attachment {
 public:
  // Errors: peer_gone (no engine at NAME, or it is stopping), busy (every lane is held by a live
  // client), permission (DIR/NAME or the engine is not ours), version_mismatch, protocol (the
  // engine sent something malformed), timeout, invalid_argument (bad name), io.
  [[nodiscard]] static Expected<Attachment> attach(std::string_view name, const AttachOptions& options = {});

  Attachment(Attachment&& other) noexcept;
  Attachment& operator=(Attachment&& other) noexcept;
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  ~Attachment();  // release()

  // Read-only: the data object is mapped PROT_READ.
  [[nodiscard]] const DataHeader& header() const noexcept { return *reinterpret_cast<const DataHeader*>(data_.data()); }
  [[nodiscard]] const LaneStatus& lane_status(std::uint32_t lane) const noexcept {
    return reinterpret_cast<const LaneStatus*>(data_.data() + geometry_.lane_status_offset)[lane];
  }
  [[nodiscard]] std::span<const double> series() const noexcept {
    return {reinterpret_cast<const double*>(data_.data() + geometry_.series_offset), n_bars_};
  }
  // The bars published so far: the preloaded ones and, live, the appended ones. Each bar is
  // written before the count that covers it is published, so none is ever torn.
  [[nodiscard]] std::span<const double> published_series() const noexcept {
    // acquire: pairs with the release store of bars_published in ShmServer::append_bar.
    const std::uint64_t bars = header().bars_published.load(std::memory_order_acquire);
    return {reinterpret_cast<const double*>(data_.data() + geometry_.series_offset),
            static_cast<std::size_t>(std::min<std::uint64_t>(bars, header().capacity_bars))};
  }
  [[nodiscard]] std::uint32_t signal_capacity() const noexcept { return signal_capacity_; }
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
  [[nodiscard]] const SegmentGeometry& geometry() const noexcept { return geometry_; }
  [[nodiscard]] std::uint32_t lane_count() const noexcept { return lane_count_; }
  [[nodiscard]] std::uint32_t ring_capacity() const noexcept { return ring_capacity_; }
  [[nodiscard]] Backing backing() const noexcept { return backing_; }
  [[nodiscard]] std::size_t size() const noexcept { return data_.size(); }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const std::string& socket_path() const noexcept { return socket_path_; }
  [[nodiscard]] pid_t engine_pid() const noexcept { return engine_pid_; }
  // The received data object's descriptor (sealed: read-only, fixed size).
  [[nodiscard]] int data_fd() const noexcept { return data_.fd(); }

  // The lane (lane role only; empty for observers).
  [[nodiscard]] bool has_lane() const noexcept { return lane_.has_value(); }
  [[nodiscard]] const LaneObject& lane() const noexcept { return *lane_; }

  // True when the engine's end of the connection is gone: the engine died or closed it. One
  // poll(2): for slow paths only.
  [[nodiscard]] bool engine_hung_up() const noexcept;

  // Tells the engine the lane is handed back on purpose, then closes the connection (the lease).
  // The mappings stay until destruction, but the engine no longer serves them. Idempotent.
  void release() noexcept;

 private:
  Attachment() = default;

  UniqueFd connection_;
  SharedObject data_;
  std::optional<LaneObject> lane_;
  std::string name_;
  std::string socket_path_;
  SegmentGeometry geometry_{};
  Backing backing_ = Backing::none;
  std::uint32_t lane_count_ = 0;
  std::uint32_t ring_capacity_ = 0;
  std::size_t n_bars_ = 0;
  std::uint32_t signal_capacity_ = 0;
  pid_t engine_pid_ = 0;
};

}  // namespace ipcfloor
