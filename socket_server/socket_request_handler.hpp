#pragma once
// Request handling for the socket server (socket_server/socket_server.hpp): decodes one frame's body,
// runs it (on the kernel for the sweeps, a chunk of combos at a time) and encodes the reply, and
// counts what every connection holds against the server's memory cap. Knows nothing of
// sockets; one RequestHandler belongs to one server thread, and only that thread calls it.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/backtest_result.hpp"
#include "common/combo.hpp"
#include "socket_server/socket_options.hpp"
#include "kernel/strategy.hpp"
#include "kernel/workspace.hpp"
#include "socket/socket_protocol.hpp"

namespace ipcfloor::socket_detail {

// Buffers and scratch above this size are released once a request is done, so a connection that
// sent one huge frame does not hold its memory forever; below it they are kept, so the chatty
// pattern (a 1.2 MB series per call) does not pay an allocation per call.
inline constexpr std::size_t kRetainedBufferBytes = std::size_t{4} << 20;

// The server-wide cap on the bytes all connections hold. Lock-free; any thread.
class MemoryCap {
 public:
  explicit MemoryCap(std::uint64_t cap) noexcept : cap_(cap) {}

  // Makes `held`, the bytes one holder counts, `bytes`. Shrinking always succeeds; growing
  // that would take the total over the cap is refused with over_memory_cap (field = `what`, one
  // of the kMemoryFor* of socket/socket_protocol.hpp; actual = `bytes`, expected = the cap,
  // limit = what the others hold) and `held` stays.
  [[nodiscard]] std::optional<SocketFault> resize(std::uint64_t& held, std::uint64_t bytes, std::uint32_t what) noexcept;

 private:
  const std::uint64_t cap_;
  std::atomic<std::uint64_t> total_{0};
};

// What every server thread shares besides the connection limit: the memory cap and whether
// the server is stopping.
struct SharedBudget {
  explicit SharedBudget(std::uint64_t max_bytes) noexcept : memory(max_bytes) {}
  MemoryCap memory;
  std::atomic<bool> stopping{false};
};

// What a connection's requests keep between them, and the bytes it counts against the cap.
struct Session {
  const Strategy* strategy = nullptr;  // what its sweeps run (use_strategy); null: the built-in one
  std::vector<double> series;      // the loaded series (opcode 2), aligned for the kernel
  std::span<const double> active;  // what sweep_loaded runs on: `series`, or the server's preloaded one
  bool loaded = false;
  std::uint64_t series_bytes = 0;   // `series`, counted
  std::uint64_t request_bytes = 0;  // the current request's frame, reply and scratch, counted
};

// A sweep in progress on one connection. Its combos run a chunk at a time
// (RequestHandler::run_chunk), so that the thread serves others between two chunks.
struct SweepJob {
  SocketOpcode opcode = SocketOpcode::sweep;
  const Strategy* strategy = nullptr;   // admitted every combo; runs them
  std::span<const double> close;        // the session's series, or `own_close`
  std::span<const std::byte> params;    // n x 48 bytes, in the connection's buffered frame
  std::vector<double> own_close;        // a stateless sweep's aligned copy of its close
  std::vector<BacktestResult> results;  // one per combo
  std::uint32_t next = 0;               // the first combo not yet run
  bool running = false;
};

// A frame refused with an error reply; the connection stays usable.
struct Rejection {
  SocketError error;
  std::string message;
};

// The rejection that carries `fault`'s sentence. Allocates.
[[nodiscard]] Rejection rejection_for(const SocketFault& fault);

class RequestHandler {
 public:
  // `strategies`: the server's (options.strategies, or the built-in alone); outlives the handler.
  RequestHandler(const SocketServerOptions& options, const StrategySet& strategies, SharedBudget& budget)
      : options_(options), strategies_(strategies), budget_(budget) {}

  // Counts a frame of `frame_bytes` whose length prefix has arrived as the session's current
  // request, or returns why not (over_memory_cap): called before its buffer grows for it.
  [[nodiscard]] std::optional<SocketFault> admit_frame(Session& session, std::uint64_t frame_bytes) noexcept;

  // The current request's reply has left: its bytes no longer count.
  void request_done(Session& session) noexcept;

  // Every byte the session counted no longer counts (its connection closed).
  void forget(Session& session) noexcept;

  // Serves one frame's body. Appends the reply to `out` and returns the opcode served; or, for
  // a sweep, starts `job` (its reply comes from finish()) and returns the opcode; or returns why
  // the frame is refused and appends nothing. Allocates (the reply, the series, scratch).
  [[nodiscard]] std::expected<SocketOpcode, Rejection> serve(std::span<const std::byte> body, Session& session,
                                                             SweepJob& job, std::vector<std::byte>& out);

  // Runs the next chunk of a running job: combos from job.next while their work stays within
  // sweep_chunk_cost per sweep thread (at least one), on sweep_threads workers. True once
  // every combo has run; a rejection when the server is stopping or the kernel refused one.
  // Every worker checks the stop flag between combos.
  [[nodiscard]] std::expected<bool, Rejection> run_chunk(SweepJob& job);

  // Appends a finished job's reply to `out` and ends the job, keeping small scratch for the
  // next one.
  void finish(SweepJob& job, std::vector<std::byte>& out);

  // Ends a job without a reply and gives its large scratch back.
  void abandon(SweepJob& job) noexcept;

 private:
  // Admits every combo of a sweep once, with the connection's strategy: each accepted for the
  // series and within the bound per combo. The first refused one is the rejection.
  [[nodiscard]] std::optional<Rejection> admit(const Strategy& strategy, std::span<const std::byte> params,
                                               std::uint32_t n, std::size_t n_bars) const;
  // Starts `job`: admitted combos in `params` over `close`.
  void start_sweep(SocketOpcode opcode, const Strategy& strategy, std::span<const double> close,
                   std::span<const std::byte> params, std::uint32_t n, SweepJob& job);
  [[nodiscard]] std::expected<SocketOpcode, Rejection> serve_use_strategy(const RequestView& r, Session& session,
                                                                          std::vector<std::byte>& out);

  [[nodiscard]] std::expected<SocketOpcode, Rejection> serve_load(const RequestView& r, Session& session,
                                                                  std::vector<std::byte>& out);
  [[nodiscard]] std::expected<SocketOpcode, Rejection> serve_preloaded(const RequestView& r, Session& session,
                                                                       std::vector<std::byte>& out);

  // Combos [begin, end) of `job` on `workers` threads (this one included).
  [[nodiscard]] std::optional<Rejection> run_combos(SweepJob& job, std::uint32_t begin, std::uint32_t end,
                                                    unsigned workers);

  // The workspace of worker `k`, holding at least `bytes`.
  KernelWorkspace& workspace(std::size_t k, std::uint64_t bytes);
  [[nodiscard]] const Strategy& strategy_of(const Session& session) const noexcept {
    return session.strategy != nullptr ? *session.strategy : *strategies_.at(0);
  }

  const SocketServerOptions& options_;
  const StrategySet& strategies_;
  SharedBudget& budget_;
  std::vector<std::unique_ptr<KernelWorkspace>> workspaces_;  // one per sweep worker, reused
};

}  // namespace ipcfloor::socket_detail
