#pragma once
// The journal of appended bars (`serve --live --journal DIR`): an append-only file, DIR/bars.journal,
// that holds every bar a live engine took, so that an engine started again preloads its data,
// replays the journal and ends where the last one was. The writer thread owns the open file while
// the engine serves (engine/journal_writer.hpp); this unit is the format and the setup path.
//
//   offset 0     JournalHeader (256 B): magic "IPCFJRNL", version, record size, the series the
//                journal continues (its preloaded bars, their FNV-1a 64 checksum, its name and
//                description), when it was made, and a CRC-32C over the rest of the header
//   offset 256   JournalRecord (32 B) ...: a CRC-32C over the record's other 28 bytes, its kind,
//                and three words: a bar's 0-based index in the series, its close's bits and the
//                tick its APPEND carried; or an engine start's bar count, pid and wall clock
//
// A crash mid-write leaves at most a torn last record: open() finds it by its CRC (or its short
// length), drops it (the file is cut back to the last whole record) and reports it. A bad record
// followed by good ones is not a tear but damage, and is refused, naming its offset. A journal
// that continues another series (another checksum, bar count or name) is refused naming both.
//
// Files are made as the pid file is (common/atomic_file.hpp): the directory must be this user's
// (or root's) and not writable by others unless sticky; the journal is created O_CREAT|O_EXCL|
// O_NOFOLLOW with mode 0600, and an existing one is opened O_NOFOLLOW and refused unless it is a
// regular file of this user that no one else may read or write. A link at either name is
// refused. An engine holds an exclusive flock on its journal, so no second engine (and no
// `ipcfloor journal compact`) can use it at the same time.
//
// Threads: every function here is setup path (syscalls, allocation, Expected), any thread; the
// record helpers are noexcept and allocation-free.

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace ipcfloor {

// When an APPEND's record counts as durable, and so when the APPEND is answered:
//   every     after fdatasync covers it (nothing acknowledged is lost, even to a power cut)
//   interval  after write(2) (a crash of the engine loses nothing; the writer fdatasyncs every MS
//             while records are unsynced, so a power cut loses at most the last MS of bars)
//   none      after write(2); the kernel writes back when it likes (a power cut loses what its
//             dirty page writeback had not reached: vm.dirty_expire_centisecs, 30 s by default)
enum class FsyncPolicy : std::uint8_t { every = 0, interval = 1, none = 2 };

struct JournalSync {
  FsyncPolicy policy = FsyncPolicy::every;
  std::chrono::milliseconds interval{0};  // interval only: 1..60,000 ms
};

// "every", "interval:MS" (MS in 1..60000) or "none". invalid_argument otherwise, naming the forms.
[[nodiscard]] Expected<JournalSync> parse_fsync_policy(std::string_view text);
// The spelling parse_fsync_policy takes: "every", "interval:50", "none". Allocates.
[[nodiscard]] std::string to_string(const JournalSync& sync);

inline constexpr const char* kJournalFileName = "bars.journal";
inline constexpr std::size_t kJournalHeaderBytes = 256;
inline constexpr std::size_t kJournalRecordBytes = 32;
inline constexpr std::uint32_t kJournalVersion = 1;
inline constexpr std::size_t kJournalKeyBytes = 64;
inline constexpr std::size_t kJournalDescriptionBytes = 96;

// Wire values of a record's kind: never renumber, only append.
enum class JournalRecordKind : std::uint16_t {
  bar = 1,    // index: the bar's 0-based index; value: its close's bits; tick: its APPEND's tick
  start = 2,  // an engine started on this journal: index: the bars it then held; value: its pid;
              // tick: CLOCK_REALTIME in ns
};

struct JournalRecord {
  std::uint32_t crc;  // CRC-32C over the 28 bytes after it
  std::uint16_t kind;
  std::uint16_t reserved;  // 0
  std::uint64_t index;
  std::uint64_t value;
  std::uint64_t tick;
};
static_assert(sizeof(JournalRecord) == kJournalRecordBytes, "a journal record is 32 bytes on disk");

// CRC-32C (Castagnoli, as iSCSI and ext4 use it). Pure; any thread.
[[nodiscard]] std::uint32_t crc32c(std::span<const std::byte> bytes) noexcept;
// A bar's record, its CRC set. Pure; no allocation.
[[nodiscard]] JournalRecord bar_record(std::uint64_t index, double close, std::uint64_t tick) noexcept;
// True when the record's CRC matches its other bytes.
[[nodiscard]] bool record_intact(const JournalRecord& record) noexcept;

// The series a journal continues: the main series' preloaded bars as the engine loads them.
struct JournalBase {
  std::uint64_t bars = 0;
  std::uint64_t checksum = 0;  // FNV-1a 64 over those bars, as the segment header records it
  std::string key;             // its name in the series table ("ES", "default")
  std::string description;     // where it came from ("data/ES.csv", "gbm(bars=150000, seed=42)")
};

// What a journal holds, read and checked.
struct JournalContents {
  JournalBase base;
  std::uint64_t created_unix_ns = 0;
  std::vector<double> closes;  // bar i here is bar base.bars + i of the series
  std::uint64_t first_tick = 0, last_tick = 0;  // of the bar records (0 when none)
  std::uint64_t start_records = 0;              // engine starts recorded
  std::uint64_t last_start_unix_ns = 0;
  std::int64_t last_start_pid = 0;
  std::uint64_t good_bytes = 0;   // the header and every whole, intact record
  std::uint64_t torn_bytes = 0;   // bytes past them: a torn last record (0 when none)
  std::string torn_reason;        // why those bytes are not a record ("" when none)
};

// Reads and checks the journal open at `fd` (`path` names it in messages): the header's magic,
// version, sizes and CRC; every record's CRC, kind and, for bars, index (each one after the
// last, the first at base.bars) and close (finite, > 0). Stops at a torn tail (reported in
// torn_bytes and torn_reason, not an error); refuses a bad record that good ones follow and any
// other fault, naming the offset (bad_data; version_mismatch for a newer format), and a file of
// more than `max_bars` bar records (invalid_argument). Reads
// the file from its start with pread; allocates the bars.
[[nodiscard]] Expected<JournalContents> read_journal(int fd, std::string_view path, std::uint64_t max_bars);

// "journal DIR/bars.journal continues series 'NQ' (data/NQ.csv: 150,000 bars, checksum
// 5d0...), not 'ES' (...)": empty when `journal` continues `data`, else the sentence naming both.
[[nodiscard]] std::string journal_mismatch(std::string_view path, const JournalBase& journal, const JournalBase& data);

// The directory a journal lives in, opened: made (mode 0700) when missing, refused when it is a
// link, or not this user's (or root's), or writable by others without the sticky bit. Errors:
// permission (a link, another user's, writable by others), invalid_argument (not a directory, an
// empty path), io.
[[nodiscard]] Expected<UniqueFd> open_journal_dir(const std::string& dir, bool create);

// An engine's journal, open and locked. Move-only.
class BarJournal {
 public:
  struct Options {
    std::string dir;         // serve --journal DIR
    JournalBase base;        // the main series the engine preloads
    std::uint64_t room = 0;  // bars the engine may append in all (its --capacity less the preload)
  };

  // Opens DIR/bars.journal (made for `base` when missing), takes its lock, reads it, refuses it
  // unless it continues `base` and its bars fit `room`, cuts a torn last record off (reported in
  // notes()), and checks that DIR's file system has room for every bar `room` still allows
  // (resource otherwise, naming the bytes needed and free). Errors: the directory's (open_journal_dir), permission (a link, a file of
  // another user, or one others may read or write), invalid_argument (not a regular file),
  // busy (another engine holds it), bad_data (read_journal's, journal_mismatch's, too many bars),
  // resource, io.
  [[nodiscard]] static Expected<BarJournal> open(const Options& options);

  BarJournal(BarJournal&&) noexcept = default;
  BarJournal& operator=(BarJournal&&) noexcept = default;
  BarJournal(const BarJournal&) = delete;
  BarJournal& operator=(const BarJournal&) = delete;
  ~BarJournal() = default;  // closes the file, and with it the lock

  // Records that an engine starts on the journal (a start record, fdatasync'ed): once it serves
  // it, so that a start that failed is not counted. io when it cannot be written.
  [[nodiscard]] Expected<void> record_start();

  // The file, open for writing at its end (the writer thread's from now on).
  [[nodiscard]] int fd() const noexcept { return file_.get(); }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  // The bars to replay (closes()[i] is bar base.bars + i), and what else was read.
  [[nodiscard]] const JournalContents& contents() const noexcept { return contents_; }
  // Its size now: where the next record goes.
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }
  // What open() did that an operator should hear of: a torn record dropped.
  [[nodiscard]] const std::vector<std::string>& notes() const noexcept { return notes_; }
  // The bar the journal takes next: the preloaded bars and every bar it holds (also after
  // forget_closes).
  [[nodiscard]] std::uint64_t next_bar() const noexcept { return next_bar_; }
  // Frees the replayed bars once they are in the segment.
  void forget_closes() noexcept { contents_.closes = {}; }

 private:
  BarJournal() = default;

  UniqueFd file_;
  std::string path_;
  JournalContents contents_;
  std::uint64_t bytes_ = 0;
  std::uint64_t next_bar_ = 0;
  std::vector<std::string> notes_;
};

// A journal opened as a file, for `ipcfloor journal inspect` (no lock: an engine may be writing
// it) and `compact` (`lock`: busy while an engine, or another compact, holds it). The same
// checks as BarJournal::open, but nothing is made: a missing journal is invalid_argument.
struct JournalFile {
  UniqueFd fd;
  std::string path;
};
[[nodiscard]] Expected<JournalFile> open_journal_file(const std::string& dir, bool lock);

// Replaces DIR's journal with a new one that continues `base` and holds no bar (the journal was
// folded into the data file `base` names: `ipcfloor journal compact`). Atomic: a crash leaves the
// old journal or the new one, never neither (common/atomic_file.hpp).
[[nodiscard]] Expected<void> start_journal_over(const std::string& dir, const JournalBase& base);

// The header of a new journal that continues `base`, made at `unix_ns`: 256 bytes. Pure.
[[nodiscard]] std::vector<std::byte> journal_header_bytes(const JournalBase& base, std::uint64_t unix_ns);

// Writes all of `bytes` at the end of `fd` (retrying short writes and EINTR); the errno of the
// first failure otherwise (0 on success). No allocation.
[[nodiscard]] int write_fully(int fd, std::span<const std::byte> bytes) noexcept;

}  // namespace ipcfloor
