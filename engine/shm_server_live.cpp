// The serving thread's live-mode requests (serve --live): APPEND, SUBSCRIBE and SNAPSHOT, and
// the signals an APPEND sends to every subscriber. An APPEND whose signal work costs at least
// --inline-cost goes to the workers in shares (one bar out at a time; live requests wait for it)
// and is answered when the last share is back. The rest of the loop is shm_server.cpp.

#include <algorithm>
#include <bit>
#include <cmath>

#include "engine/dispatch.hpp"
#include "engine/shm_server.hpp"

namespace ipcfloor {

Status ShmServer::check_append(std::uint32_t index, const RequestSlot& request) const noexcept {
  if (!live_) return Status::not_live;
  // A worker that never returned left part of the book's state in its hands.
  if (live_broken_) return Status::engine_error;
  const LiveAppend bar = LiveAppend::from_params(request.params);
  if (request.flags != 0 || bar.unused[0] != 0 || bar.unused[1] != 0 || bar.unused[2] != 0 || bar.unused[3] != 0)
    return Status::reserved_bits_set;
  // One writer: the first lane that appends keeps the series until its client leaves.
  if (writer_lane_ >= 0 && writer_lane_ != static_cast<int>(index)) return Status::not_the_writer;
  if (!std::isfinite(bar.close) || !(bar.close > 0.0)) return Status::bad_price;
  if (published_ >= room_.size()) return Status::capacity_full;
  return Status::ok;
}

bool ShmServer::fans_out(std::uint32_t index, const RequestSlot& request) const noexcept {
  return pool_ != nullptr && live_ && live_->total() != 0 && live_->cost_per_bar() >= inline_cost_ &&
         check_append(index, request) == Status::ok;
}

double ShmServer::take_bar(std::uint32_t index, const RequestSlot& request) noexcept {
  const LiveAppend bar = LiveAppend::from_params(request.params);
  writer_lane_ = static_cast<int>(index);
  room_[published_] = bar.close;
  ++published_;
  // release: the bar is written before the count that covers it; pairs with the acquire load in
  // Attachment::published_series.
  header_.bars_published.store(published_, std::memory_order_release);
  close_ = std::span<const double>(room_.data(), published_);
  series_[0] = close_;
  return bar.close;
}

void ShmServer::publish_bar(std::uint64_t tick, bool evaluate) noexcept {
  const auto publish = [this, tick](std::uint32_t lane, std::uint32_t id, const LiveBar& state) noexcept {
    push_signal(lane, id, state, tick, 0);
  };
  const auto lane_done = [this](std::uint32_t lane) noexcept {
    if (lanes_[lane].signals) notify_readable(*lanes_[lane].signals, mode_);
  };
  if (evaluate) {
    live_->on_bar(close_, publish, lane_done);
  } else {
    live_->publish_bar(publish, lane_done);
  }
  // relaxed: counters only this thread writes; readers tolerate staleness.
  header_.signals_sent.store(signals_sent_, std::memory_order_relaxed);
  header_.signals_dropped.store(signals_dropped_, std::memory_order_relaxed);
}

Status ShmServer::append_bar(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept {
  const Status checked = check_append(index, request);
  if (checked != Status::ok) return answer_status(response, request, checked);
  const double close = take_bar(index, request);
  publish_bar(LiveAppend::from_params(request.params).tick, /*evaluate=*/true);
  answer_status(response, request, Status::ok);
  response.pnl = close;
  response.trades = static_cast<std::int64_t>(published_);
  return Status::ok;
}

void ShmServer::start_bar_at_workers(std::uint32_t index, const RequestSlot& request, const JobTicket& ticket) noexcept {
  BarAtWorkers& bar = bar_at_workers_;
  bar.close = take_bar(index, request);
  bar.tick = LiveAppend::from_params(request.params).tick;
  bar.answer = ticket;
  bar.total = live_->total();
  // As many shares as the work is worth (each at least --inline-cost units) and workers there are.
  const std::uint64_t worth = std::max<std::uint64_t>(1, live_->cost_per_bar() / std::max<std::uint64_t>(1, inline_cost_));
  bar.shares = static_cast<std::uint32_t>(std::min<std::uint64_t>({worth, pool_->size(), bar.total}));
  bar.handed = 0;
  bar.back = 0;
  bar.failed = false;
  bar.active = true;
  hand_bar_shares();
}

void ShmServer::hand_bar_shares() noexcept {
  BarAtWorkers& bar = bar_at_workers_;
  while (bar.active && bar.handed < bar.shares && pool_->idle_count() != 0) {
    // Share k covers [total * k / shares, total * (k + 1) / shares) of the book's order.
    const auto bound = [&bar](std::uint32_t k) {
      return static_cast<std::uint32_t>(std::uint64_t{bar.total} * k / bar.shares);
    };
    WorkerJob job;
    job.ticket = bar.answer;
    job.ticket.kind = JobTicket::Kind::live;
    job.close = close_.data();
    job.bars = close_.size();
    job.live_first = bound(bar.handed);
    job.live_count = bound(bar.handed + 1) - job.live_first;
    job.cost = live_->cost_per_bar() / bar.shares + 1;
    const std::uint32_t worker = pool_->next_idle(next_worker_);
    pool_->hand(worker, job);
    next_worker_ = worker + 1 == pool_->size() ? 0 : worker + 1;
    ++bar.handed;
  }
}

void ShmServer::finish_bar_share(const WorkerDone& done) noexcept {
  BarAtWorkers& bar = bar_at_workers_;
  if (done.status != static_cast<std::uint16_t>(Status::ok)) bar.failed = true;
  if (++bar.back < bar.shares) return;
  bar.active = false;
  // A share given up (its worker stalled): that worker may still write its subscriptions' state,
  // so the book is never read or changed again; live requests answer engine_error.
  if (bar.failed) live_broken_ = true;
  // Lanes whose clients left while the bar was out: their subscriptions go now, unpublished.
  for (std::uint64_t pending = bar.clear_after; pending != 0 && !live_broken_; pending &= pending - 1)
    live_->clear_lane(static_cast<std::uint32_t>(std::countr_zero(pending)));
  bar.clear_after = 0;
  if (!live_broken_) publish_bar(bar.tick, /*evaluate=*/false);
  WorkerDone answer;
  answer.ticket = bar.answer;
  answer.status = static_cast<std::uint16_t>(bar.failed ? Status::engine_error : Status::ok);
  answer.pnl = bar.failed ? 0.0 : bar.close;
  answer.trades = bar.failed ? 0 : static_cast<std::int64_t>(published_);
  finish_job(answer);
}

Status ShmServer::subscribe(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept {
  if (!live_) return answer_status(response, request, Status::not_live);
  if (live_broken_) return answer_status(response, request, Status::engine_error);
  if (request.flags != 0) return answer_status(response, request, Status::reserved_bits_set);
  if (!lanes_[index].signals) return answer_status(response, request, Status::not_live);
  std::uint32_t id = 0;
  LiveBar state{};
  const Status status = live_->subscribe(index, request.params, close_, id, state);
  answer_status(response, request, status);
  if (status != Status::ok) return status;
  response.pnl = state.pnl;
  response.trades = state.trades;
  response.extra[0] = id;
  response.extra[1] = static_cast<std::int64_t>(published_);
  response.extra[2] = state.position;
  return Status::ok;
}

Status ShmServer::snapshot(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept {
  if (!live_) return answer_status(response, request, Status::not_live);
  if (live_broken_) return answer_status(response, request, Status::engine_error);
  if (request.flags != 0) return answer_status(response, request, Status::reserved_bits_set);
  Lane& lane = lanes_[index];
  if (!lane.signals) return answer_status(response, request, Status::not_live);
  live_->for_each(index, [this, index](std::uint32_t id, const LiveBar& state) noexcept {
    push_signal(index, id, state, 0, kSignalSnapshot);
  });
  notify_readable(*lane.signals, mode_);
  answer_status(response, request, Status::ok);
  response.trades = live_->count(index);
  response.extra[1] = static_cast<std::int64_t>(published_);
  return Status::ok;
}

void ShmServer::push_signal(std::uint32_t index, std::uint32_t subscription, const LiveBar& state,
                            std::uint64_t tick, std::uint16_t flags) noexcept {
  Lane& lane = lanes_[index];
  if (!lane.signals || (quarantined_ & (std::uint64_t{1} << index)) != 0) return;
  SignalSlot* slot = lane.signals->try_claim();
  if (slot == nullptr) {
    // A slow subscriber loses frames, never stalls the engine: counted, and flagged on the next
    // frame it gets. An impossible `consumed` is the client's own doing: quarantine.
    if (lane.signals->corrupt()) {
      quarantine_lane(index, lane);
      return;
    }
    ++lane.signals_dropped;
    ++signals_dropped_;
    relaxed_increment(segment_.lane_status(index).signals_dropped);
    return;
  }
  slot->bar = published_ - 1;
  slot->subscription = subscription;
  slot->hma = state.signal.hma;
  slot->hma3 = state.signal.hma3;
  slot->pnl = state.pnl;
  slot->trades = state.trades;
  slot->tick = tick;
  slot->dropped = static_cast<std::uint32_t>(std::min<std::uint64_t>(lane.signals_dropped, 0xFFFFFFFFU));
  slot->cross = static_cast<std::int8_t>(state.signal.cross);
  slot->position = static_cast<std::int8_t>(state.position);
  slot->flags = static_cast<std::uint16_t>(flags | (lane.signals_dropped != 0 ? kSignalGap : 0));
  lane.signals->commit();
  lane.signals_dropped = 0;
  ++signals_sent_;
}

}  // namespace ipcfloor
