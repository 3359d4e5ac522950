#pragma once
// Request handling for the socket server (engine/socket_server.hpp): decodes one frame's body,
// runs it (on the kernel for the sweeps) and encodes the reply. Knows nothing of sockets; one
// RequestHandler belongs to one server thread, and only that thread calls it. The scratch it
// keeps across requests spares the chatty pattern an allocation per call.

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
#include "engine/socket_server.hpp"
#include "kernel/kernel.hpp"
#include "socket/socket_protocol.hpp"

namespace ipcfloor::socket_detail {

// What every server thread shares besides the connection limit: the bytes of series all
// connections hold (against max_loaded_bytes) and whether the server is stopping.
struct SharedBudget {
  std::atomic<std::uint64_t> loaded_bytes{0};
  std::atomic<bool> stopping{false};
};

// What a connection's requests keep between them.
struct Session {
  std::vector<double> series;      // the loaded series (opcode 2), aligned for the kernel
  std::span<const double> active;  // what sweep_loaded runs on: `series`, or the server's preloaded one
  bool loaded = false;
  std::uint64_t charged = 0;       // bytes of `series` counted against the server's memory cap
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
  RequestHandler(const SocketServerOptions& options, SharedBudget& budget) : options_(options), budget_(budget) {}

  // The session's series no longer counts against the cap (its connection closed).
  void forget(Session& session) noexcept;

  // Appends the reply to `out` and returns the opcode served, or returns why the frame is
  // refused and appends nothing. Allocates (the reply, the session's series, scratch).
  [[nodiscard]] std::expected<SocketOpcode, Rejection> serve(std::span<const std::byte> body, Session& session,
                                                             std::vector<std::byte>& out);

 private:
  // Counts a load of `bytes` against the cap in place of what the session held, or refuses it.
  std::expected<void, Rejection> charge(Session& session, std::uint64_t bytes);

  // The first combo whose work exceeds the bound per combo, if any.
  [[nodiscard]] std::optional<SocketFault> check_costs(std::span<const std::byte> params, std::uint32_t n,
                                                       std::size_t n_bars) const;

  // Runs validated combos into results_. Fails (internal) if the kernel refused one anyway.
  std::expected<void, Rejection> sweep(std::span<const double> close, std::span<const std::byte> params,
                                       std::uint32_t n);

  const SocketServerOptions& options_;
  SharedBudget& budget_;
  // Scratch reused across requests: the aligned close of a stateless sweep, results, combos.
  std::vector<double> close_;
  std::vector<BacktestResult> results_;
  std::vector<Combo> combos_;
  std::unique_ptr<KernelWorkspace> workspace_;
};

}  // namespace ipcfloor::socket_detail
