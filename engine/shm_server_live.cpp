// The serving thread's live-mode requests (serve --live): APPEND, SUBSCRIBE and SNAPSHOT, and
// the signals an APPEND sends to every subscriber. The rest of the loop is shm_server.cpp.

#include <algorithm>
#include <cmath>

#include "engine/dispatch.hpp"
#include "engine/shm_server.hpp"

namespace ipcfloor {

Status ShmServer::append_bar(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept {
  if (!live_) return answer_status(response, request, Status::not_live);
  const LiveAppend bar = LiveAppend::from_params(request.params);
  if (request.flags != 0 || bar.unused[0] != 0 || bar.unused[1] != 0 || bar.unused[2] != 0 || bar.unused[3] != 0)
    return answer_status(response, request, Status::reserved_bits_set);
  // One writer: the first lane that appends keeps the series until its client leaves.
  if (writer_lane_ >= 0 && writer_lane_ != static_cast<int>(index)) return answer_status(response, request, Status::not_the_writer);
  if (!std::isfinite(bar.close) || !(bar.close > 0.0)) return answer_status(response, request, Status::bad_price);
  if (published_ >= room_.size()) return answer_status(response, request, Status::capacity_full);
  writer_lane_ = static_cast<int>(index);
  room_[published_] = bar.close;
  ++published_;
  // release: the bar is written before the count that covers it; pairs with the acquire load in
  // Attachment::published_series.
  header_.bars_published.store(published_, std::memory_order_release);
  close_ = std::span<const double>(room_.data(), published_);
  series_[0] = close_;
  const std::uint64_t tick = bar.tick;
  live_->on_bar(
      close_,
      [this, tick](std::uint32_t lane, std::uint32_t id, const LiveBar& state) noexcept {
        push_signal(lane, id, state, tick, 0);
      },
      [this](std::uint32_t lane) noexcept {
        if (lanes_[lane].signals) notify_readable(*lanes_[lane].signals, mode_);
      });
  // relaxed: counters only this thread writes; readers tolerate staleness.
  header_.signals_sent.store(signals_sent_, std::memory_order_relaxed);
  header_.signals_dropped.store(signals_dropped_, std::memory_order_relaxed);
  answer_status(response, request, Status::ok);
  response.pnl = bar.close;
  response.trades = static_cast<std::int64_t>(published_);
  return Status::ok;
}

Status ShmServer::subscribe(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept {
  if (!live_) return answer_status(response, request, Status::not_live);
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
