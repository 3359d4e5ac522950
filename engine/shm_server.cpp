#include "engine/shm_server.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>

#include "common/tsc_clock.hpp"
#include "engine/dispatch.hpp"

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

// The longest series a BACKTEST may run on: the main one's whole room when live, else the
// longest of the table.
std::size_t longest_series(Segment& segment, bool live) noexcept {
  std::size_t longest = live ? segment.series_room().size() : segment.series().size();
  for (std::uint32_t i = 1; i < segment.series_count(); ++i) longest = std::max(longest, segment.series_at(i).size());
  return longest;
}

// A TRADES page's room: as many trades as a lane's bulk region holds.
std::uint64_t trade_page_trades(Segment& segment) noexcept { return segment.header().lane_bulk_bytes / sizeof(ipcfloor_trade); }

}  // namespace

Expected<std::unique_ptr<ShmServer>> ShmServer::make(Segment& segment, EngineLanes& lanes, const StrategySet& strategies,
                                                     TelemetryQueue& telemetry, const ShmServerConfig& config) {
  const std::uint64_t workspace = strategies.workspace_bytes(longest_series(segment, config.live.has_value()));
  std::unique_ptr<ShmServer> server(new ShmServer(segment, lanes, strategies, telemetry, config, workspace));
  Bars series[kMaxSeries];
  for (std::uint32_t i = 0; i < segment.series_count(); ++i) series[i] = segment.bars_at(i);
  // The main series as published: live, the preloaded bars and any a journal replayed at start.
  // relaxed: the keeper published them before the serving thread started.
  if (config.live)
    series[0] = published_bars(series[0], segment.series_room(),
                               segment.header().bars_published.load(std::memory_order_relaxed));
  server->admission_.set_series(std::span<const Bars>(series, segment.series_count()));
  if (config.live) {
    LiveBookLimits limits = *config.live;
    limits.max_catch_up_cost = config.max_frame_cost;
    auto live = LiveServer::make(segment, server->lanes_, server->admission_, server->journal_, limits,
                                 config.inline_cost, config.mode);
    if (!live) return std::unexpected(std::move(live.error()));
    server->live_ = std::move(*live);
  }
  return server;
}

ShmServer::ShmServer(Segment& segment, EngineLanes& lanes, const StrategySet& strategies, TelemetryQueue& telemetry,
                     const ShmServerConfig& config, std::uint64_t workspace_bytes)
    : segment_(segment),
      mode_(config.mode),
      counters_(segment, telemetry, config.ns_per_tick),
      lanes_(segment, lanes, counters_, config.mode),
      admission_(strategies, AdmissionConfig{config.max_frame_cost, config.inline_cost, config.live.has_value(),
                                             segment.header().fee, segment.header().bars_per_year}),
      window_(segment.lane_count(), segment.ring_capacity()),
      workspace_(workspace_bytes, trade_page_trades(segment)),
      shared_(lanes) {}

void ShmServer::scan_lanes() noexcept {
  passes_since_scan_ = 0;
  const std::uint64_t let_go = lanes_.scan();
  if (let_go != 0 && live_) live_->lanes_left(let_go);
  // Against the lanes the client tables were made for: a lane quarantined between two scans
  // leaves the served set without a scan.
  if (lanes_.active() == clients_of_) return;
  clients_of_ = lanes_.active();
  // Which process holds each lane: the keeper recorded it before it activated the lane.
  for (std::uint64_t& lanes : client_lanes_) lanes = 0;
  for (std::uint64_t held = lanes_.active(); held != 0; held &= held - 1) {
    const auto i = static_cast<std::uint32_t>(std::countr_zero(held));
    const std::int32_t pid = segment_.lane_status(i).owner_pid;
    client_of_[i] = i;
    for (std::uint64_t lower = lanes_.active() & ((std::uint64_t{1} << i) - 1); lower != 0; lower &= lower - 1) {
      const auto j = static_cast<std::uint32_t>(std::countr_zero(lower));
      if (segment_.lane_status(j).owner_pid == pid) {
        client_of_[i] = j;
        break;
      }
    }
    client_lanes_[client_of_[i]] |= std::uint64_t{1} << i;
  }
}

void ShmServer::start_turns() noexcept {
  ++turns_round_;
  for (std::uint64_t held = lanes_.active(); held != 0; held &= held - 1) {
    const auto i = static_cast<std::uint32_t>(std::countr_zero(held));
    if (client_of_[i] != i) continue;
    turns_left_[i] = client_lanes_[i] & lanes_.active();
    turn_at_[i] = last_heavy_[i];
    turns_of_round_[i] = turns_round_;
  }
}

std::uint32_t ShmServer::take_turn(std::uint32_t slot) noexcept {
  const std::uint32_t client = client_of_[slot];
  const std::uint64_t left = turns_of_round_[client] == turns_round_ ? turns_left_[client] : 0;
  if (left == 0) return slot;  // a client the round began without (a scan since): in its own place
  // The first lane left after the one visited last, wrapping.
  const std::uint32_t after = turn_at_[client] + 1;
  const std::uint64_t above = after >= 64 ? 0 : left & (~std::uint64_t{0} << after);
  const auto lane = static_cast<std::uint32_t>(std::countr_zero(above != 0 ? above : left));
  turns_left_[client] = left & ~(std::uint64_t{1} << lane);
  turn_at_[client] = lane;
  return lane;
}

ShmServer::Plan ShmServer::plan(std::uint32_t index, const RequestSlot& request, const Verdict& verdict) noexcept {
  if (verdict.route == Verdict::Route::live) {
    switch (live_->route(index, request, workers_)) {
      case LiveServer::Route::wait: return Plan::wait;  // stays where it is until the bar is back
      case LiveServer::Route::fan_out: return Plan::fan_out;
      case LiveServer::Route::journal: return Plan::journal;
      case LiveServer::Route::here: break;
    }
    return Plan::here;
  }
  if (verdict.route != Verdict::Route::backtest || !verdict.heavy) return Plan::here;
  const std::uint64_t client = std::uint64_t{1} << client_of_[index];
  // Its client's heavy start of this round is used, or no worker is free: asked again later. When
  // every worker is stalled (the host does not run them), it is computed here, as a job taken back
  // from one is: waiting would wait for the host.
  const bool stalled = workers_.all_stalled();
  if ((heavy_clients_ & client) != 0 || (workers_.any() && !workers_.idle() && !stalled)) return Plan::wait;
  heavy_clients_ |= client;
  last_heavy_[client_of_[index]] = index;
  round_start_ = next_other_client(index);
  return workers_.any() && !stalled ? Plan::worker : Plan::here;
}

std::uint32_t ShmServer::next_other_client(std::uint32_t index) const noexcept {
  // The next served lane, wrapping, of a client other than lane `index`'s: the next round starts
  // there, so one client's other lanes wait behind every other client's (fair per client, not
  // per lane). None: the lane after `index`.
  const std::uint32_t count = lanes_.count();
  const std::uint64_t active = lanes_.active();
  for (std::uint32_t step = 1; step < count; ++step) {
    const std::uint32_t lane = (index + step) % count;
    if (((active >> lane) & 1U) != 0 && client_of_[lane] != client_of_[index]) return lane;
  }
  return index + 1;
}

void ShmServer::start_elsewhere(Plan plan, const JobTicket& ticket, const RequestSlot& request,
                                const Verdict& verdict) noexcept {
  if (plan == Plan::fan_out) {
    live_->start_bar(ticket.lane, request, ticket, workers_);
  } else if (plan == Plan::journal) {
    live_->journal_append(ticket.lane, request, ticket);
  } else {
    workers_.hand_compute(ticket, request, verdict);
  }
}

Status ShmServer::answer(std::uint32_t index, const RequestSlot& request, const Verdict& verdict,
                         ResponseSlot& response, AnswerRecord& record) noexcept {
  if (verdict.route == Verdict::Route::live) return live_->serve(index, request, response);
  const ServedLane& lane = lanes_[index];
  if (verdict.route != Verdict::Route::backtest)
    return answer_here(verdict, request, workspace_, {lane.view.bulk, lane.view.bulk_bytes}, response, record);
  // relaxed: published by the release store of `since` (ServingWatch).
  watch_.cost.store(verdict.cost, std::memory_order_relaxed);
  watch_.strategy.store(verdict.strategy->index(), std::memory_order_relaxed);
  // release: publishes cost and strategy; pairs with the acquire load in ShmEngine::watch_serving.
  watch_.since.store(TscClock::now() | 1, std::memory_order_release);
  const Status status = answer_here(verdict, request, workspace_, {lane.view.bulk, lane.view.bulk_bytes}, response, record);
  // relaxed: the keeper only compares it with zero; a late clear shows one heartbeat's age at most.
  watch_.since.store(0, std::memory_order_relaxed);
  return status;
}

std::size_t ShmServer::serve_call(std::uint32_t index) noexcept {
  ServedLane& lane = lanes_[index];
  if (lane.call_at_worker) return 0;
  ExchangeServer& exchange = *lane.exchange;
  switch (exchange.peek()) {
    case ExchangePoll::idle: return 0;
    case ExchangePoll::corrupt: lanes_.quarantine(index); return 0;
    case ExchangePoll::request: break;
  }
  // An ECHO is its own answer: the 48 bytes are already in the line, so the round trip costs the
  // line's two transfers and one status store, as the bare cache-line bounce does.
  if (exchange.opcode_now() == static_cast<std::uint16_t>(Opcode::echo) && exchange.flags_now() == 0) {
    exchange.answer_in_place(static_cast<std::uint16_t>(Status::ok));
    exchange.notify(mode_);
    counters_.request(index, Status::ok, 0);
    counters_.service_instant(index);
    return 1;
  }
  const std::uint64_t t0 = TscClock::now();
  // The engine's one copy of the request (the client may scribble on the line); the answer is
  // written into the line itself, which is the engine's until publish_answer().
  const RequestSlot request = exchange.copy_request();
  // The options line is copied only when the opcode says it holds options: a plain call moves
  // the exchange line alone.
  const Verdict verdict = has_options(request.opcode) ? admission_.admit(request, lane.view.call_extras->options)
                                                      : admission_.admit(request);
  const Plan where = plan(index, request, verdict);
  if (where == Plan::wait) return 0;  // still in the line: asked again next round
  if (where != Plan::here) {
    start_elsewhere(where, {JobTicket::Kind::call, index, lane.generation, 0, request.seq, request.opcode, t0,
                            verdict.first_trade},
                    request, verdict);
    lane.call_at_worker = true;
    return 1;
  }
  const Status status = answer(index, request, verdict, exchange.answer_slot(), lane.view.call_extras->record);
  exchange.publish_answer();
  exchange.notify(mode_);
  counters_.service(index, TscClock::now() - t0);
  counters_.request(index, status, request.seq);
  if (verdict.heavy) between_heavy_frames(index);
  return 1;
}

std::size_t ShmServer::serve_ring(std::uint32_t index) noexcept {
  ServedLane& lane = lanes_[index];
  std::size_t served = 0;
  // Bounded per visit so one busy lane cannot starve the others.
  for (std::uint32_t burst = 0; burst < window_.size() && lane.taken - lane.published < window_.size(); ++burst) {
    const RequestSlot* shared = lane.requests->try_peek();
    if (shared == nullptr) {
      if (lane.requests->corrupt()) lanes_.quarantine(index);
      break;
    }
    const RequestSlot request = *shared;  // the engine's one copy: the client may still scribble on the slot
    const Verdict verdict =
        has_options(request.opcode)
            ? admission_.admit(request, lane.view.request_options[lane.taken & (lane.requests->capacity() - 1)])
            : admission_.admit(request);
    const Plan where = plan(index, request, verdict);
    if (where == Plan::wait) break;  // stays in the ring until its turn
    // An ECHO is answered in a few ns, under the histogram's first bound: no clock read for it.
    const bool timed = verdict.route != Verdict::Route::echo;
    const std::uint64_t t0 = timed ? TscClock::now() : 0;
    if (where != Plan::here) {
      start_elsewhere(where,
                      {JobTicket::Kind::ring, index, lane.generation, lane.taken, request.seq, request.opcode, t0,
                       verdict.first_trade},
                      request, verdict);
      window_.set_ready(index, lane.taken, false);
    } else {
      Status status = Status::ok;
      if (lane.taken == lane.published) {
        // Nothing waits before it: straight into the response ring.
        ResponseSlot* out = lane.responses->try_claim();
        if (out == nullptr) {
          // Full: the client is not reading its answers, so serve the others. Or the client wrote
          // an impossible `consumed`: the lane can never move again.
          if (lane.responses->corrupt()) lanes_.quarantine(index);
          break;
        }
        status = answer(index, request, verdict, *out, lane.view.answer_records[out - lane.view.response_slots]);
        lane.responses->commit();
        notify_readable(*lane.responses, mode_);
        ++lane.published;
      } else {
        ResponseSlot& later = window_.at(index, lane.taken);
        status = answer(index, request, verdict, later, window_.record_at(index, lane.taken));
        window_.set_with_record(index, lane.taken, carries_record(later));
        window_.set_ready(index, lane.taken, true);
      }
      if (timed) {
        counters_.service(index, TscClock::now() - t0);
      } else {
        counters_.service_instant(index);
      }
      counters_.request(index, status, request.seq);
    }
    lane.requests->release();
    notify_writable(*lane.requests, mode_);  // a block-mode client may sleep waiting for request space
    ++lane.taken;
    ++served;
    if (where == Plan::here && verdict.heavy) {
      between_heavy_frames(index);
      if (!lanes_.served(index)) return served;  // its client left, or it was quarantined, meanwhile
    }
  }
  return served;
}

void ShmServer::flush_answers(std::uint32_t index) noexcept {
  ServedLane& lane = lanes_[index];
  bool published = false;
  while (lane.published < lane.taken && window_.ready(index, lane.published)) {
    ResponseSlot* out = lane.responses->try_claim();
    if (out == nullptr) {
      if (lane.responses->corrupt()) lanes_.quarantine(index);
      break;
    }
    copy_slot_payload(*out, window_.at(index, lane.published));
    if (window_.with_record(index, lane.published))
      lane.view.answer_records[out - lane.view.response_slots] = window_.record_at(index, lane.published);
    lane.responses->commit();
    ++lane.published;
    published = true;
  }
  if (published) notify_readable(*lane.responses, mode_);
}

void ShmServer::between_heavy_frames(std::uint32_t index) noexcept {
  if (between_ || workers_.any()) return;
  between_ = true;
  if (lanes_.lanes_changed()) scan_lanes();
  for (std::uint64_t pending = lanes_.active() & ~(std::uint64_t{1} << index); pending != 0; pending &= pending - 1)
    (void)serve_call(static_cast<std::uint32_t>(std::countr_zero(pending)));
  between_ = false;
}

std::size_t ShmServer::collect_from_workers() noexcept {
  std::size_t got = workers_.collect([this](const WorkerDone& done) noexcept { finish(done); });
  got += workers_.reclaim_stalled([this](const WorkerJob& job) noexcept { return take_back(job); });
  return got;
}

bool ShmServer::take_back(const WorkerJob& job) noexcept {
  // A live share steps its subscriptions' state in place: it cannot be computed twice. The bar
  // waits for its worker (status shows it); nothing is lost or reordered.
  if (job.ticket.kind == JobTicket::Kind::live) {
    live_->share_stalled();
    return false;
  }
  relaxed_increment(segment_.header().jobs_reclaimed);
  if (workers_.idle()) {
    workers_.hand_again(job);
    return true;
  }
  // No other worker is free: the combo is computed here, as without workers (one combo, bounded
  // by --max-frame-cost), so a busy host never turns a valid request into an error.
  WorkerDone done;
  // relaxed, release: as in answer().
  watch_.cost.store(job.cost, std::memory_order_relaxed);
  watch_.strategy.store(job.compute.strategy != nullptr ? job.compute.strategy->index() : 0, std::memory_order_relaxed);
  watch_.since.store(TscClock::now() | 1, std::memory_order_release);
  job.runner->run(job, workspace_, done);
  watch_.since.store(0, std::memory_order_relaxed);  // relaxed: as in answer()
  done.ticket = job.ticket;
  finish(done);
  return true;
}

void ShmServer::finish(const WorkerDone& done) noexcept {
  const JobTicket& ticket = done.ticket;
  if (ticket.kind == JobTicket::Kind::live) {
    WorkerDone answer;
    if (live_->finish_share(done, answer)) finish(answer);  // the APPEND's answer, once every share is back
    return;
  }
  ServedLane& lane = lanes_[ticket.lane];
  // The lane's client left, or was quarantined, since: the answer is nobody's.
  if (!lanes_.served(ticket.lane) || lane.generation != ticket.generation) return;
  const bool call = ticket.kind == JobTicket::Kind::call;
  ResponseSlot* answer = call ? &lane.exchange->answer_slot() : &window_.at(ticket.lane, ticket.position);
  AnswerRecord& record = call ? lane.view.call_extras->record : window_.record_at(ticket.lane, ticket.position);
  answer->seq = ticket.seq;
  answer->opcode = ticket.opcode;
  write_computed(done.result, ticket.first_trade, *answer, record);
  // A TRADES page computed elsewhere: into the lane's bulk region, which only this thread and the
  // lane's client touch (a bounded copy: at most the region).
  if (done.result.page_trades != 0 && done.page != nullptr)
    std::memcpy(lane.view.bulk, done.page, done.result.page_trades * sizeof(ipcfloor_trade));
  if (!call) window_.set_with_record(ticket.lane, ticket.position, done.result.has_record);
  if (call) {
    lane.call_at_worker = false;
    lane.exchange->publish_answer();
    lane.exchange->notify(mode_);
  } else {
    window_.set_ready(ticket.lane, ticket.position, true);
    flush_answers(ticket.lane);
  }
  counters_.service(ticket.lane, TscClock::now() - ticket.started);
  counters_.request(ticket.lane, done.result.status, ticket.seq);
}

void ShmServer::attach_journal(JournalWriter* writer) {
  journal_ = JournalDispatch(writer);  // in place: the live server holds a reference to it
}

std::size_t ShmServer::collect_from_journal() noexcept {
  std::size_t got = 0;
  JournalOutcome outcome = JournalOutcome::pending;
  JournalDispatch::Pending pending;
  // One bar at a time: while one is out at the workers, the next durable one waits for it.
  while (!live_->bar_out() && journal_.next(outcome, pending)) {
    ++got;
    WorkerDone answer;
    if (outcome == JournalOutcome::durable) {
      if (!live_->apply_journaled(pending, workers_, answer)) continue;  // answered once its shares are back
    } else {
      // Never published: the APPEND is answered with why, and the bar is not in the series.
      answer.ticket = pending.ticket;
      answer.result.status = outcome == JournalOutcome::full ? Status::journal_full : Status::journal_failed;
      answer.result.pnl = pending.close;
      // relaxed: this thread alone stores it.
      answer.result.trades =
          static_cast<std::int64_t>(segment_.header().bars_published.load(std::memory_order_relaxed));
    }
    finish(answer);
  }
  return got;
}

std::size_t ShmServer::serve_round(bool& started_heavy) noexcept {
  std::size_t served = 0;
  heavy_clients_ = 0;
  const std::uint32_t start = round_start_ >= lanes_.count() ? 0 : round_start_;
  // The served lanes from `start` up, then those below it: each place visited once, by its
  // client's lane in turn.
  const std::uint64_t from_start = lanes_.active() & (~std::uint64_t{0} << start);
  start_turns();
  for (const std::uint64_t part : {from_start, lanes_.active() & ~from_start}) {
    for (std::uint64_t pending = part; pending != 0; pending &= pending - 1) {
      const auto i = take_turn(static_cast<std::uint32_t>(std::countr_zero(pending)));
      if (!lanes_.served(i)) continue;  // let go of during this round
      served += serve_call(i);
      if (lanes_.served(i)) served += serve_ring(i);
      if (lanes_.served(i) && lanes_[i].published != lanes_[i].taken) flush_answers(i);
    }
  }
  started_heavy = heavy_clients_ != 0;
  return served;
}

std::size_t ShmServer::poll_once() noexcept {
  if (lanes_.lanes_changed() || ++passes_since_scan_ >= kPassesPerScan) scan_lanes();
  std::size_t served = workers_.any() ? collect_from_workers() : 0;
  if (journal_.any()) served += collect_from_journal();
  // A bar's shares go before any new heavy request, so an APPEND waits for at most one combo.
  if (live_ && live_->bar_out()) live_->hand_shares(workers_);
  // Rounds while heavy work was started and workers are still free, so that clients with more
  // heavy requests get them, one per client per round; without workers, one round per pass.
  const std::uint32_t rounds = workers_.size() + 1;
  for (std::uint32_t round = 0; round < rounds; ++round) {
    bool started_heavy = false;
    served += serve_round(started_heavy);
    if (!started_heavy || !workers_.idle()) break;
  }
  if (served != 0) counters_.publish_requests();
  return served;
}

bool ShmServer::has_work() noexcept {
  return lanes_.have_requests() || workers_.answers_ready() || journal_.ready();
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
    if (mode_ == WaitMode::backoff && (workers_.busy() || journal_.in_flight() != 0)) {
      detail::yield_thread();
      continue;
    }
    scan_lanes();  // sleep on the doorbells of the lanes as they are now
    auto ready = [this, &stop]() noexcept {
      return has_work() || stop.load(std::memory_order_relaxed);  // relaxed: plain flag
    };
    const auto deadline = WaitClock::now() + kIdleSleepBound;
    if (mode_ == WaitMode::block) {
      const std::size_t count = lanes_.doorbells(doorbells);
      (void)doorbells_.wait(std::span<DoorbellLine* const>(doorbells, count), shared_.keeper_word, ready, deadline);
    } else {
      (void)wait_with_backoff(ready, deadline);
    }
  }
}

}  // namespace ipcfloor
