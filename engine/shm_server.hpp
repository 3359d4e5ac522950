#pragma once
// The serving loop: one thread, pinned to its own core, polls every served lane's exchange line
// and request ring, admits each request once (engine/admission.hpp), answers cheap ones itself
// (ECHO, refusals, live requests, a BACKTEST under the inline bound: engine/dispatch.hpp) and
// hands heavier BACKTESTs to the workers (engine/worker_dispatch.hpp), so it stays free to move
// frames for every lane. It is the only reader of the request rings and the only writer of the
// response rings and exchange lines. Its parts, each with one job:
//
//   ServingLanes     which lanes are served, their handles, quarantine   (serving_lanes.hpp)
//   Admission        the verdict on each request, once                   (admission.hpp)
//   AnswerWindow     ring answers kept in request order                  (answer_window.hpp)
//   WorkerDispatch   handing jobs to workers, collecting, taking back    (worker_dispatch.hpp)
//   LiveServer       APPEND, SUBSCRIBE, SNAPSHOT and the signals         (live_server.hpp)
//   JournalDispatch  APPENDs to the journal's writer and back            (journal_dispatch.hpp)
//   ServingCounters  requests, bad frames, service times, telemetry      (serving_counters.hpp)
//
// Order and fairness: a lane's ring answers are published in the order of its requests, each
// under its request's seq. Heavy work is rationed per client (the process that holds the lanes):
// a client gets at most one heavy request started per round, whatever number of lanes it holds,
// and the next round starts at the first lane of another client, so a client that floods the
// engine from any number of lanes delays another client's request by at most one combo per
// worker (the combos already running). Within a client's share its lanes take turns: a round
// visits the client's lanes from the one after the lane its last heavy start went to, so no lane
// of an active client waits longer than one turn of each of its other lanes. With no workers (`serve
// --workers 0`) heavy requests run on this thread, one per client per round, and between two of
// them the loop serves every lane's exchange line and looks for new lanes.
//
// Threads: run()/poll_once()/has_work() belong to the serving thread only. In spin mode they make
// no syscall, no heap allocation and take no lock; telemetry goes out through a lock-free queue.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "engine/admission.hpp"
#include "engine/answer_window.hpp"
#include "engine/engine_lanes.hpp"
#include "engine/journal_dispatch.hpp"
#include "engine/live_book.hpp"
#include "engine/live_server.hpp"
#include "engine/serving_counters.hpp"
#include "engine/serving_lanes.hpp"
#include "engine/telemetry.hpp"
#include "engine/worker_dispatch.hpp"
#include "engine/worker_pool.hpp"
#include "kernel/strategy.hpp"
#include "shm/doorbell.hpp"
#include "shm/segment.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

// What the keeper watches of the serving thread: the BACKTEST it is computing itself now (its
// TSC start, cost and strategy), so that a request that holds it far past what its cost allows
// shows as degraded. One line of its own: written twice per inline BACKTEST, read once a heartbeat.
struct alignas(kRingLineBytes) ServingWatch {
  // release: publishes cost and strategy; pairs with the acquire load in ShmEngine::watch_serving.
  std::atomic<std::uint64_t> since{0};  // TSC when it began; 0: none in progress
  std::atomic<std::uint64_t> cost{0};
  std::atomic<std::uint32_t> strategy{0};
};

// How long the serving thread may be inside one BACKTEST before it counts as stuck: 250 ms plus
// 2 ns per work unit (a request it computes itself costs under --inline-cost, a millisecond or
// two), ten times that in a sanitizer build (kStallLimitScale). A fault limit for `status`, never
// a verdict on a request.
[[nodiscard]] constexpr std::uint64_t serving_stall_limit_ns(std::uint64_t cost) noexcept {
  constexpr std::uint64_t kBase = 250'000'000ULL * kStallLimitScale;
  constexpr std::uint64_t kCap = ~std::uint64_t{0} / 4;
  return cost >= kCap / 2 ? kCap : kBase + 2 * kStallLimitScale * cost;
}

struct ShmServerConfig {
  WaitMode mode = WaitMode::spin;
  std::uint64_t max_frame_cost = 0;  // a BACKTEST costing more is refused too_costly (0: unbounded)
  // A BACKTEST costing less is answered by the serving thread itself: handing it to a worker and
  // back would cost more than computing it (docs/DESIGN.md, "Workers").
  std::uint64_t inline_cost = 0;
  double ns_per_tick = 1.0;            // the TSC's rate, for the service-time histogram
  std::optional<LiveBookLimits> live;  // serve --live: APPEND, SUBSCRIBE and SNAPSHOT are served
};

class ShmServer {
 public:
  // Setup path: sizes the kernel workspace, the answer windows and the live book (allocates).
  // `segment`, `lanes`, `strategies` and `telemetry` must outlive the server. Give it its workers
  // with attach_workers() before run(); without workers every request is computed here.
  [[nodiscard]] static Expected<std::unique_ptr<ShmServer>> make(Segment& segment, EngineLanes& lanes,
                                                                 const StrategySet& strategies,
                                                                 TelemetryQueue& telemetry, const ShmServerConfig& config);

  // The workspace one kernel thread needs for the longest series a BACKTEST may run on, with
  // any strategy of the set. For WorkerPoolConfig.
  [[nodiscard]] std::uint64_t workspace_bytes() const noexcept { return workspace_.bytes(); }
  // Setup path, before run(): the workers heavy requests go to (null: none).
  void attach_workers(WorkerPool* pool) noexcept { workers_ = WorkerDispatch(pool); }
  // Setup path, before run(), live only: APPENDs go through the journal's writer first (null:
  // none). Allocates.
  void attach_journal(JournalWriter* writer);

  // Serves until `stop` turns true (checked between frames and passes, or at least every
  // kIdleSleepBound while idle in backoff/block mode). Serving thread only.
  void run(const std::atomic<bool>& stop) noexcept;
  // One pass over the served lanes; returns the number of requests answered or started.
  // Serving thread only.
  std::size_t poll_once() noexcept;
  // True when some lane has a request, a worker has an answer, or the keeper changed a lane.
  // Serving thread only.
  [[nodiscard]] bool has_work() noexcept;
  // The request the serving thread computes itself now, for the keeper.
  [[nodiscard]] const ServingWatch& watch() const noexcept { return watch_; }

 private:
  // Where one request goes, as admission and the loop's rationing decide.
  enum class Plan : std::uint8_t { wait, here, worker, fan_out, journal };

  ShmServer(Segment& segment, EngineLanes& lanes, const StrategySet& strategies, TelemetryQueue& telemetry,
            const ShmServerConfig& config, std::uint64_t workspace_bytes);
  // Scans the lane table; lanes let go of are cleared from the live book and the client table.
  void scan_lanes() noexcept;
  // One round over the served lanes from round_start_, each lane visited once; a client gets one
  // heavy start per round. True in `started_heavy` when some lane used one.
  std::size_t serve_round(bool& started_heavy) noexcept;
  // A lane's exchange line, then its ring.
  std::size_t serve_call(std::uint32_t index) noexcept;
  std::size_t serve_ring(std::uint32_t index) noexcept;
  // Decides where `request` of lane `index` goes now: `wait` leaves it where it is (its client's
  // heavy start of this round is used, no worker is free, or a live bar is out).
  [[nodiscard]] Plan plan(std::uint32_t index, const RequestSlot& request, const Verdict& verdict) noexcept;
  // The lane the round after a heavy start on lane `index` begins at (see the fairness rule above).
  [[nodiscard]] std::uint32_t next_other_client(std::uint32_t index) const noexcept;
  // The lane a round visits in the place of lane `slot`: its client's next lane in turn (see the
  // fairness rule above). Call once per slot of the round, after start_turns().
  void start_turns() noexcept;
  [[nodiscard]] std::uint32_t take_turn(std::uint32_t slot) noexcept;
  // Starts a request planned for a worker or the workers' shares; its answer comes through finish().
  void start_elsewhere(Plan plan, const JobTicket& ticket, const RequestSlot& request, const Verdict& verdict) noexcept;
  // Answers a request here, into `response` and, where the answer has one, `record`.
  Status answer(std::uint32_t index, const RequestSlot& request, const Verdict& verdict, ResponseSlot& response,
                AnswerRecord& record) noexcept;
  // Publishes the lane's finished ring answers, in order, while its response ring has room.
  void flush_answers(std::uint32_t index) noexcept;
  // Without workers: after a heavy frame computed here, every lane's exchange line and new lanes.
  void between_heavy_frames(std::uint32_t index) noexcept;
  // Answers from the workers into their lanes; jobs of stalled workers taken back.
  std::size_t collect_from_workers() noexcept;
  // A job taken back from a stalled worker: to another idle worker, else computed here.
  bool take_back(const WorkerJob& job) noexcept;
  // An answer from a worker (or a job taken back, or the journal) into its lane; stale ones dropped.
  void finish(const WorkerDone& done) noexcept;
  // APPENDs back from the journal, in order: durable ones applied and answered, refused ones
  // answered with the failure. Stops while a bar is out at the workers.
  std::size_t collect_from_journal() noexcept;

  Segment& segment_;
  WaitMode mode_;
  ServingCounters counters_;
  ServingLanes lanes_;
  Admission admission_;
  AnswerWindow window_;
  WorkerDispatch workers_{nullptr};
  JournalDispatch journal_{nullptr};
  std::unique_ptr<LiveServer> live_;  // null unless live
  KernelWorkspace workspace_;
  EngineLanes& shared_;
  DoorbellWaiter doorbells_;
  // The client each lane belongs to: the lowest lane held by the same process. A heavy start is
  // rationed per client.
  std::uint32_t client_of_[kMaxLanes] = {};
  std::uint64_t clients_of_ = 0;                // the served lanes client_of_ and client_lanes_ describe
  std::uint64_t client_lanes_[kMaxLanes] = {};  // by client (its lowest lane): the lanes it holds
  std::uint32_t last_heavy_[kMaxLanes] = {};    // by client: the lane its last heavy start went to
  std::uint64_t turns_left_[kMaxLanes] = {};    // by client: its lanes this round has not visited
  std::uint32_t turn_at_[kMaxLanes] = {};       // by client: the lane this round visited last
  std::uint64_t turns_of_round_[kMaxLanes] = {};  // by client: the round its turns_left_ is of
  std::uint64_t turns_round_ = 0;                  // rounds begun (start_turns)
  std::uint64_t heavy_clients_ = 0;  // clients (by client_of_ lane) with a heavy start this round
  std::uint32_t round_start_ = 0;    // the lane a round starts at: next_other_client of the last heavy start
  bool between_ = false;             // in between_heavy_frames (it does not nest)
  std::uint32_t passes_since_scan_ = 0;
  ServingWatch watch_;
};

}  // namespace ipcfloor
