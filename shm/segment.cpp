#include "shm/segment.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <boost/interprocess/exceptions.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/interprocess/shared_memory_object.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <optional>
#include <thread>
#include <utility>

namespace ipcfloor {
namespace bip = boost::interprocess;

namespace {

constexpr mode_t kObjectMode = 0600;
constexpr std::string_view kHugePagesFix =
    "echo 64 > /proc/sys/vm/nr_hugepages && mount -t hugetlbfs nodev /dev/hugepages";
// A creator holds the object's flock only while it builds (milliseconds); an inspector holds it
// for a few syscalls. Waiting this long tells a busy lock from a builder that is really there.
constexpr std::chrono::milliseconds kLockPatience{250};
constexpr int kCreateAttempts = 4;
// How long an inspector lets go of a magic-less object before it looks again.
constexpr std::chrono::milliseconds kFreshObjectGrace{20};

class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  [[nodiscard]] int get() const noexcept { return fd_; }
  explicit operator bool() const noexcept { return fd_ >= 0; }
  void reset() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// Lets Boost's mapped_region map a descriptor we opened ourselves (hugetlbfs files need
// O_CREAT|O_EXCL, which Boost's file_mapping does not offer; attachers need O_NOFOLLOW).
class FdMappable {
 public:
  explicit FdMappable(int fd) noexcept : fd_(fd) {}
  [[nodiscard]] bip::mapping_handle_t get_mapping_handle() const noexcept {
    bip::mapping_handle_t handle;
    handle.handle = fd_;
    handle.is_xsi = false;
    return handle;
  }

 private:
  int fd_;
};

std::string errno_text(int error) { return std::strerror(error); }

std::string mode_text(mode_t mode) { return fmt::format("{:04o}", mode & 07777); }

std::string kib_text(std::uint64_t bytes) { return fmt::format("{} KiB", (bytes + 1023) / 1024); }

// ---------------------------------------------------------------------------------------------
// Where objects live

struct Location {
  std::string dir;
  std::string path;  // dir + "/" + name
  Backing backing;
  bool posix_shm;  // /dev/shm: created through Boost's shared_memory_object, shm_unlink'ed
};

// Every place an attacher looks for NAME, in its order: hugetlbfs mounts, then tmpfs.
std::vector<Location> locations_for(std::string_view name, std::string_view tmpfs_dir) {
  std::vector<Location> where;
  for (std::string& dir : hugetlbfs_2m_mounts()) {
    std::string path = fmt::format("{}/{}", dir, name);
    where.push_back(Location{std::move(dir), std::move(path), Backing::hugetlbfs_2m, false});
  }
  std::string dir(tmpfs_dir);
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  where.push_back(Location{dir, fmt::format("{}/{}", dir, name), Backing::tmpfs_4k, dir == kDefaultTmpfsDir});
  return where;
}

// Removes `location` only while it is still the very object (device, inode) we mean: never a
// successor another process created at the same name in the meantime.
bool unlink_if_same(const Location& location, std::string_view name, dev_t device, ino_t inode) noexcept {
  struct stat now {};
  if (::lstat(location.path.c_str(), &now) != 0 || now.st_dev != device || now.st_ino != inode) return false;
  if (location.posix_shm) {
    try {
      return bip::shared_memory_object::remove(std::string(name).c_str());
    } catch (...) {
      return false;
    }
  }
  return ::unlink(location.path.c_str()) == 0;
}

// ---------------------------------------------------------------------------------------------
// Trust checks shared by create (inspecting a stale object), attach and remove

Expected<void> check_owner_and_mode(const struct stat& info, std::string_view name, const std::string& path) {
  if (S_ISLNK(info.st_mode)) {
    return fail(ErrorCode::permission, "{} ({}) is a symbolic link; ipcfloor only trusts regular 0600 objects owned by uid {}",
                name, path, ::geteuid());
  }
  if (!S_ISREG(info.st_mode)) {
    return fail(ErrorCode::permission, "{} ({}) is not a regular file (mode {:o}); ipcfloor only trusts regular 0600 objects",
                name, path, info.st_mode);
  }
  if (info.st_uid != ::geteuid() || (info.st_mode & 07777) != kObjectMode) {
    return fail(ErrorCode::permission, "{} ({}) is owned by uid {} (mode {}); ipcfloor only trusts 0600 objects owned by uid {}",
                name, path, info.st_uid, mode_text(info.st_mode), ::geteuid());
  }
  return {};
}

std::size_t page_bytes_of(Backing backing) noexcept {
  switch (backing) {
    case Backing::tmpfs_4k: return kSmallPageBytes;
    case Backing::hugetlbfs_2m: return kHugePageBytes;
    case Backing::none: break;
  }
  return 0;
}

// The header fields that locate regions or name the engine, read once into private memory. The
// header is writable shared memory: checking the fields in place and reading them again to use
// them would let a peer that rewrites them in between move a region the check accepted.
struct LayoutSnapshot {
  std::uint64_t segment_bytes;
  std::uint32_t header_bytes;
  std::uint32_t lane_count;
  std::uint32_t ring_capacity;
  std::uint32_t backing;
  std::int32_t engine_pid;
  std::uint32_t engine_uid;
  std::uint64_t engine_start_ticks;
  std::uint64_t lanes_offset;
  std::uint64_t lane_stride;
  std::uint64_t bulk_offset;
  std::uint64_t bulk_stride;
  std::uint64_t series_offset;
  std::uint64_t series_bytes;
  std::uint64_t n_bars;
  std::uint64_t series_checksum;
};

LayoutSnapshot snapshot_layout(const SegmentHeader& header) noexcept {
  return LayoutSnapshot{header.segment_bytes, header.header_bytes,  header.lane_count,         header.ring_capacity,
                        header.backing,       header.engine_pid,    header.engine_uid,         header.engine_start_ticks,
                        header.lanes_offset,  header.lane_stride,   header.bulk_offset,        header.bulk_stride,
                        header.series_offset, header.series_bytes,  header.n_bars,             header.series_checksum};
}

// Everything in a version-matching header that an offset is computed from, against the object
// it sits in: after this, every region the snapshot names lies inside the mapping.
Expected<void> check_layout(const LayoutSnapshot& header, std::size_t object_bytes, Backing found_on,
                            std::string_view name, const std::string& path) {
  const auto corrupt = [&](std::string what) {
    return fail(ErrorCode::bad_data, "{} ({}) is a corrupt ipcfloor segment: {}", name, path, what);
  };
  if (header.header_bytes != kHeaderBytes) return corrupt(fmt::format("header_bytes is {}, expected {}", header.header_bytes, kHeaderBytes));
  if (header.segment_bytes != object_bytes) {
    return corrupt(fmt::format("the header says {} bytes but the object has {}", header.segment_bytes, object_bytes));
  }
  if (header.lane_count < 1 || header.lane_count > kMaxLanes) return corrupt(fmt::format("lane_count {} is outside 1..{}", header.lane_count, kMaxLanes));
  if (!valid_ring_capacity(header.ring_capacity)) return corrupt(fmt::format("ring_capacity {} is not a power of two >= 2", header.ring_capacity));
  const auto backing = static_cast<Backing>(header.backing);
  if (page_bytes_of(backing) == 0 || backing != found_on) {
    return corrupt(fmt::format("backing {} does not match where it was found ({})", header.backing, backing_name(found_on)));
  }
  if (header.n_bars < 1 || header.n_bars > object_bytes / sizeof(double)) {
    return corrupt(fmt::format("n_bars {} does not fit in {} bytes", header.n_bars, object_bytes));
  }
  if (header.bulk_stride > kMaxBulkBytes || header.bulk_stride % 4096 != 0) {
    return corrupt(fmt::format("bulk_stride {} is not a 4 KiB multiple of at most {}", header.bulk_stride, kMaxBulkBytes));
  }
  const SegmentGeometry g = compute_geometry(header.lane_count, header.ring_capacity, header.n_bars, page_bytes_of(backing),
                                             header.bulk_stride);
  if (header.lanes_offset != g.lanes_offset || header.lane_stride != g.lane_stride || header.bulk_offset != g.bulk_offset ||
      header.series_offset != g.series_offset || header.series_bytes != g.series_bytes ||
      header.segment_bytes != g.segment_bytes) {
    return corrupt(fmt::format("offsets (lanes {} stride {} bulk {} stride {} series {}+{} total {}) differ from this "
                               "build's layout (lanes {} stride {} bulk {} stride {} series {}+{} total {})",
                               header.lanes_offset, header.lane_stride, header.bulk_offset, header.bulk_stride,
                               header.series_offset, header.series_bytes, header.segment_bytes, g.lanes_offset,
                               g.lane_stride, g.bulk_offset, g.bulk_stride, g.series_offset, g.series_bytes,
                               g.segment_bytes));
  }
  if (g.series_offset + g.series_bytes > object_bytes) return corrupt("the series region runs past the end of the object");
  if (header.engine_pid <= 0) return corrupt(fmt::format("engine_pid {} is not a pid", header.engine_pid));
  if (header.engine_uid != ::geteuid()) {
    return corrupt(fmt::format("it names engine uid {} but is owned by uid {}", header.engine_uid, ::geteuid()));
  }
  return {};
}

std::string version_mismatch_text(std::string_view name, const std::string& path, std::uint32_t found) {
  return fmt::format("{} ({}) has layout version {} but this build uses layout version {}; run the same ipcfloor "
                     "build on both sides",
                     name, path, found, kLayoutVersion);
}

Expected<bip::mapped_region> map_fd(int fd, std::size_t bytes, bool writable, bool populate, const std::string& path) {
  try {
    return bip::mapped_region(FdMappable(fd), writable ? bip::read_write : bip::read_only, 0, bytes, nullptr,
                              populate ? bip::map_options_t{MAP_POPULATE} : bip::default_map_options);
  } catch (const bip::interprocess_exception& error) {
    return fail(ErrorCode::io, "cannot map {} ({} bytes): {}", path, bytes, error.what());
  }
}

// Takes the object's flock, waiting out an inspector but not a builder. False when a builder
// holds it (or keeps it longer than kLockPatience).
bool lock_briefly(int fd) {
  const auto deadline = std::chrono::steady_clock::now() + kLockPatience;
  for (;;) {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
    if (errno != EWOULDBLOCK && errno != EINTR) return true;  // no flock support: nothing to wait for
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

// True when the object starts with our magic. pread, not a mapping: reading past the end of
// a short file is a short read, never a SIGBUS.
bool has_magic(int fd) noexcept {
  std::uint64_t magic = 0;
  return ::pread(fd, &magic, sizeof magic, 0) == static_cast<ssize_t>(sizeof magic) && magic == kSegmentMagic;
}

// What create and remove do about an object already at a location.
enum class Policy : std::uint8_t {
  remove_stale,  // create: remove only a proven ipcfloor segment of a dead engine
  remove_ours,   // remove: remove anything we own unless a live engine holds it
};
enum class Outcome : std::uint8_t { absent, removed, retry };

Expected<Outcome> clear_location(const Location& location, std::string_view name, Policy policy,
                                 std::vector<std::string>& warnings) {
  const std::string& path = location.path;
  struct stat link_info {};
  if (::lstat(path.c_str(), &link_info) != 0) {
    if (errno == ENOENT) return Outcome::absent;
    return fail(ErrorCode::io, "cannot inspect {}: {}", path, errno_text(errno));
  }
  // A foreign or odd object is refused before it is even opened. An explicit remove may take
  // our own regular file whatever its mode.
  const bool ours_to_remove =
      policy == Policy::remove_ours && S_ISREG(link_info.st_mode) && link_info.st_uid == ::geteuid();
  if (!ours_to_remove) {
    if (auto trusted = check_owner_and_mode(link_info, name, path); !trusted) {
      trusted.error().message += "; it was left untouched";
      return std::unexpected(std::move(trusted.error()));
    }
  }
  // O_NONBLOCK: a FIFO swapped in after lstat must not hang us; O_NOFOLLOW: nor a symlink.
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return Outcome::retry;
    return fail(ErrorCode::io, "cannot open {}: {}", path, errno_text(errno));
  }
  if (!lock_briefly(fd.get())) {
    return fail(ErrorCode::busy, "{} ({}) is being created by another process right now; retry, or choose another --name",
                name, path);
  }
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) return fail(ErrorCode::io, "cannot stat {}: {}", path, errno_text(errno));
  if (info.st_dev != link_info.st_dev || info.st_ino != link_info.st_ino) return Outcome::retry;  // replaced meanwhile
  struct stat again {};
  if (::lstat(path.c_str(), &again) != 0 || again.st_dev != info.st_dev || again.st_ino != info.st_ino) {
    return Outcome::retry;  // another creator removed it while we waited for the lock
  }
  // A creator takes its lock a moment after O_EXCL made the object, so an object without magic
  // may be one we locked in that gap: give it one chance to show that it is being built.
  if (policy == Policy::remove_stale && !has_magic(fd.get())) {
    ::flock(fd.get(), LOCK_UN);
    std::this_thread::sleep_for(kFreshObjectGrace);
    if (!lock_briefly(fd.get())) {
      return fail(ErrorCode::busy, "{} ({}) is being created by another process right now; retry, or choose another --name",
                  name, path);
    }
    if (::fstat(fd.get(), &info) != 0) return fail(ErrorCode::io, "cannot stat {}: {}", path, errno_text(errno));
  }

  const auto object_bytes = static_cast<std::size_t>(info.st_size);
  const auto remove_it = [&](std::string warning) -> Expected<Outcome> {
    if (!unlink_if_same(location, name, info.st_dev, info.st_ino)) {
      if (errno == ENOENT) return Outcome::retry;
      return fail(ErrorCode::io, "cannot remove {}: {}", path, errno_text(errno));
    }
    if (!warning.empty()) warnings.push_back(std::move(warning));
    return Outcome::removed;
  };
  const std::string junk_hint =
      fmt::format("; ipcfloor removes only segments it can prove stale: if it is junk remove it (rm {}), or choose "
                  "another --name (if an engine is starting under this name right now, retry)",
                  path);

  if (object_bytes < kHeaderBytes) {
    if (policy == Policy::remove_ours) return remove_it({});
    return fail(ErrorCode::bad_data, "{} holds {} bytes, less than an ipcfloor header ({}): not an ipcfloor segment{}", path,
                object_bytes, kHeaderBytes, junk_hint);
  }
  auto region = map_fd(fd.get(), object_bytes, false, false, path);
  if (!region) return std::unexpected(std::move(region.error()));
  // Plain reads are safe here: a creator writes the identity fields only while it holds the
  // flock we now hold, and never changes them afterwards.
  const auto& header = *static_cast<const SegmentHeader*>(region->get_address());
  if (header.magic != kSegmentMagic) {
    if (policy == Policy::remove_ours) return remove_it({});
    return fail(ErrorCode::bad_data, "{} is not an ipcfloor segment (magic {:#018x}, expected {:#018x}){}", path,
                header.magic, kSegmentMagic, junk_hint);
  }
  if (header.layout_version != kLayoutVersion) {
    // Another layout may keep the engine's pid elsewhere: its liveness cannot be judged.
    if (policy == Policy::remove_ours) return remove_it({});
    return fail(ErrorCode::version_mismatch, "{}; stop the engine that serves it or remove it (rm {})",
                version_mismatch_text(name, path, header.layout_version), path);
  }
  const LayoutSnapshot layout = snapshot_layout(header);
  if (auto valid = check_layout(layout, object_bytes, location.backing, name, path); !valid) {
    if (policy == Policy::remove_ours) return remove_it({});
    valid.error().message += junk_hint;
    return std::unexpected(std::move(valid.error()));
  }
  const pid_t pid = layout.engine_pid;
  if (process_alive(pid, layout.engine_start_ticks)) {
    return fail(ErrorCode::busy, "engine {} (pid {}) is running; stop it first or choose another --name", name, pid);
  }
  return remove_it(policy == Policy::remove_stale
                       ? fmt::format("removed stale segment {} left by dead engine pid {} ({})", name, pid, path)
                       : std::string{});
}

// ---------------------------------------------------------------------------------------------
// Creation

// The new object: a POSIX shm object (Boost) for /dev/shm, a plain file elsewhere.
struct CreatedObject {
  bip::shared_memory_object shm;
  UniqueFd file;
  [[nodiscard]] int fd() const noexcept { return file ? file.get() : shm.get_mapping_handle().handle; }
};

// O_EXCL create with mode 0600. nullopt when NAME exists (the caller inspects it and retries).
Expected<std::optional<CreatedObject>> create_exclusive(const Location& location, std::string_view name) {
  CreatedObject object;
  if (location.posix_shm) {
    try {
      bip::permissions permissions(kObjectMode);
      object.shm = bip::shared_memory_object(bip::create_only, std::string(name).c_str(), bip::read_write, permissions);
    } catch (const bip::interprocess_exception& error) {
      if (error.get_native_error() == EEXIST || error.get_error_code() == bip::already_exists_error) {
        return std::optional<CreatedObject>{};
      }
      return fail(ErrorCode::io, "cannot create {}: {}", location.path, error.what());
    }
  } else {
    object.file = UniqueFd(::open(location.path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, kObjectMode));
    if (!object.file) {
      if (errno == EEXIST) return std::optional<CreatedObject>{};
      return fail(errno == EACCES || errno == EPERM ? ErrorCode::permission : ErrorCode::io, "cannot create {}: {}",
                  location.path, errno_text(errno));
    }
  }
  return std::optional<CreatedObject>(std::move(object));
}

std::string memlock_limit_text() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unknown";
  if (limit.rlim_cur == RLIM_INFINITY) return "unlimited";
  return kib_text(limit.rlim_cur);
}

std::string huge_pages_fix(std::uint64_t pages_needed, const HugePageBudget& budget, bool have_mount) {
  const std::uint64_t want = std::max<std::uint64_t>(64, budget.total + pages_needed - std::min(pages_needed, budget.available));
  if (have_mount) return fmt::format("echo {} > /proc/sys/vm/nr_hugepages", want);
  if (want == 64) return std::string(kHugePagesFix);
  return fmt::format("echo {} > /proc/sys/vm/nr_hugepages && mount -t hugetlbfs nodev /dev/hugepages", want);
}

void copy_series_name(SegmentHeader& header, std::string_view text) noexcept {
  std::size_t length = std::min(text.size(), kSeriesNameBytes - 1);
  // Do not cut a UTF-8 sequence in half.
  if (length < text.size()) {
    while (length > 0 && (static_cast<unsigned char>(text[length]) & 0xC0) == 0x80) --length;
  }
  std::memcpy(header.series_name, text.data(), length);
  header.series_name[length] = '\0';
}

Expected<void> validate_config(const SegmentConfig& config) {
  if (!valid_segment_name(config.name)) {
    return fail(ErrorCode::invalid_argument, "segment name '{}' is invalid: use 1..{} characters of A-Z a-z 0-9 . _ - (not . or ..)",
                config.name, kMaxSegmentNameBytes);
  }
  if (config.lanes < 1 || config.lanes > kMaxLanes) {
    return fail(ErrorCode::invalid_argument, "--lanes {} is outside 1..{}", config.lanes, kMaxLanes);
  }
  if (!valid_ring_capacity(config.ring_capacity) || config.ring_capacity > kMaxRingCapacity) {
    return fail(ErrorCode::invalid_argument, "ring capacity {} is not a power of two in 2..{}", config.ring_capacity,
                kMaxRingCapacity);
  }
  if (config.series.empty()) return fail(ErrorCode::invalid_argument, "the series is empty: the segment needs at least one bar");
  if (config.bulk_bytes > kMaxBulkBytes) {
    return fail(ErrorCode::invalid_argument, "--bulk-bytes {} is more than the {} bytes a lane's bulk region may have",
                config.bulk_bytes, kMaxBulkBytes);
  }
  if (config.tmpfs_dir.empty() || config.tmpfs_dir.front() != '/') {
    return fail(ErrorCode::invalid_argument, "tmpfs directory '{}' is not an absolute path", config.tmpfs_dir);
  }
  return {};
}

}  // namespace

// =============================================================================================

Expected<HugePagesMode> parse_hugepages_mode(std::string_view text) {
  if (text == "auto") return HugePagesMode::automatic;
  if (text == "require") return HugePagesMode::required;
  if (text == "off") return HugePagesMode::off;
  return fail(ErrorCode::invalid_argument, "--hugepages '{}' is not one of auto, require, off", text);
}

Expected<MlockMode> parse_mlock_mode(std::string_view text) {
  if (text == "auto") return MlockMode::automatic;
  if (text == "require") return MlockMode::required;
  if (text == "off") return MlockMode::off;
  return fail(ErrorCode::invalid_argument, "--mlock '{}' is not one of auto, require, off", text);
}

std::string_view to_string(HugePagesMode mode) noexcept {
  switch (mode) {
    case HugePagesMode::automatic: return "auto";
    case HugePagesMode::required: return "require";
    case HugePagesMode::off: return "off";
  }
  return "unknown";
}

std::string_view to_string(MlockMode mode) noexcept {
  switch (mode) {
    case MlockMode::automatic: return "auto";
    case MlockMode::required: return "require";
    case MlockMode::off: return "off";
  }
  return "unknown";
}

std::string_view backing_name(Backing backing) noexcept {
  switch (backing) {
    case Backing::none: return "none";
    case Backing::tmpfs_4k: return "tmpfs_4k";
    case Backing::hugetlbfs_2m: return "hugetlbfs_2m";
  }
  return "unknown";
}

bool valid_segment_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxSegmentNameBytes || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

// ---------------------------------------------------------------------------------------------

Expected<Segment> Segment::create(const SegmentConfig& config) {
  if (auto valid = validate_config(config); !valid) return std::unexpected(std::move(valid.error()));
  const std::string& name = config.name;
  const std::vector<Location> locations = locations_for(name, config.tmpfs_dir);
  const Location& tmpfs = locations.back();
  const Location* huge = locations.size() > 1 ? &locations.front() : nullptr;

  const auto build = [&](CreatedObject object, const Location& location,
                         std::vector<std::string> warnings) -> Expected<Segment> {
    const std::size_t page_bytes = page_bytes_of(location.backing);
    const SegmentGeometry g =
        compute_geometry(config.lanes, config.ring_capacity, config.series.size(), page_bytes, config.bulk_bytes);
    const int fd = object.fd();
    // Held until `ready` is published: an inspecting creator then knows the object is being
    // built, not abandoned. On a failure return the lock dies with the object's removal.
    while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0) return fail(ErrorCode::io, "cannot stat {}: {}", location.path, errno_text(errno));
    Segment segment;
    segment.name_ = name;
    segment.path_ = location.path;
    segment.backing_ = location.backing;
    segment.owner_ = true;  // from here on, any failure return removes the object
    segment.posix_shm_ = location.posix_shm;
    segment.device_ = info.st_dev;
    segment.inode_ = info.st_ino;
    segment.geometry_ = g;
    segment.lane_count_ = config.lanes;
    segment.ring_capacity_ = config.ring_capacity;
    segment.n_bars_ = config.series.size();
    // umask may have stripped bits from 0600; attachers insist on exactly 0600.
    if (::fchmod(fd, kObjectMode) != 0) return fail(ErrorCode::io, "cannot chmod {} to 0600: {}", location.path, errno_text(errno));

    // Reserve every byte now: a full tmpfs must fail here with a message, never later as a
    // SIGBUS on first touch.
    if (const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(g.segment_bytes)); rc != 0) {
      if (location.backing == Backing::hugetlbfs_2m) {
        return fail(ErrorCode::resource, "{} could not supply {} huge pages of 2 MiB for {} ({} bytes): {}", location.dir,
                    g.segment_bytes / kHugePageBytes, name, g.segment_bytes, errno_text(rc));
      }
      struct statvfs fs {};
      const std::uint64_t free_bytes =
          ::statvfs(location.dir.c_str(), &fs) == 0 ? std::uint64_t{fs.f_bavail} * fs.f_frsize : 0;
      return fail(ErrorCode::resource,
                  "{} is too small: segment {} needs {} bytes ({} lanes x ({} ring + {} bulk) bytes, {} bars) but "
                  "only {} bytes are free ({}); free space there or enlarge it (mount -o remount,size=<bigger> {}), "
                  "or use fewer bars/lanes or a smaller --bulk-bytes",
                  location.dir, name, g.segment_bytes, config.lanes, g.lane_stride, g.bulk_stride,
                  config.series.size(), free_bytes, errno_text(rc), location.dir);
    }
    if (::fstat(fd, &info) != 0) return fail(ErrorCode::io, "cannot stat {}: {}", location.path, errno_text(errno));
    if (static_cast<std::size_t>(info.st_size) != g.segment_bytes &&
        ::ftruncate(fd, static_cast<off_t>(g.segment_bytes)) != 0) {
      return fail(ErrorCode::io, "cannot size {} to {} bytes: {}", location.path, g.segment_bytes, errno_text(errno));
    }
    auto region = map_fd(fd, g.segment_bytes, true, true, location.path);
    if (!region) return std::unexpected(std::move(region.error()));
    segment.region_ = std::move(*region);
    std::byte* const base = segment.base();

    // Huge pages are never swapped out, so they count as locked without spending
    // RLIMIT_MEMLOCK on them.
    if (location.backing == Backing::hugetlbfs_2m) {
      segment.locked_ = true;
    } else if (config.mlock != MlockMode::off) {
      if (::mlock(base, g.segment_bytes) == 0) {
        segment.locked_ = true;
      } else {
        const int error = errno;
        const std::string why =
            fmt::format("mlock failed ({}): RLIMIT_MEMLOCK is {}, the segment needs {}", errno_text(error),
                        memlock_limit_text(), kib_text(g.segment_bytes));
        const std::string fix =
            fmt::format("ulimit -l unlimited or prlimit --memlock=unlimited --pid {}", ::getpid());
        if (config.mlock == MlockMode::required) {
          return fail(ErrorCode::resource, "--mlock require: {} (fix: {}, then start again)", why, fix);
        }
        warnings.push_back(fmt::format("{}; running unlocked (fix: {})", why, fix));
      }
    }

    // Write every 4 KiB page once, now. MAP_POPULATE builds the guest's page tables, but under a
    // hypervisor the first write to each page still costs microseconds with no guest fault at
    // all (`ipcfloor bench hygiene`, memory section; docs/RESULTS.md): paid here at startup, not
    // by the first frames through each slot. Zero into zero pages: the contents do not change.
    for (std::size_t offset = 0; offset < g.segment_bytes; offset += kSmallPageBytes) {
      std::atomic_ref<std::uint8_t>(*reinterpret_cast<std::uint8_t*>(base + offset))
          .store(0, std::memory_order_relaxed);  // relaxed: nobody else can see the object yet
    }

    // Everything below is invisible to attachers until the release stores at the end.
    auto* header = ::new (base) SegmentHeader{};
    header->layout_version = kLayoutVersion;
    header->segment_bytes = g.segment_bytes;
    header->header_bytes = static_cast<std::uint32_t>(kHeaderBytes);
    header->lane_count = config.lanes;
    header->ring_capacity = config.ring_capacity;
    header->backing = static_cast<std::uint32_t>(location.backing);
    header->locked = segment.locked_ ? 1U : 0U;
    header->wait_mode = config.wait_mode;
    header->engine_pid = ::getpid();
    header->engine_uid = ::geteuid();
    header->engine_start_ticks = process_start_ticks(::getpid());
    header->engine_start_unix_ns = unix_ns();
    header->heartbeat_interval_ns = config.heartbeat_interval_ns;
    header->lanes_offset = g.lanes_offset;
    header->lane_stride = g.lane_stride;
    header->bulk_offset = g.bulk_offset;
    header->bulk_stride = g.bulk_stride;
    header->series_offset = g.series_offset;
    header->series_bytes = g.series_bytes;
    header->n_bars = config.series.size();
    header->fee = config.fee;
    header->series_first = config.series.front();
    header->series_last = config.series.back();
    copy_series_name(*header, config.series_name);
    // relaxed: published to attachers by the release store of `state` below.
    header->heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);

    for (std::uint32_t i = 0; i < config.lanes; ++i) {
      std::byte* const lane = base + g.lanes_offset + std::size_t{i} * g.lane_stride;
      ::new (lane + kLaneControlOffset) LaneControl{};  // all zero: state free, no owner
      construct_ring(lane + kLaneRequestRingOffset);
      construct_ring(lane + kLaneResponseRingOffset);
      // The slot arrays are fresh tmpfs/hugetlbfs pages: already zero.
    }
    std::byte* const series = base + g.series_offset;
    std::memcpy(series, config.series.data(), g.series_bytes);
    header->series_checksum = fnv1a64(std::span<const std::byte>(series, g.series_bytes));

    // release: every identity field above is visible to whoever sees the magic; pairs with the
    // acquire load of magic in Segment::attach.
    std::atomic_ref<std::uint64_t>(header->magic).store(kSegmentMagic, std::memory_order_release);
    // release: publishes the whole header, lanes, rings and series; pairs with the acquire load
    // of state in Segment::attach.
    header->state.store(static_cast<std::uint32_t>(SegmentState::ready), std::memory_order_release);
    // Explicitly: the mapping keeps the open file description, and with it the flock, alive
    // after the descriptor closes.
    ::flock(fd, LOCK_UN);
    segment.warnings_ = std::move(warnings);
    return segment;
  };

  for (int attempt = 0; attempt < kCreateAttempts; ++attempt) {
    std::vector<std::string> warnings;
    bool retry = false;
    for (const Location& location : locations) {
      auto outcome = clear_location(location, name, Policy::remove_stale, warnings);
      if (!outcome) return std::unexpected(std::move(outcome.error()));
      if (*outcome == Outcome::retry) retry = true;
    }
    if (retry) continue;

    if (config.hugepages != HugePagesMode::off) {
      const std::size_t huge_bytes =
          compute_geometry(config.lanes, config.ring_capacity, config.series.size(), kHugePageBytes, config.bulk_bytes)
              .segment_bytes;
      const std::uint64_t pages_needed = huge_bytes / kHugePageBytes;
      const HugePageBudget budget = huge_page_budget();
      std::string reason;
      if (huge == nullptr) {
        reason = "no hugetlbfs mount with 2 MiB pages";
      } else if (budget.available < pages_needed) {
        reason = fmt::format("{} has {} free 2 MiB huge page(s), the segment needs {}", huge->dir, budget.available,
                             pages_needed);
      } else if (::access(huge->dir.c_str(), W_OK) != 0) {
        reason = fmt::format("{} is not writable: {}", huge->dir, errno_text(errno));
      }
      if (reason.empty()) {
        auto object = create_exclusive(*huge, name);
        if (!object) return std::unexpected(std::move(object.error()));
        if (!object->has_value()) continue;  // appeared since we looked: inspect again
        auto built = build(std::move(**object), *huge, warnings);
        if (built) return built;
        if (config.hugepages == HugePagesMode::required) {
          built.error().message = fmt::format("--hugepages require: {}", built.error().message);
          return built;
        }
        warnings.push_back(fmt::format("no huge pages: {}; fell back to 4 KiB pages", built.error().message));
      } else {
        const std::string fix = huge_pages_fix(pages_needed, budget, huge != nullptr);
        if (config.hugepages == HugePagesMode::required) {
          return fail(ErrorCode::resource, "--hugepages require: {} (fix: {})", reason, fix);
        }
        warnings.push_back(fmt::format("no huge pages: {}; fell back to 4 KiB pages (fix: {})", reason, fix));
      }
    }

    auto object = create_exclusive(tmpfs, name);
    if (!object) return std::unexpected(std::move(object.error()));
    if (!object->has_value()) continue;
    return build(std::move(**object), tmpfs, std::move(warnings));
  }
  return fail(ErrorCode::busy, "segment {} kept reappearing while it was being replaced; another engine is starting "
                               "under this name: choose another --name", name);
}

Expected<Segment> Segment::attach(std::string_view name, std::string_view tmpfs_dir) {
  if (!valid_segment_name(name)) {
    return fail(ErrorCode::invalid_argument, "segment name '{}' is invalid: use 1..{} characters of A-Z a-z 0-9 . _ - (not . or ..)",
                name, kMaxSegmentNameBytes);
  }
  const std::vector<Location> locations = locations_for(name, tmpfs_dir);
  const Location* found = nullptr;
  UniqueFd fd;
  struct stat info {};
  for (const Location& location : locations) {
    struct stat link_info {};
    if (::lstat(location.path.c_str(), &link_info) != 0) {
      if (errno == ENOENT) continue;
      return fail(ErrorCode::io, "cannot inspect {}: {}", location.path, errno_text(errno));
    }
    if (auto trusted = check_owner_and_mode(link_info, name, location.path); !trusted) return std::unexpected(std::move(trusted.error()));
    fd = UniqueFd(::open(location.path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd) {
      if (errno == ENOENT) continue;
      return fail(errno == EACCES ? ErrorCode::permission : ErrorCode::io, "cannot open {}: {}", location.path, errno_text(errno));
    }
    if (::fstat(fd.get(), &info) != 0) return fail(ErrorCode::io, "cannot stat {}: {}", location.path, errno_text(errno));
    // Trust what was opened, not what lstat saw a moment ago.
    if (auto trusted = check_owner_and_mode(info, name, location.path); !trusted) return std::unexpected(std::move(trusted.error()));
    found = &location;
    break;
  }
  if (found == nullptr) {
    std::string looked;
    for (const Location& location : locations) looked += (looked.empty() ? "" : ", ") + location.path;
    return fail(ErrorCode::peer_gone, "no engine serves {}: there is no segment at {} (start one: ipcfloor engine --name {})",
                name, looked, name);
  }
  const std::string& path = found->path;
  const auto object_bytes = static_cast<std::size_t>(info.st_size);
  if (object_bytes < kHeaderBytes) {
    return fail(ErrorCode::bad_data, "{} ({}) holds {} bytes, less than an ipcfloor header ({}): not an ipcfloor segment",
                name, path, object_bytes, kHeaderBytes);
  }
  auto region = map_fd(fd.get(), object_bytes, true, true, path);
  if (!region) return std::unexpected(std::move(region.error()));
  fd.reset();
  auto& header = *static_cast<SegmentHeader*>(region->get_address());

  // acquire: pairs with the release store of magic in Segment::create, so the identity fields
  // read below (version, pid) are the creator's.
  const std::uint64_t magic = std::atomic_ref<std::uint64_t>(header.magic).load(std::memory_order_acquire);
  if (magic != kSegmentMagic) {
    return fail(ErrorCode::bad_data, "{} ({}) is not an ipcfloor segment (magic {:#018x}, expected {:#018x})", name, path,
                magic, kSegmentMagic);
  }
  if (header.layout_version != kLayoutVersion) {
    return fail(ErrorCode::version_mismatch, "{}", version_mismatch_text(name, path, header.layout_version));
  }
  // acquire: pairs with the release store of `ready` in Segment::create (and of `stopping` in
  // mark_stopping): a ready segment's lanes and series are complete before we touch them.
  const auto state = static_cast<SegmentState>(header.state.load(std::memory_order_acquire));
  if (state == SegmentState::building) {
    return fail(ErrorCode::busy, "{} is still being built by pid {}; retry", name, header.engine_pid);
  }
  if (state == SegmentState::stopping) {
    return fail(ErrorCode::peer_gone, "engine {} (pid {}) is stopping", name, header.engine_pid);
  }
  if (state != SegmentState::ready) {
    return fail(ErrorCode::bad_data, "{} ({}) is a corrupt ipcfloor segment: state {}", name, path,
                static_cast<std::uint32_t>(state));
  }
  const LayoutSnapshot layout = snapshot_layout(header);
  if (auto valid = check_layout(layout, object_bytes, found->backing, name, path); !valid) return std::unexpected(std::move(valid.error()));
  const auto* series = static_cast<const std::byte*>(region->get_address()) + layout.series_offset;
  const std::uint64_t checksum = fnv1a64(std::span<const std::byte>(series, layout.series_bytes));
  if (checksum != layout.series_checksum) {
    return fail(ErrorCode::bad_data, "{} ({}) is corrupt: its series hashes to {:#018x} but the header records {:#018x}",
                name, path, checksum, layout.series_checksum);
  }
  if (!process_alive(layout.engine_pid, layout.engine_start_ticks)) {
    return fail(ErrorCode::peer_gone, "engine {} (pid {}) is gone", name, layout.engine_pid);
  }

  Segment segment;
  segment.region_ = std::move(*region);
  segment.name_ = std::string(name);
  segment.path_ = path;
  segment.backing_ = found->backing;
  segment.locked_ = header.locked != 0;
  segment.device_ = info.st_dev;
  segment.inode_ = info.st_ino;
  segment.posix_shm_ = found->posix_shm;
  segment.geometry_ = SegmentGeometry{layout.lanes_offset, layout.lane_stride, layout.bulk_offset, layout.bulk_stride,
                                      layout.series_offset, layout.series_bytes, layout.segment_bytes};
  segment.lane_count_ = layout.lane_count;
  segment.ring_capacity_ = layout.ring_capacity;
  segment.n_bars_ = layout.n_bars;
  return segment;
}

Expected<void> Segment::remove(std::string_view name, std::string_view tmpfs_dir) {
  if (!valid_segment_name(name)) {
    return fail(ErrorCode::invalid_argument, "segment name '{}' is invalid: use 1..{} characters of A-Z a-z 0-9 . _ - (not . or ..)",
                name, kMaxSegmentNameBytes);
  }
  std::vector<std::string> ignored;
  for (const Location& location : locations_for(name, tmpfs_dir)) {
    for (int attempt = 0;; ++attempt) {
      auto outcome = clear_location(location, name, Policy::remove_ours, ignored);
      if (!outcome) return std::unexpected(std::move(outcome.error()));
      if (*outcome != Outcome::retry) break;
      if (attempt + 1 == kCreateAttempts) {
        return fail(ErrorCode::busy, "{} keeps being replaced; another engine is starting under this name", location.path);
      }
    }
  }
  return {};
}

// ---------------------------------------------------------------------------------------------

Segment::Segment(Segment&& other) noexcept
    : region_(std::move(other.region_)),
      name_(std::move(other.name_)),
      path_(std::move(other.path_)),
      warnings_(std::move(other.warnings_)),
      backing_(other.backing_),
      locked_(other.locked_),
      owner_(std::exchange(other.owner_, false)),
      posix_shm_(other.posix_shm_),
      device_(other.device_),
      inode_(other.inode_),
      geometry_(other.geometry_),
      lane_count_(other.lane_count_),
      ring_capacity_(other.ring_capacity_),
      n_bars_(other.n_bars_) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    close();
    region_ = std::move(other.region_);
    name_ = std::move(other.name_);
    path_ = std::move(other.path_);
    warnings_ = std::move(other.warnings_);
    backing_ = other.backing_;
    locked_ = other.locked_;
    owner_ = std::exchange(other.owner_, false);
    posix_shm_ = other.posix_shm_;
    device_ = other.device_;
    inode_ = other.inode_;
    geometry_ = other.geometry_;
    lane_count_ = other.lane_count_;
    ring_capacity_ = other.ring_capacity_;
    n_bars_ = other.n_bars_;
  }
  return *this;
}

Segment::~Segment() { close(); }

void Segment::close() noexcept {
  bip::mapped_region().swap(region_);  // munmap (also drops the mlock)
  if (owner_) {
    owner_ = false;
    const Location location{{}, path_, backing_, posix_shm_};
    (void)unlink_if_same(location, name_, device_, inode_);
  }
}

std::span<const double> Segment::series() const noexcept {
  return {reinterpret_cast<const double*>(base() + geometry_.series_offset), static_cast<std::size_t>(n_bars_)};
}

void Segment::mark_stopping() noexcept {
  // release: everything the engine wrote before stopping is visible to whoever sees `stopping`;
  // pairs with the acquire load of state in Segment::attach (and in clients' liveness checks).
  header().state.store(static_cast<std::uint32_t>(SegmentState::stopping), std::memory_order_release);
}

}  // namespace ipcfloor
