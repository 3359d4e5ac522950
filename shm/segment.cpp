#include "shm/segment.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include <fmt/format.h>

#include "shm/huge_pages.hpp"
#include "shm/liveness.hpp"

namespace ipcfloor {
namespace {

Expected<void> check_name(std::string_view name) {
  if (!valid_segment_name(name))
    return fail(ErrorCode::invalid_argument,
                "segment name '{}' is invalid: use 1..{} characters of A-Z a-z 0-9 . _ - (not . or ..)", name,
                kMaxSegmentNameBytes);
  return {};
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
    return fail(ErrorCode::invalid_argument, "--ring-capacity {} is not a power of two in 2..{}", config.ring_capacity,
                kMaxRingCapacity);
  if (config.series.empty())
    return fail(ErrorCode::invalid_argument, "the series is empty: the segment needs at least one bar");
  if (config.more_series.size() + 1 > kMaxSeries)
    return fail(ErrorCode::invalid_argument, "{} series given; one segment holds at most {}",
                config.more_series.size() + 1, kMaxSeries);
  for (const SegmentConfig::NamedSeries& more : config.more_series)
    if (more.bars.empty())
      return fail(ErrorCode::invalid_argument, "series {} is empty: every series needs at least one bar", more.key);
  if (config.bulk_bytes > kMaxBulkBytes)
    return fail(ErrorCode::invalid_argument, "--bulk-bytes {} is more than the {} bytes a lane's bulk region may have",
                config.bulk_bytes, kMaxBulkBytes);
  if (!config.replayed.empty() && (!config.live || config.series.size() + config.replayed.size() > std::max(config.series.size(), config.capacity_bars)))
    return fail(ErrorCode::invalid_argument, "{} replayed bars after the {} preloaded need a live series with room for "
                "them (--live --capacity {} or more)", config.replayed.size(), config.series.size(),
                config.series.size() + config.replayed.size());
  return prepare_socket_dir(config.socket_dir);
}

// ---------------------------------------------------------------------------------------------
// Creation, step by step

// Room for the series: its preloaded bars, or the live capacity when that is larger.
std::size_t capacity_of(const SegmentConfig& config) noexcept {
  return std::max(config.series.size(), config.capacity_bars);
}

// Bytes the series after the main one take, and the column region.
std::size_t extra_bytes_of(const SegmentConfig& config) noexcept {
  std::size_t bytes = 0;
  for (const SegmentConfig::NamedSeries& more : config.more_series)
    bytes += extra_series_bytes(more.bars.size()) + series_columns_bytes(more.bars.size(), more.bars.columns());
  return bytes + series_columns_bytes(config.series.size(), config.series.columns());
}

// Copies the columns of `bars` besides close to `offset` on, each to a 64-byte boundary, and
// records them in `entry`; returns the offset after them (series_columns_bytes on).
std::size_t write_columns(std::byte* base, std::size_t offset, const Bars& bars, SeriesEntry& entry) noexcept {
  entry.columns = bars.columns();
  for (std::size_t k = 0; k < kOtherColumns; ++k) {
    entry.column_offset[k] = 0;
    const double* column = bars.column(static_cast<Column>(k + 1));
    if (column == nullptr) continue;
    std::memcpy(base + offset, column, bars.size() * sizeof(double));
    entry.column_offset[k] = offset;
    offset += extra_series_bytes(bars.size());
  }
  return offset;
}

void copy_key(char (&to)[kSeriesKeyBytes], std::string_view text) noexcept {
  const std::size_t length = std::min(text.size(), kSeriesKeyBytes - 1);
  std::memcpy(to, text.data(), length);
  to[length] = '\0';
}

// Step 1, the budgets, before anything is made. The host must be able to back every object
// (segment_memory_needs, check_memory_budget). And under --mlock require, RLIMIT_MEMLOCK must
// cover the data object and the most lane objects alive at once: lane objects are made per
// client, and a limit too short for them must fail the start, not a later client.

// True when the data object will take huge pages: what SharedObject::create decides.
bool data_fits_huge_pages(const SegmentConfig& config) {
  if (config.hugepages == HugePagesMode::off) return false;
  const SegmentGeometry huge = compute_geometry(config.lanes, config.ring_capacity, capacity_of(config), kHugePageBytes,
                                                config.bulk_bytes, config.signal_capacity, extra_bytes_of(config));
  return huge_page_budget().available >= huge.data_bytes / kHugePageBytes;
}

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

// Step 3, the data object: created, populated, locked (shm/shared_object.hpp).
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

// The journal line's facts of this start (the journal's writer keeps the rest up to date).
void write_journal_facts(DataHeader& header, const SegmentConfig::JournalFacts& journal, std::size_t replayed) noexcept {
  if (journal.path.empty()) return;
  // relaxed: published to attachers by the release store of `state` in publish_data.
  header.journal_state.store(1, std::memory_order_relaxed);
  header.journal_records.store(journal.records, std::memory_order_relaxed);
  header.journal_bytes.store(journal.bytes, std::memory_order_relaxed);
  header.journal_fsync = journal.fsync;
  header.journal_interval_ms = journal.interval_ms;
  header.journal_replayed = replayed;
  header.journal_torn_bytes = journal.torn_bytes;
  header.journal_starts = journal.starts;
  const std::size_t length = std::min(journal.path.size(), kJournalPathBytes - 1);
  std::memcpy(header.journal_path, journal.path.data(), length);
  header.journal_path[length] = '\0';
}

// Step 4, the header and the lane table, then the series and its checksum. Nobody else can
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
  header->bars_published.store(config.series.size() + config.replayed.size(), std::memory_order_relaxed);
  header->max_frame_cost = config.max_frame_cost;
  header->fee = config.fee;
  header->bars_per_year = config.bars_per_year;
  header->series_first = config.series.close.front();
  header->series_last = config.series.close.back();
  copy_series_name(*header, config.series_name);
  header->serving_cpu = config.serving_cpu;
  header->near_cpu_count = static_cast<std::uint32_t>(std::min(config.near_cpus.size(), kMaxNearCpus));
  for (std::uint32_t i = 0; i < header->near_cpu_count; ++i)
    header->near_cpus[i] = static_cast<std::uint16_t>(config.near_cpus[i]);
  // relaxed: published to attachers by the release store of `state` in publish_data.
  header->heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < config.lanes; ++i) {
    ::new (base + g.lane_status_offset + std::size_t{i} * kLaneStatusBytes) LaneStatus{};  // free, no owner
  }
  std::byte* const series = base + g.series_offset;
  const std::size_t preloaded_bytes = config.series.size() * sizeof(double);
  std::memcpy(series, config.series.close.data(), preloaded_bytes);
  header->series_checksum = fnv1a64(std::span<const std::byte>(series, preloaded_bytes));
  // An empty span's data() may be null, which memcpy may not be given even for 0 bytes (UBSan).
  if (!config.replayed.empty())
    std::memcpy(series + preloaded_bytes, config.replayed.data(), config.replayed.size() * sizeof(double));
  write_journal_facts(*header, config.journal, config.replayed.size());
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
  enter(header->series_table[0], g.series_offset, config.series.close, config.series_key);
  std::size_t offset = g.extra_series_offset;
  for (std::size_t i = 0; i < config.more_series.size(); ++i) {
    const auto& more = config.more_series[i];
    std::memcpy(base + offset, more.bars.close.data(), more.bars.size() * sizeof(double));
    enter(header->series_table[i + 1], offset, more.bars.close, more.key);
    offset += extra_series_bytes(more.bars.size());
  }
  // The column region: each series' other columns, in table order.
  for (std::uint32_t i = 0; i < header->series_count; ++i)
    offset = write_columns(base, offset, i == 0 ? config.series : config.more_series[i - 1].bars,
                           header->series_table[i]);
  header->strategy_count = static_cast<std::uint32_t>(std::min(config.strategies.size(), kMaxStrategies));
  for (std::uint32_t i = 0; i < header->strategy_count; ++i) header->strategy_table[i] = config.strategies[i];
}

// Step 5, publish: magic and `ready` with release stores, then the seals. From here on nobody
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

// Whether every series' other columns sit where write_columns puts them: from `offset` (the end
// of the other series) on, in table order, each `bars` long; 0 where a series has no such column.
// The sizes were counted into the geometry, which the object's size was checked against.
bool columns_where_expected(const DataHeader& header, std::size_t offset) noexcept {
  for (std::uint32_t i = 0; i < header.series_count; ++i) {
    const SeriesEntry& entry = header.series_table[i];
    for (std::size_t k = 0; k < kOtherColumns; ++k) {
      const bool present = ((entry.columns >> (k + 1)) & 1U) != 0;
      if (entry.column_offset[k] != (present ? offset : 0)) return false;
      if (present) offset += extra_series_bytes(static_cast<std::size_t>(entry.bars));
    }
  }
  return true;
}

// The header as received, checked against the object's size and against the geometry this
// side computes itself. The object is sealed read-only, so what is checked stays true.
Expected<SegmentGeometry> check_data(const SharedObject& data, std::string_view name, bool verify_series) {
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
  if (header.near_cpu_count > kMaxNearCpus)
    return fail(ErrorCode::protocol, "engine {} lists {} cpus near its serving thread, more than the {} it has room for",
                name, header.near_cpu_count, kMaxNearCpus);
  std::size_t extra_bytes = 0;
  for (std::uint32_t i = 0; i < header.series_count; ++i) {
    const SeriesEntry& entry = header.series_table[i];
    if (entry.bars < 1 || entry.bars > data.size() / sizeof(double))
      return fail(ErrorCode::protocol, "engine {} sent series {} of impossible length {}", name, i, entry.bars);
    if ((entry.columns & IPCFLOOR_COLUMN_CLOSE) == 0 || (entry.columns & ~kAllColumns) != 0)
      return fail(ErrorCode::protocol, "engine {} sent series {} with impossible columns {:#x}", name, i, entry.columns);
    if (i != 0) extra_bytes += extra_series_bytes(static_cast<std::size_t>(entry.bars));
    extra_bytes += series_columns_bytes(static_cast<std::size_t>(entry.bars), entry.columns);
  }
  const SegmentGeometry g = compute_geometry(header.lane_count, header.ring_capacity, header.capacity_bars, page,
                                             header.lane_bulk_bytes, header.signal_capacity, extra_bytes);
  if (g.lane_status_offset != header.lane_status_offset || g.series_offset != header.series_offset ||
      g.series_bytes != header.series_bytes || g.lane_bytes != header.lane_bytes ||
      g.lane_bulk_offset != header.lane_bulk_offset || g.data_bytes > data.size() || header.data_bytes != data.size())
    return fail(ErrorCode::protocol, "engine {} sent a data header whose offsets disagree with its geometry", name);
  const std::uint64_t checksum =
      verify_series ? fnv1a64(std::span<const std::byte>(data.data() + g.series_offset, header.n_bars * sizeof(double)))
                    : header.series_checksum;
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
    if (i == 0 || !verify_series) {
      if (i != 0) offset += extra_series_bytes(static_cast<std::size_t>(entry.bars));
      continue;
    }
    const std::uint64_t sum =
        fnv1a64(std::span<const std::byte>(data.data() + entry.offset, entry.bars * sizeof(double)));
    if (sum != entry.checksum)
      return fail(ErrorCode::protocol, "engine {}'s series {} ({}) hashes to {:#018x} but its table records {:#018x}",
                  name, i, entry.name, sum, entry.checksum);
    offset += extra_series_bytes(static_cast<std::size_t>(entry.bars));
  }
  if (!columns_where_expected(header, offset))
    return fail(ErrorCode::protocol, "engine {} sent a series table whose column offsets disagree with its geometry",
                name);
  // The strategy table: names terminated within their fields, parameter counts the ABI allows.
  if (header.strategy_count > kMaxStrategies)
    return fail(ErrorCode::protocol, "engine {} sent a strategy table of {} entries", name, header.strategy_count);
  for (std::uint32_t i = 0; i < header.strategy_count; ++i) {
    const StrategyEntry& entry = header.strategy_table[i];
    bool terminated = std::memchr(entry.name, '\0', sizeof entry.name) != nullptr;
    for (const auto& text : entry.param_names) terminated = terminated && std::memchr(text, '\0', sizeof text) != nullptr;
    for (const auto& text : entry.value_names) terminated = terminated && std::memchr(text, '\0', sizeof text) != nullptr;
    if (!terminated || entry.param_count < 1 || entry.param_count > IPCFLOOR_STRATEGY_MAX_PARAMS)
      return fail(ErrorCode::protocol, "engine {} sent strategy {} with an unterminated name or {} parameters", name, i,
                  entry.param_count);
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

std::string memory_lock_text(bool data_locked, Backing backing, std::uint32_t lanes_locked, std::uint32_t lanes) {
  const std::string data = !data_locked                          ? "the data is NOT locked in RAM"
                           : backing == Backing::memfd_huge_2m ? "the data is locked in RAM (huge pages)"
                                                               : "the data is locked in RAM (mlock)";
  if (lanes_locked >= lanes) return fmt::format("{}; all {} lane objects are locked in RAM (mlock)", data, lanes);
  if (lanes_locked == 0)
    return fmt::format("{}; none of the {} lane objects is locked in RAM (mlock failed, or --mlock off)", data, lanes);
  return fmt::format("{}; {} of the {} lane objects are locked in RAM (mlock), {} are NOT (mlock failed)", data,
                     lanes_locked, lanes, lanes - lanes_locked);
}

static_assert(kMaxSegmentNameBytes < kHandoffNameBytes, "a hand-off reply names any engine whole");

bool valid_segment_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > kMaxSegmentNameBytes || name == "." || name == "..") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

std::vector<MemoryNeed> segment_memory_needs(const SegmentConfig& config, bool data_on_huge_pages) {
  const SegmentGeometry g = compute_geometry(config.lanes, config.ring_capacity, capacity_of(config), kSmallPageBytes,
                                             config.bulk_bytes, config.signal_capacity, extra_bytes_of(config));
  std::vector<MemoryNeed> needs;
  if (!data_on_huge_pages) {
    const bool live_room = config.capacity_bars > config.series.size();
    needs.push_back({"the data object", g.data_bytes,
                     live_room ? fmt::format("--capacity {}", config.capacity_bars)
                               : fmt::format("the series ({} bars; --bars or --data)", config.series.size())});
  }
  // Name the part of a lane object that sizes it: the bulk region, the rings or the signal ring.
  const std::uint64_t rings = std::uint64_t{config.ring_capacity} * (sizeof(RequestSlot) + sizeof(ResponseSlot));
  const std::uint64_t signals = std::uint64_t{config.signal_capacity} * sizeof(SignalSlot);
  const std::string sizing = config.bulk_bytes >= rings && config.bulk_bytes >= signals
                                 ? fmt::format("--bulk-bytes {}", config.bulk_bytes)
                             : rings >= signals ? fmt::format("--ring-capacity {}", config.ring_capacity)
                                                : fmt::format("--signal-capacity {}", config.signal_capacity);
  const std::uint64_t objects = std::uint64_t{config.lanes} + 1;  // a lane's replacement is made before its old one goes
  needs.push_back({fmt::format("{} lane objects of {} (one per lane, one to replace a lane's)", objects,
                               bytes_text(g.lane_bytes)),
                   objects * g.lane_bytes, fmt::format("{} or --lanes {}", sizing, config.lanes)});
  return needs;
}

Expected<Segment> Segment::create(const SegmentConfig& config) {
  if (auto valid = validate_config(config); !valid) return std::unexpected(std::move(valid.error()));
  if (auto fits = check_memory(config); !fits) return std::unexpected(std::move(fits.error()));
  if (auto budget = check_mlock_budget(config); !budget) return std::unexpected(std::move(budget.error()));
  Segment segment;
  SegmentFacts& facts = segment.facts_;
  facts.name = config.name;
  facts.socket_path = handoff_socket_path(config.socket_dir, config.name);
  if (auto address = unix_address(facts.socket_path); !address) return std::unexpected(std::move(address.error()));

  // Step 2, the name. A stale socket at DIR/NAME stays until the listener's rename replaces it.
  auto claim = NameClaim::take(config.name, config.socket_dir, segment.warnings_);
  if (!claim) return std::unexpected(std::move(claim.error()));
  segment.claim_ = std::move(*claim);

  auto data = make_data_object(config, facts.geometry);
  if (!data) return std::unexpected(std::move(data.error()));
  segment.data_ = std::move(*data);
  for (const std::string& warning : segment.data_.warnings()) segment.warnings_.push_back(warning);
  facts.backing = segment.data_.huge_pages() ? Backing::memfd_huge_2m : Backing::memfd_4k;
  facts.lane_count = config.lanes;
  facts.ring_capacity = config.ring_capacity;
  facts.n_bars = config.series.size();
  facts.capacity_bars = capacity_of(config);
  facts.signal_capacity = config.signal_capacity;
  segment.mlock_ = config.mlock;

  write_data(segment.data_.data(), segment.data_.size(), facts.geometry, config, facts.backing, segment.data_.locked());
  if (auto published = publish_data(segment.data_); !published) return std::unexpected(std::move(published.error()));

  // Step 6, the socket, last: whoever can connect finds everything above complete.
  segment.peers_ = config.peers;
  auto listener = HandoffListener::open(facts.socket_path, config.peers.socket_mode());
  if (!listener) return std::unexpected(std::move(listener.error()));
  segment.listener_ = std::move(*listener);
  return segment;
}

Expected<void> Segment::check_memory(const SegmentConfig& config, std::span<const MemoryNeed> more) {
  std::vector<MemoryNeed> needs = segment_memory_needs(config, data_fits_huge_pages(config));
  needs.insert(needs.end(), more.begin(), more.end());
  if (auto fits = check_memory_budget(needs, read_host_memory()); !fits)
    return fail(ErrorCode::resource, "engine {}: {}", config.name, fits.error().message);
  return {};
}

Expected<LaneObject> Segment::make_lane_object(std::uint32_t lane, std::uint64_t generation) const {
  const SegmentFacts& f = facts_;
  ObjectSpec spec;
  spec.label = fmt::format("ipcfloor:{}:lane{}", f.name, lane);
  spec.bytes = f.geometry.lane_bytes;
  // Small pages: a lane is touched a few lines at a time, and a client may punch holes in its own
  // object; on huge pages a hole could be refilled only from the pool.
  spec.hugepages = HugePagesMode::off;
  spec.mlock = mlock_;
  auto object = SharedObject::create(spec);
  if (!object) return std::unexpected(std::move(object.error()));
  std::byte* const base = object->data();
  const LaneView view = lane_view(base, f.ring_capacity, f.geometry, f.signal_capacity);
  ::new (view.header) LaneHeader{kLaneMagic,         kLayoutVersion,          lane, generation, f.ring_capacity,
                                 f.signal_capacity,  f.geometry.lane_bytes, f.geometry.lane_bulk_offset,
                                 f.geometry.lane_bulk_bytes};
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
  std::vector<std::string> ignored;
  auto claim = NameClaim::take(name, socket_dir, ignored);
  if (!claim) return std::unexpected(std::move(claim.error()));
  if (claim->socket_file() == SocketFileState::absent) return {};
  return remove_stale_socket_file(handoff_socket_path(socket_dir, name));
}

// ---------------------------------------------------------------------------------------------

Expected<Attachment> Attachment::attach(std::string_view name, const AttachOptions& options) {
  if (auto named = check_name(name); !named) return std::unexpected(std::move(named.error()));
  // A directory another user could swap for another (one holding an engine of the same name) is
  // refused before anything is asked of it.
  if (auto safe = check_socket_dir_if_present(options.socket_dir); !safe) return std::unexpected(std::move(safe.error()));
  Attachment attachment;
  SegmentFacts& facts = attachment.facts_;
  facts.name = std::string(name);
  facts.socket_path = handoff_socket_path(options.socket_dir, name);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(options.timeout);
  auto handoff = request_handoff(facts.socket_path, name, options.role, deadline, options.reattaches);
  if (!handoff) return std::unexpected(std::move(handoff.error()));
  attachment.engine_pid_ = handoff->engine_pid;
  attachment.engine_start_ticks_ = process_start_ticks(handoff->engine_pid);
  const HandoffReply& reply = handoff->reply;
  std::vector<UniqueFd>& fds = handoff->fds;
  const std::size_t want_fds = options.role == HandoffRole::lane ? 2 : 1;
  if (fds.size() != want_fds)
    return fail(ErrorCode::protocol, "engine {} sent {} descriptors with its hand-off; expected {}", name, fds.size(),
                want_fds);
  // Each descriptor is closed once its object is mapped (map_received): the client keeps none.
  auto data = SharedObject::map_received(std::move(fds[0]), reply.data_bytes, PeerAccess::read_only,
                                         fmt::format("the data object of engine {}", name));
  if (!data) return std::unexpected(std::move(data.error()));
  attachment.data_ = std::move(*data);
  auto geometry = check_data(attachment.data_, name, options.verify_series);
  if (!geometry) return std::unexpected(std::move(geometry.error()));
  const DataHeader& header = attachment.header();
  facts.geometry = *geometry;
  facts.backing = static_cast<Backing>(header.backing);
  facts.lane_count = header.lane_count;
  facts.ring_capacity = header.ring_capacity;
  facts.n_bars = header.n_bars;
  facts.capacity_bars = header.capacity_bars;
  facts.signal_capacity = header.signal_capacity;
  // An observer needs nothing more from the engine: its connection closes with `handoff`, and
  // takes none of the engine's connection slots.
  if (options.role != HandoffRole::lane) return attachment;

  if (reply.lane >= facts.lane_count || reply.lane_bytes != facts.geometry.lane_bytes)
    return fail(ErrorCode::protocol, "engine {} granted lane {} of {} bytes; its header says {} lanes of {} bytes", name,
                reply.lane, reply.lane_bytes, facts.lane_count, facts.geometry.lane_bytes);
  auto lane = SharedObject::map_received(std::move(fds[1]), reply.lane_bytes, PeerAccess::read_write,
                                         fmt::format("lane {} of engine {}", reply.lane, name));
  if (!lane) return std::unexpected(std::move(lane.error()));
  const LaneView view = lane_view(lane->data(), facts.ring_capacity, facts.geometry, facts.signal_capacity);
  const LaneHeader& lane_header = *view.header;
  if (lane_header.magic != kLaneMagic || lane_header.lane != reply.lane || lane_header.generation != reply.generation ||
      lane_header.ring_capacity != facts.ring_capacity || lane_header.signal_capacity != facts.signal_capacity)
    return fail(ErrorCode::protocol, "engine {} sent a lane object whose header does not match its hand-off", name);
  attachment.lane_.emplace(LaneObject(std::move(*lane), view, reply.lane, reply.generation));
  // The one descriptor a lane client keeps: the connection that is its lease. Harmless to leave
  // reachable: a socket cannot be reopened through /proc/PID/fd (ENXIO), and the engine sends
  // descriptors only once, in the reply above.
  attachment.lease_ = Lease(std::move(handoff->connection));
  return attachment;
}

bool Attachment::engine_hung_up() const noexcept {
  if (lane_) return lease_.engine_hung_up();
  if (engine_pid_ > 0) return !process_alive(engine_pid_, engine_start_ticks_);
  const DataHeader& h = header();
  // relaxed: a timestamp; only its age matters, nothing is published through it.
  const std::uint64_t beat = h.heartbeat_ns.load(std::memory_order_relaxed);
  return !judge_engine_health(true, beat, monotonic_ns(), h.heartbeat_interval_ns).heartbeat_fresh();
}

}  // namespace ipcfloor
