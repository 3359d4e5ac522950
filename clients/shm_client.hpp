#pragma once
// The C++ client of the shared-memory engine: attach by name, claim a lane, send 48-byte
// request frames and read the answers, one at a time (call) or pipelined (submit + poll).
//
// Threads: a ShmClient belongs to one thread at a time (it owns one producer and one consumer
// end). Hot-path calls (call, submit, poll, wait_response) are noexcept, never allocate, and in
// spin mode make no syscall unless a wait outlasts one engine heartbeat interval, when the
// client checks whether the engine is still alive.

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/combo.hpp"
#include "common/error.hpp"
#include "shm/frames.hpp"
#include "shm/segment.hpp"
#include "shm/spsc_ring.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

struct ShmClientOptions {
  // Bound on any one wait: for a lane that is being freed (connect), for ring space (submit) or
  // for an answer (wait_response, call). A dead engine is reported sooner, within about one
  // heartbeat interval of its death; a hung one (heartbeat older than 3 intervals) is reported
  // as engine_hung when this runs out.
  std::chrono::nanoseconds timeout = std::chrono::seconds(5);
  // How this client waits. Unset: the engine's own mode, recorded in the segment. A block-mode
  // client needs a block-mode engine (only it wakes sleepers); connect() refuses otherwise.
  std::optional<WaitMode> wait;
  std::string tmpfs_dir = std::string(kDefaultTmpfsDir);
};

enum class CallStatus : std::uint8_t {
  ok,
  timeout,      // no answer (or no ring space) before the deadline; the engine looked alive
  engine_hung,  // the engine lives but its heartbeat stopped (e.g. SIGSTOP): no answer yet
  engine_gone,  // the engine process is dead or stopping
  corrupt,      // a ring of this lane holds impossible positions (a corrupt peer, or the engine
                // quarantined the lane after this client wrote impossible positions)
  out_of_order, // an answer's seq did not match the oldest outstanding request
  empty,        // poll only: nothing has arrived yet
  too_large,    // echo_bulk only: the payload does not fit half of the lane's bulk region
};

[[nodiscard]] std::string_view to_string(CallStatus status) noexcept;

class ShmClient {
 public:
  // Attaches to segment NAME and claims a free lane. When no lane is free but one is being freed
  // (its client closed it or died), waits for it up to options.timeout. Setup path: allocates.
  // Errors: everything Segment::attach reports, busy when every lane is held by a live client,
  // peer_gone when the engine dies meanwhile, invalid_argument for a wait mode the engine
  // cannot serve.
  [[nodiscard]] static Expected<ShmClient> connect(std::string_view name, const ShmClientOptions& options = {});

  ShmClient(ShmClient&& other) noexcept;
  ShmClient& operator=(ShmClient&& other) noexcept;
  ShmClient(const ShmClient&) = delete;
  ShmClient& operator=(const ShmClient&) = delete;
  ~ShmClient();  // hands the lane back to the engine

  // One request, one answer. Fills `response` on ok. Sets request.seq itself.
  [[nodiscard]] CallStatus call(RequestSlot request, ResponseSlot& response) noexcept;

  // Pipelining. submit() waits (bounded) for ring space, publishes the request and returns its
  // seq through `seq`; answers come back in submission order through poll()/wait_response().
  // While it waits for space it also notices a response ring the engine poisoned (corrupt).
  [[nodiscard]] CallStatus submit(RequestSlot request, std::uint64_t& seq) noexcept;
  [[nodiscard]] CallStatus poll(ResponseSlot& response) noexcept;           // never waits
  [[nodiscard]] CallStatus wait_response(ResponseSlot& response) noexcept;  // bounded wait

  // This lane's bulk region (empty when the engine runs with --bulk-bytes 0). The client owns
  // its bytes; the engine reads and writes them only while serving this lane's ECHO_BULK.
  [[nodiscard]] std::span<std::byte> bulk() const noexcept { return segment_.bulk(lane_); }

  // One ECHO_BULK round trip, the shared-memory point of the echo curve: copies `in` into the
  // first half of the bulk region, has the engine copy it to the second half, copies that into
  // `out` (same size as `in`). ok means the copy came back and response.status says how the
  // engine judged it. too_large when `in` exceeds half the region; nothing is sent then.
  // Hot path like call(): noexcept, no allocation. Precondition: no request outstanding.
  [[nodiscard]] CallStatus echo_bulk(std::span<const std::byte> in, std::span<std::byte> out,
                                     ResponseSlot& response) noexcept;

  // Requests submitted whose answers have not been read yet.
  [[nodiscard]] std::uint64_t outstanding() const noexcept { return next_seq_ - next_expected_; }
  [[nodiscard]] std::uint32_t capacity() const noexcept { return requests_.capacity(); }
  [[nodiscard]] std::uint32_t lane() const noexcept { return lane_; }
  [[nodiscard]] WaitMode wait_mode() const noexcept { return mode_; }
  [[nodiscard]] const Segment& segment() const noexcept { return segment_; }

  // A sentence for a non-ok status, naming the engine, its pid and the lane. Allocates.
  [[nodiscard]] std::string describe(CallStatus status) const;

  // Convenience for scripts and the CLI: runs every combo through the ring, pipelined up to the
  // ring capacity, and returns the answers in order. Setup-style errors (allocates).
  [[nodiscard]] Expected<std::vector<ResponseSlot>> run_all(std::span<const Combo> combos, Opcode opcode);

 private:
  ShmClient(Segment segment, std::uint32_t lane, WaitMode mode, std::chrono::nanoseconds timeout,
            RingProducer<RequestSlot> requests, RingConsumer<ResponseSlot> responses);
  CallStatus check_engine() const noexcept;
  void ring_doorbell() noexcept;
  void give_back_lane() noexcept;

  Segment segment_;
  std::uint32_t lane_;
  WaitMode mode_;
  std::chrono::nanoseconds timeout_;
  std::chrono::nanoseconds slice_;  // one engine heartbeat interval: how often a wait looks up
  RingProducer<RequestSlot> requests_;
  RingConsumer<ResponseSlot> responses_;
  std::uint64_t next_seq_ = 1;
  std::uint64_t next_expected_ = 1;
  bool engine_blocks_ = false;  // the engine sleeps on the doorbell when idle
  bool owns_lane_ = true;
};

}  // namespace ipcfloor
