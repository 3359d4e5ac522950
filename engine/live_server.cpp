#include "engine/live_server.hpp"

#include <algorithm>
#include <bit>
#include <cmath>

#include "engine/dispatch.hpp"

namespace ipcfloor {
namespace {


// The answer of an APPEND whose bar is in and stepped: its close, and the bars the series holds.
WorkerDone appended(const JobTicket& ticket, double close, std::uint64_t bars) noexcept {
  WorkerDone answer;
  answer.ticket = ticket;
  answer.result.status = Status::ok;
  answer.result.pnl = close;
  answer.result.trades = static_cast<std::int64_t>(bars);
  return answer;
}

// True when stepping `book` on a new bar is dear enough for the workers.
bool dear(const WorkerDispatch& workers, const LiveBook& book, std::uint64_t inline_cost) noexcept {
  return workers.any() && book.total() != 0 && book.cost_per_bar() >= inline_cost;
}

}  // namespace

Bars published_bars(const Bars& preloaded, std::span<const double> room, std::uint64_t published) noexcept {
  const std::span<const double> close(room.data(), published);
  if (published > preloaded.size()) return Bars(close);
  Bars bars = preloaded.first(published);
  bars.close = close;
  return bars;
}

LiveServer::LiveServer(Segment& segment, ServingLanes& lanes, Admission& admission, JournalDispatch& journal,
                       std::uint64_t inline_cost, WaitMode mode) noexcept
    : segment_(segment),
      header_(segment.header()),
      lanes_(lanes),
      admission_(admission),
      journal_(journal),
      room_(segment.series_room()),
      preloaded_(segment.bars_at(0)),
      // The preloaded bars and those a journal replayed at start.
      published_(segment.header().bars_published.load(std::memory_order_relaxed)),
      inline_cost_(inline_cost),
      mode_(mode),
      fee_(segment.header().fee) {}

Expected<std::unique_ptr<LiveServer>> LiveServer::make(Segment& segment, ServingLanes& lanes, Admission& admission,
                                                       JournalDispatch& journal, LiveBookLimits limits,
                                                       std::uint64_t inline_cost, WaitMode mode) {
  std::unique_ptr<LiveServer> server(new LiveServer(segment, lanes, admission, journal, inline_cost, mode));
  limits.lanes = segment.lane_count();
  limits.capacity_bars = segment.series_room().size();
  limits.fee = segment.header().fee;
  auto book = LiveBook::make(limits);
  if (!book) return std::unexpected(std::move(book.error()));
  server->book_ = std::move(*book);
  return server;
}

Status LiveServer::check_append(std::uint32_t index, const RequestSlot& request) const noexcept {
  const LiveAppend bar = LiveAppend::from_params(request.params);
  if ((request.flags & ~kAppendPaced) != 0 || bar.unused[0] != 0 || bar.unused[1] != 0 || bar.unused[2] != 0 ||
      bar.unused[3] != 0)
    return Status::reserved_bits_set;
  // One writer: the first lane that appends keeps the series until its client leaves.
  // An APPEND carries a close alone: a series with other columns (open, high, low, volume) would
  // get bars without them, so it never grows (docs/PROTOCOL.md, APPEND).
  if (preloaded_.columns() != IPCFLOOR_COLUMN_CLOSE) return Status::missing_column;
  if (writer_lane_ >= 0 && writer_lane_ != static_cast<int>(index)) return Status::not_the_writer;
  if (!std::isfinite(bar.close) || !(bar.close > 0.0)) return Status::bad_price;
  // The bars in flight at the journal come first: they are published once durable.
  const std::uint64_t in_flight = journal_.in_flight();
  if (published_ + in_flight >= room_.size()) return Status::capacity_full;
  // A paced APPEND needs room for its own bar's signals and for those of the bars ahead of it at
  // the journal, which are pushed once they are durable.
  if ((request.flags & kAppendPaced) != 0 && lane_behind(in_flight + 1) >= 0) return Status::subscribers_behind;
  return Status::ok;
}

int LiveServer::lane_behind(std::uint64_t bars) const noexcept {
  for (std::uint32_t lane = 0; lane < lanes_.count(); ++lane) {
    const std::uint64_t wanted = static_cast<std::uint64_t>(book_->count(lane)) * bars;
    if (wanted == 0 || !lanes_[lane].signals || !lanes_.served(lane)) continue;
    const RingProducer<SignalSlot>& ring = *lanes_[lane].signals;
    // A ring whose consumer position is impossible is the client's own doing: its next signal
    // quarantines the lane, which then holds nobody back.
    if (ring.corrupt()) continue;
    if (ring.capacity() - ring.size_approx() < wanted) return static_cast<int>(lane);
  }
  return -1;
}

LiveServer::Route LiveServer::route(std::uint32_t index, const RequestSlot& request,
                                    const WorkerDispatch& workers) const noexcept {
  if (bar_.active) return Route::wait;
  if (request.opcode != static_cast<std::uint16_t>(Opcode::append)) return Route::here;
  const bool journaled = journal_.any();
  // A refusal being rewound changes what comes after the bars published: judged once it is back.
  if (journaled && journal_.blocked()) return Route::wait;
  if (check_append(index, request) != Status::ok) return Route::here;  // refused here, at once
  if (journaled) return Route::journal;
  return dear(workers, *book_, inline_cost_) ? Route::fan_out : Route::here;
}

void LiveServer::take_bar(double close) noexcept {
  room_[published_] = close;
  ++published_;
  // release: the bar is written before the count that covers it; pairs with the acquire load in
  // Attachment::published_series.
  header_.bars_published.store(published_, std::memory_order_release);
  admission_.set_main_series(published_bars(preloaded_, room_, published_));
}

void LiveServer::journal_append(std::uint32_t index, const RequestSlot& request, const JobTicket& ticket) noexcept {
  const LiveAppend bar = LiveAppend::from_params(request.params);
  writer_lane_ = static_cast<int>(index);
  journal_.submit(ticket, published_ + journal_.in_flight(), bar.close, bar.tick);
}

bool LiveServer::apply_journaled(const JournalDispatch::Pending& pending, WorkerDispatch& workers,
                                 WorkerDone& answer) noexcept {
  take_bar(pending.close);
  if (dear(workers, *book_, inline_cost_)) {
    fan_out(pending.close, pending.tick, pending.ticket, workers);
    return false;
  }
  publish_bar(pending.tick, /*evaluate=*/true);
  answer = appended(pending.ticket, pending.close, published_);
  return true;
}

Status LiveServer::serve(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept {
  switch (static_cast<Opcode>(request.opcode)) {
    case Opcode::append: return append(index, request, response);
    case Opcode::subscribe: return subscribe(index, request, response);
    case Opcode::snapshot: return snapshot(index, request, response);
    default: break;
  }
  return answer_status(response, request, Status::unknown_opcode);
}

void LiveServer::publish_bar(std::uint64_t tick, bool evaluate) noexcept {
  const auto publish = [this, tick](std::uint32_t lane, std::uint32_t id, const ipcfloor_strategy_bar& state) noexcept {
    push_signal(lane, id, state, tick, 0);
  };
  const auto lane_done = [this](std::uint32_t lane) noexcept {
    if (lanes_[lane].signals) notify_readable(*lanes_[lane].signals, mode_);
  };
  const Bars history = published_bars(preloaded_, room_, published_);
  if (evaluate) {
    book_->on_bar(history, publish, lane_done);
  } else {
    book_->publish_bar(publish, lane_done);
  }
  // relaxed: counters only this thread writes; readers tolerate staleness.
  header_.signals_sent.store(signals_sent_, std::memory_order_relaxed);
  header_.signals_dropped.store(signals_dropped_, std::memory_order_relaxed);
}

Status LiveServer::append(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept {
  const Status checked = check_append(index, request);
  if (checked == Status::subscribers_behind) {
    // Which lane holds the replay back, and how far: for the writer's note.
    answer_status(response, request, checked);
    const auto lane = static_cast<std::uint32_t>(lane_behind(journal_.in_flight() + 1));
    response.extra[0] = lane;
    response.extra[1] = static_cast<std::int64_t>(lanes_[lane].signals->size_approx());
    response.extra[2] = book_->count(lane);
    response.trades = static_cast<std::int64_t>(published_);
    return checked;
  }
  if (checked != Status::ok) {
    answer_status(response, request, checked);
    // The first column the APPEND cannot carry, and the series' bars: for the client's sentence.
    if (checked == Status::missing_column) {
      response.extra[0] = column_bit(first_missing(preloaded_.columns(), IPCFLOOR_COLUMN_CLOSE));
      response.extra[1] = static_cast<std::int64_t>(published_);
    }
    return checked;
  }
  // A journaled engine routes every admitted APPEND to its journal (route()): never here.
  if (journal_.any()) return answer_status(response, request, Status::engine_error);
  const LiveAppend bar = LiveAppend::from_params(request.params);
  writer_lane_ = static_cast<int>(index);
  take_bar(bar.close);
  publish_bar(bar.tick, /*evaluate=*/true);
  answer_status(response, request, Status::ok);
  response.pnl = bar.close;
  response.trades = static_cast<std::int64_t>(published_);
  return Status::ok;
}

void LiveServer::start_bar(std::uint32_t index, const RequestSlot& request, const JobTicket& ticket,
                           WorkerDispatch& workers) noexcept {
  const LiveAppend bar = LiveAppend::from_params(request.params);
  writer_lane_ = static_cast<int>(index);
  take_bar(bar.close);
  fan_out(bar.close, bar.tick, ticket, workers);
}

void LiveServer::fan_out(double close, std::uint64_t tick, const JobTicket& ticket, WorkerDispatch& workers) noexcept {
  BarOut& bar = bar_;
  bar.close = close;
  bar.tick = tick;
  bar.answer = ticket;
  bar.total = book_->total();
  // As many shares as the work is worth (each at least --inline-cost units) and workers there are.
  const std::uint64_t worth = std::max<std::uint64_t>(1, book_->cost_per_bar() / std::max<std::uint64_t>(1, inline_cost_));
  bar.shares = static_cast<std::uint32_t>(std::min<std::uint64_t>({worth, workers.size(), bar.total}));
  bar.handed = 0;
  bar.back = 0;
  bar.active = true;
  hand_shares(workers);
}

void LiveServer::hand_shares(WorkerDispatch& workers) noexcept {
  BarOut& bar = bar_;
  const Bars history = published_bars(preloaded_, room_, published_);
  while (bar.active && bar.handed < bar.shares && workers.idle()) {
    // Share k covers [total * k / shares, total * (k + 1) / shares) of the book's order.
    const auto bound = [&bar](std::uint32_t k) {
      return static_cast<std::uint32_t>(std::uint64_t{bar.total} * k / bar.shares);
    };
    JobTicket ticket = bar.answer;
    ticket.kind = JobTicket::Kind::live;
    const std::uint32_t first = bound(bar.handed);
    workers.hand_share(ticket, *this, history, first, bound(bar.handed + 1) - first,
                       book_->cost_per_bar() / bar.shares + 1);
    ++bar.handed;
  }
}

void LiveServer::run(const WorkerJob& job, KernelWorkspace&, WorkerDone& done) const noexcept {
  // This worker's share of the bar; the serving thread leaves the book alone until it is back.
  book_->on_bar_share(job.live_first, job.live_count, job.series());
  done.result.status = Status::ok;
}

void LiveServer::share_stalled() noexcept {
  // relaxed: for people (status); the serving thread alone writes it.
  header_.live_bar_waiting.store(1, std::memory_order_relaxed);
}

bool LiveServer::finish_share(const WorkerDone& done, WorkerDone& answer) noexcept {
  BarOut& bar = bar_;
  (void)done;  // a share always completes: it is never taken back (see the header)
  if (++bar.back < bar.shares) return false;
  bar.active = false;
  header_.live_bar_waiting.store(0, std::memory_order_relaxed);  // relaxed: as in share_stalled
  // Lanes whose clients left while the bar was out: their subscriptions go now, unpublished.
  for (std::uint64_t pending = bar.clear_after; pending != 0; pending &= pending - 1)
    book_->clear_lane(static_cast<std::uint32_t>(std::countr_zero(pending)));
  bar.clear_after = 0;
  publish_bar(bar.tick, /*evaluate=*/false);
  answer = appended(bar.answer, bar.close, published_);
  return true;
}

void LiveServer::lanes_left(std::uint64_t lanes) noexcept {
  for (std::uint64_t pending = lanes; pending != 0; pending &= pending - 1) {
    const auto lane = static_cast<std::uint32_t>(std::countr_zero(pending));
    // A bar out at the workers holds the book: this lane's subscriptions go when it is back.
    if (bar_.active) {
      bar_.clear_after |= std::uint64_t{1} << lane;
    } else {
      book_->clear_lane(lane);
    }
    if (writer_lane_ == static_cast<int>(lane)) writer_lane_ = -1;
  }
}

Status LiveServer::subscribe(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept {
  if ((request.flags & kSeriesIndexMask) != 0) return answer_status(response, request, Status::reserved_bits_set);
  if (!lanes_[index].signals) return answer_status(response, request, Status::not_live);
  const Strategy* strategy = admission_.strategies().at(strategy_of(request.flags));
  if (strategy == nullptr) return answer_status(response, request, Status::no_such_strategy);
  std::uint32_t id = 0;
  ipcfloor_strategy_bar state{};
  const Status status = book_->subscribe(index, *strategy, request.params, published_bars(preloaded_, room_, published_),
                                         id, state);
  answer_status(response, request, status);
  if (status == Status::window_out_of_range) {
    // Which parameter, against how many bars: for the client's sentence.
    response.extra[0] = strategy->refusal(request.params, room_.size());
    response.extra[1] = static_cast<std::int64_t>(room_.size());
  }
  if (status != Status::ok) return status;
  response.pnl = state.pnl;
  response.trades = state.trades;
  response.extra[0] = id;
  response.extra[1] = static_cast<std::int64_t>(published_);
  response.extra[2] = state.position;
  return Status::ok;
}

bool LiveServer::snapshot_fits(std::uint32_t index) noexcept {
  const RingProducer<SignalSlot>& ring = *lanes_[index].signals;
  return ring.capacity() - ring.size_approx() >= book_->count(index);
}

Status LiveServer::snapshot(std::uint32_t index, const RequestSlot& request, ResponseSlot& response) noexcept {
  if (request.flags != 0) return answer_status(response, request, Status::reserved_bits_set);
  ServedLane& lane = lanes_[index];
  if (!lane.signals) return answer_status(response, request, Status::not_live);
  // A snapshot is all of the lane's states or none: with too little room it would be dropped
  // frame by frame and the client would re-synchronise on nothing.
  if (!snapshot_fits(index)) return answer_status(response, request, Status::signals_full);
  book_->for_each(index, [this, index](std::uint32_t id, const ipcfloor_strategy_bar& state) noexcept {
    push_signal(index, id, state, 0, kSignalSnapshot);
  });
  notify_readable(*lane.signals, mode_);
  answer_status(response, request, Status::ok);
  response.trades = book_->count(index);
  response.extra[1] = static_cast<std::int64_t>(published_);
  return Status::ok;
}

void LiveServer::push_signal(std::uint32_t index, std::uint32_t subscription, const ipcfloor_strategy_bar& state,
                             std::uint64_t tick, std::uint16_t flags) noexcept {
  ServedLane& lane = lanes_[index];
  if (!lane.signals || !lanes_.served(index)) return;
  SignalSlot* slot = lane.signals->try_claim();
  if (slot == nullptr) {
    // A slow subscriber loses frames, never stalls the engine: counted, and flagged on the next
    // frame it gets. An impossible `consumed` is the client's own doing: quarantine.
    if (lane.signals->corrupt()) {
      lanes_.quarantine(index);
      return;
    }
    ++lane.signals_dropped;
    ++signals_dropped_;
    relaxed_increment(segment_.lane_status(index).signals_dropped);
    return;
  }
  slot->bar = published_ - 1;
  slot->subscription = subscription;
  slot->value[0] = state.value[0];
  slot->value[1] = state.value[1];
  slot->pnl = state.pnl;
  slot->trades = state.trades;
  slot->tick = tick;
  slot->dropped = static_cast<std::uint32_t>(std::min<std::uint64_t>(lane.signals_dropped, 0xFFFFFFFFU));
  slot->cross = static_cast<std::int8_t>(state.signal);
  slot->position = static_cast<std::int8_t>(state.position);
  slot->flags = static_cast<std::uint16_t>(flags | (lane.signals_dropped != 0 ? kSignalGap : 0));
  lane.signals->commit();
  lane.signals_dropped = 0;
  ++signals_sent_;
}

}  // namespace ipcfloor
