// Single-threaded contract of the SPSC ring, its frames and the wait strategies: order, the
// full/empty edges, 64-bit position wrap, corrupt peers, the cached peer index, bounded waits.

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <vector>

#include "shm/frames.hpp"
#include "shm/spsc_ring.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {
namespace {

// A ring in ordinary heap memory: the ring only sees a control block and a slot array.
template <class Slot>
struct TestRing {
  explicit TestRing(std::uint32_t capacity, std::uint64_t start = 0)
      : control(std::make_unique<RingControl>()), slots(capacity), capacity_(capacity) {
    init_ring(*control, start);
  }
  RingProducer<Slot> producer() {
    auto made = RingProducer<Slot>::make(control.get(), slots.data(), capacity_);
    REQUIRE(made.has_value());
    return *made;
  }
  RingConsumer<Slot> consumer() {
    auto made = RingConsumer<Slot>::make(control.get(), slots.data(), capacity_);
    REQUIRE(made.has_value());
    return *made;
  }
  std::unique_ptr<RingControl> control;
  std::vector<Slot> slots;
  std::uint32_t capacity_;
};

RequestSlot request(std::uint64_t seq) {
  const auto v = static_cast<std::int64_t>(seq);
  return RequestSlot{.seq = seq,
                     .opcode = static_cast<std::uint16_t>(Opcode::backtest),
                     .flags = 0,
                     .stamp = 0,
                     .params = Combo{v, v + 1, v + 2, v + 3, v + 4, v + 5}};
}

constexpr std::uint64_t kPoison = 0xDEADBEEFDEADBEEFULL;

}  // namespace

TEST_CASE("frames: layout and echo payload") {
  static_assert(sizeof(RequestSlot) == 64 && alignof(RequestSlot) == 64);
  static_assert(sizeof(ResponseSlot) == 64 && alignof(ResponseSlot) == 64);
  static_assert(std::is_trivially_copyable_v<RequestSlot>);
  static_assert(std::is_trivially_copyable_v<ResponseSlot>);
  static_assert(offsetof(RequestSlot, params) == 16);
  static_assert(offsetof(ResponseSlot, pnl) == 16);

  const Combo combo{3, 6, 2, 1, 2, 3};
  ResponseSlot response{};
  response.set_echo(combo);
  CHECK(response.echo() == combo);
  CHECK(response.seq == 0);  // the echo stays inside the payload
  CHECK(response.trades == 6);
  CHECK(response.extra[3] == 3);

  const Combo extreme{std::numeric_limits<std::int64_t>::min(), -1, 0, 1,
                      std::numeric_limits<std::int64_t>::max(), 42};
  response.set_echo(extreme);
  CHECK(response.echo() == extreme);

  CHECK(to_string(Status::ok) == "ok");
  CHECK(to_string(Status::window_out_of_range) == "window_out_of_range");
  CHECK(to_string(Status::engine_error) == "engine_error");
  CHECK(to_string(static_cast<Status>(999)) == "unknown");
  CHECK(to_string(Opcode::echo) == "echo");
  CHECK(static_cast<std::uint16_t>(Opcode::backtest) == 1);
  CHECK(static_cast<std::uint16_t>(Opcode::echo) == 2);
}

TEST_CASE("ring control: layout") {
  CHECK(sizeof(RingControl) == 384);
  CHECK(offsetof(RingControl, consumed) - offsetof(RingControl, produced) >= 128);
  RingControl zeroed{};
  CHECK(zeroed.produced.load() == 0);
  CHECK(zeroed.consumed.load() == 0);
}

TEST_CASE("ring: make validates its arguments") {
  auto control = std::make_unique<RingControl>();
  std::vector<RequestSlot> slots(16);
  for (const std::uint32_t bad : {0U, 1U, 3U, 6U, 12U, 0x80000001U}) {
    CAPTURE(bad);
    CHECK_FALSE(RingProducer<RequestSlot>::make(control.get(), slots.data(), bad).has_value());
    CHECK_FALSE(RingConsumer<RequestSlot>::make(control.get(), slots.data(), bad).has_value());
  }
  for (const std::uint32_t good : {2U, 4U, 16U}) {
    CAPTURE(good);
    CHECK(RingProducer<RequestSlot>::make(control.get(), slots.data(), good).has_value());
    CHECK(RingConsumer<RequestSlot>::make(control.get(), slots.data(), good).has_value());
  }
  CHECK_FALSE(RingProducer<RequestSlot>::make(nullptr, slots.data(), 16).has_value());
  CHECK_FALSE(RingConsumer<RequestSlot>::make(control.get(), nullptr, 16).has_value());

  // Misaligned control block: half a line into a real one. Only its address is inspected.
  const auto misaligned = reinterpret_cast<std::uintptr_t>(control.get()) + 64;
  auto* shifted = reinterpret_cast<RingControl*>(misaligned);
  const auto error = RingProducer<RequestSlot>::make(shifted, slots.data(), 16);
  REQUIRE_FALSE(error.has_value());
  CHECK(error.error().code == ErrorCode::invalid_argument);
  const auto misaligned_slots = reinterpret_cast<RequestSlot*>(
      reinterpret_cast<std::uintptr_t>(slots.data()) + 8);
  CHECK_FALSE(RingConsumer<RequestSlot>::make(control.get(), misaligned_slots, 8).has_value());

  // Positions already impossible: refuse to attach.
  init_ring(*control, 100);
  control->produced.store(100 + 17);
  const auto inconsistent = RingConsumer<RequestSlot>::make(control.get(), slots.data(), 16);
  REQUIRE_FALSE(inconsistent.has_value());
  CHECK(inconsistent.error().code == ErrorCode::protocol);
}

TEST_CASE("ring: construct_ring starts a ring in raw memory") {
  alignas(RingControl) static unsigned char raw[sizeof(RingControl)];
  std::memset(raw, 0xAB, sizeof raw);
  RingControl* control = construct_ring(raw, 77);
  CHECK(control->produced.load() == 77);
  CHECK(control->consumed.load() == 77);
  CHECK(control->data_word.load() == 0);
  CHECK(control->consumer_sleeping.load() == 0);
}

TEST_CASE("ring: FIFO order, single thread") {
  TestRing<RequestSlot> ring(8);
  auto producer = ring.producer();
  auto consumer = ring.consumer();
  for (std::uint64_t i = 0; i < 5; ++i) REQUIRE(producer.try_push(request(i)));
  CHECK(producer.position() == 5);
  CHECK(producer.size_approx() == 5);
  CHECK(consumer.size_approx() == 5);
  for (std::uint64_t i = 0; i < 5; ++i) {
    RequestSlot out{};
    REQUIRE(consumer.try_pop(out) == PopStatus::ok);
    CHECK(out.seq == i);
    CHECK(out.params == request(i).params);
  }
  CHECK(consumer.position() == 5);
  CHECK(consumer.size_approx() == 0);
}

TEST_CASE("ring: full and empty edges") {
  TestRing<RequestSlot> ring(8);
  auto producer = ring.producer();
  auto consumer = ring.consumer();

  RequestSlot out{};
  out.seq = kPoison;
  CHECK(consumer.try_pop(out) == PopStatus::empty);
  CHECK(out.seq == kPoison);  // untouched on empty
  CHECK(consumer.try_peek() == nullptr);
  CHECK_FALSE(consumer.readable());
  CHECK_FALSE(consumer.corrupt());

  for (std::uint64_t i = 0; i < 8; ++i) REQUIRE(producer.try_push(request(i)));
  CHECK_FALSE(producer.try_push(request(8)));
  CHECK(producer.try_claim() == nullptr);
  CHECK_FALSE(producer.writable());
  CHECK_FALSE(producer.corrupt());
  CHECK(producer.size_approx() == 8);

  REQUIRE(consumer.try_pop(out) == PopStatus::ok);
  CHECK(out.seq == 0);
  CHECK(producer.try_push(request(8)));  // exactly one slot freed
  CHECK_FALSE(producer.try_push(request(9)));

  for (std::uint64_t i = 1; i <= 8; ++i) {
    REQUIRE(consumer.try_pop(out) == PopStatus::ok);
    CHECK(out.seq == i);
  }
  CHECK(consumer.try_pop(out) == PopStatus::empty);
}

TEST_CASE("ring: zero-copy claim/commit and peek/release") {
  TestRing<ResponseSlot> ring(4);
  auto producer = ring.producer();
  auto consumer = ring.consumer();

  ResponseSlot* slot = producer.try_claim();
  REQUIRE(slot != nullptr);
  CHECK(producer.try_claim() == slot);  // same slot until commit
  slot->seq = 41;
  slot->status = static_cast<std::uint16_t>(Status::ok);
  slot->pnl = -5165.577039790348;
  slot->trades = 57029;
  CHECK(consumer.try_peek() == nullptr);  // claimed is not published
  producer.commit();

  const ResponseSlot* seen = consumer.try_peek();
  REQUIRE(seen != nullptr);
  CHECK(seen == slot);  // the very same memory: no copy
  CHECK(seen->seq == 41);
  CHECK(seen->pnl == -5165.577039790348);
  CHECK(seen->trades == 57029);
  CHECK(consumer.try_peek() == seen);  // same slot until release
  consumer.release();
  CHECK(consumer.try_peek() == nullptr);
}

TEST_CASE("ring: 64-bit positions wrap across 2^64 and slot indices wrap many times") {
  constexpr std::uint64_t kStart = std::numeric_limits<std::uint64_t>::max() - 10;
  for (const std::uint32_t capacity : {2U, 4U, 8U}) {
    CAPTURE(capacity);
    TestRing<RequestSlot> ring(capacity, kStart);
    auto producer = ring.producer();
    auto consumer = ring.consumer();
    CHECK(producer.position() == kStart);

    std::uint64_t pushed = 0;
    std::uint64_t popped = 0;
    constexpr std::uint64_t kFrames = 1000;
    std::uint32_t batch = 1;
    while (popped < kFrames) {
      // Vary the fill level so every slot index is used at every fill depth.
      for (std::uint32_t i = 0; i < batch && pushed < kFrames; ++i) {
        if (!producer.try_push(request(pushed))) {
          CHECK(producer.size_approx() == capacity);
          break;
        }
        ++pushed;
      }
      for (std::uint32_t i = 0; i < (batch + 1) / 2 || (pushed == kFrames && popped < pushed);
           ++i) {
        RequestSlot out{};
        const PopStatus status = consumer.try_pop(out);
        if (status == PopStatus::empty) break;
        REQUIRE(status == PopStatus::ok);
        REQUIRE(out.seq == popped);
        REQUIRE(out.params == request(popped).params);
        ++popped;
      }
      batch = batch % (capacity + 1) + 1;
    }
    CHECK(pushed == kFrames);
    CHECK(producer.position() == kStart + kFrames);  // wrapped: a small number
    CHECK(producer.position() < kStart);
    CHECK(consumer.position() == kStart + kFrames);
    CHECK_FALSE(producer.corrupt());
    CHECK_FALSE(consumer.corrupt());

    // The full/empty edges still hold right at the wrap.
    TestRing<RequestSlot> edge(capacity, std::numeric_limits<std::uint64_t>::max());
    auto p = edge.producer();
    auto c = edge.consumer();
    for (std::uint32_t i = 0; i < capacity; ++i) REQUIRE(p.try_push(request(i)));
    CHECK_FALSE(p.try_push(request(capacity)));
    CHECK(p.position() == capacity - 1ULL);  // max + capacity, modulo 2^64
    RequestSlot out{};
    for (std::uint32_t i = 0; i < capacity; ++i) {
      REQUIRE(c.try_pop(out) == PopStatus::ok);
      CHECK(out.seq == i);
    }
    CHECK(c.try_pop(out) == PopStatus::empty);
  }
}

TEST_CASE("ring: a corrupt producer position is reported, never read") {
  TestRing<RequestSlot> ring(8, 1000);
  auto producer = ring.producer();
  auto consumer = ring.consumer();
  for (auto& slot : ring.slots) slot.seq = kPoison;
  REQUIRE(producer.try_push(request(0)));
  RequestSlot out{};
  REQUIRE(consumer.try_pop(out) == PopStatus::ok);

  SUBCASE("too far ahead") { ring.control->produced.store(consumer.position() + 8 + 1); }
  SUBCASE("behind the consumer") { ring.control->produced.store(consumer.position() - 2); }
  SUBCASE("wildly off") { ring.control->produced.store(0xFFFF'0000'0000'0000ULL); }

  out.seq = kPoison - 1;
  CHECK(consumer.try_pop(out) == PopStatus::corrupt);
  CHECK(out.seq == kPoison - 1);  // nothing copied
  CHECK(consumer.try_peek() == nullptr);
  CHECK(consumer.corrupt());
  CHECK(consumer.readable());  // a waiter must wake up and see the verdict
  CHECK(wait_readable(consumer, WaitMode::spin, WaitClock::now()) == WaitStatus::ready);
  CHECK(consumer.position() == 1001);  // never advanced

  // Latched: restoring a sane value does not make the handle trust the ring again.
  ring.control->produced.store(consumer.position());
  CHECK(consumer.try_pop(out) == PopStatus::corrupt);
}

TEST_CASE("ring: a producer position one behind the consumer is legal (the stamp is stored first)") {
  TestRing<RequestSlot> ring(8, 1000);
  auto producer = ring.producer();
  auto consumer = ring.consumer();
  REQUIRE(producer.try_push(request(0)));
  RequestSlot out{};
  REQUIRE(consumer.try_pop(out) == PopStatus::ok);
  // As if the consumer read the stamped frame before the producer's position store landed.
  ring.control->produced.store(consumer.position() - 1);
  CHECK(consumer.try_pop(out) == PopStatus::empty);
  CHECK_FALSE(consumer.corrupt());
  CHECK_FALSE(consumer.probe_corrupt());
  ring.control->produced.store(consumer.position());
  REQUIRE(producer.try_push(request(1)));
  REQUIRE(consumer.try_pop(out) == PopStatus::ok);
  CHECK(out.seq == 1);
}

TEST_CASE("ring: a frame is published by its slot's stamp, which users never write") {
  TestRing<ResponseSlot> ring(4, 7);
  auto producer = ring.producer();
  auto consumer = ring.consumer();
  ResponseSlot* slot = producer.try_claim();
  REQUIRE(slot != nullptr);
  CHECK(slot->stamp == 0);  // fresh memory: never looks published
  ResponseSlot payload{};
  payload.seq = 42;
  payload.stamp = ring_stamp(7);  // a user's stamp is ignored by copy_slot_payload
  copy_slot_payload(*slot, payload);
  CHECK(slot->stamp == 0);
  CHECK(consumer.try_peek() == nullptr);  // written, not committed
  producer.commit();
  CHECK(slot->stamp == ring_stamp(7));
  const ResponseSlot* seen = consumer.try_peek();
  REQUIRE(seen == slot);
  CHECK(seen->seq == 42);
  consumer.release();
  // Stamps are odd, and differ from the same slot's stamp one lap earlier for every capacity.
  CHECK(ring_stamp(0) == 1);
  CHECK(ring_stamp(~std::uint64_t{0}) % 2 == 1);
  for (std::uint64_t capacity = 2; capacity <= (std::uint64_t{1} << 30); capacity <<= 1)
    CHECK(ring_stamp(1000 + capacity) != ring_stamp(1000));
  clear_ring_stamps(ring.slots.data(), 4);
  CHECK(slot->stamp == 0);
}

TEST_CASE("ring: a corrupt consumer position stops the producer") {
  TestRing<RequestSlot> ring(4);
  auto producer = ring.producer();
  for (std::uint64_t i = 0; i < 4; ++i) REQUIRE(producer.try_push(request(i)));
  // The consumer claims to have read more than was ever produced.
  ring.control->consumed.store(producer.position() + 3);
  CHECK_FALSE(producer.try_push(request(4)));
  CHECK(producer.corrupt());
  CHECK(producer.try_claim() == nullptr);
  CHECK(producer.position() == 4);
  CHECK(wait_writable(producer, WaitMode::backoff, WaitClock::now()) == WaitStatus::timeout);
}

TEST_CASE("ring: an idle consumer rechecks the producer position every kEmptyPollsPerBoundsCheck empty polls") {
  TestRing<RequestSlot> ring(8, 500);
  auto producer = ring.producer();
  auto consumer = ring.consumer();
  REQUIRE(producer.try_push(request(0)));
  RequestSlot out{};
  REQUIRE(consumer.try_pop(out) == PopStatus::ok);
  CHECK(consumer.try_pop(out) == PopStatus::empty);  // first empty poll after a frame: checked, sane
  ring.control->produced.store(consumer.position() + 100);  // impossible from now on
  for (std::uint32_t poll = 1; poll < kEmptyPollsPerBoundsCheck; ++poll) {
    CAPTURE(poll);
    REQUIRE(consumer.try_pop(out) == PopStatus::empty);  // not looked at on these polls
  }
  CHECK_FALSE(consumer.corrupt());
  CHECK(consumer.try_pop(out) == PopStatus::corrupt);  // the periodic check finds it
  CHECK(consumer.position() == 501);

  SUBCASE("a frame resets the period: the first empty poll after it checks again") {
    TestRing<RequestSlot> fresh(8, 900);
    auto fresh_producer = fresh.producer();
    auto fresh_consumer = fresh.consumer();
    CHECK(fresh_consumer.try_pop(out) == PopStatus::empty);  // checked: starts the period
    CHECK(fresh_consumer.try_pop(out) == PopStatus::empty);  // inside the period
    REQUIRE(fresh_producer.try_push(request(1)));
    REQUIRE(fresh_consumer.try_pop(out) == PopStatus::ok);
    fresh.control->produced.store(fresh_consumer.position() - 2);
    CHECK(fresh_consumer.try_pop(out) == PopStatus::corrupt);
  }
}

TEST_CASE("ring: cached peer positions avoid reloading the other side's line") {
  // Poke an impossible value into the peer's position: a handle that reloaded it would latch
  // corrupt at once. Staying healthy proves it worked from its cache.
  SUBCASE("producer reloads consumed only when it looks full") {
    TestRing<RequestSlot> ring(8);
    auto producer = ring.producer();  // caches consumed = 0
    ring.control->consumed.store(0xBAD);
    for (std::uint64_t i = 0; i < 8; ++i) REQUIRE(producer.try_push(request(i)));
    CHECK_FALSE(producer.corrupt());
    CHECK_FALSE(producer.try_push(request(8)));  // looks full: reloads, sees garbage
    CHECK(producer.corrupt());
  }
  SUBCASE("consumer reloads produced only when it looks empty") {
    TestRing<RequestSlot> ring(8);
    auto producer = ring.producer();
    auto consumer = ring.consumer();
    for (std::uint64_t i = 0; i < 5; ++i) REQUIRE(producer.try_push(request(i)));
    RequestSlot out{};
    REQUIRE(consumer.try_pop(out) == PopStatus::ok);  // looked empty: reloaded, caches 5
    ring.control->produced.store(0xBAD);
    for (std::uint64_t i = 1; i < 5; ++i) {
      REQUIRE(consumer.try_pop(out) == PopStatus::ok);
      CHECK(out.seq == i);
    }
    CHECK_FALSE(consumer.corrupt());
    CHECK(consumer.try_pop(out) == PopStatus::corrupt);  // looks empty: reloads, sees garbage
  }
}

TEST_CASE("wait strategies: parse and name") {
  for (const WaitMode mode : {WaitMode::spin, WaitMode::backoff, WaitMode::block}) {
    const auto parsed = parse_wait_mode(to_string(mode));
    REQUIRE(parsed.has_value());
    CHECK(*parsed == mode);
  }
  const auto bad = parse_wait_mode("busy");
  REQUIRE_FALSE(bad.has_value());
  CHECK(bad.error().code == ErrorCode::invalid_argument);
  CHECK(bad.error().message.find("busy") != std::string::npos);
}

TEST_CASE("wait strategies: ready at once, bounded otherwise") {
  using std::chrono::milliseconds;
  for (const WaitMode mode : {WaitMode::spin, WaitMode::backoff, WaitMode::block}) {
    CAPTURE(to_string(mode));
    TestRing<RequestSlot> ring(2);
    auto producer = ring.producer();
    auto consumer = ring.consumer();

    auto start = WaitClock::now();
    CHECK(wait_readable(consumer, mode, start + milliseconds(20)) == WaitStatus::timeout);
    auto waited = WaitClock::now() - start;
    CHECK(waited >= milliseconds(20));
    CHECK(waited < milliseconds(2000));
    CHECK(ring.control->consumer_sleeping.load() == 0);  // the announcement is withdrawn

    CHECK(wait_writable(producer, mode, WaitClock::now()) == WaitStatus::ready);
    REQUIRE(producer.try_push(request(0)));
    REQUIRE(producer.try_push(request(1)));
    notify_readable(producer, mode);
    CHECK(wait_readable(consumer, mode, WaitClock::now()) == WaitStatus::ready);

    start = WaitClock::now();
    CHECK(wait_writable(producer, mode, start + milliseconds(20)) == WaitStatus::timeout);
    waited = WaitClock::now() - start;
    CHECK(waited >= milliseconds(20));
    CHECK(waited < milliseconds(2000));
    CHECK(ring.control->producer_sleeping.load() == 0);
  }
}

TEST_CASE("wait strategies: notify in spin and backoff mode touches nothing shared") {
  TestRing<RequestSlot> ring(2);
  auto producer = ring.producer();
  auto consumer = ring.consumer();
  ring.control->consumer_sleeping.store(1);  // even a (bogus) sleeper is ignored
  ring.control->producer_sleeping.store(1);
  notify_readable(producer, WaitMode::spin);
  notify_writable(consumer, WaitMode::backoff);
  CHECK(ring.control->data_word.load() == 0);
  CHECK(ring.control->space_word.load() == 0);
  notify_readable(producer, WaitMode::block);  // a sleeper is announced: bump and wake
  CHECK(ring.control->data_word.load() == 1);
}

TEST_CASE("wait strategies: block mode wakes a sleeping consumer and producer") {
  using std::chrono::milliseconds;
  TestRing<RequestSlot> ring(2);
  auto producer = ring.producer();
  auto consumer = ring.consumer();

  // Consumer sleeps on an empty ring; the producer publishes after a while and notifies.
  WaitStatus seen = WaitStatus::timeout;
  WaitClock::duration took{};
  std::thread waiter([&] {
    const auto start = WaitClock::now();
    seen = wait_readable(consumer, WaitMode::block, start + std::chrono::seconds(30));
    took = WaitClock::now() - start;
  });
  std::this_thread::sleep_for(milliseconds(50));
  REQUIRE(producer.try_push(request(0)));
  notify_readable(producer, WaitMode::block);
  waiter.join();
  CHECK(seen == WaitStatus::ready);
  CHECK(took < std::chrono::seconds(10));

  // Producer sleeps on a full ring; the consumer frees a slot after a while and notifies.
  REQUIRE(producer.try_push(request(1)));
  std::thread freer([&] {
    std::this_thread::sleep_for(milliseconds(50));
    RequestSlot out{};
    seen = consumer.try_pop(out) == PopStatus::ok ? WaitStatus::ready : WaitStatus::timeout;
    notify_writable(consumer, WaitMode::block);
  });
  const auto start = WaitClock::now();
  const WaitStatus space =
      wait_writable(producer, WaitMode::block, start + std::chrono::seconds(30));
  took = WaitClock::now() - start;
  freer.join();
  CHECK(seen == WaitStatus::ready);
  CHECK(space == WaitStatus::ready);
  CHECK(took < std::chrono::seconds(10));
}

}  // namespace ipcfloor
