// The single-flight exchange (shm/exchange.hpp): the stamp protocol one call at a time, the
// stamps a hostile client can write, call numbers that wrap at 2^31, and concurrent round trips
// between two threads and two processes in every wait mode, each call carrying its number and a
// payload derived from it so that a lost, repeated, stale or torn answer is caught.
//
// IPCFLOOR_STRESS_FRAMES scales the round trips (default 10M, as the ring stress; the exchange
// runs a fiftieth of it in spin mode and a two-hundredth in backoff/block mode). Every wait has a
// deadline, so a broken exchange fails instead of hanging.

#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string_view>
#include <thread>

#include "shm/exchange.hpp"
#include "shm/wait_strategy.hpp"
#include "tests/tsan_build.hpp"

namespace ipcfloor {
namespace {

constexpr auto kTestBudget = std::chrono::seconds(120);
constexpr WaitMode kAllModes[] = {WaitMode::spin, WaitMode::backoff, WaitMode::block};

std::uint64_t stress_calls(WaitMode mode) {
  std::uint64_t frames = 10'000'000;
  if (const char* text = std::getenv("IPCFLOOR_STRESS_FRAMES")) {
    const std::string_view view(text);
    std::uint64_t parsed = 0;
    if (std::from_chars(view.data(), view.data() + view.size(), parsed).ec == std::errc{} && parsed > 0) frames = parsed;
  }
  return mode == WaitMode::spin ? frames / 50 : frames / 200;
}

// The payload a request for call `n` carries, and the answer the test engine gives it.
Combo request_payload(std::uint64_t n) {
  const auto v = static_cast<std::int64_t>(n);
  return Combo{v, v * 3 + 1, -v, v ^ 0x5a5a, v + 7, ~v};
}
Combo answer_payload(const Combo& request) {
  return Combo{request.p, request.p2, request.p3, request.s, request.L, request.h};
}

// The test engine's answer to `request`: its seq and opcode, `status`, answer_payload over the 48
// bytes. Field by field, as the engine's dispatcher writes the line: never the stamp.
void answer_with(ResponseSlot& line, const RequestSlot& request, Status status) {
  line.seq = request.seq;
  line.opcode = request.opcode;
  line.status = static_cast<std::uint16_t>(status);
  line.set_echo(answer_payload(request.params));
}

std::uint32_t stamp_of(CallArea& area) { return std::atomic_ref<std::uint32_t>(area.slot.request.stamp).load(); }
void store_stamp(CallArea& area, std::uint32_t stamp) { std::atomic_ref<std::uint32_t>(area.slot.request.stamp).store(stamp); }

// Anonymous MAP_SHARED memory: visible to a forked child, like a lane object is to a client.
class SharedArea {
 public:
  SharedArea() {
    void* at = mmap(nullptr, sizeof(CallArea), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(at != MAP_FAILED);
    area_ = ::new (at) CallArea{};
    init_call_area(*area_);
  }
  ~SharedArea() { munmap(area_, sizeof(CallArea)); }
  SharedArea(const SharedArea&) = delete;
  SharedArea& operator=(const SharedArea&) = delete;
  [[nodiscard]] CallArea& area() { return *area_; }

 private:
  CallArea* area_ = nullptr;
};

enum Outcome : int { kOk = 0, kWrongSeq = 10, kWrongPayload = 11, kTimedOut = 12, kCorrupt = 13 };

// Serves `calls` requests, answering each with answer_payload and the request's seq.
int serve(CallArea& area, WaitMode mode, std::uint64_t calls, WaitDeadline deadline, std::uint32_t start = 0) {
  ExchangeServer server(&area, start);
  for (std::uint64_t n = 1; n <= calls; ++n) {
    for (;;) {
      const ExchangePoll polled = server.peek();
      if (polled == ExchangePoll::request) break;
      if (polled == ExchangePoll::corrupt) return kCorrupt;
      // The test engine waits like a client of its own line would: spin or back off (a real
      // engine sleeps on its lanes' doorbells in block mode).
      auto ready = [&server]() noexcept { return server.readable(); };
      if (detail::wait_until(ready, mode == WaitMode::block ? WaitMode::backoff : mode, {area.answer_word, area.client_sleeping},
                             deadline) == WaitStatus::timeout)
        return kTimedOut;
    }
    const RequestSlot request = server.copy_request();
    if (request.seq != n) return kWrongSeq;
    if (!(request.params == request_payload(n))) return kWrongPayload;
    answer_with(server.answer_slot(), request, Status::ok);
    server.publish_answer();
    server.notify(mode);
  }
  return kOk;
}

// Makes `calls` calls, checking every answer.
int call(CallArea& area, WaitMode mode, std::uint64_t calls, WaitDeadline deadline, std::uint32_t start = 0) {
  ExchangeClient client(&area, start);
  for (std::uint64_t n = 1; n <= calls; ++n) {
    if (client.state() != ExchangeState::idle) return kCorrupt;
    const Combo payload = request_payload(n);
    pack_request(client.request(), n, Opcode::echo, 0, payload_of(payload));
    client.publish();
    if (client.wait_answer(mode, deadline) == WaitStatus::timeout) return kTimedOut;
    if (client.state() == ExchangeState::corrupt) return kCorrupt;
    const ResponseSlot& answer = client.answer();
    if (answer.seq != n) return kWrongSeq;
    if (!(answer.echo() == answer_payload(request_payload(n)))) return kWrongPayload;
  }
  return kOk;
}

}  // namespace

TEST_CASE("exchange: a call is published by its request stamp and answered in the same line") {
  SharedArea shared;
  CallArea& area = shared.area();
  ExchangeServer server(&area);
  ExchangeClient client(&area);
  CHECK(server.peek() == ExchangePoll::idle);
  CHECK(client.state() == ExchangeState::idle);

  const Combo payload = request_payload(41);
  pack_request(client.request(), 41, Opcode::backtest, series_flags(3), payload_of(payload));
  client.publish();
  CHECK(stamp_of(area) == request_stamp(1));
  CHECK(client.state() == ExchangeState::pending);
  CHECK_FALSE(client.answered());

  REQUIRE(server.peek() == ExchangePoll::request);
  const RequestSlot seen = server.copy_request();
  CHECK(seen.seq == 41);
  CHECK(seen.opcode == static_cast<std::uint16_t>(Opcode::backtest));
  CHECK(seen.flags == 3);  // the series byte travels in the flags
  CHECK(seen.params == request_payload(41));
  // The private copy is the engine's: a client writing the shared line now changes nothing served.
  area.slot.request.params.h = -999;
  CHECK(seen.params == request_payload(41));

  answer_with(server.answer_slot(), seen, Status::window_out_of_range);
  server.publish_answer();
  CHECK(stamp_of(area) == answer_stamp(1));
  CHECK(server.answered() == 1);
  CHECK(client.answered());
  CHECK(client.state() == ExchangeState::idle);
  CHECK(client.answer().seq == 41);
  CHECK(client.answer().opcode == static_cast<std::uint16_t>(Opcode::backtest));
  CHECK(client.answer().status == static_cast<std::uint16_t>(Status::window_out_of_range));
  CHECK(client.answer().echo() == answer_payload(request_payload(41)));
  CHECK(server.peek() == ExchangePoll::idle);
}

TEST_CASE("exchange: an ECHO answered in place returns its own payload under the request's seq") {
  SharedArea shared;
  CallArea& area = shared.area();
  ExchangeServer server(&area);
  ExchangeClient client(&area);
  const Combo payload = request_payload(9);
  pack_request(client.request(), 9, Opcode::echo, 0, payload_of(payload));
  client.publish();
  REQUIRE(server.peek() == ExchangePoll::request);
  CHECK(server.opcode_now() == static_cast<std::uint16_t>(Opcode::echo));
  CHECK(server.flags_now() == 0);
  server.answer_in_place(static_cast<std::uint16_t>(Status::ok));
  REQUIRE(client.state() == ExchangeState::idle);
  CHECK(client.answer().seq == 9);
  CHECK(client.answer().status == static_cast<std::uint16_t>(Status::ok));
  CHECK(client.answer().echo() == payload);
}

TEST_CASE("exchange: the engine accepts only the next request stamp and latches anything else as corrupt") {
  for (const std::uint32_t hostile : {request_stamp(2), request_stamp(0), answer_stamp(5), kPoisonStamp, 0x8000'0001U}) {
    CAPTURE(hostile);
    SharedArea shared;
    CallArea& area = shared.area();
    ExchangeServer server(&area);
    store_stamp(area, hostile);
    CHECK(server.peek() == ExchangePoll::corrupt);
    CHECK(server.corrupt());
    // Latched: a later, well-formed stamp does not revive the line.
    store_stamp(area, request_stamp(1));
    CHECK(server.peek() == ExchangePoll::corrupt);
  }
}

TEST_CASE("exchange: a poisoned line ends the client's wait as corrupt, not as a timeout") {
  SharedArea shared;
  CallArea& area = shared.area();
  ExchangeServer server(&area);
  ExchangeClient client(&area);
  client.request().seq = 1;
  client.publish();
  server.poison();
  CHECK(client.answered());
  CHECK(client.state() == ExchangeState::corrupt);
}

TEST_CASE("exchange: a late answer is owed to the call it belongs to, never to the next one") {
  SharedArea shared;
  CallArea& area = shared.area();
  ExchangeServer server(&area);
  ExchangeClient client(&area);
  client.request().seq = 100;
  client.publish();
  // The client's wait "times out" here: it did not look. The line stays the engine's.
  CHECK(client.state() == ExchangeState::pending);
  REQUIRE(server.peek() == ExchangePoll::request);
  answer_with(server.answer_slot(), server.copy_request(), Status::ok);
  server.publish_answer();
  // The next call may start only once the late answer arrived; it is that call's (seq 100) ...
  CHECK(client.state() == ExchangeState::idle);
  CHECK(client.answer().seq == 100);
  // ... and the next request is a new call number, which the engine accepts.
  client.request().seq = 101;
  client.publish();
  REQUIRE(server.peek() == ExchangePoll::request);
  CHECK(server.copy_request().seq == 101);
}

TEST_CASE("exchange: call numbers wrap at 2^31 from a non-zero start") {
  SharedArea shared;
  CallArea& area = shared.area();
  // Both ends start at a line idle at call 2^31 - 3; 10 calls cross the wrap.
  const std::uint32_t start = (1U << 31) - 3;
  store_stamp(area, answer_stamp(start));
  ExchangeServer server(&area, start);
  ExchangeClient client(&area, start);
  for (std::uint64_t n = 1; n <= 10; ++n) {
    CAPTURE(n);
    REQUIRE(client.state() == ExchangeState::idle);
    const Combo payload = request_payload(n);
    pack_request(client.request(), n, Opcode::echo, 0, payload_of(payload));
    client.publish();
    REQUIRE(server.peek() == ExchangePoll::request);
    const RequestSlot seen = server.copy_request();
    CHECK(seen.seq == n);
    answer_with(server.answer_slot(), seen, Status::ok);
    server.publish_answer();
    REQUIRE(client.state() == ExchangeState::idle);
    CHECK(client.answer().echo() == answer_payload(request_payload(n)));
  }
  CHECK(server.answered() == start + 10);
  CHECK(stamp_of(area) == answer_stamp(start + 10));  // the counter wrapped modulo 2^31
  CHECK(answer_stamp(start + 10) == answer_stamp(7));
}

TEST_CASE("exchange stress: round trips between two threads, every wait mode, every answer checked") {
  for (const WaitMode mode : kAllModes) {
    CAPTURE(to_string(mode));
    SharedArea shared;
    const std::uint64_t calls = stress_calls(mode);
    const auto start = WaitClock::now();
    const WaitDeadline deadline = start + kTestBudget;
    int served = kOk;
    std::thread engine([&] { served = serve(shared.area(), mode, calls, deadline); });
    const int client = call(shared.area(), mode, calls, deadline);
    engine.join();
    CHECK(client == kOk);
    CHECK(served == kOk);
    const double seconds = std::chrono::duration<double>(WaitClock::now() - start).count();
    MESSAGE("threads, " << to_string(mode) << ": " << calls << " calls in " << seconds << " s");
  }
}

TEST_CASE("exchange stress: round trips between two processes, starting just below the 2^31 wrap") {
  if (kUnderTsan) {
    MESSAGE("skipped under ThreadSanitizer: fork() is not supported there; the two-thread stress covers it");
    return;
  }
  for (const WaitMode mode : kAllModes) {
    CAPTURE(to_string(mode));
    SharedArea shared;
    const std::uint32_t start = (1U << 31) - 1000;
    store_stamp(shared.area(), answer_stamp(start));
    const std::uint64_t calls = stress_calls(mode);
    const WaitDeadline deadline = WaitClock::now() + kTestBudget;
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) _exit(serve(shared.area(), mode, calls, deadline, start));
    const int client = call(shared.area(), mode, calls, deadline, start);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    CHECK(client == kOk);
    REQUIRE(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == kOk);
  }
}

}  // namespace ipcfloor
