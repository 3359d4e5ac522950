#pragma once
// The one loop that streams requests through a lane's rings. It keeps the request ring full, so
// the engine never waits for the next frame, and hands every answer back in submission order.
// The CLI's `sweep --name`, the C ABI's ipcfloor_sweep (and through it the C++ facade and the
// Python package), ipcfloor-mpi and the benchmarks' one-lane streams (throughput's ring depths,
// live's back-to-back appends, the grid and the workers rows) all run on it. One benchmark loop
// is not this one: throughput's several-lane rows keep several lanes full from one thread, which
// a loop over one lane cannot (bench/throughput_bench.hpp says why).
//
// Threads: the client's thread (a ShmClient belongs to one thread at a time). Memory: allocates
// nothing; noexcept unless a callback throws. Waits are bounded by the client's timeout.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "clients/shm_client.hpp"
#include "shm/frames.hpp"

namespace ipcfloor {

// One request of a sweep, as pipelined_sweep packs it into the ring slot.
struct SweepRequest {
  Opcode opcode = Opcode::backtest;
  std::uint16_t flags = 0;  // the series index for a BACKTEST (series_flags)
  FramePayload payload;     // the six windows; must stay valid until the call returns
  const RequestOptions* options = nullptr;  // its options line (a range, a fee...), or none
};

// How a sweep ended.
struct SweepEnd {
  CallStatus status = CallStatus::ok;  // ok, or why the lane failed (answers from `answered` on never came)
  std::size_t answered = 0;            // answers handed to `take`, in order
};

// Sends request(i) for every i in [0, count) and calls take(i, answer) for each answer, in order
// of i. At most client.capacity() requests are in flight, or `max_in_flight` when that is smaller
// (0, the default: the capacity); the client must have none outstanding when it starts
// (ShmClient::outstanding). On a lane failure it stops at once: requests it sent may still be in
// flight, and the client must read or drop them before its next ring request.
// It also stops (CallStatus::interrupted) when the client's interrupt check says so, asked
// between answers once its interval has passed (ShmClient::interrupt_due) and by every wait.
//   request: SweepRequest(std::size_t i), called just before request i is submitted
//   take:    void(std::size_t i, const ResponseSlot& answer), called as soon as answer i is read;
//            or void(std::size_t i, const ResponseSlot& answer, const AnswerRecord& record) to get
//            the answer's record too (meaningful where carries_record(answer))
template <class Request, class Take>
[[nodiscard]] SweepEnd pipelined_sweep(ShmClient& client, std::size_t count, Request&& request, Take&& take,
                                       std::size_t max_in_flight = 0) {
  const std::size_t depth =
      max_in_flight == 0 ? client.capacity() : std::min<std::size_t>(max_in_flight, client.capacity());
  std::size_t sent = 0;
  std::size_t answered = 0;
  constexpr bool kWithRecord = std::is_invocable_v<Take&, std::size_t, const ResponseSlot&, const AnswerRecord&>;
  ResponseSlot answer{};
  AnswerRecord record{};
  while (answered < count) {
    // Keep the ring full: the answer just read freed a slot for the next request.
    while (sent < count && client.outstanding() < depth) {
      const SweepRequest next = request(sent);
      std::uint64_t seq = 0;
      if (const CallStatus got = client.submit(next.opcode, next.flags, next.payload, next.options, seq);
          got != CallStatus::ok)
        return {got, answered};
      ++sent;
    }
    if (const CallStatus got = client.wait_response(answer, kWithRecord ? &record : nullptr); got != CallStatus::ok)
      return {got, answered};
    if constexpr (kWithRecord) {
      take(answered++, answer, record);
    } else {
      take(answered++, answer);
    }
    // Answers that keep coming never end a wait's slice, so a long sweep asks here too.
    if (answered < count && client.interrupt_due()) return {CallStatus::interrupted, answered};
  }
  return {CallStatus::ok, answered};
}

// For tests, tools and benchmarks: every combo through the rings as `opcode`, the answers in
// order. Setup-style: allocates, and a lane failure is an Error (ShmClient::error_for).
[[nodiscard]] inline Expected<std::vector<ResponseSlot>> run_all(ShmClient& client, std::span<const Combo> combos,
                                                                 Opcode opcode) {
  std::vector<ResponseSlot> answers(combos.size());
  const SweepEnd end = pipelined_sweep(
      client, combos.size(),
      [&](std::size_t i) { return SweepRequest{opcode, 0, payload_of(combos[i])}; },
      [&](std::size_t i, const ResponseSlot& answer) { answers[i] = answer; });
  if (end.status != CallStatus::ok) return std::unexpected(client.error_for(end.status));
  return answers;
}

}  // namespace ipcfloor
