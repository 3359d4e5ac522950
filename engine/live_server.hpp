#pragma once
// Live mode on the serving thread (serve --live): APPEND, SUBSCRIBE and SNAPSHOT, and the
// signals each new bar sends to every subscriber. A paced APPEND (kAppendPaced) is taken only when
// every subscription's signal fits its ring, else answered subscribers_behind with nothing done. An APPEND adds a bar to the main series and
// steps every subscription (each on its strategy's per-bar step) on it: on the serving thread
// when the work is cheap, else at the workers in shares of the book, one bar out at a time
// (live requests wait meanwhile) and answered when the last share is back.
//
// A share's worker steps its subscriptions' state in place, so a share is never taken back from
// a worker the keeper declares stalled: the bar waits for it (status shows it), and the book goes
// on with nothing lost or reordered when the worker runs again.
//
// With a journal (serve --journal), an APPEND the checks admit goes to the journal first
// (engine/journal_dispatch.hpp) and its bar is added only once its record is durable: then on
// the serving thread or at the workers as above, and answered. Until then the bar is not
// published, and the APPENDs behind it are judged as coming after it.
//
// Threads: serving thread only, except run(), which the workers call for their share. noexcept,
// no allocation, no syscall (but the block-mode notifications the wait strategy makes).

#include <cstdint>
#include <memory>
#include <span>

#include "common/error.hpp"
#include "engine/admission.hpp"
#include "engine/journal_dispatch.hpp"
#include "engine/live_book.hpp"
#include "engine/serving_lanes.hpp"
#include "engine/worker_dispatch.hpp"
#include "engine/worker_pool.hpp"
#include "shm/frames.hpp"
#include "shm/segment.hpp"

namespace ipcfloor {

// The main series' bars published so far: the closes of `room` up to `published` and, while no
// bar was appended past the preloaded ones (a series with other columns never grows: APPEND is
// refused missing_column), the preloaded series' other columns. Noexcept, no allocation.
[[nodiscard]] Bars published_bars(const Bars& preloaded, std::span<const double> room, std::uint64_t published) noexcept;

class LiveServer final : public JobRunner {
 public:
  // Setup: the book for every lane (allocates). The parts given must outlive the server; APPENDs
  // go through `journal` once it has a writer (JournalDispatch::any()).
  [[nodiscard]] static Expected<std::unique_ptr<LiveServer>> make(Segment& segment, ServingLanes& lanes,
                                                                   Admission& admission, JournalDispatch& journal,
                                                                   LiveBookLimits limits, std::uint64_t inline_cost,
                                                                   WaitMode mode);

  // True while a bar is out at the workers: live requests wait (they stay in their line or ring).
  [[nodiscard]] bool bar_out() const noexcept { return bar_.active; }
  // Where a live request from lane `index` goes now: wait (a bar is out; or, journaled, the
  // journal has no room or rewinds a refusal), journal (an admitted APPEND of a journaled
  // engine), fan_out (an admitted APPEND whose signal work goes to the workers), or here (every
  // other live request, refusals included).
  enum class Route : std::uint8_t { here, fan_out, journal, wait };
  [[nodiscard]] Route route(std::uint32_t index, const RequestSlot& request, const WorkerDispatch& workers) const noexcept;
  // Answers APPEND, SUBSCRIBE or SNAPSHOT here, into `response`.
  Status serve(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept;
  // An APPEND routed fan_out: adds its bar and hands the book's shares to the workers; `ticket` is
  // where its answer goes (through finish_share) once every share is back.
  void start_bar(std::uint32_t index, const RequestSlot& request, const JobTicket& ticket, WorkerDispatch& workers) noexcept;
  // An APPEND routed journal: its record goes to the journal's writer, its answer to `ticket` once
  // the record is back (apply_journaled).
  void journal_append(std::uint32_t index, const RequestSlot& request, const JobTicket& ticket) noexcept;
  // A journaled APPEND whose record is durable: adds its bar and steps the book on it, here (true:
  // `answer` holds the APPEND's answer) or at the workers (false: the answer comes through
  // finish_share). Requires !bar_out().
  [[nodiscard]] bool apply_journaled(const JournalDispatch::Pending& pending, WorkerDispatch& workers,
                                     WorkerDone& answer) noexcept;
  // Hands the bar's remaining shares to idle workers.
  void hand_shares(WorkerDispatch& workers) noexcept;
  // A share came back. True when it was the last: `answer` then holds the APPEND's answer.
  [[nodiscard]] bool finish_share(const WorkerDone& done, WorkerDone& answer) noexcept;
  // The keeper declared the worker of a share stalled: the bar waits for it (shown in status).
  void share_stalled() noexcept;
  // Lanes whose clients left: their subscriptions go now, or when the bar out is back.
  void lanes_left(std::uint64_t lanes) noexcept;

  // A worker's share of the bar out: steps subscriptions [live_first, live_first + live_count).
  void run(const WorkerJob& job, KernelWorkspace& workspace, WorkerDone& done) const noexcept override;

 private:
  LiveServer(Segment& segment, ServingLanes& lanes, Admission& admission, JournalDispatch& journal,
             std::uint64_t inline_cost, WaitMode mode) noexcept;
  // Why an APPEND from lane `index` is refused, or ok. A pure function of the request and state
  // (the bars published and those in flight at the journal).
  [[nodiscard]] Status check_append(std::uint32_t index, const RequestSlot& request) const noexcept;
  // The first served lane whose signal ring lacks room for `bars` signals of each of its
  // subscriptions now, or -1: what holds a paced APPEND (kAppendPaced) back.
  [[nodiscard]] int lane_behind(std::uint64_t bars) const noexcept;
  // Adds an admitted bar to the series and publishes the count.
  void take_bar(double close) noexcept;
  // Hands the book's shares of the bar just taken to the workers; its answer goes to `ticket`.
  void fan_out(double close, std::uint64_t tick, const JobTicket& ticket, WorkerDispatch& workers) noexcept;
  Status append(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept;
  Status subscribe(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept;
  Status snapshot(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept;
  // Sends every subscription's state after the last bar to its lane's signal ring: computing each
  // first (`evaluate`: the serving thread's own APPEND) or as the workers' shares left it.
  void publish_bar(std::uint64_t tick, bool evaluate) noexcept;
  // Puts one signal on a lane's signal ring, or counts it dropped when the ring is full.
  void push_signal(std::uint32_t index, std::uint32_t subscription, const ipcfloor_strategy_bar& state,
                   std::uint64_t tick, std::uint16_t flags) noexcept;
  // The signal frames a SNAPSHOT of `index` needs, against the room its signal ring has.
  [[nodiscard]] bool snapshot_fits(std::uint32_t index) noexcept;

  Segment& segment_;
  DataHeader& header_;
  ServingLanes& lanes_;
  Admission& admission_;
  std::unique_ptr<LiveBook> book_;
  JournalDispatch& journal_;  // APPENDs go through it when it has a writer
  std::span<double> room_;          // the main series' whole room: where bars are appended
  Bars preloaded_;                  // the main series as preloaded, with its other columns
  std::uint64_t published_ = 0;     // mirrors header_.bars_published; only this thread writes it
  int writer_lane_ = -1;            // the lane whose client appends; -1 until one does
  std::uint64_t inline_cost_;
  WaitMode mode_;
  double fee_;
  // The one bar whose signal work is out at the workers. While `active`, the book belongs to the
  // workers' shares: live requests wait, and lanes that leave are cleared from it afterwards.
  struct BarOut {
    bool active = false;
    JobTicket answer;              // where the APPEND's answer goes
    double close = 0.0;
    std::uint64_t tick = 0;
    std::uint32_t total = 0;       // subscriptions in the book's order
    std::uint32_t shares = 0;      // split into this many
    std::uint32_t handed = 0;      // handed to workers so far
    std::uint32_t back = 0;        // come back so far
    std::uint64_t clear_after = 0;  // lanes to clear from the book once the bar is done (bit per lane)
  };
  BarOut bar_;
  std::uint64_t signals_sent_ = 0;     // mirrors header_.signals_sent
  std::uint64_t signals_dropped_ = 0;  // mirrors header_.signals_dropped
};

}  // namespace ipcfloor
