#include "shm/segment.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "shm/huge_pages.hpp"
#include "shm/liveness.hpp"

namespace ipcfloor {
namespace {

constexpr mode_t kObjectMode = 0600;
// How often an attach looks again while the engine says a lane is being freed.
constexpr std::chrono::microseconds kLaneDrainingRetry{500};

std::string errno_text(int error) { return std::strerror(error); }

std::string mode_text(mode_t mode) { return fmt::format("{:04o}", mode & 07777); }

Expected<void> check_name(std::string_view name) {
  if (!valid_segment_name(name))
    return fail(ErrorCode::invalid_argument,
                "segment name '{}' is invalid: use 1..{} characters of A-Z a-z 0-9 . _ - (not . or ..)", name,
                kMaxSegmentNameBytes);
  return {};
}

Expected<void> check_dir(std::string_view dir) {
  if (dir.empty() || dir.front() != '/')
    return fail(ErrorCode::invalid_argument, "socket directory '{}' is not an absolute path", dir);
  struct stat info {};
  if (::stat(std::string(dir).c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
    return fail(ErrorCode::invalid_argument, "socket directory {} does not exist or is not a directory", dir);
  return {};
}

// sockaddr_un for `path`, or an error when it does not fit (108 bytes on Linux).
Expected<sockaddr_un> unix_address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path)
    return fail(ErrorCode::invalid_argument, "socket path {} is longer than the {} bytes a Unix socket path may have",
                path, sizeof address.sun_path - 1);
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

void copy_series_name(DataHeader& header, std::string_view text) noexcept {
  std::size_t length = std::min(text.size(), kSeriesNameBytes - 1);
  // Do not cut a UTF-8 sequence in half.
  if (length < text.size()) {
    while (length > 0 && (static_cast<unsigned char>(text[length]) & 0xC0) == 0x80) --length;
  }
  std::memcpy(header.series_name, text.data(), length);
  header.series_name[length] = '\0';
}

Expected<void> validate_config(const SegmentConfig& config) {
  if (auto named = check_name(config.name); !named) return named;
  if (config.lanes < 1 || config.lanes > kMaxLanes)
    return fail(ErrorCode::invalid_argument, "--lanes {} is outside 1..{}", config.lanes, kMaxLanes);
  if (!valid_ring_capacity(config.ring_capacity) || config.ring_capacity > kMaxRingCapacity)
    return fail(ErrorCode::invalid_argument, "ring capacity {} is not a power of two in 2..{}", config.ring_capacity,
                kMaxRingCapacity);
  if (config.series.empty())
    return fail(ErrorCode::invalid_argument, "the series is empty: the segment needs at least one bar");
  if (config.more_series.size() + 1 > kMaxSeries)
    return fail(ErrorCode::invalid_argument, "{} series given; one segment holds at most {}",
                config.more_series.size() + 1, kMaxSeries);
  for (const SegmentConfig::NamedSeries& more : config.more_series)
    if (more.close.empty())
      return fail(ErrorCode::invalid_argument, "series {} is empty: every series needs at least one bar", more.key);
  if (config.bulk_bytes > kMaxBulkBytes)
    return fail(ErrorCode::invalid_argument, "--bulk-bytes {} is more than the {} bytes a lane's bulk region may have",
                config.bulk_bytes, kMaxBulkBytes);
  return check_dir(config.socket_dir);
}

// ---------------------------------------------------------------------------------------------
// Creation, step by step

// Step 1, the name: takes DIR/NAME.lock. A lock another process holds means a live engine. The
// file is re-checked after locking: a lock on a file a dying engine already unlinked guards
// nothing.
Expected<UniqueFd> claim_name(const std::string& name, const std::string& lock_path) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    UniqueFd lock(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, kObjectMode));
    if (!lock) {
      return fail(errno == EACCES || errno == ELOOP ? ErrorCode::permission : ErrorCode::io, "cannot open {}: {}",
                  lock_path, errno_text(errno));
    }
    struct stat held {};
    if (::fstat(lock.get(), &held) != 0) return fail(ErrorCode::io, "cannot stat {}: {}", lock_path, errno_text(errno));
    if (!S_ISREG(held.st_mode) || held.st_uid != ::geteuid())
      return fail(ErrorCode::permission, "{} is not a regular file owned by uid {} (owner {}, mode {}); ipcfloor only "
                  "trusts its own lock files", lock_path, ::geteuid(), held.st_uid, mode_text(held.st_mode));
    if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
      if (errno != EWOULDBLOCK) return fail(ErrorCode::io, "cannot lock {}: {}", lock_path, errno_text(errno));
      // The holder wrote its pid into the file for people; a pid from another namespace is
      // still a useful hint, never a decision.
      char text[16] = {};
      const ssize_t got = ::pread(lock.get(), text, sizeof text - 1, 0);
      std::string holder;
      if (got > 0) holder = fmt::format(" (pid {})", std::string_view(text, std::strcspn(text, "\n")));
      return fail(ErrorCode::busy, "engine {} is running{}: it holds {}; stop it first or choose another --name", name,
                  holder, lock_path);
    }
    struct stat now {};
    if (::stat(lock_path.c_str(), &now) != 0 || now.st_ino != held.st_ino || now.st_dev != held.st_dev) continue;
    // For people reading the file: the pid of the engine that holds it, in this pid namespace.
    const std::string pid = fmt::format("{}\n", ::getpid());
    if (::ftruncate(lock.get(), 0) == 0) (void)!::pwrite(lock.get(), pid.data(), pid.size(), 0);
    (void)::fchmod(lock.get(), kObjectMode);
    return lock;
  }
  return fail(ErrorCode::busy, "{} keeps being replaced; another engine is starting under the name {}", lock_path, name);
}

// Step 2, what the name held before: with the lock ours, a socket at DIR/NAME belongs to a dead
// engine. Anything that is not a socket of ours stays untouched.
Expected<void> clear_stale_socket(const std::string& path, std::string_view name, std::vector<std::string>& warnings) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return {};
    return fail(ErrorCode::io, "cannot inspect {}: {}", path, errno_text(errno));
  }
  if (!S_ISSOCK(info.st_mode))
    return fail(ErrorCode::permission, "{} exists and is not an ipcfloor socket (mode {:o}; an older ipcfloor's "
                "segment file?); remove it or choose another --name", path, info.st_mode);
  if (info.st_uid != ::geteuid())
    return fail(ErrorCode::permission, "{} is owned by uid {}, not {}; ipcfloor only replaces its own sockets", path,
                info.st_uid, ::geteuid());
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    return fail(ErrorCode::io, "cannot remove the stale socket {}: {}", path, errno_text(errno));
  warnings.push_back(fmt::format("removed the stale socket of a dead engine {} ({})", name, path));
  return {};
}

// Room for the series: its preloaded bars, or the live capacity when that is larger.
std::size_t capacity_of(const SegmentConfig& config) noexcept {
  return std::max(config.series.size(), config.capacity_bars);
}

// Bytes the series after the main one take.
std::size_t extra_bytes_of(const SegmentConfig& config) noexcept {
  std::size_t bytes = 0;
  for (const SegmentConfig::NamedSeries& more : config.more_series) bytes += extra_series_bytes(more.close.size());
  return bytes;
}

void copy_key(char (&to)[kSeriesKeyBytes], std::string_view text) noexcept {
  const std::size_t length = std::min(text.size(), kSeriesKeyBytes - 1);
  std::memcpy(to, text.data(), length);
  to[length] = '\0';
}

// Step 3, the memory budget: under --mlock require, RLIMIT_MEMLOCK must cover the data object
// and the most lane objects alive at once. Checked before anything is made: lane objects are
// made per client, and a limit too short for them must fail the start, not a later client.
Expected<void> check_mlock_budget(const SegmentConfig& config) {
  if (config.mlock != MlockMode::required) return {};
  // Huge pages never count against the limit, so budget the data object at 4 KiB pages: the
  // check can only be stricter than the pages granted.
  const SegmentGeometry small = compute_geometry(config.lanes, config.ring_capacity, capacity_of(config),
                                                 kSmallPageBytes, config.bulk_bytes, config.signal_capacity,
                                                 extra_bytes_of(config));
  // One lane object more than lanes: a reclaimed lane's fresh object is made while the old one
  // is still mapped.
  const std::uint64_t bytes = (config.hugepages == HugePagesMode::required ? 0 : small.data_bytes) +
                              (std::uint64_t{config.lanes} + 1) * small.lane_bytes;
  return check_memlock_budget(
      bytes, fmt::format("the data object and {} lane objects (one per lane and one to replace a lane's)",
                         config.lanes + 1));
}

// Step 4, the data object: created, populated, locked (shm/shared_object.hpp).
Expected<SharedObject> make_data_object(const SegmentConfig& config, SegmentGeometry& geometry) {
  // The geometry depends on the page size, which depends on whether huge pages are granted:
  // ask for the huge-page size first; a 4 KiB object then only needs the smaller rounding.
  const SegmentGeometry huge =
      compute_geometry(config.lanes, config.ring_capacity, capacity_of(config), kHugePageBytes, config.bulk_bytes,
                       config.signal_capacity, extra_bytes_of(config));
  ObjectSpec spec;
  spec.label = fmt::format("ipcfloor:{}:data", config.name);
  spec.bytes = huge.data_bytes;
  spec.hugepages = config.hugepages;
  spec.mlock = config.mlock;
  if (config.hugepages == HugePagesMode::off) {
    spec.bytes = compute_geometry(config.lanes, config.ring_capacity, capacity_of(config), kSmallPageBytes,
                                  config.bulk_bytes, config.signal_capacity, extra_bytes_of(config))
                     .data_bytes;
  }
  auto object = SharedObject::create(spec);
  if (!object) return object;
  geometry = compute_geometry(config.lanes, config.ring_capacity, capacity_of(config),
                              object->huge_pages() ? kHugePageBytes : kSmallPageBytes, config.bulk_bytes,
                              config.signal_capacity, extra_bytes_of(config));
  // A fallback to small pages after asking for the huge-page size leaves the object larger
  // than its geometry; that is harmless (the tail is unused) but the header records the truth.
  return object;
}

// Step 5, the header and the lane table, then the series and its checksum. Nobody else can
// see the object yet.
void write_data(std::byte* base, std::size_t object_bytes, const SegmentGeometry& g, const SegmentConfig& config,
                Backing backing, bool locked) {
  auto* header = ::new (base) DataHeader{};
  header->layout_version = kLayoutVersion;
  header->data_bytes = object_bytes;
  header->header_bytes = static_cast<std::uint32_t>(kHeaderBytes);
  header->lane_count = config.lanes;
  header->ring_capacity = config.ring_capacity;
  header->backing = static_cast<std::uint32_t>(backing);
  header->locked = locked ? 1U : 0U;
  header->wait_mode = config.wait_mode;
  header->engine_pid = ::getpid();
  header->engine_uid = ::geteuid();
  header->engine_start_ticks = process_start_ticks(::getpid());
  header->engine_start_unix_ns = unix_ns();
  header->heartbeat_interval_ns = config.heartbeat_interval_ns;
  header->lane_status_offset = g.lane_status_offset;
  header->lane_bytes = g.lane_bytes;
  header->lane_bulk_offset = g.lane_bulk_offset;
  header->lane_bulk_bytes = g.lane_bulk_bytes;
  header->series_offset = g.series_offset;
  header->series_bytes = g.series_bytes;
  header->n_bars = config.series.size();
  header->capacity_bars = capacity_of(config);
  header->live = config.live ? 1U : 0U;
  header->signal_capacity = config.signal_capacity;
  // relaxed: published to attachers by the release store of `state` in publish_data.
  header->bars_published.store(config.series.size(), std::memory_order_relaxed);
  header->max_frame_cost = config.max_frame_cost;
  header->fee = config.fee;
  header->series_first = config.series.front();
  header->series_last = config.series.back();
  copy_series_name(*header, config.series_name);
  // relaxed: published to attachers by the release store of `state` in publish_data.
  header->heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < config.lanes; ++i) {
    ::new (base + g.lane_status_offset + std::size_t{i} * kLaneStatusBytes) LaneStatus{};  // free, no owner
  }
  std::byte* const series = base + g.series_offset;
  const std::size_t preloaded_bytes = config.series.size() * sizeof(double);
  std::memcpy(series, config.series.data(), preloaded_bytes);
  header->series_checksum = fnv1a64(std::span<const std::byte>(series, preloaded_bytes));
  // The series table: the main series, then the others after its room.
  header->series_count = static_cast<std::uint32_t>(1 + config.more_series.size());
  const auto enter = [&](SeriesEntry& entry, std::size_t offset, std::span<const double> close, std::string_view key) {
    entry.offset = offset;
    entry.bars = close.size();
    entry.checksum = fnv1a64(std::as_bytes(std::span<const double>(reinterpret_cast<const double*>(base + offset),
                                                                   close.size())));
    entry.first = close.front();
    entry.last = close.back();
    copy_key(entry.name, key);
  };
  enter(header->series_table[0], g.series_offset, config.series, config.series_key);
  std::size_t offset = g.extra_series_offset;
  for (std::size_t i = 0; i < config.more_series.size(); ++i) {
    const auto& more = config.more_series[i];
    std::memcpy(base + offset, more.close.data(), more.close.size() * sizeof(double));
    enter(header->series_table[i + 1], offset, more.close, more.key);
    offset += extra_series_bytes(more.close.size());
  }
}

// Step 6, publish: magic and `ready` with release stores, then the seals. From here on nobody
// but this process's own mapping can write the object.
Expected<void> publish_data(SharedObject& object) {
  auto* header = reinterpret_cast<DataHeader*>(object.data());
  // release: every identity field is visible to whoever sees the magic; pairs with the acquire
  // load of magic in check_data (Attachment::attach).
  std::atomic_ref<std::uint64_t>(header->magic).store(kDataMagic, std::memory_order_release);
  // release: publishes the whole header, lane table and series; pairs with the acquire load of
  // state in check_data (Attachment::attach).
  header->state.store(static_cast<std::uint32_t>(SegmentState::ready), std::memory_order_release);
  return object.seal_size_and_future_writes();
}

// Step 7, the socket: bound, made 0600 and listening under a temporary name, then renamed into
// place, so a client never finds DIR/NAME with the wrong mode or not yet listening (which it
// would take for a dead engine). Returns the listener and the socket file's identity.
Expected<UniqueFd> open_listener(const std::string& path, dev_t& device, ino_t& inode) {
  if (auto final_address = unix_address(path); !final_address) return std::unexpected(std::move(final_address.error()));
  const std::string staging = path + ".new";
  auto address = unix_address(staging);
  if (!address) return std::unexpected(std::move(address.error()));
  UniqueFd listener(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener) return fail(ErrorCode::io, "cannot create the hand-off socket: {}", errno_text(errno));
  ::unlink(staging.c_str());  // left by an engine that died here; we hold the name's lock
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address) != 0)
    return fail(errno == EADDRINUSE ? ErrorCode::busy : ErrorCode::io, "cannot bind {}: {}", staging, errno_text(errno));
  const auto give_up = [&](std::string_view what) {
    const int error = errno;
    ::unlink(staging.c_str());
    return fail(ErrorCode::io, "cannot {} {}: {}", what, staging, errno_text(error));
  };
  struct stat info {};
  if (::chmod(staging.c_str(), kObjectMode) != 0 || ::lstat(staging.c_str(), &info) != 0) return give_up("make 0600");
  if (::listen(listener.get(), 64) != 0) return give_up("listen on");
  if (::rename(staging.c_str(), path.c_str()) != 0) return give_up(fmt::format("rename to {}", path));
  device = info.st_dev;
  inode = info.st_ino;
  return listener;
}

// ---------------------------------------------------------------------------------------------
// Attach, step by step

// The socket file must be ours and private before we talk to whoever listens on it.
Expected<void> check_socket_file(const std::string& path, std::string_view name) {
  struct stat info {};
  if (::lstat(path.c_str(), &info) != 0) {
    if (errno == ENOENT)
      return fail(ErrorCode::peer_gone, "no engine serves {}: there is no socket at {} (start one: ipcfloor serve --name {})",
                  name, path, name);
    return fail(ErrorCode::io, "cannot inspect {}: {}", path, errno_text(errno));
  }
  if (!S_ISSOCK(info.st_mode))
    return fail(ErrorCode::permission, "{} is not a socket (mode {:o}): no ipcfloor engine of this version serves {} "
                "(an older ipcfloor's segment file?)", path, info.st_mode, name);
  if (info.st_uid != ::geteuid() || (info.st_mode & 07777) != kObjectMode)
    return fail(ErrorCode::permission, "{} is owned by uid {} (mode {}); ipcfloor only trusts 0600 sockets owned by uid {}",
                path, info.st_uid, mode_text(info.st_mode), ::geteuid());
  return {};
}

Expected<UniqueFd> connect_engine(const std::string& path, std::string_view name, pid_t& engine_pid) {
  auto address = unix_address(path);
  if (!address) return std::unexpected(std::move(address.error()));
  UniqueFd connection(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!connection) return fail(ErrorCode::io, "cannot create a socket: {}", errno_text(errno));
  int rc = 0;
  do {
    rc = ::connect(connection.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    if (errno == ECONNREFUSED || errno == ENOENT)
      return fail(ErrorCode::peer_gone, "engine {} is gone: nobody listens on {} (the next `ipcfloor serve --name {}` "
                  "removes the stale socket)", name, path, name);
    return fail(ErrorCode::io, "cannot connect to {}: {}", path, errno_text(errno));
  }
  auto peer = peer_credentials(connection.get());
  if (!peer) return std::unexpected(std::move(peer.error()));
  if (peer->uid != ::geteuid())
    return fail(ErrorCode::permission, "the process listening on {} runs as uid {}, not {}; ipcfloor only talks to "
                "its own user's engines", path, peer->uid, ::geteuid());
  engine_pid = peer->pid;
  return connection;
}

ErrorCode error_code_for(HandoffStatus status) noexcept {
  switch (status) {
    case HandoffStatus::no_free_lane:
    case HandoffStatus::lane_draining: return ErrorCode::busy;
    case HandoffStatus::version_mismatch: return ErrorCode::version_mismatch;
    case HandoffStatus::refused: return ErrorCode::permission;
    case HandoffStatus::stopping: return ErrorCode::peer_gone;
    case HandoffStatus::bad_request: return ErrorCode::protocol;
    case HandoffStatus::internal:
    case HandoffStatus::ok: break;
  }
  return ErrorCode::io;
}

// One request and its reply. The reply's descriptors come back in `fds`.
Expected<HandoffReply> ask_engine(int connection, HandoffRole role, std::chrono::steady_clock::time_point deadline,
                                  std::vector<UniqueFd>& fds, const std::string& path) {
  const HandoffRequest request{kHandoffMagic, kHandoffVersion, static_cast<std::uint16_t>(role), kLayoutVersion, 0};
  auto sent = send_handoff(connection, std::as_bytes(std::span(&request, 1)), {});
  // An engine that refuses at accept (out of descriptors) answers and closes before it reads: the
  // send then fails, but its answer is waiting and says why.
  if (!sent && sent.error().code != ErrorCode::peer_gone) return std::unexpected(std::move(sent.error()));
  HandoffReply reply{};
  auto received = receive_handoff(connection, std::as_writable_bytes(std::span(&reply, 1)), deadline);
  if (!received && !sent) return std::unexpected(std::move(sent.error()));
  if (!received) {
    received.error().message = fmt::format("the engine on {} did not answer the hand-off: {}", path, received.error().message);
    return std::unexpected(std::move(received.error()));
  }
  if (received->truncated || received->bytes != sizeof reply || reply.magic != kHandoffMagic)
    return fail(ErrorCode::protocol, "the engine on {} sent a malformed hand-off reply ({} bytes)", path, received->bytes);
  if (reply.version != kHandoffVersion || reply.layout_version != kLayoutVersion)
    return fail(ErrorCode::version_mismatch, "the engine on {} speaks hand-off version {} with layout {}; this client "
                "speaks {} with layout {}: use the same ipcfloor version on both sides", path, reply.version,
                reply.layout_version, kHandoffVersion, kLayoutVersion);
  reply.message[kHandoffMessageBytes - 1] = '\0';
  fds = std::move(received->fds);
  return reply;
}

// The header as received, checked against the object's size and against the geometry this
// side computes itself. The object is sealed read-only, so what is checked stays true.
Expected<SegmentGeometry> check_data(const SharedObject& data, std::string_view name) {
  const auto& header = *reinterpret_cast<const DataHeader*>(data.data());
  // acquire: pairs with the release store of magic in publish_data.
  const std::uint64_t magic = std::atomic_ref<const std::uint64_t>(header.magic).load(std::memory_order_acquire);
  if (magic != kDataMagic)
    return fail(ErrorCode::protocol, "engine {} sent a data object that is not an ipcfloor one (magic {:#018x})", name,
                magic);
  if (header.layout_version != kLayoutVersion)
    return fail(ErrorCode::version_mismatch, "engine {} built layout version {}; this client reads version {}", name,
                header.layout_version, kLayoutVersion);
  // acquire: pairs with the release store of `ready` in publish_data (and of `stopping`).
  const auto state = static_cast<SegmentState>(header.state.load(std::memory_order_acquire));
  if (state == SegmentState::stopping) return fail(ErrorCode::peer_gone, "engine {} (pid {}) is stopping", name, header.engine_pid);
  if (state != SegmentState::ready)
    return fail(ErrorCode::protocol, "engine {} sent a data object in state {}", name, static_cast<std::uint32_t>(state));
  const auto backing = static_cast<Backing>(header.backing);
  const std::size_t page = backing == Backing::memfd_huge_2m ? kHugePageBytes : kSmallPageBytes;
  if (header.lane_count < 1 || header.lane_count > kMaxLanes || !valid_ring_capacity(header.ring_capacity) ||
      header.ring_capacity > kMaxRingCapacity || header.lane_bulk_bytes > kMaxBulkBytes ||
      header.n_bars > data.size() / sizeof(double) || header.capacity_bars < header.n_bars ||
      header.capacity_bars > data.size() / sizeof(double) || header.signal_capacity > kMaxRingCapacity ||
      (header.signal_capacity != 0 && !valid_ring_capacity(header.signal_capacity)) ||
      (backing != Backing::memfd_4k && backing != Backing::memfd_huge_2m))
    return fail(ErrorCode::protocol, "engine {} sent a data header with impossible geometry", name);
  // The series table: entry 0 is the main series; the others follow its room in order, each of
  // whole bars, named with a terminated string.
  if (header.series_count < 1 || header.series_count > kMaxSeries)
    return fail(ErrorCode::protocol, "engine {} sent a series table of {} entries", name, header.series_count);
  std::size_t extra_bytes = 0;
  for (std::uint32_t i = 1; i < header.series_count; ++i) {
    const std::uint64_t bars = header.series_table[i].bars;
    if (bars < 1 || bars > data.size() / sizeof(double))
      return fail(ErrorCode::protocol, "engine {} sent series {} of impossible length {}", name, i, bars);
    extra_bytes += extra_series_bytes(static_cast<std::size_t>(bars));
  }
  const SegmentGeometry g = compute_geometry(header.lane_count, header.ring_capacity, header.capacity_bars, page,
                                             header.lane_bulk_bytes, header.signal_capacity, extra_bytes);
  if (g.lane_status_offset != header.lane_status_offset || g.series_offset != header.series_offset ||
      g.series_bytes != header.series_bytes || g.lane_bytes != header.lane_bytes ||
      g.lane_bulk_offset != header.lane_bulk_offset || g.data_bytes > data.size() || header.data_bytes != data.size())
    return fail(ErrorCode::protocol, "engine {} sent a data header whose offsets disagree with its geometry", name);
  const std::uint64_t checksum =
      fnv1a64(std::span<const std::byte>(data.data() + g.series_offset, header.n_bars * sizeof(double)));
  if (checksum != header.series_checksum)
    return fail(ErrorCode::protocol, "engine {}'s series hashes to {:#018x} but its header records {:#018x}", name,
                checksum, header.series_checksum);
  std::size_t offset = g.extra_series_offset;
  for (std::uint32_t i = 0; i < header.series_count; ++i) {
    const SeriesEntry& entry = header.series_table[i];
    const std::size_t expected_offset = i == 0 ? g.series_offset : offset;
    if (i == 0 ? (entry.offset != g.series_offset || entry.bars != header.n_bars ||
                  entry.checksum != header.series_checksum)
               : entry.offset != expected_offset)
      return fail(ErrorCode::protocol, "engine {} sent a series table whose entry {} disagrees with its geometry", name, i);
    if (std::memchr(entry.name, '\0', sizeof entry.name) == nullptr)
      return fail(ErrorCode::protocol, "engine {} sent series {} with an unterminated name", name, i);
    if (i == 0) continue;
    const std::uint64_t sum =
        fnv1a64(std::span<const std::byte>(data.data() + entry.offset, entry.bars * sizeof(double)));
    if (sum != entry.checksum)
      return fail(ErrorCode::protocol, "engine {}'s series {} ({}) hashes to {:#018x} but its table records {:#018x}",
                  name, i, entry.name, sum, entry.checksum);
    offset += extra_series_bytes(static_cast<std::size_t>(entry.bars));
  }
  return g;
}

}  // namespace

// =============================================================================================

std::string_view backing_name(Backing backing) noexcept {
  switch (backing) {
    case Backing::none: return "none";
    case Backing::memfd_4k: return "memfd_4k";
    case Backing::memfd_huge_2m: return "memfd_huge_2m";
  }
  return "unknown";
}

bool valid_segment_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxSegmentNameBytes || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

Expected<Segment> Segment::create(const SegmentConfig& config) {
  if (auto valid = validate_config(config); !valid) return std::unexpected(std::move(valid.error()));
  Segment segment;
  segment.name_ = config.name;
  segment.socket_path_ = handoff_socket_path(config.socket_dir, config.name);
  segment.lock_path_ = handoff_lock_path(config.socket_dir, config.name);
  if (auto address = unix_address(segment.socket_path_); !address) return std::unexpected(std::move(address.error()));

  auto lock = claim_name(config.name, segment.lock_path_);
  if (!lock) return std::unexpected(std::move(lock.error()));
  segment.lock_ = std::move(*lock);
  if (auto cleared = clear_stale_socket(segment.socket_path_, config.name, segment.warnings_); !cleared)
    return std::unexpected(std::move(cleared.error()));

  if (auto budget = check_mlock_budget(config); !budget) return std::unexpected(std::move(budget.error()));
  auto data = make_data_object(config, segment.geometry_);
  if (!data) return std::unexpected(std::move(data.error()));
  segment.data_ = std::move(*data);
  for (const std::string& warning : segment.data_.warnings()) segment.warnings_.push_back(warning);
  segment.backing_ = segment.data_.huge_pages() ? Backing::memfd_huge_2m : Backing::memfd_4k;
  segment.lane_count_ = config.lanes;
  segment.ring_capacity_ = config.ring_capacity;
  segment.n_bars_ = config.series.size();
  segment.capacity_bars_ = capacity_of(config);
  segment.signal_capacity_ = config.signal_capacity;
  segment.mlock_ = config.mlock;

  write_data(segment.data_.data(), segment.data_.size(), segment.geometry_, config, segment.backing_,
             segment.data_.locked());
  if (auto published = publish_data(segment.data_); !published) return std::unexpected(std::move(published.error()));

  auto listener = open_listener(segment.socket_path_, segment.socket_device_, segment.socket_inode_);
  if (!listener) return std::unexpected(std::move(listener.error()));
  segment.listener_ = std::move(*listener);
  return segment;
}

Expected<LaneObject> Segment::make_lane_object(std::uint32_t lane, std::uint64_t generation) const {
  ObjectSpec spec;
  spec.label = fmt::format("ipcfloor:{}:lane{}", name_, lane);
  spec.bytes = geometry_.lane_bytes;
  // Small pages: a lane is touched a few lines at a time, and a client may punch holes in its own
  // object; on huge pages a hole could be refilled only from the pool.
  spec.hugepages = HugePagesMode::off;
  spec.mlock = mlock_;
  auto object = SharedObject::create(spec);
  if (!object) return std::unexpected(std::move(object.error()));
  std::byte* const base = object->data();
  const LaneView view = lane_view(base, ring_capacity_, geometry_, signal_capacity_);
  ::new (view.header) LaneHeader{kLaneMagic,           kLayoutVersion,         lane, generation, ring_capacity_,
                                 signal_capacity_,     geometry_.lane_bytes, geometry_.lane_bulk_offset,
                                 geometry_.lane_bulk_bytes};
  ::new (view.doorbell) DoorbellLine{};
  init_call_area(*::new (view.call) CallArea{});
  construct_ring(view.request_ring);
  construct_ring(view.response_ring);
  construct_ring(view.signal_ring);
  // The slots and the bulk region are fresh memfd pages: already zero, so no stamp is set.
  if (auto sealed = object->seal_size(); !sealed) return std::unexpected(std::move(sealed.error()));
  return LaneObject(std::move(*object), view, lane, generation);
}

void Segment::mark_stopping() noexcept {
  // release: everything the engine wrote before stopping is visible to whoever sees `stopping`;
  // pairs with the acquire load of state in check_data and in clients' liveness checks.
  header().state.store(static_cast<std::uint32_t>(SegmentState::stopping), std::memory_order_release);
}

Expected<void> Segment::remove_stale(std::string_view name, std::string_view socket_dir) {
  if (auto named = check_name(name); !named) return named;
  const std::string lock_path = handoff_lock_path(socket_dir, name);
  const std::string socket_path = handoff_socket_path(socket_dir, name);
  struct stat info {};
  if (::lstat(lock_path.c_str(), &info) != 0 && ::lstat(socket_path.c_str(), &info) != 0) return {};
  auto lock = claim_name(std::string(name), lock_path);
  if (!lock) return std::unexpected(std::move(lock.error()));
  std::vector<std::string> ignored;
  if (auto cleared = clear_stale_socket(socket_path, name, ignored); !cleared) return cleared;
  ::unlink(lock_path.c_str());  // still locked: a new engine waits for our close, then re-checks
  return {};
}

Segment::Segment(Segment&& other) noexcept
    : data_(std::move(other.data_)),
      lock_(std::move(other.lock_)),
      listener_(std::move(other.listener_)),
      name_(std::move(other.name_)),
      socket_path_(std::move(other.socket_path_)),
      lock_path_(std::move(other.lock_path_)),
      socket_device_(other.socket_device_),
      socket_inode_(std::exchange(other.socket_inode_, 0)),
      warnings_(std::move(other.warnings_)),
      geometry_(other.geometry_),
      backing_(other.backing_),
      lane_count_(other.lane_count_),
      ring_capacity_(other.ring_capacity_),
      n_bars_(other.n_bars_),
      capacity_bars_(other.capacity_bars_),
      signal_capacity_(other.signal_capacity_),
      mlock_(other.mlock_) {}

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    close();
    data_ = std::move(other.data_);
    lock_ = std::move(other.lock_);
    listener_ = std::move(other.listener_);
    name_ = std::move(other.name_);
    socket_path_ = std::move(other.socket_path_);
    lock_path_ = std::move(other.lock_path_);
    socket_device_ = other.socket_device_;
    socket_inode_ = std::exchange(other.socket_inode_, 0);
    warnings_ = std::move(other.warnings_);
    geometry_ = other.geometry_;
    backing_ = other.backing_;
    lane_count_ = other.lane_count_;
    ring_capacity_ = other.ring_capacity_;
    n_bars_ = other.n_bars_;
    capacity_bars_ = other.capacity_bars_;
    signal_capacity_ = other.signal_capacity_;
    mlock_ = other.mlock_;
  }
  return *this;
}

Segment::~Segment() { close(); }

void Segment::close() noexcept {
  listener_.reset();
  if (lock_) {
    // Only the socket we bound: a successor that replaced it keeps its own.
    struct stat info {};
    if (socket_inode_ != 0 && ::lstat(socket_path_.c_str(), &info) == 0 && info.st_ino == socket_inode_ &&
        info.st_dev == socket_device_)
      ::unlink(socket_path_.c_str());
    // Unlinked while still locked: an engine waiting on this file re-checks the path after it
    // gets the lock and starts over on a fresh file.
    ::unlink(lock_path_.c_str());
    lock_.reset();
  }
}

// ---------------------------------------------------------------------------------------------

Expected<Attachment> Attachment::attach(std::string_view name, const AttachOptions& options) {
  if (auto named = check_name(name); !named) return std::unexpected(std::move(named.error()));
  Attachment attachment;
  attachment.name_ = std::string(name);
  attachment.socket_path_ = handoff_socket_path(options.socket_dir, name);
  const std::string& path = attachment.socket_path_;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(options.timeout);
  std::vector<UniqueFd> fds;
  HandoffReply reply{};
  for (;;) {
    if (auto trusted = check_socket_file(path, name); !trusted) return std::unexpected(std::move(trusted.error()));
    auto connection = connect_engine(path, name, attachment.engine_pid_);
    if (!connection) return std::unexpected(std::move(connection.error()));
    auto answered = ask_engine(connection->get(), options.role, deadline, fds, path);
    if (!answered) {
      // A live engine answers every request it accepted (it drops only connections that stay
      // silent), so a connection closed before the answer means the engine died after the connect.
      if (answered.error().code == ErrorCode::peer_gone)
        return fail(ErrorCode::peer_gone, "engine {} is gone (pid {}): it closed the hand-off on {} without answering "
                    "(it died or is stopping)", name, attachment.engine_pid_, path);
      return std::unexpected(std::move(answered.error()));
    }
    reply = *answered;
    const auto status = static_cast<HandoffStatus>(reply.status);
    if (status == HandoffStatus::ok) {
      attachment.connection_ = std::move(*connection);
      break;
    }
    // A lane that is being freed will be free without anyone's help: a client that reconnects
    // right after another left, or after a crash, must not be told "busy".
    if (status == HandoffStatus::lane_draining && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(kLaneDrainingRetry);
      continue;
    }
    return fail(error_code_for(status), "engine {} (pid {}) refused the attach: {}{}{}", name, attachment.engine_pid_,
                to_string(status), reply.message[0] != '\0' ? ": " : "", reply.message);
  }
  const std::size_t want_fds = options.role == HandoffRole::lane ? 2 : 1;
  if (fds.size() != want_fds)
    return fail(ErrorCode::protocol, "engine {} sent {} descriptors with its hand-off; expected {}", name, fds.size(),
                want_fds);
  auto data = SharedObject::map_received(std::move(fds[0]), reply.data_bytes, PeerAccess::read_only,
                                         fmt::format("the data object of engine {}", name));
  if (!data) return std::unexpected(std::move(data.error()));
  attachment.data_ = std::move(*data);
  auto geometry = check_data(attachment.data_, name);
  if (!geometry) return std::unexpected(std::move(geometry.error()));
  const DataHeader& header = attachment.header();
  attachment.geometry_ = *geometry;
  attachment.backing_ = static_cast<Backing>(header.backing);
  attachment.lane_count_ = header.lane_count;
  attachment.ring_capacity_ = header.ring_capacity;
  attachment.n_bars_ = header.n_bars;
  attachment.signal_capacity_ = header.signal_capacity;

  if (options.role == HandoffRole::lane) {
    if (reply.lane >= attachment.lane_count_ || reply.lane_bytes != attachment.geometry_.lane_bytes)
      return fail(ErrorCode::protocol, "engine {} granted lane {} of {} bytes; its header says {} lanes of {} bytes", name,
                  reply.lane, reply.lane_bytes, attachment.lane_count_, attachment.geometry_.lane_bytes);
    auto lane = SharedObject::map_received(std::move(fds[1]), reply.lane_bytes, PeerAccess::read_write,
                                           fmt::format("lane {} of engine {}", reply.lane, name));
    if (!lane) return std::unexpected(std::move(lane.error()));
    const LaneView view =
        lane_view(lane->data(), attachment.ring_capacity_, attachment.geometry_, attachment.signal_capacity_);
    const LaneHeader& lane_header = *view.header;
    if (lane_header.magic != kLaneMagic || lane_header.lane != reply.lane || lane_header.generation != reply.generation ||
        lane_header.ring_capacity != attachment.ring_capacity_ ||
        lane_header.signal_capacity != attachment.signal_capacity_)
      return fail(ErrorCode::protocol, "engine {} sent a lane object whose header does not match its hand-off", name);
    attachment.lane_.emplace(LaneObject(std::move(*lane), view, reply.lane, reply.generation));
  }
  return attachment;
}

Attachment::Attachment(Attachment&& other) noexcept
    : connection_(std::move(other.connection_)),
      data_(std::move(other.data_)),
      lane_(std::move(other.lane_)),
      name_(std::move(other.name_)),
      socket_path_(std::move(other.socket_path_)),
      geometry_(other.geometry_),
      backing_(other.backing_),
      lane_count_(other.lane_count_),
      ring_capacity_(other.ring_capacity_),
      n_bars_(other.n_bars_),
      signal_capacity_(other.signal_capacity_),
      engine_pid_(other.engine_pid_) {
  other.lane_.reset();
}

Attachment& Attachment::operator=(Attachment&& other) noexcept {
  if (this != &other) {
    release();
    connection_ = std::move(other.connection_);
    data_ = std::move(other.data_);
    lane_ = std::move(other.lane_);
    other.lane_.reset();
    name_ = std::move(other.name_);
    socket_path_ = std::move(other.socket_path_);
    geometry_ = other.geometry_;
    backing_ = other.backing_;
    lane_count_ = other.lane_count_;
    ring_capacity_ = other.ring_capacity_;
    n_bars_ = other.n_bars_;
    signal_capacity_ = other.signal_capacity_;
    engine_pid_ = other.engine_pid_;
  }
  return *this;
}

Attachment::~Attachment() { release(); }

bool Attachment::engine_hung_up() const noexcept { return !connection_ || peer_hung_up(connection_.get()); }

void Attachment::release() noexcept {
  if (!connection_) return;
  if (lane_) {
    // Best effort, never blocking: an engine that misses it counts a death instead of a release.
    const ReleaseNotice notice{kHandoffMagic, kHandoffVersion, 1};
    (void)!::send(connection_.get(), &notice, sizeof notice, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  connection_.reset();
}

}  // namespace ipcfloor
