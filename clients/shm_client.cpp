#include "clients/shm_client.hpp"

#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "shm/liveness.hpp"

namespace ipcfloor {
namespace {

// A heartbeat older than this many intervals means the engine is not serving (stopped or hung).
constexpr std::uint64_t kStaleHeartbeats = 3;

// The setup-path ErrorCode for a failed call.
ErrorCode error_code(CallStatus status) noexcept {
  switch (status) {
    case CallStatus::engine_gone:
    case CallStatus::engine_restarted: return ErrorCode::peer_gone;
    case CallStatus::corrupt:
    case CallStatus::out_of_order: return ErrorCode::protocol;
    default: return ErrorCode::timeout;
  }
}

}  // namespace

std::string_view to_string(CallStatus status) noexcept {
  switch (status) {
    case CallStatus::ok: return "ok";
    case CallStatus::timeout: return "timeout";
    case CallStatus::engine_hung: return "engine hung";
    case CallStatus::engine_gone: return "engine gone";
    case CallStatus::corrupt: return "corrupt lane";
    case CallStatus::out_of_order: return "answer out of order";
    case CallStatus::empty: return "empty";
    case CallStatus::too_large: return "payload too large for the bulk region";
    case CallStatus::interrupted: return "interrupted";
    case CallStatus::engine_restarted: return "engine restarted";
  }
  return "unknown";
}

Expected<ShmClient> ShmClient::connect(std::string_view name, const ShmClientOptions& options) {
  AttachOptions attach;
  attach.socket_dir = options.socket_dir;
  attach.role = HandoffRole::lane;
  attach.timeout = options.timeout;
  attach.reattaches = options.reattaches;
  auto attachment = Attachment::attach(name, attach);
  if (!attachment) return std::unexpected(attachment.error());
  const DataHeader& header = attachment->header();
  const auto engine_mode = static_cast<WaitMode>(header.wait_mode);
  const WaitMode mode = options.wait.value_or(engine_mode);
  if (mode == WaitMode::block && engine_mode != WaitMode::block)
    return fail(ErrorCode::invalid_argument,
                "engine {} serves in {} mode and never wakes sleeping clients; use --wait spin or "
                "backoff, or start the engine with --wait block",
                name, to_string(engine_mode));
  const LaneView& view = attachment->lane().view();
  auto requests = RingProducer<RequestSlot>::make(view.request_ring, view.request_slots, attachment->ring_capacity());
  if (!requests) return std::unexpected(requests.error());
  auto responses = RingConsumer<ResponseSlot>::make(view.response_ring, view.response_slots, attachment->ring_capacity());
  if (!responses) return std::unexpected(responses.error());
  std::optional<RingConsumer<SignalSlot>> signals;
  if (view.signal_slots != nullptr) {
    auto made = RingConsumer<SignalSlot>::make(view.signal_ring, view.signal_slots, view.signal_capacity);
    if (!made) return std::unexpected(made.error());
    signals.emplace(*made);
  }
  ShmClient client(std::move(*attachment), mode, options.timeout, *requests, *responses);
  client.signals_ = signals;
  return client;
}

CallStatus ShmClient::call(const RequestSlot& request, ResponseSlot& response) noexcept {
  const CallStatus got = call(static_cast<Opcode>(request.opcode), request.flags, payload_of(request.params));
  if (got == CallStatus::ok) copy_slot_payload(response, answer());
  response.stamp = 0;
  return got;
}

CallStatus ShmClient::append(double close, std::uint64_t tick, ResponseSlot& response, std::uint16_t flags) noexcept {
  const LiveAppend bar{close, tick, {}};
  const CallStatus got = call(Opcode::append, flags, payload_of(bar));
  if (got == CallStatus::ok) copy_slot_payload(response, answer());
  return got;
}

CallStatus ShmClient::subscribe(const Combo& combo, ResponseSlot& response, std::uint32_t strategy) noexcept {
  const CallStatus got = call(Opcode::subscribe, request_flags(0, strategy), payload_of(combo));
  if (got == CallStatus::ok) copy_slot_payload(response, answer());
  return got;
}

CallStatus ShmClient::snapshot(ResponseSlot& response) noexcept {
  const Combo nothing{};
  const CallStatus got = call(Opcode::snapshot, 0, payload_of(nothing));
  if (got == CallStatus::ok) copy_slot_payload(response, answer());
  return got;
}

CallStatus ShmClient::poll_signal(SignalSlot& signal) noexcept {
  if (!signals_) return CallStatus::empty;
  switch (signals_->try_pop(signal)) {
    case PopStatus::ok: return CallStatus::ok;
    case PopStatus::empty: return CallStatus::empty;
    case PopStatus::corrupt: return CallStatus::corrupt;
  }
  return CallStatus::corrupt;
}

CallStatus ShmClient::wait_signal(SignalSlot& signal) noexcept {
  if (!signals_) return CallStatus::timeout;
  return wait_polling([&]() noexcept { return poll_signal(signal); }, *signals_);
}

ShmClient::ShmClient(Attachment attachment, WaitMode mode, std::chrono::nanoseconds timeout,
                     RingProducer<RequestSlot> requests, RingConsumer<ResponseSlot> responses)
    : attachment_(std::move(attachment)),
      mode_(mode),
      timeout_(timeout),
      slice_(std::chrono::nanoseconds(attachment_.header().heartbeat_interval_ns)),
      requests_(requests),
      responses_(responses),
      exchange_(attachment_.lane().view().call),
      call_extras_(attachment_.lane().view().call_extras),
      response_slots_(attachment_.lane().view().response_slots),
      answer_records_(attachment_.lane().view().answer_records),
      request_options_(attachment_.lane().view().request_options),
      doorbell_(attachment_.lane().view().doorbell),
      engine_blocks_(static_cast<WaitMode>(attachment_.header().wait_mode) == WaitMode::block) {}

CallStatus ShmClient::check_engine() const noexcept {
  const DataHeader& header = attachment_.header();
  // The connection is the engine's lease on us and ours on it: the kernel ends it when the
  // engine dies, whatever its pid or namespace.
  if (attachment_.engine_hung_up()) return CallStatus::engine_gone;
  // acquire: pairs with the engine's release store of `stopping` in Segment::mark_stopping.
  if (header.state.load(std::memory_order_acquire) != static_cast<std::uint32_t>(SegmentState::ready))
    return CallStatus::engine_gone;
  // relaxed: a timestamp; only its age matters, nothing is published through it.
  const std::uint64_t beat = header.heartbeat_ns.load(std::memory_order_relaxed);
  const std::uint64_t now = monotonic_ns();
  if (now > beat && now - beat > kStaleHeartbeats * header.heartbeat_interval_ns) return CallStatus::engine_hung;
  return CallStatus::timeout;
}

CallStatus ShmClient::await_exchange() noexcept {
  if (mode_ != WaitMode::block) {
    for (std::uint32_t i = 0; i < kCallPollsBeforeDeadline; ++i) {
      if (exchange_.answered()) return CallStatus::ok;
      cpu_relax();
    }
  }
  // Only a wait that lasted this long reads the clock: the deadline counts from here.
  const auto deadline = WaitClock::now() + timeout_;
  for (;;) {
    if (exchange_.answered()) return CallStatus::ok;
    const auto slice_end = std::min(deadline, WaitClock::now() + wait_slice());
    if (exchange_.wait_answer(mode_, slice_end) == WaitStatus::ready) return CallStatus::ok;
    // A quarantine poisons the exchange stamp, but a call published after it overwrote the
    // poison; the response ring, which the client never writes, still says so.
    if (responses_.probe_corrupt()) return CallStatus::corrupt;
    const CallStatus engine = check_engine();
    if (engine == CallStatus::engine_gone) return engine;
    // The call stays owed: the next one settles it (settle_owed_call), as after a timeout.
    if (interrupted()) return CallStatus::interrupted;
    if (WaitClock::now() >= deadline) return engine;
  }
}

CallStatus ShmClient::settle_owed_call() noexcept {
  // The line is still owed to an earlier call that timed out: its answer is that call's, and is
  // dropped here; the new call starts once the line is the client's again.
  const CallStatus owed = await_exchange();
  if (owed != CallStatus::ok) return owed;
  return exchange_.state() == ExchangeState::corrupt ? CallStatus::corrupt : CallStatus::ok;
}

CallStatus ShmClient::submit(Opcode opcode, std::uint16_t flags, FramePayload payload, const RequestOptions* options,
                             std::uint64_t& seq) noexcept {
  if (!requests_.writable()) {
    const auto deadline = WaitClock::now() + timeout_;
    while (!requests_.writable()) {
      if (requests_.corrupt()) return CallStatus::corrupt;
      const auto slice_end = std::min(deadline, WaitClock::now() + wait_slice());
      if (wait_writable(requests_, mode_, slice_end) == WaitStatus::ready) continue;
      // An engine that quarantined this lane stops taking requests and poisons the response
      // ring; answers not read yet would hide that from poll(), so look at the ring itself.
      if (responses_.probe_corrupt()) return CallStatus::corrupt;
      const CallStatus engine = check_engine();
      if (engine == CallStatus::engine_gone) return engine;
      if (interrupted()) return CallStatus::interrupted;
      if (WaitClock::now() >= deadline) return engine;
    }
  }
  seq = next_seq_++;
  RequestSlot* const slot = requests_.try_claim();  // writable() said there is one; only we fill it
  if (options != nullptr) {
    // Beside the slot, before the commit: the ring's release publication carries it along.
    request_options_[slot - attachment_.lane().view().request_slots] = *options;
    opcode = static_cast<Opcode>(static_cast<std::uint16_t>(opcode) | kOpcodeWithOptions);
  }
  pack_request(*slot, seq, opcode, flags, payload);
  requests_.commit();
  ring_engine();  // a block-mode engine sleeps on the lane's doorbell, not on this ring
  return CallStatus::ok;
}

CallStatus ShmClient::poll(ResponseSlot& response, AnswerRecord* record) noexcept {
  const ResponseSlot* const slot = responses_.try_peek();
  if (slot == nullptr) return responses_.corrupt() ? CallStatus::corrupt : CallStatus::empty;
  response = *slot;
  // The record beside the slot was written before the slot's stamp, which try_peek acquired; it
  // is read before the slot goes back to the engine.
  if (record != nullptr && carries_record(response)) *record = answer_records_[slot - response_slots_];
  responses_.release();
  if (response.seq != next_expected_) return CallStatus::out_of_order;
  ++next_expected_;
  return CallStatus::ok;
}

CallStatus ShmClient::wait_response(ResponseSlot& response, AnswerRecord* record) noexcept {
  return wait_polling([&]() noexcept { return poll(response, record); }, responses_);
}

CallStatus ShmClient::echo_bulk(std::span<const std::byte> in, std::span<std::byte> out,
                                ResponseSlot& response) noexcept {
  const std::span<std::byte> region = bulk();
  const std::size_t half = region.size() / 2;
  if (in.size() > half || out.size() != in.size()) return CallStatus::too_large;
  // An earlier call that timed out may still be using the region: settle it first.
  if (exchange_.pending()) {
    if (const CallStatus owed = settle_owed_call(); owed != CallStatus::ok) return owed;
  }
  if (!in.empty()) std::memcpy(region.data(), in.data(), in.size());
  const BulkEcho echo{.in_offset = 0, .out_offset = half, .bytes = in.size(), .unused = {}};
  // The exchange's release publication carries the bytes above along with the request; the
  // engine's copy is published by its answer stamp, which call() acquires.
  const CallStatus got = call(Opcode::echo_bulk, 0, payload_of(echo));
  if (got != CallStatus::ok) return got;
  copy_slot_payload(response, answer());
  if (response.status == static_cast<std::uint16_t>(Status::ok) && !out.empty())
    std::memcpy(out.data(), region.data() + half, out.size());
  return got;
}

Error ShmClient::error_for(CallStatus status) const { return Error{error_code(status), describe(status)}; }

std::string ShmClient::describe(CallStatus status) const {
  const DataHeader& header = attachment_.header();
  const std::string& name = attachment_.name();
  const pid_t pid = attachment_.engine_pid();
  switch (status) {
    case CallStatus::engine_gone:
      return fmt::format("engine {} (pid {}) is gone", name, pid);
    case CallStatus::engine_hung:
      return fmt::format("engine {} (pid {}) is alive but not serving: its heartbeat is older than {} ms", name, pid,
                         kStaleHeartbeats * header.heartbeat_interval_ns / 1'000'000);
    case CallStatus::timeout:
      return fmt::format("engine {} (pid {}) did not answer on lane {} within {} ms", name, pid, lane(),
                         std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count());
    case CallStatus::corrupt: {
      // Say what happened, not what might have: the lane's state is the engine's own word.
      // relaxed: a report, read once on a slow path.
      const auto state = attachment_.lane_status(lane()).state.load(std::memory_order_relaxed);
      if (state == static_cast<std::uint32_t>(LaneState::quarantined))
        return fmt::format("the engine quarantined lane {} of {}: impossible ring positions or stamps were written "
                           "into it", lane(), name);
      return fmt::format("lane {} of {} holds a ring position or stamp that neither this client nor the engine wrote "
                         "(the engine has not quarantined it): something else wrote into this client's lane memory",
                         lane(), name);
    }
    case CallStatus::out_of_order:
      return fmt::format("lane {} of {} returned an answer out of order", lane(), name);
    case CallStatus::too_large:
      return fmt::format("the payload does not fit half of lane {}'s {}-byte bulk region of {} (serve --bulk-bytes)",
                         lane(), bulk().size(), name);
    case CallStatus::interrupted:
      return fmt::format("a call on lane {} of {} was interrupted while it waited (its interrupt check asked it to "
                         "stop); the lane stays usable: the next call drops the answers it left owed", lane(), name);
    case CallStatus::engine_restarted:
      return fmt::format("engine {} went away while a call on lane {} was in flight; the client re-attached (pid "
                         "{} now): the call was not answered and is not retried", name, lane(), pid);
    case CallStatus::ok:
    case CallStatus::empty: break;
  }
  return std::string(to_string(status));
}

}  // namespace ipcfloor
