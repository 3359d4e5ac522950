#pragma once
// The shared-memory engine as one object: the segment, the serving thread pinned to its core, its
// compute workers, and the duties of the thread that keeps it alive (the keeper): the hand-off
// server on the engine's socket (engine/handoff_server.hpp), the lane objects
// (engine/lane_keeper.hpp), the heartbeat, the workers' health, and passing on what the serving
// thread reports. `ipcfloor serve` runs one; tests and embedders can run one in process.
//
// Threads: start() returns once the serving thread serves. event_fd(), service(),
// drain_events() and stop() belong to one keeper thread (the caller's). The serving thread never
// does I/O; the keeper never blocks: it polls with a timeout it is given, and writes its
// reports into a queue the caller drains.

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"
#include "engine/engine_event.hpp"
#include "engine/bar_journal.hpp"
#include "engine/handoff_server.hpp"
#include "engine/journal_writer.hpp"
#include "engine/lane_keeper.hpp"
#include "engine/shm_server.hpp"
#include "engine/telemetry.hpp"
#include "engine/worker_pool.hpp"
#include "kernel/cost.hpp"
#include "kernel/strategy_loader.hpp"
#include "shm/segment.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

struct ShmEngineConfig {
  SegmentConfig segment;  // name, lanes, rings, backing, series; wait_mode and max_frame_cost are set here
                          // segment.live: serve APPEND/SUBSCRIBE/SNAPSHOT (engine/live_book.hpp)
  std::uint32_t subscriptions_per_lane = 256;  // live mode
  WaitMode wait = WaitMode::spin;
  int cpu = 0;            // the serving thread's core
  // The allowed cpus nearest it, nearest first, published in the segment's placement block for
  // clients to pin to (common/placement.hpp). Empty: the engine ranks them by the declared topology.
  std::vector<int> near_cpus;
  bool fifo = false;      // SCHED_FIFO for the serving thread
  int fifo_priority = 50;
  // Compute workers, one pinned to each of these cpus (engine/worker_pool.hpp). Empty: the
  // serving thread computes every BACKTEST itself (serve --workers 0). default_worker_cpus()
  // gives serve's default.
  std::vector<int> worker_cpus;
  // The bound on one BACKTEST's work (work units: the strategy's cost()): dearer frames are refused too_costly.
  // A fixed number, so a request gets the same verdict on every host. 0: unbounded.
  std::uint64_t max_frame_cost = kDefaultMaxFrameCost;
  // Opt-in instead (serve --max-frame-ms): a bound in time, turned into work units at start by
  // timing this host's kernel, and then fixed for the engine's life. Zero: not used.
  std::chrono::milliseconds max_frame_time{0};
  std::uint64_t inline_cost = kDefaultInlineCost;  // cheaper BACKTESTs are computed by the serving thread
  std::uint64_t max_bar_cost = kDefaultMaxBarCost;  // live: one bar's work over every subscription
  int stall_worker_for_test = -1;  // fault tests only: this worker holds its first job until released
  // serve --live --journal DIR: every APPEND is written to DIR's journal before it is applied and
  // answered (engine/journal_dispatch.hpp), and the journal's bars are replayed at start, after
  // the preloaded series (engine/bar_journal.hpp). Unset: no journal.
  struct Journal {
    std::string dir;
    JournalSync sync;
  };
  std::optional<Journal> journal;
  // The strategies served (serve --strategy), the built-in one first; null: the built-in alone.
  // Shared: the engine keeps it while it runs, and past its end when a stuck worker was left.
  std::shared_ptr<const StrategyCatalog> strategies;
};

// serve's default workers: every cpu this process may run on except the serving cpu, in the
// order `serve --workers N` takes them: those that disturb the serving pair (the serving cpu and
// `client_cpu`, its nearest client cpu; -1: the nearest by the declared topology) least first
// (common/placement.hpp, worker_order): no cache shared with the pair, the highest first; then an
// L3, then an L2 shared; then cpu 0 (the kernel's housekeeping); then the client cpu's SMT
// siblings and the client cpu; the serving cpu's SMT siblings last (a worker there shares a core
// with the polling thread). Setup path: reads /sys, allocates.
[[nodiscard]] std::vector<int> default_worker_cpus(int serving_cpu, int client_cpu = -1);

class ShmEngine {
 public:
  // Creates the segment, builds the server and starts the serving thread pinned to config.cpu.
  // Setup path: allocates; errors are the segment's, the pinning's or the server's. warnings()
  // lists every fallback taken (backing, mlock, FIFO, a core that is not isolated).
  [[nodiscard]] static Expected<std::unique_ptr<ShmEngine>> start(ShmEngineConfig config);

  ShmEngine(const ShmEngine&) = delete;
  ShmEngine& operator=(const ShmEngine&) = delete;
  ~ShmEngine();  // stop(); then the segment's socket and lock file go

  // Keeper: readable when service() has connections or messages to handle. For poll/epoll.
  [[nodiscard]] int event_fd() const noexcept { return handoff_->event_fd(); }
  // Keeper: the longest the caller may wait before calling service() again (the next heartbeat,
  // or sooner while a lane is being replaced).
  [[nodiscard]] std::chrono::milliseconds service_timeout() const noexcept;
  // Keeper: handles every pending connection, hand-off and departure without blocking, replaces
  // drained lanes' objects, and stores the heartbeat when it is due.
  void service() noexcept;

  // Keeper: moves every event reported since the last call to `sink`, oldest first.
  template <class Sink>
  std::size_t drain_events(Sink&& sink) {
    std::size_t drained = 0;
    TelemetryEvent event{};
    while (telemetry_.try_dequeue(event)) {
      sink(from_telemetry(event));
      ++drained;
    }
    return drained + events_.drain(sink);
  }

  // Keeper: tells clients the engine is stopping, stops the serving thread (after the frame it is
  // serving) and then the workers (after the combo each computes, which max_frame_cost bounds),
  // and joins them. Idempotent.
  void stop() noexcept;

  [[nodiscard]] const Segment& segment() const noexcept { return segment_; }
  [[nodiscard]] const std::vector<std::string>& warnings() const noexcept { return warnings_; }
  [[nodiscard]] WaitMode wait_mode() const noexcept { return wait_; }
  [[nodiscard]] int cpu() const noexcept { return cpu_; }
  // The bound on a BACKTEST's cost in work units (0: none), and, when it came from --max-frame-ms, the kernel speed
  // measured at start that turned the time into units (0 otherwise).
  [[nodiscard]] std::uint64_t max_frame_cost() const noexcept { return max_frame_cost_; }
  [[nodiscard]] double measured_cost_per_us() const noexcept { return cost_per_us_; }
  // The compute workers' cpus (empty: none). How many of them are stalled, the keeper writes to
  // the data header (DataHeader::workers_stalled) in service().
  [[nodiscard]] const std::vector<int>& worker_cpus() const noexcept { return worker_cpus_; }
  // The strategies served, by index.
  [[nodiscard]] const StrategySet& strategies() const noexcept { return strategies_->set(); }
  // The journal's path ("" without one), and how long its bars took to read and check at start.
  [[nodiscard]] const std::string& journal_path() const noexcept { return journal_path_; }
  [[nodiscard]] std::chrono::microseconds journal_replay_time() const noexcept { return replay_time_; }
  // Fault tests: lets the worker held by stall_worker_for_test finish its job. Keeper thread.
  void release_stalled_worker_for_test() noexcept {
    if (pool_) pool_->release_stalled_for_test();
  }

 private:
  ShmEngine(Segment segment, WaitMode wait, int cpu);
  [[nodiscard]] static EngineEvent from_telemetry(const TelemetryEvent& event);
  // Starts the workers and records them in the header. Setup path.
  [[nodiscard]] Expected<void> start_workers(const ShmEngineConfig& config);
  // Once a heartbeat: stalled workers are reported and counted in the header.
  void watch_workers() noexcept;
  // Once a heartbeat: a serving thread inside one BACKTEST past serving_stall_limit_ns is reported
  // and shown in the header (degraded).
  void watch_serving() noexcept;
  // Starts the journal's writer on `journal` and hands it to the server. Setup path.
  [[nodiscard]] Expected<void> start_journal(BarJournal journal, const ShmEngineConfig& config);

  Segment segment_;
  WaitMode wait_;
  int cpu_;
  KeeperEvents events_;  // the keeper's own reports
  LaneKeeper lanes_;
  std::optional<HandoffServer> handoff_;
  TelemetryQueue telemetry_{kTelemetryQueueCapacity};
  std::shared_ptr<const StrategyCatalog> strategies_;
  std::unique_ptr<ShmServer> server_;
  std::unique_ptr<WorkerPool> pool_;
  std::unique_ptr<JournalWriter> journal_;  // null without --journal
  std::string journal_path_;
  std::chrono::microseconds replay_time_{0};
  std::vector<int> worker_cpus_;
  std::uint32_t workers_stalled_ = 0;  // at the last watch_workers; keeper thread only
  std::uint64_t serving_stuck_since_ = 0;  // the stuck request last reported; keeper thread only
  std::atomic<bool> stop_{false};
  std::thread serving_;
  std::chrono::steady_clock::time_point next_beat_{};
  std::uint64_t max_frame_cost_ = 0;
  double cost_per_us_ = 0.0;
  double ns_per_tick_ = 1.0;  // the TSC's rate, calibrated at start
  bool stopping_ = false;
  std::vector<std::string> warnings_;
};

}  // namespace ipcfloor
