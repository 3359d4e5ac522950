#include "engine/shm_server.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <chrono>
#include <cstring>
#include <utility>

#include "common/tsc_clock.hpp"
#include "engine/dispatch.hpp"

namespace ipcfloor {
namespace {

// Idle passes before a backoff/block engine starts to back off or sleep: long enough that a
// client pipelining requests never finds the engine asleep between two of them.
constexpr std::uint32_t kIdlePassesBeforeWait = 4096;
// A sleeping engine wakes at least this often to look at the stop flag.
constexpr std::chrono::milliseconds kIdleSleepBound{50};
// Passes between two scans of the lane table (a pass over one active lane takes tens of ns, so
// a scan happens every few microseconds).
constexpr std::uint32_t kPassesPerScan = 128;
// Scans between two samples of each ring's fill for `status`: loading the client's position
// line more often would make it travel beside the slots it publishes.
constexpr std::uint32_t kScansPerFillSample = 256;

void relaxed_increment(std::atomic<std::uint64_t>& counter) noexcept {
  // relaxed: a counter only the serving thread writes; readers (status) tolerate staleness.
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

}  // namespace

Expected<std::unique_ptr<ShmServer>> ShmServer::make(Segment& segment, EngineLanes& lanes, WaitMode mode,
                                                     TelemetryQueue& telemetry, std::uint64_t max_frame_cost,
                                                     double ns_per_tick, std::optional<LiveBookLimits> live) {
  const std::size_t room = segment.series_room().size();
  // The workspace holds the longest series a BACKTEST may run on.
  std::size_t longest = live ? room : segment.series().size();
  for (std::uint32_t i = 1; i < segment.series_count(); ++i) longest = std::max(longest, segment.series_at(i).size());
  std::unique_ptr<ShmServer> server(
      new ShmServer(segment, lanes, mode, telemetry, max_frame_cost, ns_per_tick, longest));
  server->series_count_ = segment.series_count();
  server->series_[0] = server->close_;
  for (std::uint32_t i = 1; i < server->series_count_; ++i) server->series_[i] = segment.series_at(i);
  if (live) {
    live->lanes = segment.lane_count();
    live->capacity_bars = room;
    live->fee = segment.header().fee;
    live->max_catch_up_cost = max_frame_cost;
    auto book = LiveBook::make(*live);
    if (!book) return std::unexpected(std::move(book.error()));
    server->live_ = std::move(*book);
  }
  return server;
}

ShmServer::ShmServer(Segment& segment, EngineLanes& lanes, WaitMode mode, TelemetryQueue& telemetry,
                     std::uint64_t max_frame_cost, double ns_per_tick, std::size_t workspace_bars)
    : segment_(segment),
      header_(segment.header()),
      shared_(lanes),
      mode_(mode),
      telemetry_(telemetry),
      close_(segment.series()),
      fee_(segment.header().fee),
      room_(segment.series_room()),
      published_(segment.series().size()),
      max_frame_cost_(max_frame_cost),
      ns_per_tick_(ns_per_tick),
      workspace_(workspace_bars),
      lane_count_(segment.lane_count()),
      capacity_(segment.ring_capacity()) {}

void ShmServer::report(const TelemetryEvent& event) noexcept {
  // try_enqueue never allocates; a full queue drops the event (the shared counters still count).
  (void)telemetry_.try_enqueue(event);
}

bool ShmServer::take_up(std::uint32_t index, Lane& lane, const EngineLane& shared) noexcept {
  const LaneView& view = shared.view;
  // adopt, not make: a client may already have written its positions; impossible ones must
  // quarantine the lane, not fail here. Errors only for misaligned pointers or bad capacities,
  // which the engine's own geometry rules out; should one appear, the lane is not served.
  auto requests = RingConsumer<RequestSlot>::adopt(view.request_ring, view.request_slots, capacity_);
  auto responses = RingProducer<ResponseSlot>::adopt(view.response_ring, view.response_slots, capacity_);
  if (!requests || !responses) return false;
  lane.view = view;
  lane.generation = shared.generation;
  lane.requests.emplace(*requests);
  lane.responses.emplace(*responses);
  lane.signals.reset();
  if (view.signal_slots != nullptr) {
    auto signals = RingProducer<SignalSlot>::adopt(view.signal_ring, view.signal_slots, view.signal_capacity);
    if (!signals) return false;
    lane.signals.emplace(*signals);
  }
  lane.signals_dropped = 0;
  lane.exchange.emplace(view.call);
  quarantined_ &= ~(std::uint64_t{1} << index);
  return true;
}

void ShmServer::scan_lanes() noexcept {
  passes_since_scan_ = 0;
  const bool sample_fill = ++scans_ % kScansPerFillSample == 0;
  std::uint64_t active = 0;
  for (std::uint32_t i = 0; i < lane_count_; ++i) {
    EngineLane& shared = shared_.lanes[i];
    Lane& lane = lanes_[i];
    const std::uint64_t bit = std::uint64_t{1} << i;
    switch (load_phase(shared)) {
      case LanePhase::active:
        if (lane.generation != shared.generation && !take_up(i, lane, shared)) {
          quarantined_ |= bit;
          lane.generation = shared.generation;
        }
        if ((quarantined_ & bit) == 0) {
          active |= bit;
          // relaxed: a report for people.
          if (sample_fill) segment_.lane_status(i).ring_fill.store(lane.requests->size_approx(), std::memory_order_relaxed);
        }
        break;
      case LanePhase::draining:
        // Its client is gone: drop the handles, so nothing of this thread points into the old
        // object once the keeper unmaps it.
        lane = Lane{};
        quarantined_ &= ~bit;
        if (live_) live_->clear_lane(i);
        if (writer_lane_ == static_cast<int>(i)) writer_lane_ = -1;
        set_phase(shared, LanePhase::drained);
        break;
      case LanePhase::free:
      case LanePhase::drained:
        break;
    }
  }
  active_ = active;
}

void ShmServer::count_request(std::uint32_t index, Status status, std::uint64_t seq) noexcept {
  ++requests_;
  LaneStatus& lane_status = segment_.lane_status(index);
  relaxed_increment(lane_status.requests);
  if (status != Status::ok) {
    ++bad_frames_;
    relaxed_increment(lane_status.bad_frames);
    // relaxed: only this thread writes the segment-wide counter.
    header_.bad_frames.store(bad_frames_, std::memory_order_relaxed);
    report(TelemetryEvent{TelemetryEvent::Kind::bad_frame, static_cast<std::uint16_t>(status), index,
                          segment_.lane_status(index).owner_pid, seq});
  }
}

void ShmServer::record_service(std::uint32_t index, std::uint64_t ticks) noexcept {
  const auto ns = static_cast<std::uint64_t>(static_cast<double>(ticks) * ns_per_tick_);
  relaxed_increment(segment_.lane_status(index).service_ns[service_bucket(ns)]);
}

void ShmServer::quarantine_lane(std::uint32_t index, Lane& lane) noexcept {
  const std::uint64_t bit = std::uint64_t{1} << index;
  active_ &= ~bit;
  if ((quarantined_ & bit) != 0) return;
  quarantined_ |= bit;
  ++lanes_corrupt_;
  // relaxed: counter only this thread writes; readers (status, tests) tolerate staleness.
  header_.lanes_corrupt.store(lanes_corrupt_, std::memory_order_relaxed);
  LaneStatus& lane_status = segment_.lane_status(index);
  // relaxed: a report for people; the lane table, not this word, decides what is served.
  lane_status.state.store(static_cast<std::uint32_t>(LaneState::quarantined), std::memory_order_relaxed);
  report(TelemetryEvent{TelemetryEvent::Kind::ring_corrupt, 0, index, lane_status.owner_pid, 0});
  // Tell the client instead of leaving it to time out: an impossible response position makes its
  // consumer latch corrupt, and the poison stamp ends a pending call the same way. The object is
  // the client's own; the keeper replaces it once the client's connection ends.
  // relaxed: publishes no payload; the client's acquire load of `produced` only checks bounds.
  lane.view.response_ring->produced.store(lane.responses->position() + capacity_ + 1, std::memory_order_relaxed);
  notify_readable(*lane.responses, mode_);
  lane.exchange->poison();
  lane.exchange->notify(mode_);
}

std::size_t ShmServer::serve_call(std::uint32_t index, Lane& lane) noexcept {
  ExchangeServer& exchange = *lane.exchange;
  switch (exchange.peek()) {
    case ExchangePoll::idle: return 0;
    case ExchangePoll::corrupt: quarantine_lane(index, lane); return 0;
    case ExchangePoll::request: break;
  }
  // An ECHO is its own answer: the 48 bytes are already in the line, so the round trip costs the
  // line's two transfers and one status store, as the bare cache-line bounce does.
  if (exchange.opcode_now() == static_cast<std::uint16_t>(Opcode::echo) && exchange.flags_now() == 0) {
    exchange.answer_in_place(static_cast<std::uint16_t>(Status::ok));
    exchange.notify(mode_);
    count_request(index, Status::ok, 0);
    relaxed_increment(segment_.lane_status(index).service_ns[0]);  // in place: under the first bound
    return 1;
  }
  const std::uint64_t t0 = TscClock::now();
  // The engine's one copy of the request (the client may scribble on the line); the answer is
  // written into the line itself, which is the engine's until publish_answer().
  const RequestSlot request = exchange.copy_request();
  const Status status = serve_request(index, request, exchange.answer_slot());
  exchange.publish_answer();
  exchange.notify(mode_);
  record_service(index, TscClock::now() - t0);
  count_request(index, status, request.seq);
  return 1;
}

std::size_t ShmServer::serve_ring(std::uint32_t index, Lane& lane) noexcept {
  std::size_t served = 0;
  // Bounded per pass so one busy lane cannot starve the others.
  for (std::uint32_t burst = 0; burst < capacity_; ++burst) {
    const RequestSlot* shared = lane.requests->try_peek();
    if (shared == nullptr) {
      if (lane.requests->corrupt()) quarantine_lane(index, lane);
      break;
    }
    ResponseSlot* out = lane.responses->try_claim();
    if (out == nullptr) {
      // Full: the client is not reading its answers, so serve the others. Or the client wrote
      // an impossible `consumed`: the lane can never move again.
      if (lane.responses->corrupt()) quarantine_lane(index, lane);
      break;
    }
    const RequestSlot request = *shared;  // private copy: the client may still scribble on it
    // An ECHO is answered in a few ns, under the histogram's first bound: no clock read for it.
    const bool timed = request.opcode != static_cast<std::uint16_t>(Opcode::echo);
    const std::uint64_t t0 = timed ? TscClock::now() : 0;
    const Status status = serve_request(index, request, *out);
    lane.responses->commit();
    notify_readable(*lane.responses, mode_);
    lane.requests->release();
    // A block-mode client may sleep waiting for request space.
    notify_writable(*lane.requests, mode_);
    if (timed) {
      record_service(index, TscClock::now() - t0);
    } else {
      relaxed_increment(segment_.lane_status(index).service_ns[0]);
    }
    ++served;
    count_request(index, status, request.seq);
  }
  return served;
}

namespace {
// Starts the answer to a live request: echoes its seq and opcode, zeroes the payload.
Status answer(ResponseSlot& response, const RequestSlot& request, Status status) noexcept {
  response.seq = request.seq;
  response.opcode = request.opcode;
  response.status = static_cast<std::uint16_t>(status);
  response.pnl = 0.0;
  response.trades = 0;
  for (std::int64_t& word : response.extra) word = 0;
  return status;
}
}  // namespace

Status ShmServer::serve_request(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept {
  switch (static_cast<Opcode>(request.opcode)) {
    case Opcode::append: return append_bar(index, request, response);
    case Opcode::subscribe: return subscribe(index, request, response);
    case Opcode::snapshot: return snapshot(index, request, response);
    default: break;
  }
  const Lane& lane = lanes_[index];
  // The low byte of flags picks the series (BACKTEST); the dispatcher checks the rest as before.
  const std::uint32_t series = request.flags & kSeriesIndexMask;
  if (series == 0) {
    return dispatch_request(request, close_, fee_, workspace_, response, {lane.view.bulk, lane.view.bulk_bytes},
                            max_frame_cost_);
  }
  if ((request.flags & ~kSeriesIndexMask) != 0 || request.opcode != static_cast<std::uint16_t>(Opcode::backtest))
    return answer(response, request, Status::reserved_bits_set);
  if (series >= series_count_) return answer(response, request, Status::no_such_series);
  RequestSlot on_series = request;
  on_series.flags = 0;
  return dispatch_request(on_series, series_[series], fee_, workspace_, response, {lane.view.bulk, lane.view.bulk_bytes},
                          max_frame_cost_);
}


Status ShmServer::append_bar(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept {
  if (!live_) return answer(response, request, Status::not_live);
  const LiveAppend bar = LiveAppend::from_params(request.params);
  if (request.flags != 0 || bar.unused[0] != 0 || bar.unused[1] != 0 || bar.unused[2] != 0 || bar.unused[3] != 0)
    return answer(response, request, Status::reserved_bits_set);
  // One writer: the first lane that appends keeps the series until its client leaves.
  if (writer_lane_ >= 0 && writer_lane_ != static_cast<int>(index)) return answer(response, request, Status::not_the_writer);
  if (!std::isfinite(bar.close) || !(bar.close > 0.0)) return answer(response, request, Status::bad_price);
  if (published_ >= room_.size()) return answer(response, request, Status::capacity_full);
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
  answer(response, request, Status::ok);
  response.pnl = bar.close;
  response.trades = static_cast<std::int64_t>(published_);
  return Status::ok;
}

Status ShmServer::subscribe(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept {
  if (!live_) return answer(response, request, Status::not_live);
  if (request.flags != 0) return answer(response, request, Status::reserved_bits_set);
  if (!lanes_[index].signals) return answer(response, request, Status::not_live);
  std::uint32_t id = 0;
  LiveBar state{};
  const Status status = live_->subscribe(index, request.params, close_, id, state);
  answer(response, request, status);
  if (status != Status::ok) return status;
  response.pnl = state.pnl;
  response.trades = state.trades;
  response.extra[0] = id;
  response.extra[1] = static_cast<std::int64_t>(published_);
  response.extra[2] = state.position;
  return Status::ok;
}

Status ShmServer::snapshot(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept {
  if (!live_) return answer(response, request, Status::not_live);
  if (request.flags != 0) return answer(response, request, Status::reserved_bits_set);
  Lane& lane = lanes_[index];
  if (!lane.signals) return answer(response, request, Status::not_live);
  live_->for_each(index, [this, index](std::uint32_t id, const LiveBar& state) noexcept {
    push_signal(index, id, state, 0, kSignalSnapshot);
  });
  notify_readable(*lane.signals, mode_);
  answer(response, request, Status::ok);
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

std::size_t ShmServer::poll_once() noexcept {
  if (++passes_since_scan_ >= kPassesPerScan) scan_lanes();
  std::size_t served = 0;
  for (std::uint64_t pending = active_; pending != 0; pending &= pending - 1) {
    const auto i = static_cast<std::uint32_t>(std::countr_zero(pending));
    Lane& lane = lanes_[i];
    served += serve_call(i, lane);
    if ((active_ & (std::uint64_t{1} << i)) != 0) served += serve_ring(i, lane);
  }
  // relaxed: only this thread writes it.
  if (served != 0) header_.requests.store(requests_, std::memory_order_relaxed);
  return served;
}

bool ShmServer::has_work() noexcept {
  for (std::uint32_t i = 0; i < lane_count_; ++i) {
    const EngineLane& shared = shared_.lanes[i];
    const LanePhase phase = load_phase(shared);
    if (phase == LanePhase::draining) return true;
    if (phase != LanePhase::active) continue;
    Lane& lane = lanes_[i];
    if (lane.generation != shared.generation) return true;  // a new client to take up
    // A quarantined lane's corrupt ring always reads "readable": it must not keep us awake.
    if ((quarantined_ & (std::uint64_t{1} << i)) != 0) continue;
    if (lane.exchange->readable() || lane.requests->readable()) return true;
  }
  return false;
}

void ShmServer::run(const std::atomic<bool>& stop) noexcept {
  std::uint32_t idle = 0;
  DoorbellLine* doorbells[kMaxLanes];
  // relaxed: a plain flag; nothing is published through it.
  while (!stop.load(std::memory_order_relaxed)) {
    if (poll_once() != 0) {
      idle = 0;
      continue;
    }
    if (mode_ == WaitMode::spin || ++idle < kIdlePassesBeforeWait) {
      cpu_relax();
      continue;
    }
    scan_lanes();  // sleep on the doorbells of the lanes as they are now
    auto ready = [this, &stop]() noexcept {
      return has_work() || stop.load(std::memory_order_relaxed);  // relaxed: plain flag
    };
    const auto deadline = WaitClock::now() + kIdleSleepBound;
    if (mode_ == WaitMode::block) {
      std::size_t count = 0;
      for (std::uint64_t held = active_; held != 0; held &= held - 1)
        doorbells[count++] = lanes_[std::countr_zero(held)].view.doorbell;
      (void)doorbells_.wait(std::span<DoorbellLine* const>(doorbells, count), shared_.keeper_word, ready, deadline);
    } else {
      (void)wait_with_backoff(ready, deadline);
    }
  }
}

}  // namespace ipcfloor
