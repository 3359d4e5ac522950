#pragma once
// The shared-memory segment as a process-local object (docs/SPEC.md §2, §8): the engine creates it,
// clients and `status` attach to it. The bytes inside follow shm/layout.hpp; this class owns
// the mapping and decides whether a named object may be trusted at all.
//
// Creation (engine)
//   - Looks at NAME in every place an attacher would look (each hugetlbfs mount, then the tmpfs
//     directory): a segment of a live engine is refused, a segment left by a dead engine is
//     removed (with a warning), anything it cannot prove is ours and stale is refused untouched.
//   - Backing: a file on a 2 MiB hugetlbfs mount when huge pages are available (per
//     HugePagesMode), else a POSIX shm object (Boost.Interprocess) with 4 KiB pages.
//   - O_EXCL, mode 0600; space reserved with posix_fallocate so a full /dev/shm fails now with a
//     clear error and never as a SIGBUS later; pages populated (MAP_POPULATE) and mlock'ed per
//     MlockMode.
//   - Writes the header, lanes and series completely, then publishes magic and `ready` with a
//     release store (paired with the acquire load in Segment::attach).
//   - The creator holds an flock on the object until it is published, so a concurrent creator
//     inspecting the name can tell "being built" from "left half-built by a crash".
// Attach (client, status)
//   - Owner uid and mode 0600, size, magic, state (no waiting: anything but `ready` is a clear
//     error), version, every offset against compute_geometry, series checksum, engine liveness.
//   - Maps read-write: clients produce into their request rings.
//
// Threads: create/attach/remove are setup calls (they allocate, make syscalls, return
// Expected). The accessors are noexcept, allocation-free and safe from any thread.

#include <sys/types.h>

#include <boost/interprocess/mapped_region.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/checksum.hpp"
#include "common/error.hpp"
#include "shm/huge_pages.hpp"
#include "shm/layout.hpp"
#include "shm/liveness.hpp"

namespace ipcfloor {

// --hugepages auto|require|off
enum class HugePagesMode : std::uint8_t {
  automatic,  // hugetlbfs when a 2 MiB mount has enough free pages, else tmpfs with a warning
  required,   // hugetlbfs or a clear error naming the fix
  off,        // tmpfs only
};

// --mlock auto|require|off
enum class MlockMode : std::uint8_t {
  automatic,  // mlock; when RLIMIT_MEMLOCK forbids it, warn and run unlocked
  required,   // mlock or a clear error naming the fix
  off,        // never mlock
};

// Parse the command-line spellings "auto", "require", "off"; invalid_argument otherwise.
[[nodiscard]] Expected<HugePagesMode> parse_hugepages_mode(std::string_view text);
[[nodiscard]] Expected<MlockMode> parse_mlock_mode(std::string_view text);
// The command-line spelling ("auto", "require", "off").
[[nodiscard]] std::string_view to_string(HugePagesMode mode) noexcept;
[[nodiscard]] std::string_view to_string(MlockMode mode) noexcept;
// A stable lowercase name for reports and JSON: "none", "tmpfs_4k", "hugetlbfs_2m", "unknown".
[[nodiscard]] std::string_view backing_name(Backing backing) noexcept;

// True for a name create/attach accept: 1..200 of [A-Za-z0-9._-], and not "." or "..".
[[nodiscard]] bool valid_segment_name(std::string_view name) noexcept;

inline constexpr std::string_view kDefaultTmpfsDir = "/dev/shm";
inline constexpr std::size_t kMaxSegmentNameBytes = 200;
inline constexpr std::size_t kSmallPageBytes = 4096;

struct SegmentConfig {
  std::string name;  // the object is /dev/shm/NAME or <hugetlbfs mount>/NAME
  std::uint32_t lanes = kDefaultLanes;                 // 1..kMaxLanes
  std::uint32_t ring_capacity = kDefaultRingCapacity;  // power of two >= 2
  std::size_t bulk_bytes = kDefaultBulkBytes;          // per lane, 0..kMaxBulkBytes, rounded up to 4 KiB
  HugePagesMode hugepages = HugePagesMode::automatic;
  MlockMode mlock = MlockMode::automatic;
  std::span<const double> series;  // at least one bar; copied into the series region
  std::string series_name;         // description, truncated into header.series_name
  double fee = 0.0;
  std::uint32_t wait_mode = 0;  // the engine's WaitMode, recorded for clients
  std::uint64_t heartbeat_interval_ns = 10'000'000;
  // Where tmpfs-backed objects live. Anything other than /dev/shm is for tests (e.g. a tiny
  // tmpfs to provoke ENOSPC): attachers must be given the same directory.
  std::string tmpfs_dir = std::string(kDefaultTmpfsDir);
};

// Move-only owner of one mapping of a segment. The creator also removes the object on
// destruction unless release_ownership() was called.
class Segment {
 public:
  // Engine side. Allocates; returns
  //   invalid_argument  bad name, lanes, capacity or empty series
  //   busy              NAME is held by a live engine (or is being created right now)
  //   permission        an object at NAME is not ours (owner or mode)
  //   bad_data          an object at NAME is not an ipcfloor segment we can prove stale
  //   version_mismatch  an object at NAME is a segment of another layout version
  //   resource          no room in tmpfs / hugetlbfs, huge pages or mlock required but missing
  //   io                any other OS failure
  // On success warnings() lists every fallback taken and every stale object removed.
  [[nodiscard]] static Expected<Segment> create(const SegmentConfig& config);

  // Client / status side. Looks for NAME on each hugetlbfs mount, then in `tmpfs_dir`. Never
  // waits: a segment that is not `ready` is an error (busy while building, peer_gone when
  // stopping or when its engine is dead). Also permission, bad_data, version_mismatch, io.
  [[nodiscard]] static Expected<Segment> attach(std::string_view name,
                                                std::string_view tmpfs_dir = kDefaultTmpfsDir);

  // Removes the object at NAME (every place create/attach would look) unless a live engine
  // holds it (busy) or it is not ours (permission). Succeeds when nothing is there.
  [[nodiscard]] static Expected<void> remove(std::string_view name,
                                             std::string_view tmpfs_dir = kDefaultTmpfsDir);

  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  [[nodiscard]] SegmentHeader& header() const noexcept { return *reinterpret_cast<SegmentHeader*>(base()); }
  [[nodiscard]] std::byte* base() const noexcept { return static_cast<std::byte*>(region_.get_address()); }
  [[nodiscard]] std::size_t size() const noexcept { return region_.get_size(); }
  // Geometry as validated by create/attach, kept in this process. The header's copy lives in
  // writable shared memory, so a corrupt or hostile peer could rewrite it later; every region
  // below is located from these private copies instead, and so always lies inside the mapping.
  [[nodiscard]] std::uint32_t lane_count() const noexcept { return lane_count_; }
  [[nodiscard]] std::uint32_t ring_capacity() const noexcept { return ring_capacity_; }
  // Precondition: i < lane_count().
  [[nodiscard]] LaneView lane(std::uint32_t i) const noexcept {
    return lane_view(base(), geometry_.lanes_offset, geometry_.lane_stride, ring_capacity_, i);
  }
  // Lane i's bulk region (empty when the segment has none). Precondition: i < lane_count().
  [[nodiscard]] std::span<std::byte> bulk(std::uint32_t i) const noexcept {
    return {base() + geometry_.bulk_offset + std::size_t{i} * geometry_.bulk_stride, geometry_.bulk_stride};
  }
  [[nodiscard]] std::span<const double> series() const noexcept;
  [[nodiscard]] Backing backing() const noexcept { return backing_; }
  // True when the pages cannot be swapped out: mlock'ed, or on hugetlbfs (never swapped).
  [[nodiscard]] bool locked() const noexcept { return locked_; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }  // e.g. "/dev/shm/NAME"
  [[nodiscard]] const std::vector<std::string>& warnings() const noexcept { return warnings_; }
  [[nodiscard]] bool owns_object() const noexcept { return owner_; }

  // Engine side, on shutdown: tells attachers and clients the engine is going away.
  void mark_stopping() noexcept;

  // Keeps the object after this Segment is destroyed (e.g. handed over, or a test simulating a
  // crash). The mapping is still unmapped.
  void release_ownership() noexcept { owner_ = false; }

 private:
  Segment() = default;
  void close() noexcept;

  boost::interprocess::mapped_region region_;
  std::string name_;
  std::string path_;
  std::vector<std::string> warnings_;
  Backing backing_ = Backing::none;
  bool locked_ = false;
  bool owner_ = false;       // unlink path_ on destruction
  bool posix_shm_ = false;   // path_ is a POSIX shm object (shm_unlink) rather than a file
  dev_t device_ = 0;         // identity of the object we created: never unlink a successor
  ino_t inode_ = 0;
  SegmentGeometry geometry_{};  // validated offsets (see lane_count())
  std::uint32_t lane_count_ = 0;
  std::uint32_t ring_capacity_ = 0;
  std::uint64_t n_bars_ = 0;
};

}  // namespace ipcfloor
