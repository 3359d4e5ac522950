#pragma once
// The C++ client of the shared-memory engine: attach by name, get a lane, and send 48-byte
// request frames, one at a time through the lane's exchange line (call: the request and its
// answer share one cache line) or pipelined through its rings (submit + poll).
//
// Threads: a ShmClient belongs to one thread at a time (it owns both ends of its lane). Hot-path
// calls (call, submit, poll, wait_response, echo_bulk) are noexcept, never allocate, and in spin
// mode make no syscall unless a wait outlasts one engine heartbeat interval, when the client
// checks whether the engine is still there (one poll(2) on its connection).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/combo.hpp"
#include "shm/socket_dir.hpp"
#include "common/error.hpp"
#include "shm/doorbell.hpp"
#include "shm/exchange.hpp"
#include "shm/frames.hpp"
#include "shm/segment.hpp"
#include "shm/spsc_ring.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

struct ShmClientOptions {
  // Bound on any one wait: for the attach (including a lane that is being freed), for ring
  // space (submit) or for an answer (wait_response, call). A dead engine is reported sooner,
  // within about one heartbeat interval of its death; a hung one (heartbeat older than 3
  // intervals) is reported as engine_hung when this runs out.
  std::chrono::nanoseconds timeout = std::chrono::seconds(5);
  // How this client waits. Unset: the engine's own mode, recorded in the segment. A block-mode
  // client needs a block-mode engine (only it wakes sleepers); connect() refuses otherwise.
  std::optional<WaitMode> wait;
  // Where the engine's socket lives: by default the user's private directory (shm/socket_dir.hpp).
  std::string socket_dir = default_socket_dir();
  // Told to the engine for its status: how many times this client re-attached after an engine it
  // used went away (set by clients/reconnect.hpp; 0 for a first attach).
  std::uint32_t reattaches = 0;
};

enum class CallStatus : std::uint8_t {
  ok,
  timeout,      // no answer (or no ring space) before the deadline; the engine looked alive
  engine_hung,  // the engine lives but its heartbeat stopped (e.g. SIGSTOP): no answer yet
  engine_gone,  // the engine process is dead or stopping
  corrupt,      // this lane holds impossible positions or stamps (describe() says whether the
                // engine quarantined it, or the client found them itself)
  out_of_order, // an answer's seq did not match the oldest outstanding request
  empty,        // poll only: nothing has arrived yet
  too_large,    // echo_bulk only: the payload does not fit half of the lane's bulk region
  interrupted,  // the interrupt check (set_interrupt) asked the wait to stop; answers may be owed
  // The engine went away while the call was in flight and the client re-attached to the one that
  // came back (clients/reconnect.hpp). The call was not answered and is not retried: an APPEND
  // may or may not have been journaled. Never returned by ShmClient itself.
  engine_restarted,
};

[[nodiscard]] std::string_view to_string(CallStatus status) noexcept;

// Polls a blocking call or wait makes before it reads the clock to start its deadline (a vDSO
// clock read costs tens of ns, a large share of a round trip through the segment, so the common
// case never makes one).
inline constexpr std::uint32_t kCallPollsBeforeDeadline = 2048;

// What a waiting call asks, at least every `every` of waiting, whether to stop (a binding's
// Ctrl-C): check(context) != 0 stops it with CallStatus::interrupted. Unset (check null): never.
struct InterruptCheck {
  int (*check)(void* context) = nullptr;
  void* context = nullptr;
  std::chrono::nanoseconds every{};
};

class ShmClient {
 public:
  // Attaches to engine NAME and gets a lane. When no lane is free but one is being freed (its
  // client left or died), waits for it up to options.timeout. Setup path: allocates.
  // Errors: everything Attachment::attach reports (busy when every lane is held by a live
  // client), invalid_argument for a wait mode the engine cannot serve.
  [[nodiscard]] static Expected<ShmClient> connect(std::string_view name, const ShmClientOptions& options = {});

  ShmClient(ShmClient&& other) noexcept = default;
  ShmClient& operator=(ShmClient&& other) noexcept = default;
  ShmClient(const ShmClient&) = delete;
  ShmClient& operator=(const ShmClient&) = delete;
  ~ShmClient() = default;  // the attachment hands the lane back

  // One request through the lane's exchange line, packed straight into it (pack_request). On ok,
  // answer() holds the engine's answer (seq, opcode, status and the 48 answer bytes) until the
  // next call on this client; other statuses leave it undefined. A call that timed out leaves its
  // answer owed: the next call first waits (bounded) for it and drops it, so it can never return
  // an earlier call's answer.
  [[nodiscard]] CallStatus call(Opcode opcode, std::uint16_t flags, FramePayload payload) noexcept;
  // The same with an options line (a range, a fee, bars per year, a TRADES page: BACKTEST, STATS
  // and TRADES take them): written beside the exchange line before the request is published, with
  // the opcode's kOpcodeWithOptions bit. `options` null: call() above.
  [[nodiscard]] CallStatus call(Opcode opcode, std::uint16_t flags, FramePayload payload,
                                const RequestOptions* options) noexcept;
  // The answer of the last call that returned ok: the exchange line itself (no copy).
  [[nodiscard]] const ResponseSlot& answer() const noexcept { return exchange_.answer(); }
  // Its answer record (carries_record(answer()) says whether it holds one), in place.
  [[nodiscard]] const AnswerRecord& answer_record() const noexcept { return call_extras_->record; }
  // The same call for a request built beforehand, its answer copied into `response`: a
  // convenience for tests and tools (one more copy each way than the form above).
  [[nodiscard]] CallStatus call(const RequestSlot& request, ResponseSlot& response) noexcept;

  // Pipelining through the rings. submit() waits (bounded) for ring space, packs the request
  // straight into the ring slot, publishes it and returns its seq through `seq`; answers come
  // back in submission order through poll()/wait_response(). While it waits for space it also
  // notices a response ring the engine poisoned (corrupt). pipelined_sweep
  // (clients/pipelined_sweep.hpp) is the loop that keeps the ring full.
  [[nodiscard]] CallStatus submit(Opcode opcode, std::uint16_t flags, FramePayload payload, std::uint64_t& seq) noexcept {
    return submit(opcode, flags, payload, nullptr, seq);
  }
  // The same with an options line (as call() with options), written beside the ring slot.
  [[nodiscard]] CallStatus submit(Opcode opcode, std::uint16_t flags, FramePayload payload,
                                  const RequestOptions* options, std::uint64_t& seq) noexcept;
  // The same for a request built beforehand (tests and tools): its seq is set here.
  [[nodiscard]] CallStatus submit(const RequestSlot& request, std::uint64_t& seq) noexcept {
    return submit(static_cast<Opcode>(request.opcode), request.flags, payload_of(request.params), seq);
  }
  // `record`, when not null, receives the answer's record where it has one (carries_record),
  // read before the slot is handed back.
  [[nodiscard]] CallStatus poll(ResponseSlot& response, AnswerRecord* record = nullptr) noexcept;  // never waits
  [[nodiscard]] CallStatus wait_response(ResponseSlot& response, AnswerRecord* record = nullptr) noexcept;  // bounded

  // This lane's bulk region (empty when the engine runs with --bulk-bytes 0). The client owns
  // its bytes; the engine reads and writes them only while serving this lane's ECHO_BULK.
  [[nodiscard]] std::span<std::byte> bulk() const noexcept { return attachment_.lane().bulk(); }

  // One ECHO_BULK round trip, the shared-memory point of the echo curve: copies `in` into the
  // first half of the bulk region, has the engine copy it to the second half, copies that into
  // `out` (same size as `in`). ok means the copy came back and response.status says how the
  // engine judged it. too_large when `in` exceeds half the region; nothing is sent then.
  // Hot path like call(): noexcept, no allocation.
  [[nodiscard]] CallStatus echo_bulk(std::span<const std::byte> in, std::span<std::byte> out,
                                     ResponseSlot& response) noexcept;

  // ---- Live mode: an engine started with `serve --live` ----------------------------------
  // Appends one close to the series (the engine's one writer is the first lane that appends).
  // `tick` is any clock reading the subscribers share; every signal of this bar carries it. ok
  // means answered: response.status says ok (response.trades is then the bar count),
  // capacity_full, bad_price, not_the_writer or not_live. `flags` kAppendPaced (shm/frames.hpp):
  // taken only when every subscription's signal fits its ring now, else subscribers_behind with
  // nothing appended (extra[0] the lane behind, extra[1] its unread signals). Hot path like call().
  [[nodiscard]] CallStatus append(double close, std::uint64_t tick, ResponseSlot& response,
                                  std::uint16_t flags = 0) noexcept;
  // Subscribes `combo` on this lane: from now on every new bar brings one SignalSlot for it.
  // On status ok: response.extra[0] is its id, extra[1] the bars so far, pnl/trades/extra[2]
  // its state after them (extra[2] the position). Other statuses: window_out_of_range,
  // too_costly, no_room, not_live.
  [[nodiscard]] CallStatus subscribe(const Combo& combo, ResponseSlot& response, std::uint32_t strategy = 0) noexcept;
  // Asks for one SignalSlot per subscription with its state now (flag kSignalSnapshot): what a
  // subscriber that saw a gap does to re-synchronise. response.trades: the subscriptions.
  [[nodiscard]] CallStatus snapshot(ResponseSlot& response) noexcept;
  // The next signal: ok, empty (nothing yet; never waits) or corrupt.
  [[nodiscard]] CallStatus poll_signal(SignalSlot& signal) noexcept;
  // The same, waiting up to the client's timeout: ok, timeout, engine_gone, engine_hung, corrupt.
  [[nodiscard]] CallStatus wait_signal(SignalSlot& signal) noexcept;
  // Signals this lane has lost to a full signal ring since the engine started (all its clients):
  // a subscriber that hears nothing for a while compares its growth with the drops its frames
  // reported (SignalSlot::dropped) and asks for a snapshot when they differ.
  [[nodiscard]] std::uint64_t signals_dropped() const noexcept {
    // relaxed: a counter only the engine writes; a stale value only delays the re-synchronisation.
    return attachment_.lane_status(lane()).signals_dropped.load(std::memory_order_relaxed);
  }
  // True when the engine is live (this lane has a signal ring).
  [[nodiscard]] bool live() const noexcept { return signals_.has_value(); }

  // Installs the interrupt check every wait of this client asks (InterruptCheck; check null
  // removes it); interrupt_due asks a new one at its first chance. The client's thread.
  void set_interrupt(const InterruptCheck& interrupt) noexcept {
    interrupt_ = interrupt;
    next_interrupt_check_ = {};
  }
  // True when the check is set, at least `every` passed since it was last asked (or never was),
  // and it says stop: what a loop of short waits (pipelined_sweep) asks between them. One clock
  // read when a check is set; nothing otherwise.
  [[nodiscard]] bool interrupt_due() noexcept {
    if (interrupt_.check == nullptr) return false;
    const auto now = WaitClock::now();
    if (now < next_interrupt_check_) return false;
    next_interrupt_check_ = now + interrupt_.every;
    return interrupt_.check(interrupt_.context) != 0;
  }
  // Closes this process's copy of the lease without handing the lane back: a forked child's
  // exit from its parent's lane (Attachment::abandon). Only the destructor may follow.
  void abandon() noexcept { attachment_.abandon(); }
  // A client whose engine is gone gives up its lane (its connection is closed, its lane object
  // unmapped) and hands back the engine's data, mapped: views of the series taken from it stay
  // valid as long as the returned Attachment lives. Only the destructor or an assignment may
  // follow. Slow path.
  [[nodiscard]] Attachment retire() && noexcept {
    attachment_.drop_lane();
    return std::move(attachment_);
  }
  // How long each wait may take from now on (ShmClientOptions::timeout at connect): a caller
  // whose calls differ in cost (a SUBSCRIBE that replays a long series, then short signal waits)
  // sets it per phase. The client's thread.
  void set_timeout(std::chrono::nanoseconds timeout) noexcept { timeout_ = timeout; }

  // Requests submitted to the rings whose answers have not been read yet.
  [[nodiscard]] std::uint64_t outstanding() const noexcept { return next_seq_ - next_expected_; }
  [[nodiscard]] std::uint32_t capacity() const noexcept { return requests_.capacity(); }
  [[nodiscard]] std::uint32_t lane() const noexcept { return attachment_.lane().lane(); }
  [[nodiscard]] WaitMode wait_mode() const noexcept { return mode_; }
  // The engine's data: its header and series, read-only.
  [[nodiscard]] const Attachment& segment() const noexcept { return attachment_; }

  // A sentence for a non-ok status, naming the engine, its pid and the lane. Allocates.
  [[nodiscard]] std::string describe(CallStatus status) const;
  // The same as a setup-path Error: peer_gone for engine_gone, protocol for corrupt or
  // out_of_order, timeout otherwise. Allocates.
  [[nodiscard]] Error error_for(CallStatus status) const;

 private:
  ShmClient(Attachment attachment, WaitMode mode, std::chrono::nanoseconds timeout,
            RingProducer<RequestSlot> requests, RingConsumer<ResponseSlot> responses);
  // Why a wait ran out: engine_gone, engine_hung, or timeout.
  [[nodiscard]] CallStatus check_engine() const noexcept;
  // How long one slice of a wait lasts: one heartbeat, or the interrupt check's interval when
  // that is shorter.
  [[nodiscard]] std::chrono::nanoseconds wait_slice() const noexcept {
    return interrupt_.check != nullptr ? std::min(slice_, interrupt_.every) : slice_;
  }
  // After a slice that ended empty: the interrupt check's word (it is asked every slice).
  [[nodiscard]] bool interrupted() noexcept {
    if (interrupt_.check == nullptr) return false;
    next_interrupt_check_ = WaitClock::now() + interrupt_.every;
    return interrupt_.check(interrupt_.context) != 0;
  }
  void ring_engine() noexcept;
  // Waits (bounded by timeout_, in mode_) until the exchange's pending call is answered or
  // corrupt. Reads the clock only once the first kCallPollsBeforeDeadline polls came up empty.
  [[nodiscard]] CallStatus await_exchange() noexcept;
  // Polls `poll` (a few thousand times at once unless blocking, then in slices of one heartbeat,
  // sleeping on `ring` between them) until it says something other than empty or the timeout
  // runs out; a slice that ends empty checks the engine (engine_gone, engine_hung, timeout).
  template <class Poll, class Ring>
  [[nodiscard]] CallStatus wait_polling(Poll poll, Ring& ring) noexcept {
    if (mode_ != WaitMode::block) {
      for (std::uint32_t i = 0; i < kCallPollsBeforeDeadline; ++i) {
        const CallStatus got = poll();
        if (got != CallStatus::empty) return got;
        cpu_relax();
      }
    }
    const auto deadline = WaitClock::now() + timeout_;
    for (;;) {
      const CallStatus got = poll();
      if (got != CallStatus::empty) return got;
      const auto slice_end = std::min(deadline, WaitClock::now() + wait_slice());
      if (wait_readable(ring, mode_, slice_end) == WaitStatus::ready) continue;
      const CallStatus engine = check_engine();
      if (engine == CallStatus::engine_gone) return engine;
      if (interrupted()) return CallStatus::interrupted;
      if (WaitClock::now() >= deadline) return engine;
    }
  }
  // The rest of a call once its answer is in (or the line turned corrupt): ok when the answer is
  // call `seq`'s.
  [[nodiscard]] CallStatus finish_call(std::uint64_t seq) noexcept;
  // A call that finds the line still owed to an earlier call: settles that first.
  [[nodiscard]] CallStatus settle_owed_call() noexcept;

  Attachment attachment_;
  WaitMode mode_;
  std::chrono::nanoseconds timeout_;
  std::chrono::nanoseconds slice_;  // one engine heartbeat interval: how often a wait looks up
  RingProducer<RequestSlot> requests_;
  RingConsumer<ResponseSlot> responses_;
  std::optional<RingConsumer<SignalSlot>> signals_;  // live engines only
  ExchangeClient exchange_;
  CallExtras* call_extras_;
  const ResponseSlot* response_slots_;
  const AnswerRecord* answer_records_;
  RequestOptions* request_options_;
  DoorbellLine* doorbell_;
  std::uint64_t next_seq_ = 1;       // the next ring request's seq
  std::uint64_t next_expected_ = 1;  // the seq of the oldest ring answer not read yet
  std::uint64_t next_call_seq_ = 1;  // the next exchange call's seq
  bool engine_blocks_ = false;       // the engine sleeps on the doorbell when idle
  InterruptCheck interrupt_;         // asked every slice of a wait (set_interrupt)
  WaitClock::time_point next_interrupt_check_{};  // interrupt_due asks no sooner
};

// Inline: a blocking call is the round trip the ladder holds against the bare cache-line bounce,
// so its common path (the line is ours, the answer comes within the first polls) stays in the
// caller's code, without a call, a copy of the request beyond its packing, or a clock read.
inline CallStatus ShmClient::call(Opcode opcode, std::uint16_t flags, FramePayload payload) noexcept {
  return call(opcode, flags, payload, nullptr);
}

inline CallStatus ShmClient::call(Opcode opcode, std::uint16_t flags, FramePayload payload,
                                  const RequestOptions* options) noexcept {
  if (exchange_.pending()) {
    if (const CallStatus owed = settle_owed_call(); owed != CallStatus::ok) return owed;
  }
  const std::uint64_t seq = next_call_seq_++;
  if (options != nullptr) {
    // Before the request: the exchange's release publication carries the options line with it.
    call_extras_->options = *options;
    opcode = static_cast<Opcode>(static_cast<std::uint16_t>(opcode) | kOpcodeWithOptions);
  }
  pack_request(exchange_.request(), seq, opcode, flags, payload);
  exchange_.publish();
  ring_engine();
  if (mode_ != WaitMode::block) {
    for (std::uint32_t i = 0; i < kCallPollsBeforeDeadline; ++i) {
      if (exchange_.answered()) return finish_call(seq);
      cpu_relax();
    }
  }
  if (const CallStatus got = await_exchange(); got != CallStatus::ok) return got;
  return finish_call(seq);
}

inline CallStatus ShmClient::finish_call(std::uint64_t seq) noexcept {
  if (exchange_.state() == ExchangeState::corrupt) return CallStatus::corrupt;
  return exchange_.answer().seq == seq ? CallStatus::ok : CallStatus::out_of_order;
}

inline void ShmClient::ring_engine() noexcept {
  if (engine_blocks_) ring_doorbell(*doorbell_);
}

}  // namespace ipcfloor
