#include "clients/shm_client.hpp"

#include <cstring>

#include <unistd.h>

#include <thread>
#include <utility>

#include <fmt/format.h>

#include "shm/lane.hpp"
#include "shm/liveness.hpp"

namespace ipcfloor {
namespace {

// A heartbeat older than this many intervals means the engine is not serving (stopped or hung).
constexpr std::uint64_t kStaleHeartbeats = 3;
// Polls before a spin or backoff wait reads the clock to set its deadline. A vDSO clock read
// costs tens of ns, a large share of a round trip through the ring, so the common case never
// makes one.
constexpr std::uint32_t kPollsBeforeDeadline = 2048;
// How often connect() looks again while a lane is being freed (setup path: sleeping is fine).
constexpr std::chrono::microseconds kLaneFreeingPoll{500};

// The setup-path ErrorCode for a failed call.
ErrorCode error_code(CallStatus status) noexcept {
  switch (status) {
    case CallStatus::engine_gone: return ErrorCode::peer_gone;
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
    case CallStatus::corrupt: return "corrupt ring";
    case CallStatus::out_of_order: return "answer out of order";
    case CallStatus::empty: return "empty";
    case CallStatus::too_large: return "payload too large for the bulk region";
  }
  return "unknown";
}

Expected<ShmClient> ShmClient::connect(std::string_view name, const ShmClientOptions& options) {
  auto segment = Segment::attach(name, options.tmpfs_dir);
  if (!segment) return std::unexpected(segment.error());
  SegmentHeader& header = segment->header();
  const auto engine_mode = static_cast<WaitMode>(header.wait_mode);
  const WaitMode mode = options.wait.value_or(engine_mode);
  if (mode == WaitMode::block && engine_mode != WaitMode::block)
    return fail(ErrorCode::invalid_argument,
                "engine {} serves in {} mode and never wakes sleeping clients; use --wait spin or "
                "backoff, or start the engine with --wait block",
                name, to_string(engine_mode));

  const auto pid = static_cast<std::int32_t>(getpid());
  const auto deadline = WaitClock::now() + options.timeout;
  for (;;) {
    // A lane that is not free yet but will be without anyone's help: its client just closed it
    // (releasing), or died (reclaiming, or still claimed by a dead pid until the engine's next
    // heartbeat). Worth a bounded wait: a client that reconnects right after another closed,
    // or after a crash, must not be told "busy".
    bool freeing = false;
    for (std::uint32_t i = 0; i < segment->lane_count(); ++i) {
      const LaneView view = segment->lane(i);
      const ClaimOutcome claim = try_claim_lane(*view.control, pid);
      if (claim != ClaimOutcome::claimed) {
        freeing |= claim == ClaimOutcome::freeing;
        continue;
      }
      auto requests = RingProducer<RequestSlot>::make(view.request_ring, view.request_slots, segment->ring_capacity());
      auto responses = RingConsumer<ResponseSlot>::make(view.response_ring, view.response_slots, segment->ring_capacity());
      if (!requests || !responses) {
        release_lane(*view.control, pid);
        return std::unexpected(requests ? responses.error() : requests.error());
      }
      const auto timeout = options.timeout;
      return ShmClient(std::move(*segment), i, mode, timeout, *requests, *responses);
    }
    if (!freeing || WaitClock::now() >= deadline) break;
    if (!process_alive(header.engine_pid, header.engine_start_ticks))
      return fail(ErrorCode::peer_gone, "engine {} (pid {}) is gone", name, header.engine_pid);
    std::this_thread::sleep_for(kLaneFreeingPoll);
  }
  return fail(ErrorCode::busy, "engine {} (pid {}) has no free lane: all {} are taken; start it with more --lanes",
              name, header.engine_pid, segment->lane_count());
}

ShmClient::ShmClient(Segment segment, std::uint32_t lane, WaitMode mode, std::chrono::nanoseconds timeout,
                     RingProducer<RequestSlot> requests, RingConsumer<ResponseSlot> responses)
    : segment_(std::move(segment)),
      lane_(lane),
      mode_(mode),
      timeout_(timeout),
      slice_(std::chrono::nanoseconds(segment_.header().heartbeat_interval_ns)),
      requests_(requests),
      responses_(responses),
      engine_blocks_(static_cast<WaitMode>(segment_.header().wait_mode) == WaitMode::block) {}

ShmClient::ShmClient(ShmClient&& other) noexcept
    : segment_(std::move(other.segment_)),
      lane_(other.lane_),
      mode_(other.mode_),
      timeout_(other.timeout_),
      slice_(other.slice_),
      requests_(other.requests_),
      responses_(other.responses_),
      next_seq_(other.next_seq_),
      next_expected_(other.next_expected_),
      engine_blocks_(other.engine_blocks_),
      owns_lane_(std::exchange(other.owns_lane_, false)) {}

ShmClient& ShmClient::operator=(ShmClient&& other) noexcept {
  if (this != &other) {
    give_back_lane();
    segment_ = std::move(other.segment_);
    lane_ = other.lane_;
    mode_ = other.mode_;
    timeout_ = other.timeout_;
    slice_ = other.slice_;
    requests_ = other.requests_;
    responses_ = other.responses_;
    next_seq_ = other.next_seq_;
    next_expected_ = other.next_expected_;
    engine_blocks_ = other.engine_blocks_;
    owns_lane_ = std::exchange(other.owns_lane_, false);
  }
  return *this;
}

ShmClient::~ShmClient() { give_back_lane(); }

void ShmClient::give_back_lane() noexcept {
  if (!owns_lane_) return;
  owns_lane_ = false;
  release_lane(*segment_.lane(lane_).control, static_cast<std::int32_t>(getpid()));
  ring_doorbell();
}

void ShmClient::ring_doorbell() noexcept {
  if (engine_blocks_) ring_engine_doorbell(segment_.header());
}

CallStatus ShmClient::check_engine() const noexcept {
  const SegmentHeader& header = segment_.header();
  // acquire: pairs with the engine's release store of `stopping` in Segment::mark_stopping.
  if (header.state.load(std::memory_order_acquire) != static_cast<std::uint32_t>(SegmentState::ready))
    return CallStatus::engine_gone;
  if (!process_alive(header.engine_pid, header.engine_start_ticks)) return CallStatus::engine_gone;
  // relaxed: a timestamp; only its age matters, nothing is published through it.
  const std::uint64_t beat = header.heartbeat_ns.load(std::memory_order_relaxed);
  const std::uint64_t now = monotonic_ns();
  if (now > beat && now - beat > kStaleHeartbeats * header.heartbeat_interval_ns) return CallStatus::engine_hung;
  return CallStatus::timeout;
}

CallStatus ShmClient::submit(RequestSlot request, std::uint64_t& seq) noexcept {
  if (!requests_.writable()) {
    const auto deadline = WaitClock::now() + timeout_;
    while (!requests_.writable()) {
      if (requests_.corrupt()) return CallStatus::corrupt;
      const auto slice_end = std::min(deadline, WaitClock::now() + slice_);
      if (wait_writable(requests_, mode_, slice_end) == WaitStatus::ready) continue;
      // An engine that quarantined this lane stops taking requests and poisons the response
      // ring; answers not read yet would hide that from poll(), so look at the ring itself.
      if (responses_.probe_corrupt()) return CallStatus::corrupt;
      const CallStatus engine = check_engine();
      if (engine == CallStatus::engine_gone) return engine;
      if (WaitClock::now() >= deadline) return engine;
    }
  }
  request.seq = next_seq_++;
  seq = request.seq;
  (void)requests_.try_push(request);  // writable() said there is a slot; only we fill it
  ring_doorbell();  // a block-mode engine sleeps on the segment's doorbell, not on this ring
  return CallStatus::ok;
}

CallStatus ShmClient::poll(ResponseSlot& response) noexcept {
  switch (responses_.try_pop(response)) {
    case PopStatus::ok: break;
    case PopStatus::empty: return CallStatus::empty;
    case PopStatus::corrupt: return CallStatus::corrupt;
  }
  if (response.seq != next_expected_) return CallStatus::out_of_order;
  ++next_expected_;
  return CallStatus::ok;
}

CallStatus ShmClient::wait_response(ResponseSlot& response) noexcept {
  if (mode_ != WaitMode::block) {
    for (std::uint32_t i = 0; i < kPollsBeforeDeadline; ++i) {
      const CallStatus got = poll(response);
      if (got != CallStatus::empty) return got;
      cpu_relax();
    }
  }
  const auto deadline = WaitClock::now() + timeout_;
  for (;;) {
    const CallStatus got = poll(response);
    if (got != CallStatus::empty) return got;
    const auto slice_end = std::min(deadline, WaitClock::now() + slice_);
    if (wait_readable(responses_, mode_, slice_end) == WaitStatus::ready) continue;
    const CallStatus engine = check_engine();
    if (engine == CallStatus::engine_gone) return engine;
    if (WaitClock::now() >= deadline) return engine;
  }
}

CallStatus ShmClient::call(RequestSlot request, ResponseSlot& response) noexcept {
  std::uint64_t seq = 0;
  if (const CallStatus sent = submit(request, seq); sent != CallStatus::ok) return sent;
  return wait_response(response);
}

CallStatus ShmClient::echo_bulk(std::span<const std::byte> in, std::span<std::byte> out,
                                ResponseSlot& response) noexcept {
  const std::span<std::byte> region = bulk();
  const std::size_t half = region.size() / 2;
  if (in.size() > half || out.size() != in.size()) return CallStatus::too_large;
  if (!in.empty()) std::memcpy(region.data(), in.data(), in.size());
  const BulkEcho echo{.in_offset = 0, .out_offset = half, .bytes = in.size(), .unused = {}};
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::echo_bulk);
  request.params = echo.as_params();
  // The ring's release commit publishes the bytes above along with the frame; the engine's
  // copy is published by its response's commit, which call() acquires.
  const CallStatus got = call(request, response);
  if (got == CallStatus::ok && response.status == static_cast<std::uint16_t>(Status::ok) && !out.empty())
    std::memcpy(out.data(), region.data() + half, out.size());
  return got;
}

std::string ShmClient::describe(CallStatus status) const {
  const SegmentHeader& header = segment_.header();
  switch (status) {
    case CallStatus::engine_gone:
      return fmt::format("engine {} (pid {}) is gone", segment_.name(), header.engine_pid);
    case CallStatus::engine_hung:
      return fmt::format("engine {} (pid {}) is alive but not serving: its heartbeat is older than {} ms",
                         segment_.name(), header.engine_pid,
                         kStaleHeartbeats * header.heartbeat_interval_ns / 1'000'000);
    case CallStatus::timeout:
      return fmt::format("engine {} (pid {}) did not answer on lane {} within {} ms", segment_.name(),
                         header.engine_pid, lane_,
                         std::chrono::duration_cast<std::chrono::milliseconds>(timeout_).count());
    case CallStatus::corrupt:
      return fmt::format("lane {} of {} holds impossible ring positions; the segment is corrupt", lane_,
                         segment_.name());
    case CallStatus::out_of_order:
      return fmt::format("lane {} of {} returned an answer out of order", lane_, segment_.name());
    case CallStatus::too_large:
      return fmt::format("the payload does not fit half of lane {}'s {}-byte bulk region of {} (serve --bulk-bytes)",
                         lane_, bulk().size(), segment_.name());
    case CallStatus::ok:
    case CallStatus::empty: break;
  }
  return std::string(to_string(status));
}

Expected<std::vector<ResponseSlot>> ShmClient::run_all(std::span<const Combo> combos, Opcode opcode) {
  std::vector<ResponseSlot> answers;
  answers.reserve(combos.size());
  std::size_t sent = 0;
  while (answers.size() < combos.size()) {
    // Keep the ring full: the engine never waits for the next request.
    while (sent < combos.size() && outstanding() < capacity()) {
      RequestSlot request{};
      request.opcode = static_cast<std::uint16_t>(opcode);
      request.params = combos[sent];
      std::uint64_t seq = 0;
      if (const CallStatus status = submit(request, seq); status != CallStatus::ok)
        return fail(error_code(status), "{}", describe(status));
      ++sent;
    }
    ResponseSlot answer{};
    if (const CallStatus status = wait_response(answer); status != CallStatus::ok)
      return fail(error_code(status), "{}", describe(status));
    answers.push_back(answer);
  }
  return answers;
}

}  // namespace ipcfloor
