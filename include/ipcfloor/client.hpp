#pragma once
// ipcfloor::Client: a C++20 client of a running ipcfloor engine, over its shared-memory segment.
//
//   auto engine = ipcfloor::Client::attach("ipcfloor");          // throws ipcfloor::ClientError
//   std::span<const double> close = engine.series();             // zero-copy, read-only
//   ipcfloor::Result r = engine.backtest({3, 6, 2, 1, 2, 3});    // h, L, s, p3, p2, p
//   engine.sweep(grid, results);                                 // pipelined through the ring
//
// Link ipcfloor::client (CMake: find_package(ipcfloor CONFIG)). The class owns one lane of the
// engine; it is move-only and belongs to one thread at a time for requests. series() and the
// metadata accessors never change after attach and may be read from any thread.
//
// Errors: attach and every request throw ipcfloor::ClientError, whose code() is one of the
// IPCFLOOR_E_* values of ipcfloor/ipcfloor.h and whose what() names the engine, its pid and the
// lane. sweep() is the exception to the rule for refused combos: it reports them per combo and
// throws only when the lane itself fails. Requests allocate nothing unless they fail.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "ipcfloor/ipcfloor.h"

#if defined(__GNUC__) || defined(__clang__)
#define IPCFLOOR_CXX_API __attribute__((visibility("default")))
#else
#define IPCFLOOR_CXX_API
#endif

namespace ipcfloor {

// The six windows of one combo: h, L, s, p3, p2, p, each in [1, bars].
using Params = std::array<std::int64_t, 6>;

// The six windows for one user-facing length L (the engine's own mapping; L >= 1).
[[nodiscard]] IPCFLOOR_CXX_API Params params_from_length(std::int64_t length);

// How the client waits for answers (ipcfloor/ipcfloor.h, IPCFLOOR_WAIT_*).
enum class Wait : std::int32_t {
  engine = IPCFLOOR_WAIT_ENGINE,  // the engine's own mode
  spin = IPCFLOOR_WAIT_SPIN,
  backoff = IPCFLOOR_WAIT_BACKOFF,
  block = IPCFLOOR_WAIT_BLOCK,
};

struct ClientOptions {
  std::chrono::nanoseconds timeout = std::chrono::seconds(5);  // bound on any one wait
  Wait wait = Wait::engine;
};

struct Result {
  double pnl = 0.0;         // percentage points, net of fees
  std::int64_t trades = 0;  // closed round trips
  int status = IPCFLOOR_OK; // sweep: IPCFLOOR_OK or why the engine refused this combo
};

class IPCFLOOR_CXX_API ClientError : public std::runtime_error {
 public:
  ClientError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  [[nodiscard]] int code() const noexcept { return code_; }  // an IPCFLOOR_E_* value

 private:
  int code_;
};

class IPCFLOOR_CXX_API Client {
 public:
  // Attaches to engine NAME (`ipcfloor serve --name NAME`) and claims a free lane. Allocates.
  [[nodiscard]] static Client attach(std::string_view name, const ClientOptions& options = {});

  Client(Client&& other) noexcept;
  Client& operator=(Client&& other) noexcept;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client();  // hands the lane back; series() views die with the client
  // A moved-from Client may only be destroyed or assigned to.

  // The engine's preloaded close series, zero-copy and read-only (it may be mapped read-only).
  [[nodiscard]] std::span<const double> series() const noexcept;
  [[nodiscard]] std::uint64_t bars() const noexcept;
  [[nodiscard]] double fee() const noexcept;                  // per round trip, percentage points
  [[nodiscard]] std::string_view series_name() const noexcept;
  [[nodiscard]] std::uint64_t series_checksum() const noexcept;  // FNV-1a 64 of the series bytes
  [[nodiscard]] std::string_view engine_name() const noexcept;
  [[nodiscard]] std::int32_t engine_pid() const noexcept;
  [[nodiscard]] std::uint32_t lane() const noexcept;
  [[nodiscard]] std::uint32_t ring_capacity() const noexcept;  // requests a sweep keeps in flight

  // One backtest. Throws ClientError when the engine refuses the combo (IPCFLOOR_E_WINDOW, ...) or the
  // lane fails (IPCFLOOR_E_ENGINE_GONE, _TIMEOUT, ...). No allocation on success.
  [[nodiscard]] Result backtest(const Params& params);

  // params.size() backtests, pipelined; out[i] answers params[i] (out.size() == params.size(),
  // else ClientError IPCFLOOR_E_INVALID). A refused combo gets its code in out[i].status, pnl NaN.
  // Returns how many combos were refused; throws ClientError when the lane fails.
  std::size_t sweep(std::span<const Params> params, std::span<Result> out);

  // The 48 bytes travel to the engine and back untouched: the transport alone.
  [[nodiscard]] Params echo(const Params& params);

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl) noexcept;
  [[noreturn]] void fail(int code) const;

  std::unique_ptr<Impl> impl_;
};

}  // namespace ipcfloor
