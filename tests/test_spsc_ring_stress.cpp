// Concurrency stress for the SPSC ring: a one-way stream between two threads and between two
// processes (fork + MAP_SHARED), and request -> response round trips in every wait mode.
// Every frame carries its sequence number and a payload derived from it, so loss, duplication,
// reordering and torn frames are all caught.
//
// IPCFLOOR_STRESS_FRAMES overrides the stream length (default 10M; use ~1M under TSan). Round
// trips use a twentieth of it in spin mode (a strict spin ping-pong crawls when the 2-core host
// is busy) and a fiftieth in backoff/block mode (each futex wake costs microseconds). Every wait has a
// deadline, so a broken ring fails the test instead of hanging it.

#include <doctest/doctest.h>

#include <signal.h>
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

#include "shm/frames.hpp"
#include "shm/spsc_ring.hpp"
#include "shm/wait_strategy.hpp"
#include "tests/tsan_build.hpp"

namespace ipcfloor {
namespace {

constexpr std::uint64_t kDefaultStressFrames = 10'000'000;
constexpr auto kTestBudget = std::chrono::seconds(120);
constexpr std::uint32_t kStreamCapacity = 1024;
constexpr std::uint32_t kRequestCapacity = 16;
constexpr std::uint32_t kResponseCapacity = 64;

// Outcome of one side of a stress run; also the child's exit code in the fork tests.
enum StressCode : int {
  kStressOk = 0,
  kStressSeqMismatch = 10,
  kStressPayloadMismatch = 11,
  kStressTimeout = 12,
  kStressCorrupt = 13,
  kStressBadResponse = 14,
  kStressSetupFailed = 15,
};

std::string_view describe(int code) {
  switch (code) {
    case kStressOk: return "ok";
    case kStressSeqMismatch: return "sequence mismatch (loss, duplicate or reorder)";
    case kStressPayloadMismatch: return "payload mismatch (torn or stale frame)";
    case kStressTimeout: return "timed out";
    case kStressCorrupt: return "ring reported corrupt";
    case kStressBadResponse: return "bad response status/opcode";
    case kStressSetupFailed: return "ring setup failed";
    default: return "unexpected exit";
  }
}

std::uint64_t stress_frames() {
  const char* text = std::getenv("IPCFLOOR_STRESS_FRAMES");
  if (text == nullptr) return kDefaultStressFrames;
  const std::string_view view(text);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(view.data(), view.data() + view.size(), value);
  if (error != std::errc{} || end != view.data() + view.size() || value == 0) {
    return kDefaultStressFrames;
  }
  return value;
}

// A well-mixed 64-bit function of the sequence number (splitmix64 finaliser).
constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

Combo payload_for(std::uint64_t seq) noexcept {
  const std::uint64_t a = mix(seq);
  const std::uint64_t b = mix(a);
  const auto i64 = [](std::uint64_t v) { return static_cast<std::int64_t>(v); };
  return Combo{i64(a), i64(b), i64(a ^ b), i64(a + b), i64(a * 3), i64(b * 5)};
}

std::uint64_t checksum_step(std::uint64_t sum, const Combo& combo) noexcept {
  for (const std::int64_t v : combo.as_array()) sum = (sum ^ static_cast<std::uint64_t>(v)) * 31;
  return sum;
}

void fill_request(RequestSlot& slot, std::uint64_t seq) noexcept {
  slot.seq = seq;
  slot.opcode = static_cast<std::uint16_t>(Opcode::echo);
  slot.flags = 0;
  slot.params = payload_for(seq);
}

// Everything two sides share, laid out as it would be in a segment: control blocks on their
// own lines, slot arrays after them. Lives in a MAP_SHARED mapping so threads and forked
// processes use it the same way.
struct SharedRings {
  RingControl stream_control;
  RingControl request_control;
  RingControl response_control;
  RequestSlot stream[kStreamCapacity];
  RequestSlot requests[kRequestCapacity];
  ResponseSlot responses[kResponseCapacity];
};

// An anonymous shared mapping that survives fork(): the child sees the same physical pages.
class SharedMapping {
 public:
  SharedMapping() {
    void* memory = ::mmap(nullptr, sizeof(SharedRings), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(memory != MAP_FAILED);
    rings_ = ::new (memory) SharedRings{};
  }
  SharedMapping(const SharedMapping&) = delete;
  SharedMapping& operator=(const SharedMapping&) = delete;
  ~SharedMapping() { ::munmap(rings_, sizeof(SharedRings)); }
  SharedRings& rings() { return *rings_; }

 private:
  SharedRings* rings_;
};

// ---- one-way stream ---------------------------------------------------------------------------

// Producer side: publishes `frames` frames, alternating copy-in and zero-copy claim/commit.
int produce_stream(SharedRings& rings, WaitMode mode, std::uint64_t frames, WaitDeadline deadline) {
  auto made = RingProducer<RequestSlot>::make(&rings.stream_control, rings.stream, kStreamCapacity);
  if (!made) return kStressSetupFailed;
  RingProducer<RequestSlot>& producer = *made;
  RequestSlot staged{};
  for (std::uint64_t seq = 0; seq < frames;) {
    bool pushed = false;
    if (seq % 2 == 0) {
      fill_request(staged, seq);
      pushed = producer.try_push(staged);
    } else if (RequestSlot* slot = producer.try_claim()) {
      fill_request(*slot, seq);
      producer.commit();
      pushed = true;
    }
    if (pushed) {
      notify_readable(producer, mode);
      ++seq;
      continue;
    }
    if (producer.corrupt()) return kStressCorrupt;
    if (wait_writable(producer, mode, deadline) == WaitStatus::timeout) return kStressTimeout;
  }
  return kStressOk;
}

struct StreamResult {
  int code = kStressOk;
  std::uint64_t received = 0;
  std::uint64_t checksum = 0;
};

// Consumer side: expects exactly seq 0..frames-1 in order, alternating copy-out and peek/release.
StreamResult consume_stream(SharedRings& rings, WaitMode mode, std::uint64_t frames,
                            WaitDeadline deadline) {
  StreamResult result;
  auto made = RingConsumer<RequestSlot>::make(&rings.stream_control, rings.stream, kStreamCapacity);
  if (!made) return {kStressSetupFailed, 0, 0};
  RingConsumer<RequestSlot>& consumer = *made;
  RequestSlot copy{};
  while (result.received < frames) {
    const RequestSlot* slot = nullptr;
    if (result.received % 2 == 0) {
      const PopStatus status = consumer.try_pop(copy);
      if (status == PopStatus::ok) slot = &copy;
    } else {
      slot = consumer.try_peek();
    }
    if (slot == nullptr) {
      if (consumer.corrupt()) return {kStressCorrupt, result.received, result.checksum};
      if (wait_readable(consumer, mode, deadline) == WaitStatus::timeout) {
        return {kStressTimeout, result.received, result.checksum};
      }
      continue;
    }
    const std::uint64_t expected = result.received;
    const bool seq_ok = slot->seq == expected;
    const bool payload_ok = slot->params == payload_for(expected) &&
                            slot->opcode == static_cast<std::uint16_t>(Opcode::echo);
    result.checksum = checksum_step(result.checksum, slot->params);
    if (slot != &copy) consumer.release();
    notify_writable(consumer, mode);
    if (!seq_ok) return {kStressSeqMismatch, result.received, result.checksum};
    if (!payload_ok) return {kStressPayloadMismatch, result.received, result.checksum};
    ++result.received;
  }
  // Nothing beyond the last frame may appear.
  if (consumer.try_pop(copy) != PopStatus::empty) result.code = kStressSeqMismatch;
  return result;
}

std::uint64_t expected_checksum(std::uint64_t frames) {
  std::uint64_t sum = 0;
  for (std::uint64_t seq = 0; seq < frames; ++seq) sum = checksum_step(sum, payload_for(seq));
  return sum;
}

// ---- request -> response round trips ----------------------------------------------------------

// Engine side: answers every ECHO request in order with its payload; checks what it receives.
int serve_echo(SharedRings& rings, WaitMode mode, std::uint64_t frames, WaitDeadline deadline) {
  auto requests = RingConsumer<RequestSlot>::make(&rings.request_control, rings.requests,
                                                  kRequestCapacity);
  auto responses = RingProducer<ResponseSlot>::make(&rings.response_control, rings.responses,
                                                    kResponseCapacity);
  if (!requests || !responses) return kStressSetupFailed;
  for (std::uint64_t served = 0; served < frames;) {
    const RequestSlot* request = requests->try_peek();
    if (request == nullptr) {
      if (requests->corrupt()) return kStressCorrupt;
      if (wait_readable(*requests, mode, deadline) == WaitStatus::timeout) return kStressTimeout;
      continue;
    }
    ResponseSlot* response = responses->try_claim();
    if (response == nullptr) {
      if (responses->corrupt()) return kStressCorrupt;
      if (wait_writable(*responses, mode, deadline) == WaitStatus::timeout) return kStressTimeout;
      continue;
    }
    if (request->seq != served) return kStressSeqMismatch;
    if (request->params != payload_for(served)) return kStressPayloadMismatch;
    response->seq = request->seq;
    response->status = static_cast<std::uint16_t>(Status::ok);
    response->opcode = request->opcode;
    response->set_echo(request->params);
    responses->commit();
    notify_readable(*responses, mode);
    requests->release();
    notify_writable(*requests, mode);
    ++served;
  }
  return kStressOk;
}

// Client side: keeps up to `window` requests in flight (1 = strict ping-pong) and checks every
// response. window <= kResponseCapacity, so the engine never waits for response space while the
// client waits for request space.
int run_client(SharedRings& rings, WaitMode mode, std::uint64_t frames, std::uint64_t window,
               WaitDeadline deadline) {
  auto requests = RingProducer<RequestSlot>::make(&rings.request_control, rings.requests,
                                                  kRequestCapacity);
  auto responses = RingConsumer<ResponseSlot>::make(&rings.response_control, rings.responses,
                                                    kResponseCapacity);
  if (!requests || !responses) return kStressSetupFailed;
  std::uint64_t sent = 0;
  std::uint64_t received = 0;
  while (received < frames) {
    while (sent < frames && sent - received < window) {
      RequestSlot* slot = requests->try_claim();
      if (slot == nullptr) break;
      fill_request(*slot, sent);
      requests->commit();
      notify_readable(*requests, mode);
      ++sent;
    }
    ResponseSlot response{};
    const PopStatus status = responses->try_pop(response);
    if (status == PopStatus::ok) {
      notify_writable(*responses, mode);
      if (response.seq != received) return kStressSeqMismatch;
      if (response.status != static_cast<std::uint16_t>(Status::ok) ||
          response.opcode != static_cast<std::uint16_t>(Opcode::echo)) {
        return kStressBadResponse;
      }
      if (response.echo() != payload_for(received)) return kStressPayloadMismatch;
      ++received;
      continue;
    }
    if (status == PopStatus::corrupt || requests->corrupt()) return kStressCorrupt;
    const bool want_to_send = sent < frames && sent - received < window;
    const WaitStatus waited = want_to_send && !requests->writable()
                                  ? wait_writable(*requests, mode, deadline)
                                  : wait_readable(*responses, mode, deadline);
    if (waited == WaitStatus::timeout) return kStressTimeout;
  }
  return kStressOk;
}

// ---- process plumbing -------------------------------------------------------------------------

// Waits for `child` until `deadline`; kills it if it is still running then. Returns its exit
// code, or -signal if it died of a signal.
int reap_child(pid_t child, WaitDeadline deadline) {
  int status = 0;
  for (;;) {
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) break;
    if (done < 0) return -1000;
    if (WaitClock::now() >= deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      return kStressTimeout;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return -WTERMSIG(status);
  return -1001;
}

// Runs `body` in a forked child whose exit code is body's result. The child leaves with _exit:
// it must not run the test framework's exit handlers on the parent's behalf.
template <class Body>
pid_t fork_child(Body&& body) {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(body());
  return pid;
}

constexpr WaitMode kAllModes[] = {WaitMode::spin, WaitMode::backoff, WaitMode::block};

std::uint64_t round_trip_frames(WaitMode mode) {
  const std::uint64_t base = stress_frames();
  const std::uint64_t frames = mode == WaitMode::spin ? base / 20 : base / 50;
  return frames == 0 ? 1 : frames;
}

double seconds_since(WaitClock::time_point start) {
  return std::chrono::duration<double>(WaitClock::now() - start).count();
}

}  // namespace

TEST_CASE("stress: two threads, one-way stream, sequence and payload checked") {
  const std::uint64_t frames = stress_frames();
  // backoff in the heavy loop: on a busy 2-core host a pure spinner can burn the peer's core.
  const WaitMode mode = WaitMode::backoff;
  SharedMapping mapping;
  SharedRings& rings = mapping.rings();
  init_ring(rings.stream_control, 0);
  const auto start = WaitClock::now();
  const WaitDeadline deadline = start + kTestBudget;

  StreamResult consumed;
  std::thread consumer([&] { consumed = consume_stream(rings, mode, frames, deadline); });
  const int produced = produce_stream(rings, mode, frames, deadline);
  consumer.join();
  const double seconds = seconds_since(start);

  INFO("producer: " << describe(produced) << ", consumer: " << describe(consumed.code)
                    << " after " << consumed.received << " frames");
  CHECK(produced == kStressOk);
  CHECK(consumed.code == kStressOk);
  CHECK(consumed.received == frames);
  CHECK(consumed.checksum == expected_checksum(frames));
  MESSAGE("two threads: " << frames << " frames in " << seconds << " s ("
                          << static_cast<double>(frames) / seconds / 1e6 << " M frames/s)");
}

TEST_CASE("stress: stream positions start just below 2^64 and wrap mid-run") {
  const std::uint64_t frames = stress_frames() / 10 + kStreamCapacity * 4;
  SharedMapping mapping;
  SharedRings& rings = mapping.rings();
  init_ring(rings.stream_control, ~std::uint64_t{0} - kStreamCapacity * 2);
  const WaitDeadline deadline = WaitClock::now() + kTestBudget;
  StreamResult consumed;
  std::thread consumer(
      [&] { consumed = consume_stream(rings, WaitMode::backoff, frames, deadline); });
  const int produced = produce_stream(rings, WaitMode::backoff, frames, deadline);
  consumer.join();
  INFO("producer: " << describe(produced) << ", consumer: " << describe(consumed.code));
  CHECK(produced == kStressOk);
  CHECK(consumed.code == kStressOk);
  CHECK(consumed.received == frames);
  CHECK(rings.stream_control.consumed.load() == frames - kStreamCapacity * 2 - 1);
}

TEST_CASE("stress: two processes over MAP_SHARED, one-way stream") {
  if (kUnderTsan) {
    MESSAGE("skipped under ThreadSanitizer: TSan does not support fork() with running threads "
            "and cannot see the peer process; the two-thread stress covers the ring");
    return;
  }
  const std::uint64_t frames = stress_frames();
  const WaitMode mode = WaitMode::backoff;
  const std::uint64_t want_checksum = expected_checksum(frames);
  SharedMapping mapping;
  SharedRings& rings = mapping.rings();
  init_ring(rings.stream_control, 0);
  const auto start = WaitClock::now();
  const WaitDeadline deadline = start + kTestBudget;

  const pid_t child = fork_child([&]() -> int {
    const StreamResult result = consume_stream(rings, mode, frames, deadline);
    if (result.code != kStressOk) return result.code;
    return result.checksum == want_checksum ? kStressOk : kStressPayloadMismatch;
  });
  REQUIRE(child > 0);
  const int produced = produce_stream(rings, mode, frames, deadline);
  const int consumed = reap_child(child, deadline + std::chrono::seconds(10));
  const double seconds = seconds_since(start);

  INFO("producer: " << describe(produced) << ", child consumer: " << describe(consumed) << " ("
                    << consumed << ")");
  CHECK(produced == kStressOk);
  CHECK(consumed == kStressOk);
  CHECK(rings.stream_control.consumed.load() == frames);
  MESSAGE("two processes: " << frames << " frames in " << seconds << " s ("
                            << static_cast<double>(frames) / seconds / 1e6 << " M frames/s)");
}

TEST_CASE("stress: request -> response round trips between threads, every wait mode") {
  for (const WaitMode mode : kAllModes) {
    for (const std::uint64_t window : {std::uint64_t{1}, std::uint64_t{kResponseCapacity}}) {
      const std::uint64_t frames = round_trip_frames(mode);
      CAPTURE(to_string(mode));
      CAPTURE(window);
      SharedMapping mapping;
      SharedRings& rings = mapping.rings();
      init_ring(rings.request_control, 0);
      init_ring(rings.response_control, 0);
      const auto start = WaitClock::now();
      const WaitDeadline deadline = start + kTestBudget;
      int served = kStressOk;
      std::thread engine([&] { served = serve_echo(rings, mode, frames, deadline); });
      const int client = run_client(rings, mode, frames, window, deadline);
      engine.join();
      const double seconds = seconds_since(start);
      INFO("client: " << describe(client) << ", engine: " << describe(served));
      CHECK(client == kStressOk);
      CHECK(served == kStressOk);
      MESSAGE("threads, " << to_string(mode) << ", window " << window << ": " << frames
                          << " round trips in " << seconds << " s ("
                          << seconds * 1e9 / static_cast<double>(frames) << " ns each)");
    }
  }
}

TEST_CASE("stress: request -> response round trips between processes, every wait mode") {
  if (kUnderTsan) {
    MESSAGE("skipped under ThreadSanitizer: fork() is not supported there");
    return;
  }
  for (const WaitMode mode : kAllModes) {
    for (const std::uint64_t window : {std::uint64_t{1}, std::uint64_t{kResponseCapacity}}) {
      const std::uint64_t frames = round_trip_frames(mode);
      CAPTURE(to_string(mode));
      CAPTURE(window);
      SharedMapping mapping;
      SharedRings& rings = mapping.rings();
      init_ring(rings.request_control, 0);
      init_ring(rings.response_control, 0);
      const auto start = WaitClock::now();
      const WaitDeadline deadline = start + kTestBudget;
      const pid_t engine = fork_child([&] { return serve_echo(rings, mode, frames, deadline); });
      REQUIRE(engine > 0);
      const int client = run_client(rings, mode, frames, window, deadline);
      const int served = reap_child(engine, deadline + std::chrono::seconds(10));
      const double seconds = seconds_since(start);
      INFO("client: " << describe(client) << ", engine child: " << describe(served) << " ("
                      << served << ")");
      CHECK(client == kStressOk);
      CHECK(served == kStressOk);
      MESSAGE("processes, " << to_string(mode) << ", window " << window << ": " << frames
                            << " round trips in " << seconds << " s ("
                            << seconds * 1e9 / static_cast<double>(frames) << " ns each)");
    }
  }
}

}  // namespace ipcfloor
