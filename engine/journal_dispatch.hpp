#pragma once
// The serving thread's hand on the journal's writer (engine/journal_writer.hpp), as WorkerDispatch
// is on the workers: an APPEND the live checks admitted is handed over as one record, with the
// ticket its answer goes to, and comes back, in order, durable or refused. A durable one is then
// applied (its bar published, its signals sent) and answered; a refused one is answered with the
// failure, its bar never published. So a bar is in the series only once it is in the journal:
// no subscriber ever sees a bar that a restart could lose, and no APPEND is answered ok before
// its record is durable under the engine's --fsync policy.
//
// The bars in flight here come after the published ones: bar published + k is the k-th in
// flight. After a refusal, the records behind it were made for bars that will not exist, and the
// writer refuses them too; until they are all back (rewinding()), new APPENDs wait in their
// line or ring, so that every later APPEND is judged against the series as it then is.
//
// Threads: serving thread only; noexcept, no allocation (the ring is made at setup), no syscall
// but the block-mode wake-up the writer's submit makes.

#include <cstdint>
#include <memory>

#include "engine/journal_writer.hpp"
#include "engine/worker_pool.hpp"

namespace ipcfloor {

class JournalDispatch {
 public:
  // An APPEND in flight: where its answer goes, and its bar.
  struct Pending {
    JobTicket ticket;
    double close = 0.0;
    std::uint64_t tick = 0;
  };

  // `writer` null: no journal. Setup path: allocates the ring of tickets.
  explicit JournalDispatch(JournalWriter* writer)
      : writer_(writer), pending_(writer != nullptr ? std::make_unique<Pending[]>(JournalWriter::kCapacity) : nullptr) {}

  [[nodiscard]] bool any() const noexcept { return writer_ != nullptr; }
  // APPENDs wait while this is true: the writer has no room, or a refusal is being rewound.
  [[nodiscard]] bool blocked() const noexcept { return !writer_->has_room() || rewinding_; }
  // APPENDs handed over and not yet back: the bars that follow the published ones.
  [[nodiscard]] std::uint64_t in_flight() const noexcept { return writer_ != nullptr ? writer_->in_flight() : 0; }
  // True when the writer has an outcome waiting.
  [[nodiscard]] bool ready() const noexcept { return writer_ != nullptr && writer_->finished_ready(); }

  // Hands bar `index` (published + in_flight()) to the writer. Requires !blocked().
  void submit(const JobTicket& ticket, std::uint64_t index, double close, std::uint64_t tick) noexcept {
    pending_[head_++ % JournalWriter::kCapacity] = Pending{ticket, close, tick};
    writer_->submit(index, close, tick);
  }

  // The oldest APPEND the writer is done with: its outcome and what it carried. False when none.
  [[nodiscard]] bool next(JournalOutcome& outcome, Pending& pending) noexcept {
    if (writer_ == nullptr || !writer_->take_finished(outcome)) return false;
    pending = pending_[tail_++ % JournalWriter::kCapacity];
    if (outcome != JournalOutcome::durable) rewinding_ = true;
    if (writer_->in_flight() == 0) rewinding_ = false;  // every record behind the refusal is back
    return true;
  }

 private:
  JournalWriter* writer_;
  std::unique_ptr<Pending[]> pending_;  // in the writer's order: slot k % kCapacity
  std::uint64_t head_ = 0;              // handed over
  std::uint64_t tail_ = 0;              // come back
  bool rewinding_ = false;
};

}  // namespace ipcfloor
