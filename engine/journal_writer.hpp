#pragma once
// The journal's writer thread (serve --journal): it owns the open journal file, so the serving
// thread never makes a system call for it. The hand-off, one record per APPEND:
//
//   serving thread                               writer thread ("ipcf-journal")
//   submit(index, close, tick): writes the       waits for published_ to move (backoff naps of at
//     slot, then published_ (release)              most 64 us; a futex in block mode, which the
//     [block mode: wakes the writer]               serving thread may then wake)
//                                                takes every slot up to published_ (acquire), up to
//                                                  kBatch at once: their records in one write(2),
//                                                  then fdatasync under --fsync every
//                                                writes each slot's outcome, then completed_
//   take_finished(): the oldest slot's outcome,      (release) [block mode: wakes the serving thread]
//     once completed_ (acquire) covers it; its
//     APPEND is then applied and answered
//
// A batch whose write fails (ENOSPC, EDQUOT, EFBIG: `full`; anything else: `failed`) is cut back
// off the file (ftruncate to its last whole record) and every record in it is refused, as is every
// later record submitted before the serving thread heard of the failure (the writer takes a
// record only when its index is the journal's next bar): nothing is half written, nothing is
// skipped, and the serving thread answers each such APPEND with the failure (never a silent
// loss). A write retried later succeeds once the disk has room again. A journal whose file cannot
// be cut back, or whose fdatasync failed, can no longer be trusted: every later record is refused
// `failed`, and status says so.
//
// The writer reports what it did in the data header's journal line (relaxed stores, for people:
// status and metrics).
//
// Threads: submit, has_room, take_finished and in_flight belong to the serving thread (noexcept,
// no allocation, no syscall but the block-mode wake-up); start and stop to the keeper.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "engine/bar_journal.hpp"
#include "shm/layout.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

// How a journaled APPEND ended at the writer. Wire-adjacent: the serving thread turns full and
// failed into the statuses journal_full and journal_failed.
enum class JournalOutcome : std::uint8_t { pending = 0, durable = 1, full = 2, failed = 3 };

// The journal's state as the data header shows it (DataHeader::journal_state).
enum class JournalState : std::uint32_t { off = 0, ok = 1, full = 2, failed = 3 };

struct JournalWriterConfig {
  JournalSync sync;
  WaitMode wait = WaitMode::spin;  // the engine's: block mode lets the serving thread wake the writer
  std::vector<int> cpus;           // where the writer may run (empty: anywhere); never the serving cpu
  // Block mode: the word a sleeping serving thread wakes on (the keeper's); the writer bumps it
  // once a batch is done (wake_serving_thread). Null: never woken.
  std::atomic<std::uint32_t>* engine_word = nullptr;
};

class JournalWriter {
 public:
  // Records in flight at most: APPENDs past it wait in their line or ring.
  static constexpr std::uint32_t kCapacity = 1024;
  // Records written with one write(2) (and synced with one fdatasync) at most.
  static constexpr std::uint32_t kBatch = 256;

  // Starts the thread on `journal` (which it owns from now on), reporting in `header`'s journal
  // line. Setup path: allocates; io when the thread cannot start.
  [[nodiscard]] static Expected<std::unique_ptr<JournalWriter>> start(BarJournal journal, const JournalWriterConfig& config,
                                                                      DataHeader& header);
  JournalWriter(const JournalWriter&) = delete;
  JournalWriter& operator=(const JournalWriter&) = delete;
  ~JournalWriter();  // stop()

  // Serving thread: whether one more record may be submitted now.
  [[nodiscard]] bool has_room() const noexcept { return submitted_ - retired_ < kCapacity; }
  // Serving thread: hands over bar `index`'s record. Requires has_room().
  void submit(std::uint64_t index, double close, std::uint64_t tick) noexcept;
  // Serving thread: true, with its outcome, when the oldest record not yet taken is done.
  [[nodiscard]] bool take_finished(JournalOutcome& outcome) noexcept;
  // Serving thread: records submitted and not yet taken back.
  [[nodiscard]] std::uint64_t in_flight() const noexcept { return submitted_ - retired_; }
  // Serving thread: true when take_finished() has an outcome for it.
  [[nodiscard]] bool finished_ready() const noexcept {
    // acquire: as in take_finished().
    return completed_.load(std::memory_order_acquire) != retired_;
  }

  // Keeper, once the serving thread has stopped: writes (and syncs) what was submitted, then
  // joins the thread. Idempotent.
  void stop() noexcept;

 private:
  struct alignas(64) Slot {
    std::uint64_t index;
    double close;
    std::uint64_t tick;
    JournalOutcome outcome;
  };
  JournalWriter(BarJournal journal, const JournalWriterConfig& config, DataHeader& header);
  void run() noexcept;
  // Writes slots [done, done + count) as one batch; stores each one's outcome.
  void write_batch(std::uint64_t done, std::uint32_t count) noexcept;
  // Cuts the file back to its last whole record after a failed write; false when it cannot.
  [[nodiscard]] bool cut_back() noexcept;
  // fdatasync now; records the time in the header. False on failure (the journal is then failed).
  [[nodiscard]] bool sync_now() noexcept;
  // Waits until a record is published, stop() is called, or `deadline`.
  void idle_until(std::uint64_t done, WaitDeadline deadline) noexcept;
  void report() noexcept;

  BarJournal journal_;
  JournalWriterConfig config_;
  DataHeader& header_;
  std::unique_ptr<Slot[]> slots_;
  std::vector<JournalRecord> batch_;  // the writer's: records of one batch
  // Serving thread's own positions.
  std::uint64_t submitted_ = 0;
  std::uint64_t retired_ = 0;
  // release: the serving thread publishes slots; pairs with the acquire load in run().
  alignas(128) std::atomic<std::uint64_t> published_{0};
  // release: the writer publishes outcomes; pairs with the acquire load in take_finished().
  alignas(128) std::atomic<std::uint64_t> completed_{0};
  // Block mode: the writer sleeps on word_ (detail::block_until), the serving thread wakes it
  // (detail::notify_channel).
  alignas(128) std::atomic<std::uint32_t> word_{0};
  std::atomic<std::uint32_t> sleeping_{0};
  alignas(128) std::atomic<bool> stop_{false};
  // The writer's own state.
  std::uint64_t next_index_ = 0;  // the bar the journal takes next
  std::uint64_t bytes_ = 0;       // the file's size: every whole record
  std::uint64_t bar_records_ = 0;
  std::uint64_t refused_ = 0;
  bool unsynced_ = false;
  bool broken_ = false;  // cannot be trusted any more: every record is refused
  JournalState state_ = JournalState::ok;
  WaitDeadline last_sync_{};
  std::thread thread_;
};

}  // namespace ipcfloor
