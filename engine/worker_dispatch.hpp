#pragma once
// The serving thread's hand on the compute workers (engine/worker_pool.hpp): whether heavy work
// may start, handing an admitted BACKTEST or a live share to an idle worker (spreading the jobs
// over the cores), collecting answers, and taking back the jobs of workers the keeper declared
// stalled. A BACKTEST's request is copied once here, from the serving thread's private copy into
// the worker's mailbox, and the worker's kernel reads it there.
//
// Threads: serving thread only; noexcept, no allocation, no lock, no syscall (but the block-mode
// wake-up hand() makes). run() is called by the workers.

#include <cstdint>
#include <span>

#include "engine/admission.hpp"
#include "engine/worker_pool.hpp"
#include "shm/frames.hpp"

namespace ipcfloor {

class WorkerDispatch final : public JobRunner {
 public:
  // `pool` null: no workers; every request is computed by the serving thread.
  explicit WorkerDispatch(WorkerPool* pool) noexcept : pool_(pool) {}

  [[nodiscard]] bool any() const noexcept { return pool_ != nullptr; }
  [[nodiscard]] std::uint32_t size() const noexcept { return pool_ != nullptr ? pool_->size() : 0; }
  // True when a worker is free to take a job now.
  [[nodiscard]] bool idle() const noexcept { return pool_ != nullptr && pool_->idle_count() != 0; }
  [[nodiscard]] bool busy() const noexcept { return pool_ != nullptr && pool_->idle_count() != pool_->size(); }
  // True when no worker is free and every one that holds a job is past its stall limit: a job
  // waiting for a worker would wait for the host to run a stalled one.
  [[nodiscard]] bool all_stalled() const noexcept {
    return pool_ != nullptr && pool_->idle_count() == 0 && pool_->stalled_count() == pool_->size();
  }
  [[nodiscard]] bool answers_ready() const noexcept { return pool_ != nullptr && pool_->answers_ready(); }

  // Hands an admitted BACKTEST, STATS or TRADES (`verdict` routed it heavy) to an idle worker:
  // idle() must be true.
  void hand_compute(const JobTicket& ticket, const RequestSlot& request, const Verdict& verdict) noexcept;
  // Hands a live share to an idle worker: idle() must be true.
  void hand_share(const JobTicket& ticket, const JobRunner& runner, const Bars& series, std::uint32_t first,
                  std::uint32_t count, std::uint64_t cost) noexcept;
  // Hands a job taken back from a stalled worker to another idle worker: idle() must be true.
  void hand_again(const WorkerJob& job) noexcept;

  // Every finished job's answer to `sink(const WorkerDone&)`; returns how many.
  template <class Sink>
  std::size_t collect(Sink&& sink) noexcept {
    return pool_ != nullptr ? pool_->collect(sink) : 0;
  }
  // Each job of a worker the keeper declared stalled, once, to `take_back(const WorkerJob&)`.
  template <class TakeBack>
  std::size_t reclaim_stalled(TakeBack&& take_back) noexcept {
    return pool_ != nullptr ? pool_->reclaim_stalled(take_back) : 0;
  }

  // A worker's BACKTEST, STATS or TRADES: compute() on the request as admitted (nothing checked
  // again), a TRADES page into the worker's own page buffer.
  void run(const WorkerJob& job, KernelWorkspace& workspace, WorkerDone& done) const noexcept override;

 private:
  // The idle worker the next job goes to, advancing the start point so jobs spread over the cores.
  [[nodiscard]] std::uint32_t take_idle() noexcept;

  WorkerPool* pool_;
  std::uint32_t next_worker_ = 0;  // where the search for a free worker starts
};

}  // namespace ipcfloor
