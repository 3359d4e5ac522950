#pragma once
// The engine's compute workers: pinned threads that run the BACKTESTs the serving thread hands
// them (and shares of a live APPEND's signal work), so the serving core stays free to move frames for every lane. Each worker has a pair of moodycamel ReaderWriterQueues: jobs in
// (serving thread -> worker) and answers out (worker -> serving thread), each with exactly one
// producer and one consumer, pre-sized so that neither side ever allocates.
//
// The serving thread gives a worker one job at a time (idle() says which are free), and picks the
// next job round-robin across lanes. So no lane can queue work ahead of another's: a request that
// finds every worker busy waits for the first of them to finish the job it runs, one combo.
//
// A worker that does not come back is seen: the serving thread stamps each hand-off with the TSC
// (no syscall), and the keeper (health(), once a heartbeat) declares a worker stalled when its
// job has been out longer than stall_limit_ns(cost). A stalled worker gets no more work; the
// serving thread answers its job engine_error (abandon_stalled()) and drops whatever it returns
// later. A worker that does return is healthy again.
//
// Threads: make()/stop()/health() belong to the keeper; idle_at(), next_idle(), hand(), collect()
// and abandon_stalled() to the serving thread alone: noexcept, no allocation, no lock, and no syscall unless the engine runs in
// block mode (then hand() wakes a sleeping worker with a futex). Workers run the JobRunner given
// to make() on their own thread.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <thread>
#include <vector>

#include "common/combo.hpp"
#include "common/error.hpp"
#include "engine/rw_queue.hpp"
#include "kernel/kernel.hpp"
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
};

// One job: a BACKTEST of `params` on `close`, admitted by the serving thread; or (ticket.kind
// live) the live subscriptions [live_first, live_first + live_count) evaluated on close's last bar.
struct WorkerJob {
  JobTicket ticket;
  Combo params{};
  const double* close = nullptr;  // a span, as pointer and size: the queue stores plain data
  std::size_t bars = 0;
  std::uint64_t cost = 0;  // backtest_cost of the job, for the stall limit
  std::uint32_t live_first = 0;
  std::uint32_t live_count = 0;
  [[nodiscard]] std::span<const double> series() const noexcept { return {close, bars}; }
};

struct WorkerDone {
  JobTicket ticket;
  std::uint16_t status = 0;  // a Status value
  std::uint32_t worker = 0;
  double pnl = 0.0;
  std::int64_t trades = 0;
};

// Runs one job on a worker's thread with that worker's own workspace (sized for the longest
// series); fills `done` (all but ticket and worker). Must not throw, allocate or block.
using JobRunner = void (*)(void* context, const WorkerJob& job, KernelWorkspace& workspace, WorkerDone& done) noexcept;

struct WorkerPoolConfig {
  std::vector<int> cpus;            // one worker per entry, pinned there; empty: no workers
  WaitMode wait = WaitMode::spin;   // how an idle worker waits (see worker_pool.cpp)
  std::size_t workspace_bars = 0;   // the longest series a job may run on
  JobRunner runner = nullptr;
  void* context = nullptr;
  double ns_per_tick = 1.0;         // the TSC's rate, for the stall limit
  // Block mode: bumped and woken after each answer, so a sleeping serving thread hears it
  // (EngineLanes::keeper_word). Unused otherwise: the serving thread polls.
  std::atomic<std::uint32_t>* engine_word = nullptr;
  int stall_worker_for_test = -1;   // fault tests: this worker never finishes its first job
};

// How long a job of `cost` units may be out before its worker counts as stalled: 2 s plus 2 ns per
// unit (some ten times what the slowest supported kernel path needs), ten times that in a
// sanitizer build, whose kernel runs about ten times slower. A fault limit, never a verdict on a
// request.
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

  // Serving thread: true when `worker` holds no job.
  [[nodiscard]] bool idle_at(std::uint32_t worker) const noexcept;
  // Serving thread: workers holding no job, and holding one.
  [[nodiscard]] std::uint32_t idle_count() const noexcept { return idle_count_; }
  [[nodiscard]] std::uint32_t busy_count() const noexcept { return size() - idle_count_; }
  // Serving thread: true when some worker has an answer to collect.
  [[nodiscard]] bool answers_ready() noexcept;
  // Serving thread: the first idle worker at or after `from` (wrapping), or size() when none.
  [[nodiscard]] std::uint32_t next_idle(std::uint32_t from) const noexcept;
  // Serving thread: hands `job` to idle worker `worker`. Never blocks: the queue has room.
  void hand(std::uint32_t worker, const WorkerJob& job) noexcept;
  // Serving thread: moves every finished job's answer to `sink(const WorkerDone&)`, and frees its
  // worker. Answers of abandoned jobs are dropped here. Returns the answers passed on.
  template <class Sink>
  std::size_t collect(Sink&& sink) noexcept {
    std::size_t passed = 0;
    for (std::uint32_t w = 0; w < size(); ++w) {
      Worker& worker = *workers_[w];
      if (!worker.held) continue;
      WorkerDone* done = worker.out.peek();
      if (done == nullptr) continue;
      const WorkerDone answer = *done;
      (void)worker.out.pop();
      worker.held = false;
      ++idle_count_;
      if (worker.abandoned) {
        worker.abandoned = false;
        continue;
      }
      sink(answer);
      ++passed;
    }
    return passed;
  }
  // Serving thread: each job whose worker the keeper declared stalled is passed to
  // `give_up(const WorkerJob&)` once (to answer it engine_error); its late answer will be dropped,
  // and the worker gets no job until it returns. Returns how many were given up now.
  template <class GiveUp>
  std::size_t abandon_stalled(GiveUp&& give_up) noexcept {
    std::size_t count = 0;
    for (std::uint32_t w = 0; w < size(); ++w) {
      Worker& worker = *workers_[w];
      if (!worker.held || worker.abandoned) continue;
      // relaxed: the keeper's verdict names the job by its hand-off tick, which this thread wrote
      // itself; a verdict on an earlier job never matches a later one.
      if (worker.line.stalled_tick.load(std::memory_order_relaxed) != worker.handed_tick) continue;
      worker.abandoned = true;
      give_up(worker.current);
      ++count;
    }
    return count;
  }

  // Keeper: looks at every worker's job: one out longer than stall_limit_ns(its cost) marks its
  // worker stalled. Returns the number of stalled workers now. `now_ticks`: TscClock::now().
  std::uint32_t health(std::uint64_t now_ticks) noexcept;
  // Jobs finished by all workers since start (for status).
  [[nodiscard]] std::uint64_t jobs_done() const noexcept;

  // Keeper: tells every worker to stop after its current job and joins them (a stalled worker is
  // left behind, detached: the process is going away). Idempotent.
  void stop() noexcept;
  // After stop(): how many workers were left behind. What they may still read (the series, the
  // runner's context) must then never be freed.
  [[nodiscard]] std::uint32_t left_behind() const noexcept { return left_behind_; }

 private:
  // What the keeper, the worker and the serving thread share about one worker, on its own line.
  struct alignas(kRingLineBytes) HealthLine {
    std::atomic<std::uint64_t> handed_tick{0};   // TSC of the job out now; 0: none (serving thread sets, worker clears)
    std::atomic<std::uint64_t> handed_cost{0};   // that job's cost
    std::atomic<std::uint64_t> stalled_tick{0};  // the keeper's verdict: the job of this tick is stalled
    std::atomic<std::uint64_t> finished{0};      // jobs this worker finished
  };
  // Everything a worker thread touches lives here, so that a thread left behind at stop() (a
  // stuck one) can be left its Worker, never a freed pool.
  struct Worker {
    explicit Worker(const WorkerPoolConfig& pool_config) : in(4), out(4), config(pool_config) {}
    moodycamel::ReaderWriterQueue<WorkerJob> in;    // serving thread -> worker
    moodycamel::ReaderWriterQueue<WorkerDone> out;  // worker -> serving thread
    WorkerPoolConfig config;
    std::atomic<bool> stop{false};    // stop after the current job
    std::atomic<bool> exited{false};  // the thread has returned
    HealthLine line;
    alignas(kRingLineBytes) std::atomic<std::uint32_t> wake_word{0};  // block mode: the futex
    std::atomic<std::uint32_t> sleeping{0};
    // The serving thread's own record (only it reads or writes these).
    alignas(kRingLineBytes) bool held = false;  // a job is out
    bool abandoned = false;                     // answered engine_error; drop what comes back
    std::uint64_t handed_tick = 0;              // what it stored into line.handed_tick
    WorkerJob current{};
    std::thread thread;
  };

  explicit WorkerPool(const WorkerPoolConfig& config);
  static void run_worker(Worker& worker, std::uint32_t index) noexcept;
  // Waits for a job the way worker.config.wait says (`last_job`: when the worker finished its
  // last); returns false when told to stop.
  static bool wait_for_job(Worker& worker, std::chrono::steady_clock::time_point last_job) noexcept;

  WorkerPoolConfig config_;
  std::vector<int> cpus_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::uint32_t idle_count_ = 0;  // the serving thread's count of workers holding no job
  bool stopped_ = false;
  std::uint32_t left_behind_ = 0;
};

}  // namespace ipcfloor
