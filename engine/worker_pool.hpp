#pragma once
// The engine's compute workers: pinned threads that run the jobs the serving thread hands them
// (an admitted BACKTEST, or a share of a live APPEND's signal work), so the serving core stays
// free to move frames for every lane.
//
// Each worker holds one job at a time, in a mailbox of its own (JobSlot): the serving thread
// writes the job there and publishes it; the worker reads it in place, computes, writes its
// answer beside it and publishes that; the serving thread collects it. A mailbox, not a queue:
// the worker never holds more than one job (so no lane can queue work ahead of another's), the
// request is copied once on its way to the kernel (into the slot), and the job stays where it was
// written, so the serving thread can take it back if the worker stops running (below).
//
// A worker that does not come back is seen: the serving thread stamps each hand-off with the TSC
// (no syscall), and the keeper (health(), once a heartbeat) declares a worker stalled when its
// job has been out longer than stall_limit_ns(cost): on a busy host, that is a worker the
// scheduler has not run for seconds. A stalled worker gets no more work until it returns; the
// serving thread takes its job back (reclaim_stalled()) and has it computed elsewhere, and drops
// whatever the worker answers later. A worker that returns is healthy again.
//
// Threads: make()/stop()/health() belong to the keeper; idle_count(), next_idle(), hand(),
// collect() and reclaim_stalled() to the serving thread alone: noexcept, no allocation, no lock,
// and no syscall unless the engine runs in block mode (then hand() wakes a sleeping worker with a
// futex). Workers run each job's JobRunner on their own thread.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "common/combo.hpp"
#include "common/error.hpp"
#include "engine/compute.hpp"
#include "kernel/strategy.hpp"
#include "kernel/workspace.hpp"
#include "shm/spsc_ring.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

inline constexpr std::uint32_t kMaxWorkers = 256;

// Where a job's answer goes, carried to the worker and back unchanged. `live`: a share of one
// APPEND's signal work (the serving thread answers the APPEND once every share is back).
struct JobTicket {
  enum class Kind : std::uint8_t { ring, call, live };
  Kind kind = Kind::ring;
  std::uint32_t lane = 0;
  std::uint64_t generation = 0;  // of the lane object the request came from
  std::uint64_t position = 0;    // ring: the request's position in its ring
  std::uint64_t seq = 0;
  std::uint16_t opcode = 0;
  std::uint64_t started = 0;  // TSC when the serving thread took the request, for its service time
  std::uint64_t first_trade = 0;  // TRADES: the page's first trade, echoed in the answer
};

class JobRunner;

// One job, as the serving thread admitted it: what runs it, and on what.
struct WorkerJob {
  JobTicket ticket;
  const JobRunner* runner = nullptr;
  // BACKTEST, STATS, TRADES: the admitted computation (the request's one copy handed over); a
  // live share: only its bars, the series so far.
  ComputeJob compute;
  std::uint64_t cost = 0;              // the job's work units, for the stall limit
  std::uint32_t live_first = 0;        // live share: subscriptions [first, first + count) of the book
  std::uint32_t live_count = 0;
  [[nodiscard]] const Bars& series() const noexcept { return compute.bars; }
};

struct WorkerDone {
  JobTicket ticket;
  std::uint32_t worker = 0;
  Computed result;  // a live share: its status only
  // TRADES: the page, in the workspace of whoever computed it, until the serving thread copies
  // it into the lane (WorkerPool::collect passes it on before the worker takes another job).
  const ipcfloor_trade* page = nullptr;
};

// What computes a job on a worker's thread, with that worker's own workspace; fills `done` (all
// but ticket and worker). Must not throw, allocate or block. Implemented by the engine's parts
// that hand out work (a BACKTEST's strategy run, a live bar's share).
class JobRunner {
 public:
  virtual void run(const WorkerJob& job, KernelWorkspace& workspace, WorkerDone& done) const noexcept = 0;

 protected:
  ~JobRunner() = default;
};

// One worker's mailbox, on cache lines of its own. `posted` and `finished` count jobs: the slot
// holds a job for the worker while posted > finished.
struct JobSlot {
  alignas(kRingLineBytes) WorkerJob job;  // written by the serving thread before posted moves
  // release: publishes job; pairs with the acquire load in WorkerPool::wait_for_job.
  std::atomic<std::uint64_t> posted{0};
  alignas(kRingLineBytes) WorkerDone done;  // written by the worker before finished moves
  // release: publishes done; pairs with the acquire load in WorkerPool::collect.
  std::atomic<std::uint64_t> finished{0};
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "the mailbox counters must be lock-free");
static_assert(offsetof(JobSlot, done) % kRingLineBytes == 0 && offsetof(JobSlot, done) >= offsetof(JobSlot, posted) + 8,
              "the worker's answer sits on lines apart from the job the serving thread writes");

struct WorkerPoolConfig {
  std::vector<int> cpus;            // one worker per entry, pinned there; empty: no workers
  WaitMode wait = WaitMode::spin;   // how an idle worker waits (see worker_pool.cpp)
  std::uint64_t workspace_bytes = 0;  // what the longest series needs (StrategySet::workspace_bytes)
  std::uint64_t trade_page_trades = 0;  // a TRADES page's room: the trades a lane's bulk region holds
  double ns_per_tick = 1.0;         // the TSC's rate, for the stall limit
  // Block mode: bumped and woken after each answer, so a sleeping serving thread hears it
  // (EngineLanes::keeper_word). Unused otherwise: the serving thread polls.
  std::atomic<std::uint32_t>* engine_word = nullptr;
  int stall_worker_for_test = -1;   // fault tests: this worker holds its first job until told
};

// How long a job of `cost` units may be out before its worker counts as stalled: 2 s plus 2 ns per
// unit (some ten times what the slowest supported kernel path needs), ten times that in a
// sanitizer build, whose kernel runs about ten times slower. A fault limit, never a verdict on a
// request: a stalled job is computed elsewhere, not refused.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
inline constexpr std::uint64_t kStallLimitScale = 10;
#else
inline constexpr std::uint64_t kStallLimitScale = 1;
#endif
[[nodiscard]] constexpr std::uint64_t stall_limit_ns(std::uint64_t cost) noexcept {
  constexpr std::uint64_t kBase = 2'000'000'000ULL * kStallLimitScale;
  constexpr std::uint64_t kCap = ~std::uint64_t{0} / 4;
  return cost >= kCap / 2 ? kCap : kBase + 2 * kStallLimitScale * cost;
}

class WorkerPool {
 public:
  // Starts one pinned thread per cpu and waits until each has pinned itself and sized its
  // workspace. Setup path: allocates; errors name the cpu that could not be had.
  [[nodiscard]] static Expected<std::unique_ptr<WorkerPool>> make(const WorkerPoolConfig& config);
  ~WorkerPool();  // stop()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  [[nodiscard]] std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(workers_.size()); }
  [[nodiscard]] const std::vector<int>& cpus() const noexcept { return cpus_; }

  // Serving thread: workers holding no job (size() - idle_count() hold one).
  [[nodiscard]] std::uint32_t idle_count() const noexcept { return idle_count_; }
  // Serving thread: workers holding a job past their stall limit (passed to reclaim_stalled's
  // taker, taken back or not): they take no new job until they run again.
  [[nodiscard]] std::uint32_t stalled_count() const noexcept { return stalled_held_; }
  // Serving thread: true when some worker has an answer to collect.
  [[nodiscard]] bool answers_ready() const noexcept;
  // Serving thread: the first idle worker at or after `from` (wrapping), or size() when none.
  [[nodiscard]] std::uint32_t next_idle(std::uint32_t from) const noexcept;
  // Serving thread: the mailbox of idle worker `worker`, to write a job into, then hand().
  [[nodiscard]] WorkerJob& job_at(std::uint32_t worker) noexcept { return workers_[worker]->slot.job; }
  // Serving thread: publishes the job written into job_at(worker) to that idle worker.
  void hand(std::uint32_t worker) noexcept;
  // Serving thread: moves every finished job's answer to `sink(const WorkerDone&)`, and frees its
  // worker. Answers of jobs taken back are dropped here. Returns the answers passed on.
  template <class Sink>
  std::size_t collect(Sink&& sink) noexcept {
    std::size_t passed = 0;
    for (std::uint32_t w = 0; w < size(); ++w) {
      Worker& worker = *workers_[w];
      // acquire: pairs with the worker's release store of `finished` in run_worker.
      if (!worker.held || worker.slot.finished.load(std::memory_order_acquire) != worker.handed) continue;
      worker.held = false;
      ++idle_count_;
      if (worker.stall_seen == worker.handed_tick) --stalled_held_;  // it runs again
      if (worker.reclaimed) {
        worker.reclaimed = false;
        continue;
      }
      sink(static_cast<const WorkerDone&>(worker.slot.done));
      ++passed;
    }
    return passed;
  }
  // Serving thread: each job whose worker the keeper declared stalled is passed once to
  // `take_back(const WorkerJob&) -> bool`. True: it is computed elsewhere; the worker gets no job
  // until it returns, and what it answers then is dropped. False: the job stays the worker's and
  // its answer is awaited. Returns how many were taken back now.
  template <class TakeBack>
  std::size_t reclaim_stalled(TakeBack&& take_back) noexcept {
    std::size_t count = 0;
    for (std::uint32_t w = 0; w < size(); ++w) {
      Worker& worker = *workers_[w];
      if (!worker.held || worker.reclaimed || worker.stall_seen == worker.handed_tick) continue;
      // relaxed: the keeper's verdict names the job by its hand-off tick, which this thread wrote
      // itself; a verdict on an earlier job never matches a later one.
      if (worker.line.stalled_tick.load(std::memory_order_relaxed) != worker.handed_tick) continue;
      worker.stall_seen = worker.handed_tick;
      ++stalled_held_;
      if (!take_back(static_cast<const WorkerJob&>(worker.slot.job))) continue;
      worker.reclaimed = true;
      ++reclaimed_;
      ++count;
    }
    return count;
  }
  // Serving thread: jobs taken back from stalled workers since start.
  [[nodiscard]] std::uint64_t reclaimed() const noexcept { return reclaimed_; }

  // Keeper: looks at every worker's job: one out longer than stall_limit_ns(its cost) marks its
  // worker stalled. Returns the number of stalled workers now. `now_ticks`: TscClock::now().
  std::uint32_t health(std::uint64_t now_ticks) noexcept;
  // Jobs finished by all workers since start (for status).
  [[nodiscard]] std::uint64_t jobs_done() const noexcept;

  // Keeper: tells every worker to stop after its current job and joins them (a stalled worker is
  // left behind, detached: the process is going away). Idempotent.
  void stop() noexcept;
  // After stop(): how many workers were left behind. What they may still read (the series, the
  // job's runner and strategy) must then never be freed.
  [[nodiscard]] std::uint32_t left_behind() const noexcept { return left_behind_; }
  // Fault tests: lets the worker held by stall_worker_for_test finish its job.
  void release_stalled_for_test() noexcept { release_test_stall_.store(true, std::memory_order_relaxed); }

 private:
  // What the keeper, the worker and the serving thread share about one worker's health, on its
  // own line.
  struct alignas(kRingLineBytes) HealthLine {
    std::atomic<std::uint64_t> handed_tick{0};   // TSC of the job out now; 0: none (serving thread sets, worker clears)
    std::atomic<std::uint64_t> handed_cost{0};   // that job's cost
    std::atomic<std::uint64_t> stalled_tick{0};  // the keeper's verdict: the job of this tick is stalled
    std::atomic<std::uint64_t> finished{0};      // jobs this worker finished
  };
  // Everything a worker thread touches lives here, so that a thread left behind at stop() (a
  // stuck one) can be left its Worker, never a freed pool.
  struct Worker {
    explicit Worker(const WorkerPoolConfig& pool_config) : config(pool_config) {}
    JobSlot slot;
    WorkerPoolConfig config;
    const std::atomic<bool>* release_test_stall = nullptr;
    std::atomic<bool> stop{false};    // stop after the current job
    std::atomic<bool> exited{false};  // the thread has returned
    HealthLine line;
    alignas(kRingLineBytes) std::atomic<std::uint32_t> wake_word{0};  // block mode: the futex
    std::atomic<std::uint32_t> sleeping{0};
    // The serving thread's own record (only it reads or writes these).
    alignas(kRingLineBytes) bool held = false;  // a job is out
    bool reclaimed = false;                     // taken back; drop what comes back
    std::uint64_t stall_seen = 0;               // the handed_tick whose stall was passed on
    std::uint64_t handed = 0;                   // jobs posted to this worker so far
    std::uint64_t handed_tick = 0;              // what it stored into line.handed_tick
    std::thread thread;
  };

  explicit WorkerPool(const WorkerPoolConfig& config);
  static void run_worker(Worker& worker, std::uint32_t index) noexcept;
  // Waits for job number `next` the way worker.config.wait says (`last_job`: when the worker
  // finished its last); returns false when told to stop.
  static bool wait_for_job(Worker& worker, std::uint64_t next, std::chrono::steady_clock::time_point last_job) noexcept;

  WorkerPoolConfig config_;
  std::vector<int> cpus_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::uint32_t idle_count_ = 0;  // the serving thread's count of workers holding no job
  std::uint64_t reclaimed_ = 0;   // serving thread only
  std::uint32_t stalled_held_ = 0;  // serving thread only: see stalled_count()
  std::atomic<bool> release_test_stall_{false};
  bool stopped_ = false;
  std::uint32_t left_behind_ = 0;
};

}  // namespace ipcfloor
