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
// written by a corrupt or hostile client: ExchangeServer::peek says corrupt and reads nothing,
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

// The exchange's one line. The client packs a request there (pack_request, shm/frames.hpp) and
// the engine writes the answer over it: the two ring frames, whose heads share one layout (seq,
// opcode, flags or status, the stamp at offset 12) and whose 48 payload bytes sit at offset 16 in
// both, so neither side converts one shape into another. The stamp belongs to the protocol
// below; everything else to whoever the stamp names. `request.stamp` and `answer.stamp` are the
// same four bytes (a common initial sequence); the protocol always reaches them as request.stamp.
union alignas(64) CallLine {
  RequestSlot request;  // what the client publishes with request(n): opcode, flags (the series), seq, params
  ResponseSlot answer;  // what the engine publishes with answer(n): the request's seq and opcode, the status, payload
};

// The exchange's 128 bytes inside a lane: the line, then the block strategy's wait line.
struct alignas(kRingLineBytes) CallArea {
  CallLine slot;
  alignas(64) std::atomic<std::uint32_t> answer_word;   // futex: bumped when an answer lands
  std::atomic<std::uint32_t> client_sleeping;           // 1 while the client may sleep on it
};

static_assert(std::is_trivially_copyable_v<CallLine>, "CallLine is shared memory of plain bytes");
static_assert(sizeof(CallLine) == 64 && alignof(CallLine) == 64, "CallLine is exactly one cache line");
static_assert(offsetof(RequestSlot, stamp) == offsetof(ResponseSlot, stamp),
              "the request and its answer keep the stamp in the same four bytes");
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

  // Looks for request(answered + 1). On `request`, the line's fields are visible and the line is
  // the engine's until publish_answer() or answer_in_place(); the client may still scribble on
  // it, so decide nothing on what it reads now: serve from copy_request(). Latches corrupt.
  [[nodiscard]] ExchangePoll peek() noexcept {
    if (corrupt_) return ExchangePoll::corrupt;
    const std::uint32_t stamp = load_stamp();
    if (stamp == answer_stamp(answered_)) return ExchangePoll::idle;
    if (stamp != request_stamp(answered_ + 1)) {
      corrupt_ = true;
      return ExchangePoll::corrupt;
    }
    return ExchangePoll::request;
  }

  // The request peek() found, as a private copy: the engine's one copy of it. Every field but the
  // stamp, which the protocol owns.
  [[nodiscard]] RequestSlot copy_request() const noexcept {
    const RequestSlot& line = area_->slot.request;
    RequestSlot out;
    out.seq = line.seq;
    out.opcode = line.opcode;
    out.flags = line.flags;
    out.stamp = 0;
    out.params = line.params;
    return out;
  }
  // The request's opcode and flags as they read now (the client may still change them: decide
  // nothing on them that copy_request() would not confirm).
  [[nodiscard]] std::uint16_t opcode_now() const noexcept { return area_->slot.request.opcode; }
  [[nodiscard]] std::uint16_t flags_now() const noexcept { return area_->slot.request.flags; }

  // Answers the request peek() found with the line as it is, setting only the status: the
  // request's seq, opcode and 48 bytes become the answer's (an ECHO is its own answer). One store
  // on a line this thread just read, then the stamp.
  void answer_in_place(std::uint16_t status) noexcept {
    area_->slot.answer.status = status;
    publish_answer();
  }

  // Where the answer to the request peek() found is written: the line itself, the engine's until
  // publish_answer(). Write every field but the stamp (dispatch_request does).
  [[nodiscard]] ResponseSlot& answer_slot() noexcept { return area_->slot.answer; }

  // Publishes the answer written into answer_slot(): answer(answered + 1).
  void publish_answer() noexcept {
    ++answered_;
    // release: publishes the answer's fields; pairs with the client's acquire load of the stamp
    // in ExchangeClient::state.
    stamp_ref().store(answer_stamp(answered_), std::memory_order_release);
  }

  // Cheap readiness test for the wait strategies: a new request or a corrupt stamp.
  [[nodiscard]] bool readable() noexcept { return load_stamp() != answer_stamp(answered_); }

  // Block mode only, after an answer: wakes a client sleeping on the wait line.
  void notify(WaitMode mode) noexcept {
    if (mode != WaitMode::block) return;
    detail::notify_channel({area_->answer_word, area_->client_sleeping});
  }

  // Marks the line so that its client's wait ends with "corrupt" (kPoisonStamp).
  void poison() noexcept {
    corrupt_ = true;
    // release: orders nothing the client reads but the stamp itself; pairs with its acquire load
    // in ExchangeClient::state.
    stamp_ref().store(kPoisonStamp, std::memory_order_release);
  }

  [[nodiscard]] bool corrupt() const noexcept { return corrupt_; }
  [[nodiscard]] std::uint32_t answered() const noexcept { return answered_; }

 private:
  [[nodiscard]] std::atomic_ref<std::uint32_t> stamp_ref() const noexcept {
    return std::atomic_ref<std::uint32_t>(area_->slot.request.stamp);
  }
  [[nodiscard]] std::uint32_t load_stamp() const noexcept {
    // acquire: pairs with the client's release store of the request stamp in
    // ExchangeClient::publish, so the request's fields are visible before they are read.
    return stamp_ref().load(std::memory_order_acquire);
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

  // Where the next request is packed (pack_request). Only while state() is idle; never the stamp.
  [[nodiscard]] RequestSlot& request() noexcept { return area_->slot.request; }

  // Publishes the request packed into request(). Precondition: state() was idle.
  void publish() noexcept {
    pending_ = true;
    ++last_;
    // release: publishes the request's fields; pairs with the engine's acquire load of the stamp
    // in ExchangeServer::peek (through its load_stamp).
    stamp_ref().store(request_stamp(last_), std::memory_order_release);
  }

  // Where the pending call stands. Turns idle (the answer is in answer(), to be read before the
  // next publish) once answer(last) is stored; the wait strategies poll this.
  [[nodiscard]] ExchangeState state() noexcept {
    if (!pending_) return ExchangeState::idle;
    // acquire: pairs with the engine's release store of the answer stamp in
    // ExchangeServer::publish_answer, so the answer's fields are visible before they are read.
    const std::uint32_t stamp = stamp_ref().load(std::memory_order_acquire);
    if (stamp == answer_stamp(last_)) {
      pending_ = false;
      return ExchangeState::idle;
    }
    return stamp == request_stamp(last_) ? ExchangeState::pending : ExchangeState::corrupt;
  }

  // True when the answer of the pending call has arrived (or the line is corrupt).
  [[nodiscard]] bool answered() noexcept { return state() != ExchangeState::pending; }

  // The answer of the call that just turned idle: the line itself, valid until the next publish.
  [[nodiscard]] const ResponseSlot& answer() const noexcept { return area_->slot.answer; }

  // Waits, as `mode` says, until answered() or `deadline`. Client thread only. Spin and backoff
  // make no syscall; block sleeps on the line's answer word, which ExchangeServer::notify wakes.
  [[nodiscard]] WaitStatus wait_answer(WaitMode mode, WaitDeadline deadline) noexcept {
    auto ready = [this]() noexcept { return answered(); };
    return detail::wait_until(ready, mode, {area_->answer_word, area_->client_sleeping}, deadline);
  }

  [[nodiscard]] bool pending() const noexcept { return pending_; }

 private:
  [[nodiscard]] std::atomic_ref<std::uint32_t> stamp_ref() const noexcept {
    return std::atomic_ref<std::uint32_t>(area_->slot.request.stamp);
  }

  CallArea* area_;
  std::uint32_t last_;   // the call number published last
  bool pending_ = false;  // last_ has not been answered yet
};

}  // namespace ipcfloor
