#pragma once
// The C++ client of the socket baseline (docs/PROTOCOL.md): connect to `ipcfloor serve --socket`
// (Unix-domain) or `--tcp` (TCP_NODELAY), then call any opcode, one request in flight at a time.
//
// Errors: every call returns Expected; the message names the server ("unix socket PATH" or
// "tcp HOST:PORT"), the opcode and what went wrong: the server's error reply (its code and
// sentence), the server closing the connection, or no answer within the timeout. After a
// failure that can leave a reply half-read (timeout, closed, malformed reply) the client is
// broken() and every later call fails at once: reconnect.
//
// Timeouts: each blocking send/recv waits at most one slice (SO_SNDTIMEO/SO_RCVTIMEO) and the
// call gives up once `timeout` has passed, so no call blocks much longer than `timeout`.
//
// Threads: a SocketClient belongs to one thread at a time. echo_params() makes one send and
// one recv and never allocates after construction (its buffers are preallocated), so the
// latency ladder can time it per sample; the other calls allocate their results.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/backtest_result.hpp"
#include "socket/socket_protocol.hpp"
#include "common/combo.hpp"
#include "common/error.hpp"

namespace ipcfloor {

struct SocketClientOptions {
  std::chrono::milliseconds timeout{5000};  // bound on connecting and on each call
  std::uint32_t max_reply_bytes = kDefaultMaxFrameBytes;  // a longer reply is a protocol error
};

// What a server's preloaded series is (the use_preloaded reply, with the name copied out).
struct ServerSeries {
  std::uint64_t checksum = 0;  // fnv1a64 of its bytes
  double fee = 0.0;            // what the server's sweeps charge per round trip
  std::uint64_t n_bars = 0;
  std::string name;            // where it came from, as `ipcfloor serve` describes it
};

// A strategy of the server, as use_strategy answers it.
struct ServerStrategy {
  std::uint32_t index = 0;
  std::vector<std::string> params;  // its parameter names, in order
};

class SocketClient {
 public:
  // Connects to the Unix-domain socket at `path`. Errors name the path and the reason (no such
  // socket, nobody listening, permission, timeout).
  [[nodiscard]] static Expected<SocketClient> connect_unix(std::string_view path, const SocketClientOptions& options = {});
  // Connects to HOST:PORT over TCP and sets TCP_NODELAY. HOST is a name or numeric address.
  [[nodiscard]] static Expected<SocketClient> connect_tcp(std::string_view host, std::uint16_t port,
                                                          const SocketClientOptions& options = {});

  SocketClient(SocketClient&& other) noexcept;
  SocketClient& operator=(SocketClient&& other) noexcept;
  SocketClient(const SocketClient&) = delete;
  SocketClient& operator=(const SocketClient&) = delete;
  ~SocketClient();  // closes the connection

  // Opcode 0: ships the series and the combos; one result per combo, in order.
  [[nodiscard]] Expected<std::vector<BacktestResult>> sweep(std::span<const double> close, std::span<const Combo> combos);
  // Opcode 1: the series comes back verbatim. echo_into writes it to `out` (same size as close)
  // and allocates nothing once a request of that size has been sent before.
  [[nodiscard]] Expected<std::vector<double>> echo(std::span<const double> close);
  [[nodiscard]] Expected<void> echo_into(std::span<const double> close, std::span<double> out);
  // Opcode 2: the series becomes this connection's; the server answers its checksum and fee.
  [[nodiscard]] Expected<LoadReply> load(std::span<const double> close);
  // Opcode 3: combos only, over the loaded series.
  [[nodiscard]] Expected<std::vector<BacktestResult>> sweep_loaded(std::span<const Combo> combos);
  // Opcode 5: the server's preloaded series becomes this connection's (sweep_loaded then runs on
  // it); the server says which series that is. Fails with the server's no_preloaded_series
  // error when it holds none.
  [[nodiscard]] Expected<ServerSeries> use_preloaded();
  // Opcode 4: the 48 bytes come back verbatim. No allocation unless it fails.
  [[nodiscard]] Expected<Combo> echo_params(const Combo& combo);
  // Opcode 6: the server's strategy `name` runs this connection's sweeps from now on. Returns its
  // index and parameter names; a server without it answers no_such_strategy (an Error naming
  // the ones it holds).
  [[nodiscard]] Expected<ServerStrategy> use_strategy(std::string_view name);

  // "unix socket PATH" or "tcp HOST:PORT", as errors name it.
  [[nodiscard]] const std::string& server() const noexcept { return server_; }
  // The code of the error reply the last call got (a SocketError value), or 0.
  [[nodiscard]] std::uint32_t last_server_error() const noexcept { return last_server_error_; }
  [[nodiscard]] bool broken() const noexcept { return !broken_reason_.empty(); }
  [[nodiscard]] int native_handle() const noexcept { return fd_; }

 private:
  SocketClient(int fd, std::string server, const SocketClientOptions& options);
  // Sends `frame`, reads one reply and returns its body, or the error reply as an Error.
  // The body view lives in reply_ until the next call.
  Expected<std::span<const std::byte>> round_trip(std::span<const std::byte> frame, SocketOpcode opcode);
  Expected<void> send_all(std::span<const std::byte> frame, SocketOpcode opcode);
  Expected<std::span<const std::byte>> read_reply(SocketOpcode opcode, bool after_send_failure);
  std::unexpected<Error> broken_by(ErrorCode code, std::string message);
  Expected<void> check_usable(SocketOpcode opcode) const;

  int fd_ = -1;
  std::string server_;
  SocketClientOptions options_;
  std::chrono::milliseconds slice_;  // one blocking wait
  std::vector<std::byte> request_;   // reused request frame
  std::vector<std::byte> reply_;     // reused reply buffer; its size is its usable capacity
  std::uint32_t last_server_error_ = 0;
  std::string broken_reason_;        // empty while the connection is usable
};

}  // namespace ipcfloor
