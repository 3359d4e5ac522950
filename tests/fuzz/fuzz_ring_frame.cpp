// fuzz-sources: engine/dispatch.cpp engine/compute.cpp engine/admission.cpp common/trade_stats.cpp kernel/kernel.cpp kernel/isa.cpp kernel/path_scalar.cpp
// fuzz-sources: kernel/strategy.cpp kernel/hma_strategy.cpp kernel/workspace.cpp kernel/cost_rate.cpp kernel/live_signal.cpp
// fuzz-sources: kernel/path_avx2.cpp:-mavx2 kernel/path_avx512.cpp:-mavx512f
// fuzz-libs: -lfmt
//
// libFuzzer harness for the ring frame validator (docs/SPEC.md §3, §8): the input is what a corrupt or
// hostile peer can leave in one lane of the shared segment. It sets both ring positions, the
// bytes of every request slot (the ring-owned stamps included), and the further position and
// stamp writes the peer makes while the engine reads. A RingConsumer reads that ring exactly as the serving thread does, and every frame it
// yields goes through dispatch_request against a tiny series. A RingProducer faces a hostile
// `consumed` the same way (the engine's side of the response ring).
//
// Build (tools/fuzz does this for every tests/fuzz/fuzz_*.cpp), from the repository root:
//   clang++-19 -std=c++23 -O1 -g -I. -fsanitize=fuzzer,address,undefined
//     tests/fuzz/fuzz_ring_frame.cpp engine/dispatch.cpp kernel/kernel.cpp kernel/isa.cpp kernel/path_scalar.cpp
//     path_avx2.o path_avx512.o -o fuzz_ring_frame
//   where each path_<isa>.o is its source compiled alone with -fsanitize=fuzzer-no-link and its
//   target flag (-mavx2, -mavx512f), as kernel/CMakeLists.txt does
//   ./fuzz_ring_frame -runs=10000000
// fmt is compiled into this file (FMT_HEADER_ONLY below), so no -lfmt is needed: the error
// messages of the setup paths (ring make(), run_sweep in kernel.cpp) link against it.
//
// Invariants (a violation traps, which libFuzzer records as a crash):
//   - make() accepts a pair of positions exactly when produced - consumed <= capacity;
//   - every slot handed out is slots[position & mask] for the consumer's own next position, so
//     it lies inside the slot array (ASan enforces it too: the array is its own allocation of
//     exactly `capacity` slots);
//   - a frame is only handed out when its slot carries the stamp of the consumer's position;
//   - corrupt latches only when the published position is impossible for the consumer's own
//     (outside [consumed - 1, consumed + capacity]), and only on an empty poll that checks it:
//     the first after a frame or a restart, then every kEmptyPollsPerBoundsCheck-th;
//   - once corrupt, a handle stays corrupt and hands out nothing, and readable() stays true,
//     until the engine restarts the ring (init_ring + clear_ring_stamps + restart()), which
//     makes it empty and sane;
//   - dispatch_request answers every frame: seq and opcode echoed, the ring-owned stamp left
//     alone, the status it returns is the one stored, and it is the status the frame deserves
//     (flags, unknown opcode, windows outside [1, n_bars], bulk ranges outside the lane's bulk
//     region); ECHO returns the payload verbatim, ECHO_BULK copies inside the region only.

// Before any header that pulls in fmt: its one out-of-line function (vformat) is then defined
// here, which also satisfies kernel.cpp's reference to it (see kFmtVformat).
#define FMT_HEADER_ONLY 1

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include <fuzzer/FuzzedDataProvider.h>

#include "engine/dispatch.hpp"
#include "kernel/kernel.hpp"
#include "shm/frames.hpp"
#include "shm/spsc_ring.hpp"

// The out-of-line copy of fmt::vformat that kernel.cpp links against: taking its address makes
// the compiler emit one even where every call here was inlined.
[[gnu::used]] std::string (*const kFmtVformat)(fmt::string_view, fmt::format_args) = &fmt::vformat;

namespace {

using namespace ipcfloor;

constexpr std::size_t kBars = 16;  // tiny: a BACKTEST costs next to nothing
constexpr std::size_t kMaxSteps = 256;
constexpr std::size_t kBulkBytes = 256;  // the lane's bulk region: its own allocation, for ASan

#define FUZZ_CHECK(condition) \
  do {                        \
    if (!(condition)) __builtin_trap(); \
  } while (false)

// Shared across runs: built once, read-only (series) or scratch (workspace) afterwards.
struct Fixture {
  std::vector<double> close;
  KernelWorkspace workspace{hma_workspace_bytes(kBars)};
  std::unique_ptr<std::byte[]> bulk = std::make_unique<std::byte[]>(kBulkBytes);
  Fixture() : close(kBars) {
    for (std::size_t i = 0; i < kBars; ++i) close[i] = 100.0 + static_cast<double>((i * 7) % 5) - static_cast<double>(i % 3);
  }
};

Fixture& fixture() {
  static Fixture instance;
  return instance;
}

Status expected_status(const RequestSlot& request) {
  // Above the operation's byte only the options bit is defined; dispatch_request passes no options
  // line, so the bit asks for nothing more.
  if ((request.opcode & ~(kOpcodeMask | kOpcodeWithOptions)) != 0) return Status::unknown_opcode;
  const bool with_options = (request.opcode & kOpcodeWithOptions) != 0;
  const auto op = static_cast<Opcode>(request.opcode & kOpcodeMask);
  if (op == Opcode::backtest || op == Opcode::stats || op == Opcode::trades) {
    // The flags name the strategy (high byte) and the series (low byte): one of each here.
    if ((request.flags >> 8) != 0) return Status::no_such_strategy;
    if ((request.flags & 0xFF) != 0) return Status::no_such_series;
    for (const std::int64_t window : request.params.as_array())
      if (window < 1 || window > static_cast<std::int64_t>(kBars)) return Status::window_out_of_range;
    return Status::ok;
  }
  if (op == Opcode::append || op == Opcode::subscribe || op == Opcode::snapshot)
    return with_options ? Status::reserved_bits_set : Status::not_live;
  if (request.flags != 0 || with_options) return Status::reserved_bits_set;
  if (request.opcode == static_cast<std::uint16_t>(Opcode::echo)) return Status::ok;
  if (request.opcode == static_cast<std::uint16_t>(Opcode::echo_bulk)) {
    const BulkEcho bulk = BulkEcho::from_params(request.params);
    if (bulk.unused[0] != 0 || bulk.unused[1] != 0 || bulk.unused[2] != 0) return Status::bulk_out_of_range;
    // In 128-bit arithmetic: the model must not share the engine's overflow reasoning.
    const auto end = [&](std::uint64_t offset) { return static_cast<unsigned __int128>(offset) + bulk.bytes; };
    if (end(bulk.in_offset) > kBulkBytes || end(bulk.out_offset) > kBulkBytes) return Status::bulk_out_of_range;
    const bool disjoint = end(bulk.in_offset) <= bulk.out_offset || end(bulk.out_offset) <= bulk.in_offset;
    return disjoint ? Status::ok : Status::bulk_out_of_range;
  }
  return Status::unknown_opcode;
}

void check_dispatch(const RequestSlot& request) {
  Fixture& f = fixture();
  ResponseSlot response;
  std::memset(&response, 0xA5, sizeof response);  // dispatch must overwrite every other field
  std::vector<std::byte> before(f.bulk.get(), f.bulk.get() + kBulkBytes);
  const Status status = dispatch_request(request, f.close, 0.09, f.workspace, response,
                                         std::span<std::byte>(f.bulk.get(), kBulkBytes));
  FUZZ_CHECK(response.seq == request.seq);
  FUZZ_CHECK(response.opcode == request.opcode);
  FUZZ_CHECK(response.stamp == 0xA5A5A5A5U);  // the ring's, never dispatch's
  FUZZ_CHECK(response.status == static_cast<std::uint16_t>(status));
  FUZZ_CHECK(status == expected_status(request));
  if (status != Status::ok) return;
  if (request.opcode == static_cast<std::uint16_t>(Opcode::echo)) {
    FUZZ_CHECK(response.echo() == request.params);
  } else if (request.opcode == static_cast<std::uint16_t>(Opcode::echo_bulk)) {
    const BulkEcho bulk = BulkEcho::from_params(request.params);
    FUZZ_CHECK(response.trades == static_cast<std::int64_t>(bulk.bytes));
    for (std::size_t i = 0; i < kBulkBytes; ++i) {
      const bool copied = i >= bulk.out_offset && i - bulk.out_offset < bulk.bytes;
      FUZZ_CHECK(f.bulk[i] == (copied ? before[bulk.in_offset + (i - bulk.out_offset)] : before[i]));
    }
  } else {
    FUZZ_CHECK(response.trades >= 0);
    FUZZ_CHECK(!std::isnan(response.pnl));
  }
}

// A ring in its own allocations, so ASan sees any access outside the control block or slots.
template <class Slot>
struct HostileRing {
  std::unique_ptr<RingControl> control = std::make_unique<RingControl>();
  std::unique_ptr<Slot[]> slots;
  std::uint32_t capacity;
  explicit HostileRing(std::uint32_t slots_count) : slots(new Slot[slots_count]), capacity(slots_count) {}
  [[nodiscard]] bool in_array(const Slot* slot) const noexcept {
    return slot >= slots.get() && slot < slots.get() + capacity;
  }
};

// A position for the peer to publish: mostly near `base` (within or just beyond the capacity,
// or just behind), sometimes anything at all.
std::uint64_t hostile_position(FuzzedDataProvider& input, std::uint64_t base, std::uint32_t capacity) {
  switch (input.ConsumeIntegralInRange<int>(0, 3)) {
    case 0: return base + input.ConsumeIntegralInRange<std::uint64_t>(0, capacity);
    case 1: return base + capacity + 1 + input.ConsumeIntegralInRange<std::uint64_t>(0, 3);
    case 2: return base - 1 - input.ConsumeIntegralInRange<std::uint64_t>(0, 3);
    default: return input.ConsumeIntegral<std::uint64_t>();
  }
}

// The consumer's verdict on a published position, restated independently: legal positions lie
// in [tail - 1, tail + capacity] (the stamp is stored before the position).
bool impossible(std::uint64_t head, std::uint64_t tail, std::uint32_t capacity) {
  const std::uint64_t ahead = head - tail;
  return !(ahead <= capacity || head == tail - 1);
}

void fuzz_consumer(FuzzedDataProvider& input, std::uint32_t capacity) {
  HostileRing<RequestSlot> ring(capacity);
  for (std::uint32_t i = 0; i < capacity; ++i) {
    const std::vector<std::uint8_t> bytes = input.ConsumeBytes<std::uint8_t>(sizeof(RequestSlot));
    std::memset(&ring.slots[i], 0, sizeof(RequestSlot));
    if (!bytes.empty()) std::memcpy(&ring.slots[i], bytes.data(), bytes.size());
  }
  const std::uint64_t start = input.ConsumeBool() ? input.ConsumeIntegral<std::uint64_t>()
                                                  : ~std::uint64_t{0} - input.ConsumeIntegralInRange<std::uint64_t>(0, 40);
  const std::uint64_t first_head = hostile_position(input, start, capacity);

  // Verdict on positions found at attach time.
  init_ring(*ring.control, start);
  ring.control->produced.store(first_head, std::memory_order_relaxed);  // relaxed: single thread
  auto at_attach = RingConsumer<RequestSlot>::make(ring.control.get(), ring.slots.get(), capacity);
  FUZZ_CHECK(at_attach.has_value() == (first_head - start <= capacity));
  if (!at_attach) FUZZ_CHECK(at_attach.error().code == ErrorCode::protocol);
  // The engine's way (adopt): it always comes up, and the first look judges the slot's stamp,
  // then (only when the stamp says "not yet") the position.
  auto adopted = RingConsumer<RequestSlot>::adopt(ring.control.get(), ring.slots.get(), capacity);
  FUZZ_CHECK(adopted.has_value());
  const RequestSlot* first = adopted->try_peek();
  const bool first_stamped = ring.slots[start & (capacity - 1)].stamp == ring_stamp(start);
  FUZZ_CHECK((first != nullptr) == first_stamped);
  FUZZ_CHECK(adopted->corrupt() == (!first_stamped && impossible(first_head, start, capacity)));
  if (first != nullptr) FUZZ_CHECK(first == &ring.slots[start & (capacity - 1)]);

  // The same positions written by the peer after attach, then more writes while reading.
  init_ring(*ring.control, start);
  auto made = RingConsumer<RequestSlot>::make(ring.control.get(), ring.slots.get(), capacity);
  FUZZ_CHECK(made.has_value());
  RingConsumer<RequestSlot> consumer = *made;
  std::uint64_t head = first_head;  // the position the peer published last
  ring.control->produced.store(first_head, std::memory_order_relaxed);  // relaxed: single thread

  std::uint64_t tail = start;  // the consumer's position, modelled
  bool was_corrupt = false;
  // Empty polls left before the consumer looks at the position again, modelled: zero after a
  // frame or a restart, so that poll checks; then it checks every kEmptyPollsPerBoundsCheck-th.
  std::uint32_t polls_to_check = 0;
  const auto empty_poll_checks = [&polls_to_check] {
    if (polls_to_check != 0) {
      --polls_to_check;
      return false;
    }
    polls_to_check = kEmptyPollsPerBoundsCheck - 1;
    return true;
  };
  for (std::size_t step = 0; step < kMaxSteps && input.remaining_bytes() > 0; ++step) {
    const bool stamped_now = ring.slots[tail & (capacity - 1)].stamp == ring_stamp(tail);
    switch (input.ConsumeIntegralInRange<int>(0, 6)) {
      case 6: {  // the peer stamps a slot as a commit would, for a position near the consumer's
        const std::uint64_t position = tail + input.ConsumeIntegralInRange<std::uint64_t>(0, capacity);
        ring.slots[position & (capacity - 1)].stamp = ring_stamp(position - input.ConsumeIntegralInRange<int>(0, 1));
        break;
      }
      case 5:  // a client's slow path looks at the position whatever the stamps say
        FUZZ_CHECK(consumer.probe_corrupt() == (was_corrupt || impossible(head, tail, capacity)));
        break;
      case 4: {  // the engine takes the lane back (ShmServer::reset_lane): empty at any position
        const std::uint64_t position = input.ConsumeBool() ? input.ConsumeIntegral<std::uint64_t>() : tail;
        init_ring(*ring.control, position);
        clear_ring_stamps(ring.slots.get(), capacity);
        consumer.restart(position);
        FUZZ_CHECK(!consumer.corrupt() && consumer.position() == position && consumer.try_peek() == nullptr);
        tail = position;
        head = position;
        was_corrupt = false;
        polls_to_check = kEmptyPollsPerBoundsCheck - 1;  // that try_peek was the checking poll
        continue;
      }
      case 0: {  // the peer publishes another position
        head = hostile_position(input, tail, capacity);
        ring.control->produced.store(head, std::memory_order_relaxed);  // relaxed: single thread
        break;
      }
      case 1: {  // the peer scribbles on a slot (stamp included), as a client may after publishing it
        const auto index = input.ConsumeIntegralInRange<std::uint32_t>(0, capacity - 1);
        const auto offset = input.ConsumeIntegralInRange<std::size_t>(0, sizeof(RequestSlot) - 1);
        reinterpret_cast<unsigned char*>(&ring.slots[index])[offset] = input.ConsumeIntegral<std::uint8_t>();
        break;
      }
      case 2: {  // the serving thread's way: peek, private copy, dispatch, release
        const RequestSlot* shared = consumer.try_peek();
        FUZZ_CHECK((shared != nullptr) == (!was_corrupt && stamped_now));
        if (shared == nullptr) {
          const bool checked = !was_corrupt && empty_poll_checks();
          FUZZ_CHECK(consumer.corrupt() == (was_corrupt || (checked && impossible(head, tail, capacity))));
          break;
        }
        FUZZ_CHECK(ring.in_array(shared));
        FUZZ_CHECK(shared == &ring.slots[tail & (capacity - 1)]);
        const RequestSlot request = *shared;
        consumer.release();
        ++tail;
        polls_to_check = 0;
        FUZZ_CHECK(consumer.position() == tail);
        check_dispatch(request);
        break;
      }
      default: {
        RequestSlot out{};
        const PopStatus status = consumer.try_pop(out);
        FUZZ_CHECK((status == PopStatus::ok) == (!was_corrupt && stamped_now));
        if (status == PopStatus::ok) {
          ++tail;
          polls_to_check = 0;
          check_dispatch(out);
        } else {
          const bool checked = !was_corrupt && empty_poll_checks();
          FUZZ_CHECK((status == PopStatus::corrupt) == consumer.corrupt());
          FUZZ_CHECK(consumer.corrupt() == (was_corrupt || (checked && impossible(head, tail, capacity))));
        }
        break;
      }
    }
    if (was_corrupt) FUZZ_CHECK(consumer.corrupt() && consumer.readable());
    was_corrupt = consumer.corrupt();
  }
}

void fuzz_producer(FuzzedDataProvider& input, std::uint32_t capacity) {
  HostileRing<ResponseSlot> ring(capacity);
  const std::uint64_t start = input.ConsumeIntegral<std::uint64_t>();
  init_ring(*ring.control, start);
  // The engine's way: adopt trusts only its own `produced`; the peer's `consumed` may already
  // be anything.
  if (input.ConsumeBool()) {
    ring.control->consumed.store(input.ConsumeIntegral<std::uint64_t>(), std::memory_order_relaxed);  // relaxed: single thread
  }
  auto made = RingProducer<ResponseSlot>::adopt(ring.control.get(), ring.slots.get(), capacity);
  FUZZ_CHECK(made.has_value());
  RingProducer<ResponseSlot> producer = *made;
  std::uint64_t head = start;
  bool was_corrupt = false;
  for (std::size_t step = 0; step < kMaxSteps && input.remaining_bytes() > 0; ++step) {
    if (input.ConsumeIntegralInRange<int>(0, 15) == 0) {  // the engine takes the lane back
      head = input.ConsumeIntegral<std::uint64_t>();
      init_ring(*ring.control, head);
      producer.restart(head);
      FUZZ_CHECK(!producer.corrupt() && producer.position() == head && producer.writable());
      was_corrupt = false;
      continue;
    }
    if (input.ConsumeBool()) {
      // The peer (the client) publishes a consumer position: any value, or a plausible one.
      const std::uint64_t tail = input.ConsumeBool() ? input.ConsumeIntegral<std::uint64_t>()
                                                     : head - input.ConsumeIntegralInRange<std::uint64_t>(0, capacity + 1);
      ring.control->consumed.store(tail, std::memory_order_relaxed);  // relaxed: single thread
    } else {
      ResponseSlot* slot = producer.try_claim();
      if (slot == nullptr) continue;
      FUZZ_CHECK(!was_corrupt);
      FUZZ_CHECK(ring.in_array(slot));
      FUZZ_CHECK(slot == &ring.slots[head & (capacity - 1)]);
      ResponseSlot payload;
      std::memset(&payload, 0x5A, sizeof payload);
      copy_slot_payload(*slot, payload);  // a user never writes the ring-owned stamp
      producer.commit();
      FUZZ_CHECK(slot->stamp == ring_stamp(head) && slot->seq == payload.seq && slot->extra[3] == payload.extra[3]);
      ++head;
      FUZZ_CHECK(ring.control->produced.load(std::memory_order_relaxed) == head);  // relaxed: single thread
    }
    if (was_corrupt) FUZZ_CHECK(producer.corrupt() && !producer.writable());
    was_corrupt = producer.corrupt();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider input(data, size);
  const std::uint32_t capacity = 2U << input.ConsumeIntegralInRange<unsigned>(0, 3);  // 2..16 slots
  if (input.ConsumeBool()) {
    fuzz_consumer(input, capacity);
  } else {
    fuzz_producer(input, capacity);
  }
  return 0;
}
