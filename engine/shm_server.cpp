#include "engine/shm_server.hpp"

#include <bit>
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

// The exchange line's request as the dispatcher takes it, and its answer back into the line.
RequestSlot to_request(const CallSlot& call) noexcept {
  RequestSlot request{};
  request.seq = call.seq;
  request.opcode = call.opcode;
  request.flags = call.code;
  request.params = call.payload;
  return request;
}

CallSlot to_answer(const ResponseSlot& response) noexcept {
  CallSlot answer{};
  answer.opcode = response.opcode;
  answer.code = response.status;
  answer.seq = response.seq;
  answer.payload = response.echo();  // the 48 bytes from pnl on, whatever they hold
  return answer;
}

}  // namespace

Expected<std::unique_ptr<ShmServer>> ShmServer::make(Segment& segment, EngineLanes& lanes, WaitMode mode,
                                                     TelemetryQueue& telemetry, std::uint64_t max_frame_cost,
                                                     double ns_per_tick) {
  return std::unique_ptr<ShmServer>(new ShmServer(segment, lanes, mode, telemetry, max_frame_cost, ns_per_tick));
}

ShmServer::ShmServer(Segment& segment, EngineLanes& lanes, WaitMode mode, TelemetryQueue& telemetry,
                     std::uint64_t max_frame_cost, double ns_per_tick)
    : segment_(segment),
      header_(segment.header()),
      shared_(lanes),
      mode_(mode),
      telemetry_(telemetry),
      close_(segment.series()),
      fee_(segment.header().fee),
      max_frame_cost_(max_frame_cost),
      ns_per_tick_(ns_per_tick),
      workspace_(segment.series().size()),
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
  const CallSlot call = exchange.copy_of();  // private: the client may scribble on the line
  ResponseSlot response;
  const Status status = dispatch_request(to_request(call), close_, fee_, workspace_, response,
                                         {lane.view.bulk, lane.view.bulk_bytes}, max_frame_cost_);
  exchange.answer(to_answer(response));
  exchange.notify(mode_);
  record_service(index, TscClock::now() - t0);
  count_request(index, status, call.seq);
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
    const Status status = dispatch_request(request, close_, fee_, workspace_, *out,
                                           {lane.view.bulk, lane.view.bulk_bytes}, max_frame_cost_);
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
