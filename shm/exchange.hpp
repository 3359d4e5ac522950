#pragma once
// The single-flight exchange: one request in flight per lane, the request and its answer in the
// same 64-byte line. The client writes the request and a request stamp into the line; the
// engine reads it, answers in place and stores an answer stamp. Each direction moves that one
// line, which is the physical floor of a request and its reply: nothing else crosses between
// the cores. The rings stay for pipelining (several frames in flight); a blocking call uses this.
//
// The stamp is the whole protocol. Call number n (counted by the client from 1, wrapping at
// 2^31) is published as the request stamp (n << 1) | 1 and answered as n << 1; zero-filled
// memory reads as "call 0 answered", an idle line. Whoever the stamp names owns the line:
//
//   stamp      owner    may write the payload     next legal stamp
//   answer(n)  client   client                    request(n+1), written by the client
//   request(n) engine   engine (its answer)       answer(n), written by the engine
//
// The engine keeps the number it answered last in private memory, so it accepts exactly one
// stamp as a new request (request(last + 1)) and one as idle (answer(last)). Anything else was
// written by a corrupt or hostile client: ExchangeServer::poll says corrupt and reads nothing,
// and the engine quarantines the lane. The client likewise accepts only answer(pending); the
// engine marks a line it gave up on with kPoisonStamp, which no call number produces.
//
// A client whose call timed out still owes the engine that call: the line stays the engine's
// until answer(pending) appears. The next call first waits (bounded) for that answer and drops
// it, so no later call can ever return an earlier call's answer.
//
// The line is followed by a wait line (the block strategy's futex words; spin and backoff never
// touch it), so the exchange takes 128 bytes and its line never shares the adjacent-line
// prefetcher's pair with anything else.
//
// Hot-path calls never allocate, never throw and make no syscalls (block mode's notify aside).

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/combo.hpp"
#include "shm/frames.hpp"
#include "shm/spsc_ring.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

// The exchange's one line. `stamp` belongs to the protocol; the rest to whoever owns the line.
struct alignas(64) CallSlot {
  std::uint32_t stamp;   // request(n) or answer(n); see exchange_stamp
  std::uint16_t opcode;  // request: an Opcode value, raw; answer: the request's, echoed
  std::uint16_t code;    // request: flags (none defined: 0); answer: the Status
  std::uint64_t seq;     // the caller's correlation id, echoed
  // Request: the six windows (BACKTEST, ECHO) or a BulkEcho (ECHO_BULK). Answer: the 48 bytes a
  // ResponseSlot carries from `pnl` on (pnl, trades, extra), at the same offsets.
  Combo payload;
};

// The exchange's 128 bytes inside a lane: the line, then the block strategy's wait line.
struct alignas(kRingLineBytes) CallArea {
  CallSlot slot;
  alignas(64) std::atomic<std::uint32_t> answer_word;   // futex: bumped when an answer lands
  std::atomic<std::uint32_t> client_sleeping;           // 1 while the client may sleep on it
};

static_assert(std::is_trivially_copyable_v<CallSlot>, "CallSlot is copied as raw bytes");
static_assert(std::is_standard_layout_v<CallSlot>, "CallSlot offsets must be well defined");
static_assert(sizeof(CallSlot) == 64 && alignof(CallSlot) == 64, "CallSlot is exactly one cache line");
static_assert(offsetof(CallSlot, stamp) == 0, "CallSlot.stamp opens the line");
static_assert(offsetof(CallSlot, opcode) == 4, "CallSlot.opcode offset");
static_assert(offsetof(CallSlot, code) == 6, "CallSlot.code offset");
static_assert(offsetof(CallSlot, seq) == 8, "CallSlot.seq offset");
static_assert(offsetof(CallSlot, payload) == offsetof(ResponseSlot, pnl),
              "CallSlot's payload sits where ResponseSlot's answer does");
static_assert(std::is_standard_layout_v<CallArea>, "CallArea offsets must be well defined");
static_assert(offsetof(CallArea, answer_word) == 64, "the wait words sit on the line after the call slot");
static_assert(sizeof(CallArea) == kRingLineBytes, "CallArea is one 128-byte prefetch pair");

// Call number n's request and answer stamps. n counts modulo 2^31: the shift drops its top bit.
[[nodiscard]] constexpr std::uint32_t request_stamp(std::uint32_t n) noexcept { return (n << 1) | 1U; }
[[nodiscard]] constexpr std::uint32_t answer_stamp(std::uint32_t n) noexcept { return n << 1; }
// What the engine stores into a line it quarantined. It is odd, so it reads as a request, but of
// a call number no client would publish next: the client's wait sees neither its answer nor its
// own request and reports corruption instead of waiting out its timeout.
inline constexpr std::uint32_t kPoisonStamp = 0xFFFF'FFFFU;

// Zeroes the area: an idle line at call 0 and empty wait words. Setup only, before the lane is
// handed to a client; the hand-over publishes it.
inline void init_call_area(CallArea& area) noexcept {
  std::memset(static_cast<void*>(&area.slot), 0, sizeof area.slot);
  // relaxed: published to the client by the lane's hand-over.
  area.answer_word.store(0, std::memory_order_relaxed);
  area.client_sleeping.store(0, std::memory_order_relaxed);
}

enum class ExchangePoll : std::uint8_t {
  idle,     // nothing new
  request,  // a new request was copied out
  corrupt,  // the stamp is impossible; nothing was read
};

// The engine's end. One thread owns it (the serving thread).
class ExchangeServer {
 public:
  // `answered`: the call number the line is idle at (0 for a fresh line).
  explicit ExchangeServer(CallArea* area, std::uint32_t answered = 0) noexcept : area_(area), answered_(answered) {}

  // Looks for request(answered + 1). On `request`, `out` holds a private copy of the line: the
  // client may scribble on the shared one, but it cannot change what is served. Latches corrupt.
  [[nodiscard]] ExchangePoll poll(CallSlot& out) noexcept {
    if (corrupt_) return ExchangePoll::corrupt;
    // acquire: pairs with the client's release store of the request stamp in
    // ExchangeClient::publish, so the request's fields are visible before they are copied.
    const std::uint32_t stamp = std::atomic_ref<std::uint32_t>(area_->slot.stamp).load(std::memory_order_acquire);
    if (stamp == answer_stamp(answered_)) return ExchangePoll::idle;
    if (stamp != request_stamp(answered_ + 1)) {
      corrupt_ = true;
      return ExchangePoll::corrupt;
    }
    copy_fields(out, area_->slot);
    return ExchangePoll::request;
  }

  // Looks for request(answered + 1) without copying it: on `request`, the line's fields are
  // visible and still the client's to change. For a request answered from the line itself (an
  // ECHO is its own answer); anything the engine computes from must be copied first (copy_of).
  [[nodiscard]] ExchangePoll peek() noexcept {
    if (corrupt_) return ExchangePoll::corrupt;
    // acquire: as in poll.
    const std::uint32_t stamp = std::atomic_ref<std::uint32_t>(area_->slot.stamp).load(std::memory_order_acquire);
    if (stamp == answer_stamp(answered_)) return ExchangePoll::idle;
    if (stamp != request_stamp(answered_ + 1)) {
      corrupt_ = true;
      return ExchangePoll::corrupt;
    }
    return ExchangePoll::request;
  }

  // The request peek() found, as a private copy.
  [[nodiscard]] CallSlot copy_of() const noexcept {
    CallSlot out;
    copy_fields(out, area_->slot);
    return out;
  }
  // The request's opcode and flags as they read now (the client may still change them: decide
  // nothing on them that copy_of() would not confirm).
  [[nodiscard]] std::uint16_t opcode_now() const noexcept { return area_->slot.opcode; }
  [[nodiscard]] std::uint16_t flags_now() const noexcept { return area_->slot.code; }

  // Answers the request peek() found with the line as it is, setting only the status: the
  // request's seq, opcode and 48 bytes become the answer's. One store on a line this thread just
  // read, then the stamp.
  void answer_in_place(std::uint16_t status) noexcept {
    area_->slot.code = status;
    ++answered_;
    // release: publishes the status; pairs with the client's acquire load of the stamp in
    // ExchangeClient::answered.
    std::atomic_ref<std::uint32_t>(area_->slot.stamp).store(answer_stamp(answered_), std::memory_order_release);
  }

  // Cheap readiness test for the wait strategies: a new request or a corrupt stamp.
  [[nodiscard]] bool readable() noexcept {
    // acquire: as in poll.
    const std::uint32_t stamp = std::atomic_ref<std::uint32_t>(area_->slot.stamp).load(std::memory_order_acquire);
    return stamp != answer_stamp(answered_);
  }

  // Answers the request poll() returned: copies `answer`'s opcode, code, seq and payload into the
  // line, then publishes answer(answered + 1).
  void answer(const CallSlot& answer) noexcept {
    copy_fields(area_->slot, answer);
    ++answered_;
    // release: publishes the answer's fields; pairs with the client's acquire load of the stamp
    // in ExchangeClient::answered.
    std::atomic_ref<std::uint32_t>(area_->slot.stamp).store(answer_stamp(answered_), std::memory_order_release);
  }

  // Block mode only, after answer(): wakes a client sleeping on the wait line.
  void notify(WaitMode mode) noexcept {
    if (mode != WaitMode::block) return;
    detail::notify_channel({area_->answer_word, area_->client_sleeping});
  }

  // Marks the line so that its client's wait ends with "corrupt" (kPoisonStamp).
  void poison() noexcept {
    corrupt_ = true;
    // release: orders nothing the client reads but the stamp itself; pairs with its acquire load.
    std::atomic_ref<std::uint32_t>(area_->slot.stamp).store(kPoisonStamp, std::memory_order_release);
  }

  [[nodiscard]] bool corrupt() const noexcept { return corrupt_; }
  [[nodiscard]] std::uint32_t answered() const noexcept { return answered_; }

 private:
  // Every field but the stamp: the other side polls the stamp atomically right now.
  static void copy_fields(CallSlot& dst, const CallSlot& src) noexcept {
    dst.opcode = src.opcode;
    dst.code = src.code;
    dst.seq = src.seq;
    dst.payload = src.payload;
  }

  CallArea* area_;
  std::uint32_t answered_;
  bool corrupt_ = false;
};

enum class ExchangeState : std::uint8_t {
  idle,     // the line is the client's: a call may start
  pending,  // a call is published and not answered yet
  corrupt,  // the stamp is neither this client's request nor its answer (or the engine poisoned it)
};

// The client's end. One thread owns it.
class ExchangeClient {
 public:
  // `answered`: the call number the line is idle at (0 for a fresh line).
  explicit ExchangeClient(CallArea* area, std::uint32_t answered = 0) noexcept : area_(area), last_(answered) {}

  // Where to write the next request. Only while state() is idle. Write opcode, code (flags),
  // seq and payload; never the stamp.
  [[nodiscard]] CallSlot& request() noexcept { return area_->slot; }

  // Publishes the request written into request(). Precondition: state() was idle.
  void publish() noexcept {
    pending_ = true;
    ++last_;
    // release: publishes the request's fields; pairs with the engine's acquire load of the stamp
    // in ExchangeServer::poll.
    std::atomic_ref<std::uint32_t>(area_->slot.stamp).store(request_stamp(last_), std::memory_order_release);
  }

  // Where the pending call stands. Turns idle (the answer is in request()'s fields, to be read
  // before the next publish) once answer(last) is stored; the wait strategies poll this.
  [[nodiscard]] ExchangeState state() noexcept {
    if (!pending_) return ExchangeState::idle;
    // acquire: pairs with the engine's release store of the answer stamp in
    // ExchangeServer::answer, so the answer's fields are visible before they are read.
    const std::uint32_t stamp = std::atomic_ref<std::uint32_t>(area_->slot.stamp).load(std::memory_order_acquire);
    if (stamp == answer_stamp(last_)) {
      pending_ = false;
      return ExchangeState::idle;
    }
    return stamp == request_stamp(last_) ? ExchangeState::pending : ExchangeState::corrupt;
  }

  // True when the answer of the pending call has arrived (or the line is corrupt).
  [[nodiscard]] bool answered() noexcept { return state() != ExchangeState::pending; }

  // The answer of the call that just turned idle.
  [[nodiscard]] const CallSlot& answer() const noexcept { return area_->slot; }

  // Waits, as `mode` says, until answered() or `deadline`. Client thread only. Spin and backoff
  // make no syscall; block sleeps on the line's answer word, which ExchangeServer::notify wakes.
  [[nodiscard]] WaitStatus wait_answer(WaitMode mode, WaitDeadline deadline) noexcept {
    auto ready = [this]() noexcept { return answered(); };
    return detail::wait_until(ready, mode, {area_->answer_word, area_->client_sleeping}, deadline);
  }

  [[nodiscard]] bool pending() const noexcept { return pending_; }
  [[nodiscard]] std::uint32_t last_call() const noexcept { return last_; }

 private:
  CallArea* area_;
  std::uint32_t last_;   // the call number published last
  bool pending_ = false;  // last_ has not been answered yet
};

}  // namespace ipcfloor
