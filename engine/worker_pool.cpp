#include "engine/worker_pool.hpp"

#include <pthread.h>
#include <sys/prctl.h>

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include "common/affinity.hpp"
#include "common/tsc_clock.hpp"
#include "shm/doorbell.hpp"

namespace ipcfloor {
namespace {

// An idle worker in spin mode keeps polling this long after its last job (spinning, and yielding
// every thousand polls), so the jobs of a sweep, which follow each other within microseconds,
// never find it asleep; backoff and block workers poll only briefly.
constexpr std::chrono::milliseconds kSpinAfterJob{10};
constexpr std::chrono::microseconds kBriefSpin{50};
// Then it naps, each nap twice the last, from kFirstNap up to kLongestNap: a job after a short pause
// waits at most a short nap, and a worker idle for longer wakes a thousand times a second, not
// fifty thousand. Those wakes matter where the workers fill every core but the serving one: each
// one preempts whatever else runs there (a client starting up, the keeper answering a hand-off).
// No wake-up is needed from the serving thread, which makes no syscall. A block-mode worker sleeps
// on a futex instead.
constexpr std::chrono::microseconds kFirstNap{20};
constexpr std::chrono::milliseconds kLongestNap{1};
// A block-mode worker sleeps on its futex at most this long before it looks at the stop flag.
constexpr std::chrono::milliseconds kBlockWaitBound{50};

}  // namespace

WorkerPool::WorkerPool(const WorkerPoolConfig& config)
    : config_(config), cpus_(config.cpus), idle_count_(static_cast<std::uint32_t>(config.cpus.size())) {}

Expected<std::unique_ptr<WorkerPool>> WorkerPool::make(const WorkerPoolConfig& config) {
  if (config.cpus.size() > kMaxWorkers)
    return fail(ErrorCode::invalid_argument, "{} workers asked for; at most {}", config.cpus.size(), kMaxWorkers);
  std::unique_ptr<WorkerPool> pool(new WorkerPool(config));
  for (std::size_t i = 0; i < config.cpus.size(); ++i) {
    pool->workers_.push_back(std::make_unique<Worker>(config));
    pool->workers_.back()->release_test_stall = &pool->release_test_stall_;
  }
  // Each worker pins itself and sizes its workspace on its own thread (the memory then lives
  // near its core), and reports back through `ready`: 1 ready, -1 failed.
  std::vector<std::atomic<int>> ready(config.cpus.size());
  std::vector<Error> errors(config.cpus.size(), Error{ErrorCode::io, ""});
  for (std::uint32_t i = 0; i < pool->size(); ++i) {
    Worker& worker = *pool->workers_[i];
    worker.thread = std::thread([&worker, cpu = config.cpus[i], &ready, &errors, i] {
      pthread_setname_np(pthread_self(), "ipcf-worker");
      if (auto pinned = pin_current_thread(cpu); !pinned) {
        errors[i] = pinned.error();
        worker.exited.store(true, std::memory_order_release);  // release: pairs with the acquire in stop()
        ready[i].store(-1, std::memory_order_release);  // release: publishes errors[i]; pairs with the acquire below
        return;
      }
      // Naps of microseconds need a timer slack of about that much, not the default 50 us.
      (void)::prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
      ready[i].store(1, std::memory_order_release);  // release: as above
      run_worker(worker, i);
      worker.exited.store(true, std::memory_order_release);  // release: as above
    });
  }
  Expected<void> outcome;
  for (std::uint32_t i = 0; i < pool->size(); ++i) {
    int state = 0;
    // acquire: pairs with the worker's release store of ready[i].
    while ((state = ready[i].load(std::memory_order_acquire)) == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
    if (state < 0 && outcome) outcome = std::unexpected(Error{errors[i].code, fmt::format("worker {}: {}", i, errors[i].message)});
  }
  if (!outcome) return std::unexpected(outcome.error());  // the destructor stops the others
  return pool;
}

WorkerPool::~WorkerPool() { stop(); }

std::uint32_t WorkerPool::next_idle(std::uint32_t from) const noexcept {
  const std::uint32_t n = size();
  for (std::uint32_t k = 0; k < n; ++k) {
    const std::uint32_t w = from + k < n ? from + k : from + k - n;
    if (!workers_[w]->held) return w;
  }
  return n;
}

bool WorkerPool::answers_ready() const noexcept {
  for (const auto& worker : workers_)
    // acquire: as in collect().
    if (worker->held && worker->slot.finished.load(std::memory_order_acquire) == worker->handed) return true;
  return false;
}

void WorkerPool::hand(std::uint32_t worker) noexcept {
  Worker& w = *workers_[worker];
  w.held = true;
  --idle_count_;
  w.reclaimed = false;
  w.handed_tick = TscClock::now() | 1;  // never 0, which means "none out"
  // relaxed: read by the keeper after its acquire load of handed_tick.
  w.line.handed_cost.store(w.slot.job.cost, std::memory_order_relaxed);
  // release: publishes handed_cost; pairs with the acquire load in WorkerPool::health.
  w.line.handed_tick.store(w.handed_tick, std::memory_order_release);
  // release: publishes the job written into the slot; pairs with the acquire load in wait_for_job.
  w.slot.posted.store(++w.handed, std::memory_order_release);
  if (config_.wait == WaitMode::block) detail::notify_channel({w.wake_word, w.sleeping});
}

bool WorkerPool::wait_for_job(Worker& worker, std::uint64_t next, std::chrono::steady_clock::time_point last_job) noexcept {
  const auto ready = [&]() noexcept {
    // acquire: pairs with the release store of `posted` in WorkerPool::hand. relaxed (stop): a
    // plain flag; nothing is published through it.
    return worker.slot.posted.load(std::memory_order_acquire) == next || worker.stop.load(std::memory_order_relaxed);
  };
  const auto spin_for = worker.config.wait == WaitMode::spin ? std::chrono::nanoseconds(kSpinAfterJob)
                                                       : std::chrono::nanoseconds(kBriefSpin);
  std::chrono::nanoseconds nap = kFirstNap;
  while (!ready()) {
    for (int i = 0; i < 1024 && !ready(); ++i) cpu_relax();
    if (ready()) break;
    const auto idle = std::chrono::steady_clock::now() - last_job;
    if (idle < spin_for) {
      // A worker may share its cpu with a client (a small host, or a client pinned there): a
      // yield lets it run at once, and costs a spinning worker with a core of its own a few
      // hundred ns per thousand polls.
      detail::yield_thread();
      continue;
    }
    if (worker.config.wait == WaitMode::block) {
      auto check = ready;
      (void)detail::block_until(check, {worker.wake_word, worker.sleeping}, WaitClock::now() + kBlockWaitBound);
    } else {
      detail::sleep_for(nap);
      nap = std::min<std::chrono::nanoseconds>(2 * nap, kLongestNap);
    }
  }
  // relaxed: as above.
  return !worker.stop.load(std::memory_order_relaxed);
}

void WorkerPool::run_worker(Worker& worker, std::uint32_t index) noexcept {
  const WorkerPoolConfig& config = worker.config;
  KernelWorkspace workspace(config.workspace_bytes, config.trade_page_trades);
  bool stall_next = static_cast<int>(index) == config.stall_worker_for_test;
  // A worker that has had no job yet waits like one idle for long: it costs an idle engine nothing.
  auto last_job = std::chrono::steady_clock::now() - kSpinAfterJob;
  for (std::uint64_t next = 1; wait_for_job(worker, next, last_job); ++next) {
    const WorkerJob& job = worker.slot.job;  // read in place: the serving thread leaves it alone until answered
    if (stall_next) {
      // The fault tests' stuck worker: holds its first job until the test lets it go or the pool stops.
      stall_next = false;
      // relaxed: plain flags.
      while (!worker.stop.load(std::memory_order_relaxed) && !worker.release_test_stall->load(std::memory_order_relaxed))
        detail::sleep_for(std::chrono::milliseconds(5));
      if (worker.stop.load(std::memory_order_relaxed)) return;
    }
    WorkerDone& done = worker.slot.done;
    done = WorkerDone{};
    job.runner->run(job, workspace, done);
    done.ticket = job.ticket;
    done.worker = index;
    // relaxed: the keeper only compares it with its own earlier reading.
    worker.line.finished.fetch_add(1, std::memory_order_relaxed);
    // release: orders this job's end before the clear; pairs with the acquire load in health().
    worker.line.handed_tick.store(0, std::memory_order_release);
    // release: publishes `done`; pairs with the acquire load in WorkerPool::collect.
    worker.slot.finished.store(next, std::memory_order_release);
    last_job = std::chrono::steady_clock::now();
    if (config.wait == WaitMode::block && config.engine_word != nullptr) wake_serving_thread(*config.engine_word);
  }
}

std::uint32_t WorkerPool::health(std::uint64_t now_ticks) noexcept {
  std::uint32_t stalled = 0;
  for (auto& worker : workers_) {
    if (!worker) continue;  // left behind at stop()
    HealthLine& line = worker->line;
    // acquire: pairs with the release store in WorkerPool::hand, so handed_cost is the job's.
    const std::uint64_t tick = line.handed_tick.load(std::memory_order_acquire);
    if (tick == 0 || now_ticks <= tick) continue;
    if (line.stalled_tick.load(std::memory_order_relaxed) == tick) {  // relaxed: its own earlier store
      ++stalled;
      continue;
    }
    // relaxed: see above.
    const std::uint64_t cost = line.handed_cost.load(std::memory_order_relaxed);
    const double out_ns = static_cast<double>(now_ticks - tick) * config_.ns_per_tick;
    if (out_ns <= static_cast<double>(stall_limit_ns(cost))) continue;
    // relaxed: the serving thread matches the tick against its own record (reclaim_stalled).
    line.stalled_tick.store(tick, std::memory_order_relaxed);
    ++stalled;
  }
  return stalled;
}

std::uint64_t WorkerPool::jobs_done() const noexcept {
  std::uint64_t total = 0;
  // relaxed: a counter for people.
  for (const auto& worker : workers_)
    if (worker) total += worker->line.finished.load(std::memory_order_relaxed);
  return total;
}

void WorkerPool::stop() noexcept {
  if (stopped_) return;
  stopped_ = true;
  for (auto& worker : workers_) {
    // relaxed: a plain flag; each worker reads it between jobs.
    worker->stop.store(true, std::memory_order_relaxed);
    if (config_.wait == WaitMode::block) detail::notify_channel({worker->wake_word, worker->sleeping});
  }
  for (auto& worker : workers_) {
    if (!worker->thread.joinable()) continue;
    // acquire: pairs with the worker's release clear in run_worker. A job still out past its
    // limit belongs to a stuck worker: give it a moment to see the flag, then leave it behind
    // with its Worker (never freed), rather than wait on it forever.
    const std::uint64_t tick = worker->line.handed_tick.load(std::memory_order_acquire);
    // relaxed: as in health().
    const bool stuck = tick != 0 && worker->line.stalled_tick.load(std::memory_order_relaxed) == tick;
    // acquire: pairs with the release store of `exited` when the thread returns.
    for (int i = 0; stuck && i < 100 && !worker->exited.load(std::memory_order_acquire); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (stuck && !worker->exited.load(std::memory_order_acquire)) {  // acquire: as above
      worker->thread.detach();
      (void)worker.release();  // the thread may still touch it: it stays allocated
      ++left_behind_;
      continue;
    }
    worker->thread.join();
  }
}

}  // namespace ipcfloor
