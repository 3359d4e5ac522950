#include "engine/bar_journal.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <ctime>
#include <system_error>

#include <boost/crc.hpp>
#include <fmt/format.h>

#include "common/atomic_file.hpp"

namespace ipcfloor {
namespace {

constexpr char kMagic[8] = {'I', 'P', 'C', 'F', 'J', 'R', 'N', 'L'};
// The longest interval:MS takes: a minute. Longer, a power cut could take more than most people
// would call "an interval".
constexpr std::int64_t kMaxSyncIntervalMs = 60'000;
// Records read at once while scanning a journal.
constexpr std::size_t kScanRecords = 4096;

// The header as it lies on disk. Plain bytes, little-endian (the engine's own byte order: a
// journal is read back by the host that wrote it, as the segment is).
struct JournalHeaderDisk {
  char magic[8];
  std::uint32_t version;
  std::uint32_t record_bytes;
  std::uint64_t base_bars;
  std::uint64_t base_checksum;
  std::uint64_t created_unix_ns;
  char key[kJournalKeyBytes];                  // NUL-terminated
  char description[kJournalDescriptionBytes];  // NUL-terminated
  std::uint8_t reserved[52];
  std::uint32_t crc;  // CRC-32C over every byte before it
};
static_assert(sizeof(JournalHeaderDisk) == kJournalHeaderBytes, "the journal header is 256 bytes on disk");
static_assert(offsetof(JournalHeaderDisk, crc) == kJournalHeaderBytes - 4, "the header's CRC is its last word");
static_assert(std::endian::native == std::endian::little, "journals are little-endian, as the engine's host");

std::string os_reason(int err) { return std::system_category().message(err); }

std::uint64_t realtime_ns() noexcept {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<std::uint64_t>(now.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(now.tv_nsec);
}

std::uint32_t record_crc(const JournalRecord& record) noexcept {
  return crc32c(std::as_bytes(std::span(&record, 1)).subspan(sizeof record.crc));
}

// The text of a NUL-terminated field, cut at its size whatever it holds.
template <std::size_t N>
std::string field_text(const char (&field)[N]) {
  return std::string(field, strnlen(field, N));
}

template <std::size_t N>
void set_field(char (&field)[N], std::string_view text) {
  std::memset(field, 0, N);
  text.substr(0, N - 1).copy(field, N - 1);
}

// Reads `bytes` at `offset`; the bytes read (fewer at the end of the file), or -errno.
ssize_t read_at(int fd, std::span<std::byte> bytes, std::uint64_t offset) noexcept {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::pread(fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return -errno;
    if (got == 0) break;
    done += static_cast<std::size_t>(got);
  }
  return static_cast<ssize_t>(done);
}

Expected<JournalContents> read_header(int fd, std::string_view path, std::uint64_t size) {
  JournalHeaderDisk header{};
  if (size < kJournalHeaderBytes)
    return fail(ErrorCode::bad_data, "journal {} is {} bytes, shorter than its {}-byte header: not a journal (or one "
                "cut short while it was being made; remove it to start a new one)", path, size, kJournalHeaderBytes);
  const ssize_t got = read_at(fd, std::as_writable_bytes(std::span(&header, 1)), 0);
  if (got < 0) return fail(ErrorCode::io, "cannot read journal {}: {}", path, os_reason(static_cast<int>(-got)));
  if (std::memcmp(header.magic, kMagic, sizeof kMagic) != 0)
    return fail(ErrorCode::bad_data, "{} is not an ipcfloor journal (its first bytes are not IPCFJRNL)", path);
  if (header.crc != crc32c(std::as_bytes(std::span(&header, 1)).first(offsetof(JournalHeaderDisk, crc))))
    return fail(ErrorCode::bad_data, "journal {}: its header fails its CRC: it was damaged", path);
  if (header.version != kJournalVersion || header.record_bytes != kJournalRecordBytes)
    return fail(ErrorCode::version_mismatch, "journal {} is version {} with {}-byte records; this ipcfloor reads "
                "version {} ({}-byte records)", path, header.version, header.record_bytes, kJournalVersion,
                kJournalRecordBytes);
  JournalContents contents;
  contents.base = {header.base_bars, header.base_checksum, field_text(header.key), field_text(header.description)};
  contents.created_unix_ns = header.created_unix_ns;
  contents.good_bytes = kJournalHeaderBytes;
  return contents;
}

// One intact record into `contents`; an error names what is wrong with it at `offset`.
Expected<void> take_record(const JournalRecord& record, std::uint64_t offset, std::string_view path,
                           std::uint64_t max_bars, JournalContents& contents) {
  switch (static_cast<JournalRecordKind>(record.kind)) {
    case JournalRecordKind::bar: {
      const std::uint64_t expected = contents.base.bars + contents.closes.size();
      if (record.index != expected)
        return fail(ErrorCode::bad_data, "journal {}: the record at offset {} holds bar {} where bar {} comes next: "
                    "bars are missing or doubled", path, offset, record.index, expected);
      const double close = std::bit_cast<double>(record.value);
      if (!std::isfinite(close) || !(close > 0.0))
        return fail(ErrorCode::bad_data, "journal {}: bar {} (offset {}) has close {}, not a finite number > 0", path,
                    record.index, offset, close);
      if (contents.closes.size() == max_bars)
        return fail(ErrorCode::invalid_argument, "journal {} holds more than {} bars (bar {} at offset {})", path, max_bars,
                    record.index, offset);
      contents.closes.push_back(close);
      if (contents.closes.size() == 1) contents.first_tick = record.tick;
      contents.last_tick = record.tick;
      return {};
    }
    case JournalRecordKind::start:
      ++contents.start_records;
      contents.last_start_unix_ns = record.tick;
      contents.last_start_pid = static_cast<std::int64_t>(record.value);
      return {};
  }
  return fail(ErrorCode::version_mismatch, "journal {}: the record at offset {} is of kind {}, which this ipcfloor "
              "does not know (a newer version wrote it)", path, offset, record.kind);
}

// True when some whole record at or after `offset` is intact: then the bad one before it is
// damage, not a tear. Reads the rest of the file.
Expected<bool> intact_record_after(int fd, std::string_view path, std::uint64_t offset, std::uint64_t size) {
  std::vector<JournalRecord> chunk(kScanRecords);
  for (std::uint64_t at = offset; at + kJournalRecordBytes <= size;) {
    const ssize_t got = read_at(fd, std::as_writable_bytes(std::span(chunk)), at);
    if (got < 0) return fail(ErrorCode::io, "cannot read journal {}: {}", path, os_reason(static_cast<int>(-got)));
    const std::size_t whole = static_cast<std::size_t>(got) / kJournalRecordBytes;
    if (whole == 0) break;
    for (std::size_t i = 0; i < whole; ++i)
      if (record_intact(chunk[i])) return true;
    at += whole * kJournalRecordBytes;
  }
  return false;
}

// The tail from `offset` on holds no whole intact record: a torn last write. Recorded, not an error.
Expected<void> check_tail(int fd, std::string_view path, std::uint64_t offset, std::uint64_t size,
                          JournalContents& contents) {
  if (size - offset < kJournalRecordBytes) {
    contents.torn_bytes = size - offset;
    contents.torn_reason = fmt::format("a record cut short: {} of its {} bytes at offset {}", size - offset,
                                       kJournalRecordBytes, offset);
    return {};
  }
  auto later = intact_record_after(fd, path, offset + kJournalRecordBytes, size);
  if (!later) return std::unexpected(later.error());
  if (*later)
    return fail(ErrorCode::bad_data, "journal {}: the record at offset {} fails its CRC, and intact records follow "
                "it: the journal was damaged, not torn by a crash; `ipcfloor journal inspect {}` shows it",
                path, offset, path.substr(0, path.rfind('/')));
  contents.torn_bytes = size - offset;
  contents.torn_reason = fmt::format("the record at offset {} fails its CRC ({} bytes from there on)", offset,
                                     size - offset);
  return {};
}

}  // namespace

Expected<JournalSync> parse_fsync_policy(std::string_view text) {
  if (text == "every") return JournalSync{FsyncPolicy::every, {}};
  if (text == "none") return JournalSync{FsyncPolicy::none, {}};
  constexpr std::string_view kInterval = "interval:";
  if (text.starts_with(kInterval)) {
    const std::string_view digits = text.substr(kInterval.size());
    std::int64_t ms = 0;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ms);
    if (ec == std::errc() && end == digits.data() + digits.size() && ms >= 1 && ms <= kMaxSyncIntervalMs)
      return JournalSync{FsyncPolicy::interval, std::chrono::milliseconds(ms)};
  }
  return fail(ErrorCode::invalid_argument, "--fsync '{}' is not every, interval:MS (MS in 1..{}) or none", text,
              kMaxSyncIntervalMs);
}

std::string to_string(const JournalSync& sync) {
  switch (sync.policy) {
    case FsyncPolicy::every: return "every";
    case FsyncPolicy::interval: return fmt::format("interval:{}", sync.interval.count());
    case FsyncPolicy::none: return "none";
  }
  return "unknown";
}

std::uint32_t crc32c(std::span<const std::byte> bytes) noexcept {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(bytes.data(), bytes.size());
  return crc.checksum();
}

JournalRecord bar_record(std::uint64_t index, double close, std::uint64_t tick) noexcept {
  JournalRecord record{0, static_cast<std::uint16_t>(JournalRecordKind::bar), 0, index,
                       std::bit_cast<std::uint64_t>(close), tick};
  record.crc = record_crc(record);
  return record;
}

bool record_intact(const JournalRecord& record) noexcept { return record.crc == record_crc(record); }

std::vector<std::byte> journal_header_bytes(const JournalBase& base, std::uint64_t unix_ns) {
  JournalHeaderDisk header{};
  std::memcpy(header.magic, kMagic, sizeof kMagic);
  header.version = kJournalVersion;
  header.record_bytes = kJournalRecordBytes;
  header.base_bars = base.bars;
  header.base_checksum = base.checksum;
  header.created_unix_ns = unix_ns;
  set_field(header.key, base.key);
  set_field(header.description, base.description);
  header.crc = crc32c(std::as_bytes(std::span(&header, 1)).first(offsetof(JournalHeaderDisk, crc)));
  const auto bytes = std::as_bytes(std::span(&header, 1));
  return {bytes.begin(), bytes.end()};
}

Expected<JournalContents> read_journal(int fd, std::string_view path, std::uint64_t max_bars) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return fail(ErrorCode::io, "cannot inspect journal {}: {}", path, os_reason(errno));
  const auto size = static_cast<std::uint64_t>(info.st_size);
  auto contents = read_header(fd, path, size);
  if (!contents) return contents;
  // No more bars than the file can hold, nor than the caller allows: reserved before reading.
  contents->closes.reserve(std::min<std::uint64_t>(max_bars, (size - kJournalHeaderBytes) / kJournalRecordBytes));
  std::vector<JournalRecord> chunk(kScanRecords);
  std::uint64_t offset = kJournalHeaderBytes;
  while (offset < size) {
    const ssize_t got = read_at(fd, std::as_writable_bytes(std::span(chunk)), offset);
    if (got < 0) return fail(ErrorCode::io, "cannot read journal {}: {}", path, os_reason(static_cast<int>(-got)));
    const std::size_t whole = static_cast<std::size_t>(got) / kJournalRecordBytes;
    for (std::size_t i = 0; i < whole; ++i, offset += kJournalRecordBytes) {
      if (!record_intact(chunk[i])) {
        if (auto tail = check_tail(fd, path, offset, size, *contents); !tail) return std::unexpected(tail.error());
        return contents;
      }
      if (auto taken = take_record(chunk[i], offset, path, max_bars, *contents); !taken)
        return std::unexpected(taken.error());
      contents->good_bytes = offset + kJournalRecordBytes;
    }
    if (whole == 0) break;  // fewer than 32 bytes left
  }
  if (offset < size)
    if (auto tail = check_tail(fd, path, offset, size, *contents); !tail) return std::unexpected(tail.error());
  return contents;
}

std::string journal_mismatch(std::string_view path, const JournalBase& journal, const JournalBase& data) {
  if (journal.bars == data.bars && journal.checksum == data.checksum && journal.key == data.key) return {};
  return fmt::format("journal {} continues series '{}' ({}: {} bars, checksum {:016x}), but this engine preloads "
                     "series '{}' ({}: {} bars, checksum {:016x}); start it with the data the journal continues, or "
                     "give another --journal DIR",
                     path, journal.key, journal.description, journal.bars, journal.checksum, data.key,
                     data.description, data.bars, data.checksum);
}

Expected<UniqueFd> open_journal_dir(const std::string& dir, bool create) {
  if (dir.empty()) return fail(ErrorCode::invalid_argument, "the journal directory is an empty path");
  struct stat info {};
  if (::lstat(dir.c_str(), &info) != 0) {
    const int err = errno;
    if (err != ENOENT || !create)
      return fail(ErrorCode::io, "journal directory {}: {}", dir, os_reason(err));
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return fail(ErrorCode::io, "cannot make journal directory {}: {}", dir, os_reason(errno));
    if (::lstat(dir.c_str(), &info) != 0)
      return fail(ErrorCode::io, "journal directory {}: {}", dir, os_reason(errno));
  }
  if (S_ISLNK(info.st_mode))
    return fail(ErrorCode::permission, "journal directory {} is a symbolic link: refused (a link can be "
                "pointed elsewhere behind the engine's back); give the directory itself", dir);
  if (!S_ISDIR(info.st_mode)) return fail(ErrorCode::invalid_argument, "journal directory {} is not a directory", dir);
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return fail(ErrorCode::io, "cannot open journal directory {}: {}", dir, os_reason(errno));
  if (auto safe = check_output_directory(fd.get(), dir, fmt::format("the journal in {}", dir)); !safe)
    return std::unexpected(safe.error());
  return fd;
}

int write_fully(int fd, std::span<const std::byte> bytes) noexcept {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote < 0) return errno;
    if (wrote == 0) return EIO;
    done += static_cast<std::size_t>(wrote);
  }
  return 0;
}

namespace {

// Opens DIR/bars.journal, or makes it for `base` (0600, O_EXCL|O_NOFOLLOW, its header synced,
// and the directory entry too). A link at the name is refused.
Expected<UniqueFd> open_or_make(int dir_fd, const std::string& path, const JournalBase& base) {
  UniqueFd file(::openat(dir_fd, kJournalFileName, O_RDWR | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (file) return file;
  if (errno == ELOOP)
    return fail(ErrorCode::permission, "journal {} is a symbolic link: refused (a journal is opened only where "
                "it lies, never through a link someone could point elsewhere)", path);
  if (errno != ENOENT) return fail(ErrorCode::io, "cannot open journal {}: {}", path, os_reason(errno));
  file.reset(::openat(dir_fd, kJournalFileName, O_RDWR | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!file) {
    if (errno == EEXIST) return fail(ErrorCode::busy, "journal {} appeared while this engine made it: another engine "
                                     "is starting on it", path);
    return fail(ErrorCode::io, "cannot create journal {}: {}", path, os_reason(errno));
  }
  const std::vector<std::byte> header = journal_header_bytes(base, realtime_ns());
  if (::fchmod(file.get(), 0600) != 0 || write_fully(file.get(), header) != 0 || ::fdatasync(file.get()) != 0 ||
      ::fsync(dir_fd) != 0) {
    const int err = errno;
    (void)::unlinkat(dir_fd, kJournalFileName, 0);
    return fail(ErrorCode::io, "cannot create journal {}: {}", path, os_reason(err));
  }
  return file;
}

// A regular file of this user that nobody else may read or write; with `lock`, nobody else holds
// its lock (then this descriptor does).
Expected<void> check_and_lock(int fd, const std::string& path, bool lock = true) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) return fail(ErrorCode::io, "cannot inspect journal {}: {}", path, os_reason(errno));
  if (!S_ISREG(info.st_mode)) return fail(ErrorCode::invalid_argument, "journal {} is not a regular file", path);
  if (info.st_uid != ::geteuid())
    return fail(ErrorCode::permission, "journal {} belongs to uid {}, not to this engine's uid {}: refused", path,
                info.st_uid, ::geteuid());
  if ((info.st_mode & 077) != 0)
    return fail(ErrorCode::permission, "journal {} has mode {:04o}: others may read or write it; a journal is its "
                "owner's alone (chmod 600 {})", path, info.st_mode & 07777, path);
  if (lock && ::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK)
      return fail(ErrorCode::busy, "journal {} is in use: another engine (or `ipcfloor journal compact`) holds it",
                  path);
    return fail(ErrorCode::io, "cannot lock journal {}: {}", path, os_reason(errno));
  }
  // Blocking writes from here on: it is a regular file, opened non-blocking only so that a FIFO
  // planted at the name could not hang the open.
  if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0)
    return fail(ErrorCode::io, "journal {}: {}", path, os_reason(errno));
  return {};
}

// Whether the file system holds every record the journal may still get.
Expected<void> check_disk_budget(int fd, const std::string& path, std::uint64_t bars_left) {
  struct statvfs fs {};
  if (::fstatvfs(fd, &fs) != 0) return fail(ErrorCode::io, "cannot inspect the file system of journal {}: {}", path, os_reason(errno));
  const std::uint64_t free_bytes = static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
  const std::uint64_t need = (bars_left + 1) * kJournalRecordBytes;
  if (need > free_bytes)
    return fail(ErrorCode::resource, "journal {} may grow by {} bytes ({} more bars, the room --capacity leaves, at "
                "{} bytes each) but its file system has {} bytes free: free space there, or lower --capacity", path,
                need, bars_left, kJournalRecordBytes, free_bytes);
  return {};
}

}  // namespace

Expected<JournalFile> open_journal_file(const std::string& dir, bool lock) {
  auto dir_fd = open_journal_dir(dir, /*create=*/false);
  if (!dir_fd) return std::unexpected(dir_fd.error());
  JournalFile file;
  file.path = dir + (dir.ends_with('/') ? "" : "/") + kJournalFileName;
  file.fd.reset(::openat(dir_fd->get(), kJournalFileName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (!file.fd) {
    if (errno == ELOOP) return fail(ErrorCode::permission, "journal {} is a symbolic link: refused", file.path);
    if (errno == ENOENT) return fail(ErrorCode::invalid_argument, "{} holds no journal ({} is missing)", dir, file.path);
    return fail(ErrorCode::io, "cannot open journal {}: {}", file.path, os_reason(errno));
  }
  if (auto checked = check_and_lock(file.fd.get(), file.path, lock); !checked) return std::unexpected(checked.error());
  return file;
}

Expected<void> start_journal_over(const std::string& dir, const JournalBase& base) {
  const std::string path = dir + (dir.ends_with('/') ? "" : "/") + kJournalFileName;
  const std::vector<std::byte> header = journal_header_bytes(base, realtime_ns());
  auto written = write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(header.data()), header.size()),
                                       "the journal", 0600);
  if (!written) return std::unexpected(written.error());
  return {};
}

Expected<BarJournal> BarJournal::open(const Options& options) {
  auto dir = open_journal_dir(options.dir, /*create=*/true);
  if (!dir) return std::unexpected(dir.error());
  BarJournal journal;
  journal.path_ = options.dir + (options.dir.ends_with('/') ? "" : "/") + kJournalFileName;
  auto file = open_or_make(dir->get(), journal.path_, options.base);
  if (!file) return std::unexpected(file.error());
  journal.file_ = std::move(*file);
  const int fd = journal.file_.get();
  if (auto locked = check_and_lock(fd, journal.path_); !locked) return std::unexpected(locked.error());
  auto contents = read_journal(fd, journal.path_, options.room);
  if (!contents) {
    if (contents.error().code != ErrorCode::invalid_argument) return std::unexpected(contents.error());
    return fail(ErrorCode::invalid_argument, "{}: this engine has room for {} bars after its {} preloaded (--capacity "
                "{}); give a larger --capacity", contents.error().message, options.room, options.base.bars,
                options.base.bars + options.room);
  }
  journal.contents_ = std::move(*contents);
  if (const std::string mismatch = journal_mismatch(journal.path_, journal.contents_.base, options.base);
      !mismatch.empty())
    return fail(ErrorCode::bad_data, "{}", mismatch);
  JournalContents& held = journal.contents_;
  if (held.torn_bytes != 0) {
    if (::ftruncate(fd, static_cast<off_t>(held.good_bytes)) != 0 || ::fdatasync(fd) != 0)
      return fail(ErrorCode::io, "journal {}: cannot drop its torn last record: {}", journal.path_, os_reason(errno));
    journal.notes_.push_back(fmt::format("journal {}: dropped a torn last record ({}), {} bytes, written by an engine "
                                         "that died mid-write; its APPEND was never answered ok", journal.path_,
                                         held.torn_reason, held.torn_bytes));
  }
  if (auto budget = check_disk_budget(fd, journal.path_, options.room - held.closes.size()); !budget)
    return std::unexpected(budget.error());
  journal.bytes_ = held.good_bytes;
  journal.next_bar_ = options.base.bars + held.closes.size();
  return journal;
}

Expected<void> BarJournal::record_start() {
  JournalRecord start{0, static_cast<std::uint16_t>(JournalRecordKind::start), 0, next_bar_,
                      static_cast<std::uint64_t>(::getpid()), realtime_ns()};
  start.crc = record_crc(start);
  const int fd = file_.get();
  if (const int err = write_fully(fd, std::as_bytes(std::span(&start, 1))); err != 0 || ::fdatasync(fd) != 0) {
    const int why = err != 0 ? err : errno;
    (void)::ftruncate(fd, static_cast<off_t>(bytes_));
    return fail(ErrorCode::io, "journal {}: cannot record this start: {}", path_, os_reason(why));
  }
  ++contents_.start_records;
  contents_.last_start_pid = ::getpid();
  contents_.last_start_unix_ns = start.tick;
  bytes_ += kJournalRecordBytes;
  contents_.good_bytes = bytes_;
  return {};
}

}  // namespace ipcfloor
