#include "engine/shm_server.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <chrono>
#include <cstring>
#include <utility>

#include "common/tsc_clock.hpp"
#include "engine/dispatch.hpp"
#include "kernel/cost.hpp"

namespace ipcfloor {
namespace {

// Idle passes before a backoff/block engine starts to back off or sleep: long enough that a
// client pipelining requests never finds the engine asleep between two of them.
constexpr std::uint32_t kIdlePassesBeforeWait = 4096;
// A sleeping engine wakes at least this often to look at the stop flag.
constexpr std::chrono::milliseconds kIdleSleepBound{50};
// Passes between two scans of the lane table besides those the keeper's lane changes trigger
// (lanes_changed): they sample the rings' fill for `status`.
constexpr std::uint32_t kPassesPerScan = 128;
// Scans between two samples of each ring's fill for `status`: loading the client's position
// line more often would make it travel beside the slots it publishes.
constexpr std::uint32_t kScansPerFillSample = 256;

}  // namespace

Expected<std::unique_ptr<ShmServer>> ShmServer::make(Segment& segment, EngineLanes& lanes, TelemetryQueue& telemetry,
                                                     const ShmServerConfig& config) {
  const std::size_t room = segment.series_room().size();
  // The workspace holds the longest series a BACKTEST may run on.
  std::size_t longest = config.live ? room : segment.series().size();
  for (std::uint32_t i = 1; i < segment.series_count(); ++i) longest = std::max(longest, segment.series_at(i).size());
  std::unique_ptr<ShmServer> server(new ShmServer(segment, lanes, telemetry, config, longest));
  server->series_count_ = segment.series_count();
  server->series_[0] = server->close_;
  for (std::uint32_t i = 1; i < server->series_count_; ++i) server->series_[i] = segment.series_at(i);
  // The answer windows: ring capacity is a power of two, so the window is one as well.
  server->window_size_ = std::min(server->capacity_, kMaxAnswerWindow);
  server->window_.resize(std::size_t{server->lane_count_} * server->window_size_);
  server->window_done_.resize(server->window_.size());
  if (config.live) {
    LiveBookLimits live = *config.live;
    live.lanes = segment.lane_count();
    live.capacity_bars = room;
    live.fee = segment.header().fee;
    live.max_catch_up_cost = config.max_frame_cost;
    auto book = LiveBook::make(live);
    if (!book) return std::unexpected(std::move(book.error()));
    server->live_ = std::move(*book);
  }
  return server;
}

ShmServer::ShmServer(Segment& segment, EngineLanes& lanes, TelemetryQueue& telemetry, const ShmServerConfig& config,
                     std::size_t workspace_bars)
    : segment_(segment),
      header_(segment.header()),
      shared_(lanes),
      mode_(config.mode),
      telemetry_(telemetry),
      close_(segment.series()),
      fee_(segment.header().fee),
      room_(segment.series_room()),
      published_(segment.series().size()),
      max_frame_cost_(config.max_frame_cost),
      inline_cost_(config.inline_cost),
      ns_per_tick_(config.ns_per_tick),
      workspace_bars_(workspace_bars),
      workspace_(workspace_bars),
      lane_count_(segment.lane_count()),
      capacity_(segment.ring_capacity()) {}

WorkerPoolConfig ShmServer::workers_config(std::vector<int> cpus) noexcept {
  WorkerPoolConfig config;
  config.cpus = std::move(cpus);
  config.wait = mode_;
  config.workspace_bars = workspace_bars_;
  config.runner = &ShmServer::run_job;
  config.context = this;
  config.ns_per_tick = ns_per_tick_;
  config.engine_word = &shared_.keeper_word;
  return config;
}

void ShmServer::run_job(void* context, const WorkerJob& job, KernelWorkspace& workspace, WorkerDone& done) noexcept {
  const ShmServer& server = *static_cast<const ShmServer*>(context);
  if (job.ticket.kind == JobTicket::Kind::live) {
    // This worker's share of a bar; the serving thread leaves the book alone until it is back.
    server.live_->on_bar_share(job.live_first, job.live_count, job.series());
    done.status = static_cast<std::uint16_t>(Status::ok);
    return;
  }
  // Admitted by the serving thread (route) before it was handed over: only the kernel runs here.
  BacktestResult result;
  const Status status = status_of(run_backtest(job.series(), job.params, server.fee_, workspace, result));
  done.status = static_cast<std::uint16_t>(status);
  done.pnl = status == Status::ok ? result.pnl : 0.0;
  done.trades = status == Status::ok ? result.trades : 0;
}

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
  lane.taken = lane.requests->position();
  lane.published = lane.responses->position();
  lane.call_at_worker = false;
  quarantined_ &= ~(std::uint64_t{1} << index);
  return true;
}

bool ShmServer::lanes_changed() noexcept {
  // acquire: pairs with the release bump in announce_lane_change, so the phase the keeper stored
  // before it is seen by the scan that follows.
  const std::uint32_t now = shared_.keeper_word.load(std::memory_order_acquire);
  if (now == keeper_seen_) return false;
  keeper_seen_ = now;
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
        // A bar out at the workers holds the book: this lane's subscriptions go when it is back.
        if (live_ && bar_at_workers_.active) {
          bar_at_workers_.clear_after |= bit;
        } else if (live_ && !live_broken_) {
          live_->clear_lane(i);
        }
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
  LaneStatus& lane = segment_.lane_status(index);
  relaxed_increment(lane.service_ns[service_bucket(ns)]);
  // relaxed: one writer (this thread); `status` reads it as a snapshot, like the buckets.
  lane.service_ns_sum.store(lane.service_ns_sum.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
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

std::size_t ShmServer::serve_call(std::uint32_t index, Lane& lane, bool& heavy_allowed) noexcept {
  if (lane.call_at_worker) return 0;
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
  const Routed routed = route(index, request);
  if (routed.live_wait) return 0;  // still in the line: asked again once the bar is back
  if (routed.heavy) {
    if (!heavy_allowed || !heavy_may_start()) return 0;  // still in the line: asked again next round
    heavy_allowed = false;
    round_start_ = index + 1;
  }
  if (routed.fan_out || (routed.heavy && pool_ != nullptr)) {
    const JobTicket ticket{JobTicket::Kind::call, index, lane.generation, 0, request.seq, request.opcode, t0};
    if (routed.fan_out) {
      start_bar_at_workers(index, request, ticket);
    } else {
      hand_to_worker(ticket, request, routed);
    }
    lane.call_at_worker = true;
    return 1;
  }
  const Status status = serve_request(index, request, exchange.answer_slot());
  exchange.publish_answer();
  exchange.notify(mode_);
  record_service(index, TscClock::now() - t0);
  count_request(index, status, request.seq);
  if (routed.heavy) between_heavy_frames(index);
  return 1;
}

std::size_t ShmServer::serve_ring(std::uint32_t index, Lane& lane, bool& heavy_allowed) noexcept {
  const std::uint64_t bit = std::uint64_t{1} << index;
  std::size_t served = 0;
  // Bounded per visit so one busy lane cannot starve the others.
  for (std::uint32_t burst = 0; burst < capacity_ && lane.taken - lane.published < window_size_; ++burst) {
    const RequestSlot* shared = lane.requests->try_peek();
    if (shared == nullptr) {
      if (lane.requests->corrupt()) quarantine_lane(index, lane);
      break;
    }
    const RequestSlot request = *shared;  // private copy: the client may still scribble on it
    const Routed routed = route(index, request);
    if (routed.live_wait) break;  // stays in the ring until the bar out at the workers is back
    // An ECHO is answered in a few ns, under the histogram's first bound: no clock read for it.
    const bool timed = request.opcode != static_cast<std::uint16_t>(Opcode::echo);
    const std::uint64_t t0 = timed ? TscClock::now() : 0;
    if (routed.heavy) {
      if (!heavy_allowed || !heavy_may_start()) break;  // stays in the ring until its turn
      heavy_allowed = false;
      round_start_ = index + 1;
    }
    if (routed.fan_out || (routed.heavy && pool_ != nullptr)) {
      const JobTicket ticket{JobTicket::Kind::ring, index, lane.generation, lane.taken, request.seq, request.opcode, t0};
      if (routed.fan_out) {
        start_bar_at_workers(index, request, ticket);
      } else {
        hand_to_worker(ticket, request, routed);
      }
      done_at(index, lane.taken) = 0;
      take_request(lane);
      ++served;
      continue;  // cheap requests behind it are answered now, into the window
    }
    Status status = Status::ok;
    if (lane.taken == lane.published) {
      // Nothing waits before it: straight into the response ring.
      ResponseSlot* out = lane.responses->try_claim();
      if (out == nullptr) {
        // Full: the client is not reading its answers, so serve the others. Or the client wrote
        // an impossible `consumed`: the lane can never move again.
        if (lane.responses->corrupt()) quarantine_lane(index, lane);
        break;
      }
      status = serve_request(index, request, *out);
      lane.responses->commit();
      notify_readable(*lane.responses, mode_);
      ++lane.published;
    } else {
      status = serve_request(index, request, window_at(index, lane.taken));
      done_at(index, lane.taken) = 1;
    }
    take_request(lane);
    if (timed) {
      record_service(index, TscClock::now() - t0);
    } else {
      relaxed_increment(segment_.lane_status(index).service_ns[0]);
    }
    ++served;
    count_request(index, status, request.seq);
    if (routed.heavy) {
      between_heavy_frames(index);
      if ((active_ & bit) == 0) return served;  // its client left, or it was quarantined, meanwhile
    }
  }
  return served;
}

void ShmServer::take_request(Lane& lane) noexcept {
  lane.requests->release();
  // A block-mode client may sleep waiting for request space.
  notify_writable(*lane.requests, mode_);
  ++lane.taken;
}

void ShmServer::flush_answers(std::uint32_t index, Lane& lane) noexcept {
  bool published = false;
  while (lane.published < lane.taken && done_at(index, lane.published) != 0) {
    ResponseSlot* out = lane.responses->try_claim();
    if (out == nullptr) {
      if (lane.responses->corrupt()) quarantine_lane(index, lane);
      break;
    }
    copy_slot_payload(*out, window_at(index, lane.published));
    lane.responses->commit();
    ++lane.published;
    published = true;
  }
  if (published) notify_readable(*lane.responses, mode_);
}

void ShmServer::between_heavy_frames(std::uint32_t index) noexcept {
  if (between_ || pool_ != nullptr) return;
  between_ = true;
  if (lanes_changed()) scan_lanes();
  for (std::uint64_t pending = active_ & ~(std::uint64_t{1} << index); pending != 0; pending &= pending - 1) {
    const auto i = static_cast<std::uint32_t>(std::countr_zero(pending));
    bool heavy_allowed = true;
    (void)serve_call(i, lanes_[i], heavy_allowed);
  }
  between_ = false;
}

bool ShmServer::heavy_may_start() const noexcept { return pool_ == nullptr || pool_->idle_count() != 0; }

ShmServer::Routed ShmServer::route(std::uint32_t index, const RequestSlot& request) const noexcept {
  Routed routed;
  const auto opcode = static_cast<Opcode>(request.opcode);
  if (live_ && (opcode == Opcode::append || opcode == Opcode::subscribe || opcode == Opcode::snapshot)) {
    routed.live_wait = bar_at_workers_.active;
    routed.fan_out = !routed.live_wait && opcode == Opcode::append && fans_out(index, request);
    return routed;
  }
  if (opcode != Opcode::backtest) return routed;
  const std::uint32_t series = request.flags & kSeriesIndexMask;
  // Frames refused for their flags, their series or their windows are answered here, at once.
  if ((request.flags & ~kSeriesIndexMask) != 0 || series >= series_count_) return routed;
  routed.close = series_[series];
  if (admit_backtest(request.params, routed.close.size(), max_frame_cost_) != Status::ok) return routed;
  routed.cost = backtest_cost(request.params, routed.close.size());
  routed.heavy = routed.cost >= inline_cost_;
  return routed;
}

void ShmServer::hand_to_worker(const JobTicket& ticket, const RequestSlot& request, const Routed& routed) noexcept {
  WorkerJob job;
  job.ticket = ticket;
  job.params = request.params;
  job.close = routed.close.data();
  job.bars = routed.close.size();
  job.cost = routed.cost;
  // heavy_may_start() said one is idle; spreading the start point spreads the work over the cores.
  const std::uint32_t worker = pool_->next_idle(next_worker_);
  pool_->hand(worker, job);
  next_worker_ = worker + 1 == pool_->size() ? 0 : worker + 1;
}

std::size_t ShmServer::collect_from_workers() noexcept {
  std::size_t got = pool_->collect([this](const WorkerDone& done) noexcept { finish_job(done); });
  // A worker the keeper declared stalled: its job is answered now, engine_error; what it returns
  // later is dropped.
  got += pool_->abandon_stalled([this](const WorkerJob& job) noexcept {
    WorkerDone failed;
    failed.ticket = job.ticket;
    failed.status = static_cast<std::uint16_t>(Status::engine_error);
    finish_job(failed);
  });
  return got;
}

void ShmServer::finish_job(const WorkerDone& done) noexcept {
  const JobTicket& ticket = done.ticket;
  if (ticket.kind == JobTicket::Kind::live) {
    finish_bar_share(done);  // answers the APPEND through this function once the bar is done
    return;
  }
  Lane& lane = lanes_[ticket.lane];
  // The lane's client left, or was quarantined, since: the answer is nobody's.
  if ((active_ & (std::uint64_t{1} << ticket.lane)) == 0 || lane.generation != ticket.generation) return;
  ResponseSlot* answer = nullptr;
  if (ticket.kind == JobTicket::Kind::call) {
    lane.call_at_worker = false;
    answer = &lane.exchange->answer_slot();
  } else {
    answer = &window_at(ticket.lane, ticket.position);
  }
  answer->seq = ticket.seq;
  answer->opcode = ticket.opcode;
  answer->status = done.status;
  answer->pnl = done.pnl;
  answer->trades = done.trades;
  for (std::int64_t& word : answer->extra) word = 0;
  if (ticket.kind == JobTicket::Kind::call) {
    lane.exchange->publish_answer();
    lane.exchange->notify(mode_);
  } else {
    done_at(ticket.lane, ticket.position) = 1;
    flush_answers(ticket.lane, lane);
  }
  record_service(ticket.lane, TscClock::now() - ticket.started);
  count_request(ticket.lane, static_cast<Status>(done.status), ticket.seq);
}

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
    return answer_status(response, request, Status::reserved_bits_set);
  if (series >= series_count_) return answer_status(response, request, Status::no_such_series);
  RequestSlot on_series = request;
  on_series.flags = 0;
  return dispatch_request(on_series, series_[series], fee_, workspace_, response, {lane.view.bulk, lane.view.bulk_bytes},
                          max_frame_cost_);
}



std::size_t ShmServer::serve_round(bool& started_heavy) noexcept {
  std::size_t served = 0;
  const std::uint32_t start = round_start_ >= lane_count_ ? 0 : round_start_;
  // The active lanes from `start` up, then those below it: each visited once.
  const std::uint64_t from_start = active_ & (~std::uint64_t{0} << start);
  for (const std::uint64_t part : {from_start, active_ & ~from_start}) {
    for (std::uint64_t pending = part; pending != 0; pending &= pending - 1) {
      const auto i = static_cast<std::uint32_t>(std::countr_zero(pending));
      const std::uint64_t bit = std::uint64_t{1} << i;
      if ((active_ & bit) == 0) continue;  // let go of during this round
      Lane& lane = lanes_[i];
      bool heavy_allowed = true;  // one heavy start per lane per round
      served += serve_call(i, lane, heavy_allowed);
      if ((active_ & bit) != 0) served += serve_ring(i, lane, heavy_allowed);
      if ((active_ & bit) != 0 && lane.published != lane.taken) flush_answers(i, lane);
      started_heavy |= !heavy_allowed;
    }
  }
  return served;
}

std::size_t ShmServer::poll_once() noexcept {
  if (lanes_changed() || ++passes_since_scan_ >= kPassesPerScan) scan_lanes();
  std::size_t served = pool_ != nullptr ? collect_from_workers() : 0;
  // A bar's shares go before any new heavy request, so an APPEND waits for at most one combo.
  if (bar_at_workers_.active) hand_bar_shares();
  // Rounds while heavy work was started and workers are still free, so that lanes with more heavy
  // requests get them, one per lane per round; without workers, one round per pass.
  const std::uint32_t rounds = pool_ != nullptr ? pool_->size() + 1 : 1;
  for (std::uint32_t round = 0; round < rounds; ++round) {
    bool started_heavy = false;
    served += serve_round(started_heavy);
    if (!started_heavy || !heavy_may_start() || pool_ == nullptr) break;
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
    if ((!lane.call_at_worker && lane.exchange->readable()) || lane.requests->readable()) return true;
  }
  return pool_ != nullptr && pool_->answers_ready();
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
    // A backoff engine keeps polling while workers compute (a nap would leave a worker idle until
    // it ended), yielding between passes so that it never keeps a thread of a small host off its
    // cpu. A block-mode engine sleeps; a worker's answer wakes it.
    if (mode_ == WaitMode::backoff && pool_ != nullptr && pool_->busy_count() != 0) {
      detail::yield_thread();
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
