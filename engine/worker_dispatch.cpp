#include "engine/worker_dispatch.hpp"

#include "engine/dispatch.hpp"

namespace ipcfloor {

std::uint32_t WorkerDispatch::take_idle() noexcept {
  const std::uint32_t worker = pool_->next_idle(next_worker_);
  next_worker_ = worker + 1 >= pool_->size() ? 0 : worker + 1;
  return worker;
}

void WorkerDispatch::hand_compute(const JobTicket& ticket, const RequestSlot& request, const Verdict& verdict) noexcept {
  const std::uint32_t worker = take_idle();
  WorkerJob& job = pool_->job_at(worker);  // written in place: the request's one copy on its way
  job.ticket = ticket;
  job.runner = this;
  job.compute = ComputeJob::of(verdict, request);
  job.cost = verdict.cost;
  job.live_first = 0;
  job.live_count = 0;
  pool_->hand(worker);
}

void WorkerDispatch::hand_share(const JobTicket& ticket, const JobRunner& runner, const Bars& series,
                                std::uint32_t first, std::uint32_t count, std::uint64_t cost) noexcept {
  const std::uint32_t worker = take_idle();
  WorkerJob& job = pool_->job_at(worker);
  job.ticket = ticket;
  job.runner = &runner;
  job.compute = ComputeJob{};
  job.compute.bars = series;
  job.cost = cost;
  job.live_first = first;
  job.live_count = count;
  pool_->hand(worker);
}

void WorkerDispatch::hand_again(const WorkerJob& job) noexcept {
  const std::uint32_t worker = take_idle();
  pool_->job_at(worker) = job;
  pool_->hand(worker);
}

void WorkerDispatch::run(const WorkerJob& job, KernelWorkspace& workspace, WorkerDone& done) const noexcept {
  compute(job.compute, workspace, workspace.trade_page(), done.result);
  done.page = workspace.trade_page().data();
}

}  // namespace ipcfloor
