#pragma once
// The serving loop: one thread, pinned to its own core, polls every active lane's exchange line
// and request ring, answers cheap requests itself (ECHO, ECHO_BULK, bad frames, live requests, a
// BACKTEST whose cost is under the inline limit) and hands heavier BACKTESTs to the engine's
// workers (engine/worker_pool.hpp), so it stays free to move frames for every lane. It is the
// only reader of the request rings and the only writer of the response rings and exchange lines.
//
// Order and fairness: a lane's ring answers are published in the order of its requests (a
// window of answers not yet published holds the early ones), and each under its request's seq.
// Heavy work is rationed: a lane gets at most one heavy request started per round, and rounds
// start at the lane after the one that got the last, so a lane that floods the engine delays
// another lane's request by at most one combo. With no workers (`serve --workers 0`) heavy
// requests run on this thread, one per lane per round, and between two of them the loop serves
// every lane's exchange line and looks for new lanes.
//
// A lane whose client wrote impossible ring positions or an impossible exchange stamp is counted
// in header.lanes_corrupt, never read out of bounds, and quarantined: its client is told (its
// response ring and exchange line read corrupt) and nothing of it is served again. Which lanes
// exist and where their memory is comes from the engine-private lane table
// (engine/engine_lanes.hpp), never from anything a client can write. Answers of a lane whose
// client left (or was quarantined) are dropped when they come back from a worker: they carry the
// lane object's generation, so none lands in the lane's next owner.
//
// Threads: run()/poll_once()/has_work() belong to the serving thread only. In spin mode they make
// no syscall, no heap allocation and take no lock; telemetry goes out through a lock-free queue.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/engine_lanes.hpp"
#include "engine/live_book.hpp"
#include "engine/telemetry.hpp"
#include "engine/worker_pool.hpp"
#include "kernel/kernel.hpp"
#include "shm/doorbell.hpp"
#include "shm/exchange.hpp"
#include "shm/segment.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

// Ring answers a lane may have started but not published, at most: the window that keeps them in
// order (a ring of capacity C never has more than C in flight; this caps the memory per lane).
inline constexpr std::uint32_t kMaxAnswerWindow = 1024;

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
  // Setup path: sizes the kernel workspace and the answer windows (allocates). `segment`, `lanes`
  // and `telemetry` must outlive the server. Start the workers with `workers_config()` and give
  // them to attach_workers() before run(); without workers every request is computed here.
  [[nodiscard]] static Expected<std::unique_ptr<ShmServer>> make(Segment& segment, EngineLanes& lanes,
                                                                 TelemetryQueue& telemetry, const ShmServerConfig& config);

  // What a WorkerPool serving this server needs (its runner, context and workspace size), for
  // these cpus. Setup path.
  [[nodiscard]] WorkerPoolConfig workers_config(std::vector<int> cpus) noexcept;
  // Setup path, before run(): the workers heavy requests go to (null: none).
  void attach_workers(WorkerPool* pool) noexcept { pool_ = pool; }

  // Serves until `stop` turns true (checked between frames and passes, or at least every
  // kIdleSleepBound while idle in backoff/block mode). Serving thread only.
  void run(const std::atomic<bool>& stop) noexcept;

  // One pass over the active lanes; returns the number of requests answered or started.
  // Serving thread only.
  std::size_t poll_once() noexcept;

  // True when some lane has a request, a worker has an answer, or the keeper changed a lane.
  // Serving thread only.
  [[nodiscard]] bool has_work() noexcept;

 private:
  // What the serving thread holds of one lane while the keeper has it active.
  struct Lane {
    std::uint64_t generation = 0;  // of the object the handles point into; 0: none held
    LaneView view{};
    std::optional<RingConsumer<RequestSlot>> requests;
    std::optional<RingProducer<ResponseSlot>> responses;
    std::optional<RingProducer<SignalSlot>> signals;  // live mode only
    std::optional<ExchangeServer> exchange;
    std::uint64_t signals_dropped = 0;  // since the last signal delivered on this lane
    // Ring answers started but not published: positions [published, taken) of the window.
    std::uint64_t taken = 0;      // requests taken from the ring (its consumer position)
    std::uint64_t published = 0;  // answers committed to the response ring
    bool call_at_worker = false;  // the exchange line's request is being computed by a worker
    std::uint64_t call_started = 0;  // TSC when that request was handed over
  };
  // How the serving thread routes one request.
  struct Routed {
    bool heavy = false;             // a BACKTEST for a worker (or, without workers, rationed)
    bool fan_out = false;           // an APPEND whose signal work goes to the workers
    bool live_wait = false;         // a live request while a bar is out at the workers: it waits
    std::span<const double> close;  // the series it runs on
    std::uint64_t cost = 0;
  };

  ShmServer(Segment& segment, EngineLanes& lanes, TelemetryQueue& telemetry, const ShmServerConfig& config,
            std::size_t workspace_bars);
  // The keeper's lane changes since the last scan (an acquire load of one engine-private word).
  [[nodiscard]] bool lanes_changed() noexcept;
  // Reads the keeper's phases: takes up newly active lanes, lets go of draining ones.
  void scan_lanes() noexcept;
  // Builds the handles for the object the keeper installed. Returns false if it cannot.
  bool take_up(std::uint32_t index, Lane& lane, const EngineLane& shared) noexcept;
  // One round over the active lanes from round_start_, each lane visited once and allowed one
  // heavy start; `started_heavy` turns true when some lane used it.
  std::size_t serve_round(bool& started_heavy) noexcept;
  // A lane's exchange line, then its ring. `heavy_allowed` is the lane's one heavy start of this
  // round: a heavy request that finds it used (or no worker free) waits for a later round.
  std::size_t serve_call(std::uint32_t index, Lane& lane, bool& heavy_allowed) noexcept;
  std::size_t serve_ring(std::uint32_t index, Lane& lane, bool& heavy_allowed) noexcept;
  // Releases the request slot just copied and counts it taken.
  void take_request(Lane& lane) noexcept;
  // Without workers: after a heavy frame computed here, every lane's exchange line and new lanes.
  void between_heavy_frames(std::uint32_t index) noexcept;
  // Publishes the lane's finished ring answers, in order, while its response ring has room.
  void flush_answers(std::uint32_t index, Lane& lane) noexcept;
  // Answers from the workers into their lanes (stale ones dropped); stalled workers' jobs failed.
  std::size_t collect_from_workers() noexcept;
  void finish_job(const WorkerDone& done) noexcept;
  // True when a heavy request may start now: a worker is free (with workers), or always (without).
  [[nodiscard]] bool heavy_may_start() const noexcept;
  // Hands `request` (routed heavy) to a free worker.
  void hand_to_worker(const JobTicket& ticket, const RequestSlot& request, const Routed& routed) noexcept;
  [[nodiscard]] Routed route(std::uint32_t index, const RequestSlot& request) const noexcept;
  // Answers one request here: the live opcodes, everything else through dispatch_request.
  Status serve_request(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept;
  Status append_bar(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept;
  // Why an APPEND from lane `index` is refused, or ok. A pure function of the request and state.
  [[nodiscard]] Status check_append(std::uint32_t index, const RequestSlot& request) const noexcept;
  // True when an APPEND that check_append admits goes to the workers: there are workers, and its
  // signal work costs at least inline_cost_.
  [[nodiscard]] bool fans_out(std::uint32_t index, const RequestSlot& request) const noexcept;
  // Adds an admitted APPEND's bar to the series and publishes the count; returns its close.
  double take_bar(std::uint32_t index, const RequestSlot& request) noexcept;
  // Sends every subscription's state after the last bar to its lane's signal ring: computing each
  // first (`evaluate`, the serving thread's own APPEND) or as the workers' shares left it.
  void publish_bar(std::uint64_t tick, bool evaluate) noexcept;
  // An admitted APPEND whose signal work goes to the workers in shares; `ticket` says where its
  // answer goes once every share is back (finish_bar_share).
  void start_bar_at_workers(std::uint32_t index, const RequestSlot& request, const JobTicket& ticket) noexcept;
  // Hands the bar's remaining shares to idle workers.
  void hand_bar_shares() noexcept;
  void finish_bar_share(const WorkerDone& done) noexcept;
  Status subscribe(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept;
  Status snapshot(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept;
  // Puts one signal on a lane's signal ring, or counts it dropped when the ring is full.
  void push_signal(std::uint32_t index, std::uint32_t subscription, const LiveBar& state, std::uint64_t tick,
                   std::uint16_t flags) noexcept;
  // Stops serving a lane whose client wrote something impossible, and tells that client.
  void quarantine_lane(std::uint32_t index, Lane& lane) noexcept;
  void count_request(std::uint32_t index, Status status, std::uint64_t seq) noexcept;
  // Adds one service time, measured in TSC ticks, to the lane's histogram.
  void record_service(std::uint32_t index, std::uint64_t ticks) noexcept;
  void report(const TelemetryEvent& event) noexcept;
  [[nodiscard]] ResponseSlot& window_at(std::uint32_t index, std::uint64_t position) noexcept {
    return window_[index * window_size_ + (position & (window_size_ - 1))];
  }
  [[nodiscard]] std::uint8_t& done_at(std::uint32_t index, std::uint64_t position) noexcept {
    return window_done_[index * window_size_ + (position & (window_size_ - 1))];
  }
  // The workers' job runner (worker threads): a BACKTEST, or a share of a live bar.
  static void run_job(void* context, const WorkerJob& job, KernelWorkspace& workspace, WorkerDone& done) noexcept;

  Segment& segment_;
  DataHeader& header_;
  EngineLanes& shared_;
  WaitMode mode_;
  TelemetryQueue& telemetry_;
  std::span<const double> close_;  // the main series' bars published so far (all of them unless live)
  std::span<const double> series_[kMaxSeries];  // the segment's series; [0] is close_, kept equal
  std::uint32_t series_count_ = 1;
  double fee_;
  std::unique_ptr<LiveBook> live_;  // null unless live
  std::span<double> room_;          // the series' whole room (live: where bars are appended)
  std::uint64_t published_ = 0;     // mirrors header_.bars_published; only this thread writes it
  int writer_lane_ = -1;            // the lane whose client appends; -1 until one does
  // The one bar whose signal work is out at the workers. While `active`, the book belongs to the
  // workers' shares: live requests wait, and lanes that leave are cleared from it afterwards.
  struct BarAtWorkers {
    bool active = false;
    bool failed = false;           // a share came back failed or was given up
    JobTicket answer;              // where the APPEND's answer goes
    double close = 0.0;
    std::uint64_t tick = 0;
    std::uint32_t total = 0;       // subscriptions in the book's order
    std::uint32_t shares = 0;      // split into this many
    std::uint32_t handed = 0;      // handed to workers so far
    std::uint32_t back = 0;        // come back so far
    std::uint64_t clear_after = 0;  // lanes to clear from the book once the bar is done (bit per lane)
  };
  BarAtWorkers bar_at_workers_;
  bool live_broken_ = false;  // a share's worker never returned: live requests answer engine_error
  std::uint64_t signals_sent_ = 0;     // mirrors header_.signals_sent
  std::uint64_t signals_dropped_ = 0;  // mirrors header_.signals_dropped
  std::uint64_t max_frame_cost_;
  std::uint64_t inline_cost_;
  double ns_per_tick_;
  std::size_t workspace_bars_;
  KernelWorkspace workspace_;
  WorkerPool* pool_ = nullptr;
  std::uint32_t next_worker_ = 0;  // where the search for a free worker starts (spreads the jobs)
  Lane lanes_[kMaxLanes];
  std::uint32_t window_size_ = 0;           // per lane: a power of two <= kMaxAnswerWindow
  std::vector<ResponseSlot> window_;        // lane_count x window_size_ answers not yet published
  std::vector<std::uint8_t> window_done_;   // 1: that answer is ready
  DoorbellWaiter doorbells_;
  std::uint32_t lane_count_;
  // Lanes the serving thread holds (active and not quarantined), as of the last scan. Passes
  // between scans poll only these, so the hot loop touches no line of an idle lane; the keeper's
  // lane changes trigger a scan on the next pass (lanes_changed).
  std::uint64_t active_ = 0;
  // Lanes whose client wrote something impossible: never served again until the keeper drains
  // them (the client's connection ends).
  std::uint64_t quarantined_ = 0;
  std::uint32_t round_start_ = 0;  // the lane a round starts at: after the one that got the last heavy start
  bool between_ = false;           // in between_heavy_frames (it does not nest)
  std::uint32_t keeper_seen_ = 0;  // keeper_word at the last scan
  std::uint32_t passes_since_scan_ = 0;
  std::uint32_t scans_ = 0;  // counts scans, to sample the rings' fill every so many
  std::uint32_t capacity_;  // slots per ring, from the segment's own geometry
  std::uint64_t requests_ = 0;       // mirrors header_.requests; only this thread writes it
  std::uint64_t bad_frames_ = 0;     // mirrors header_.bad_frames; only this thread writes it
  std::uint64_t lanes_corrupt_ = 0;  // mirrors header_.lanes_corrupt; only this thread writes it
};

}  // namespace ipcfloor
