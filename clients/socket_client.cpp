#include "clients/socket_client.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <system_error>
#include <utility>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

using Clock = std::chrono::steady_clock;

// Longest single blocking wait. Short enough that a call overshoots its timeout by little,
// long enough that an idle wait costs almost no wake-ups.
constexpr std::chrono::milliseconds kMaxSlice{100};

std::string os_error(int error) { return std::error_code(error, std::generic_category()).message(); }

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

bool set_timeouts(int fd, std::chrono::milliseconds send, std::chrono::milliseconds receive) {
  const timeval s = to_timeval(send);
  const timeval r = to_timeval(receive);
  return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &s, sizeof s) == 0 &&
         setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &r, sizeof r) == 0;
}

ErrorCode error_code_for(std::uint32_t code) {
  switch (static_cast<SocketError>(code)) {
    case SocketError::window_out_of_range: return ErrorCode::invalid_argument;
    case SocketError::bad_price: return ErrorCode::bad_data;
    case SocketError::stalled: return ErrorCode::timeout;
    case SocketError::permission_denied: return ErrorCode::permission;
    case SocketError::too_many_connections: return ErrorCode::busy;
    case SocketError::idle_timeout: return ErrorCode::timeout;
    case SocketError::over_memory_cap: return ErrorCode::resource;
    case SocketError::too_costly: return ErrorCode::invalid_argument;
    case SocketError::internal: return ErrorCode::io;
    default: return ErrorCode::protocol;
  }
}

std::string opcode_name(SocketOpcode opcode) {
  return fmt::format("{} (opcode {})", to_string(opcode), static_cast<unsigned>(opcode));
}

// Starts counting only when a wait actually times out a slice, so a call that never waits
// never reads the clock.
class LazyDeadline {
 public:
  LazyDeadline(std::chrono::milliseconds timeout, std::chrono::milliseconds slice) : timeout_(timeout), slice_(slice) {}
  // Called after a slice ran out; true once the whole timeout has passed.
  bool expired() {
    const auto now = Clock::now();
    if (!started_) {
      started_ = true;
      end_ = now + timeout_ - slice_;  // one slice has passed already
    }
    return now >= end_;
  }

 private:
  std::chrono::milliseconds timeout_;
  std::chrono::milliseconds slice_;
  bool started_ = false;
  Clock::time_point end_{};
};

}  // namespace

Expected<SocketClient> SocketClient::connect_unix(std::string_view path, const SocketClientOptions& options) {
  const std::string server = fmt::format("unix socket {}", path);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path)
    return fail(ErrorCode::invalid_argument, "socket path '{}' must be 1..{} bytes", path, sizeof address.sun_path - 1);
  std::memcpy(address.sun_path, path.data(), path.size());
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(ErrorCode::io, "cannot create a Unix socket: {}", os_error(errno));
  // SO_SNDTIMEO bounds a blocking connect (e.g. on a full backlog) as well as sends.
  if (!set_timeouts(fd, options.timeout, options.timeout)) {
    const int error = errno;
    close(fd);
    return fail(ErrorCode::io, "cannot set timeouts on a socket for {}: {}", server, os_error(error));
  }
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    const int error = errno;
    close(fd);
    switch (error) {
      case ENOENT:
        return fail(ErrorCode::peer_gone, "no socket at {}: is `ipcfloor serve --socket {}` running?", path, path);
      case ECONNREFUSED:
        return fail(ErrorCode::peer_gone, "nothing listens on {} (a socket file left by a server that is gone?)", path);
      case EACCES:
        return fail(ErrorCode::permission,
                    "permission denied connecting to {}: the server admits only its own uid (socket mode 0600); its "
                    "operator lets others in with `serve --allow-uid` or `--allow-group`", path);
      case EAGAIN:
      case EINPROGRESS:
        return fail(ErrorCode::timeout, "{} did not accept the connection within {} ms", server, options.timeout.count());
      default: return fail(ErrorCode::io, "cannot connect to {}: {}", server, os_error(error));
    }
  }
  return SocketClient(fd, server, options);
}

Expected<SocketClient> SocketClient::connect_tcp(std::string_view host, std::uint16_t port,
                                                 const SocketClientOptions& options) {
  const bool v6 = host.find(':') != std::string_view::npos;
  const std::string server = fmt::format("tcp {}{}{}:{}", v6 ? "[" : "", host, v6 ? "]" : "", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string host_text(host);
  const std::string port_text = std::to_string(port);
  if (const int rc = getaddrinfo(host_text.c_str(), port_text.c_str(), &hints, &found); rc != 0)
    return fail(ErrorCode::invalid_argument, "cannot resolve tcp host '{}': {}", host, gai_strerror(rc));
  int last_error = 0;
  int fd = -1;
  for (const addrinfo* ai = found; ai != nullptr && fd < 0; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = errno;
      continue;
    }
    // SO_SNDTIMEO bounds the blocking connect (it then fails with EINPROGRESS).
    if (!set_timeouts(fd, options.timeout, options.timeout) ||
        connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      last_error = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    if (last_error == ECONNREFUSED)
      return fail(ErrorCode::peer_gone, "nothing listens on {}: is `ipcfloor serve --tcp {}:{}` running?", server,
                  host, port);
    if (last_error == EINPROGRESS || last_error == EAGAIN || last_error == ETIMEDOUT)
      return fail(ErrorCode::timeout, "{} did not accept the connection within {} ms", server, options.timeout.count());
    return fail(ErrorCode::io, "cannot connect to {}: {}", server, os_error(last_error));
  }
  const int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
    const int error = errno;
    close(fd);
    return fail(ErrorCode::io, "cannot set TCP_NODELAY on the connection to {}: {}", server, os_error(error));
  }
  return SocketClient(fd, server, options);
}

SocketClient::SocketClient(int fd, std::string server, const SocketClientOptions& options)
    : fd_(fd),
      server_(std::move(server)),
      options_(options),
      slice_(std::clamp(options.timeout, std::chrono::milliseconds(1), kMaxSlice)),
      reply_(kErrorReplyHeaderBytes + kMaxErrorMessageBytes) {
  // From here on each blocking call waits one slice; the calls count slices against timeout.
  set_timeouts(fd_, slice_, slice_);
  request_.reserve(kEchoParamsRequestBytes);
}

SocketClient::SocketClient(SocketClient&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      server_(std::move(other.server_)),
      options_(other.options_),
      slice_(other.slice_),
      request_(std::move(other.request_)),
      reply_(std::move(other.reply_)),
      last_server_error_(other.last_server_error_),
      broken_reason_(std::move(other.broken_reason_)) {}

SocketClient& SocketClient::operator=(SocketClient&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    server_ = std::move(other.server_);
    options_ = other.options_;
    slice_ = other.slice_;
    request_ = std::move(other.request_);
    reply_ = std::move(other.reply_);
    last_server_error_ = other.last_server_error_;
    broken_reason_ = std::move(other.broken_reason_);
  }
  return *this;
}

SocketClient::~SocketClient() {
  if (fd_ >= 0) close(fd_);
}

std::unexpected<Error> SocketClient::broken_by(ErrorCode code, std::string message) {
  broken_reason_ = message;
  return std::unexpected(Error{code, std::move(message)});
}

Expected<void> SocketClient::check_usable(SocketOpcode opcode) const {
  if (fd_ < 0) return fail(ErrorCode::invalid_argument, "{}: this client was moved from", server_);
  if (!broken_reason_.empty())
    return fail(ErrorCode::peer_gone, "cannot send {} to {}: the connection is unusable after an earlier failure ({}); "
                "reconnect", opcode_name(opcode), server_, broken_reason_);
  return {};
}

Expected<void> SocketClient::send_all(std::span<const std::byte> frame, SocketOpcode opcode) {
  LazyDeadline deadline(options_.timeout, slice_);
  std::size_t done = 0;
  while (done < frame.size()) {
    const ssize_t sent = send(fd_, frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
    if (sent > 0) {
      done += static_cast<std::size_t>(sent);
      continue;
    }
    const int error = errno;
    if (sent < 0 && error == EINTR) continue;
    if (sent < 0 && (error == EAGAIN || error == EWOULDBLOCK)) {
      if (deadline.expired())
        return broken_by(ErrorCode::timeout, fmt::format("{} took only {} of the {} bytes of a {} request within {} ms",
                                                         server_, done, frame.size(), opcode_name(opcode),
                                                         options_.timeout.count()));
      continue;
    }
    if (error == EPIPE || error == ECONNRESET)
      return fail(ErrorCode::peer_gone, "{} closed the connection after {} of the {} bytes of a {} request", server_,
                  done, frame.size(), opcode_name(opcode));
    return broken_by(ErrorCode::io, fmt::format("sending {} to {} failed: {}", opcode_name(opcode), server_, os_error(error)));
  }
  return {};
}

Expected<std::span<const std::byte>> SocketClient::read_reply(SocketOpcode opcode, bool after_send_failure) {
  LazyDeadline deadline(options_.timeout, slice_);
  std::size_t have = 0;
  ReplyScan scan;
  for (;;) {
    scan = scan_reply(std::span<const std::byte>(reply_.data(), have), options_.max_reply_bytes);
    if (scan.state == ScanState::complete) break;
    if (scan.state == ScanState::too_large)
      return broken_by(ErrorCode::protocol,
                       scan.is_error ? fmt::format("{} sent an error reply with a {}-byte message, over the {}-byte "
                                                   "limit of the protocol", server_, scan.message_len, kMaxErrorMessageBytes)
                                     : fmt::format("{} answered {} with a {}-byte reply, over the {}-byte limit", server_,
                                                   opcode_name(opcode), scan.body_len, options_.max_reply_bytes));
    // The server sends one reply per request and nothing unasked, so whatever is readable now
    // belongs to this reply; once its length is known, never read past its end.
    const std::size_t target = scan.frame_bytes != 0 ? scan.frame_bytes : std::max(reply_.size(), have + 1);
    if (reply_.size() < target) reply_.resize(target);
    const ssize_t got = recv(fd_, reply_.data() + have, target - have, 0);
    if (got > 0) {
      have += static_cast<std::size_t>(got);
      continue;
    }
    const int error = errno;
    if (got < 0 && error == EINTR) continue;
    if (got < 0 && (error == EAGAIN || error == EWOULDBLOCK)) {
      if (deadline.expired())
        return broken_by(ErrorCode::timeout, fmt::format("{} did not answer {} within {} ms ({} bytes of the reply "
                                                         "arrived)", server_, opcode_name(opcode),
                                                         options_.timeout.count(), have));
      continue;
    }
    if (got == 0 || error == ECONNRESET || error == EPIPE)
      return broken_by(ErrorCode::peer_gone,
                       have == 0 ? fmt::format("{} closed the connection {} {}", server_,
                                               after_send_failure ? "while we sent" : "without answering",
                                               opcode_name(opcode))
                                 : fmt::format("{} closed the connection after {} bytes of its reply to {}", server_,
                                               have, opcode_name(opcode)));
    return broken_by(ErrorCode::io, fmt::format("reading the reply to {} from {} failed: {}", opcode_name(opcode),
                                                server_, os_error(error)));
  }
  if (scan.is_error) {
    last_server_error_ = scan.error_code;
    const std::string_view message(reinterpret_cast<const char*>(reply_.data()) + kErrorReplyHeaderBytes,
                                   scan.message_len);
    const auto code = static_cast<SocketError>(scan.error_code);
    std::string text = fmt::format("{} rejected {}: {} (error {}): {}", server_, opcode_name(opcode), to_string(code),
                                   scan.error_code, message);
    if (closes_connection(code) || after_send_failure) broken_reason_ = text;
    return std::unexpected(Error{error_code_for(scan.error_code), std::move(text)});
  }
  if (after_send_failure)
    return broken_by(ErrorCode::protocol,
                     fmt::format("{} closed the connection while we sent {}, yet answered it", server_, opcode_name(opcode)));
  return std::span<const std::byte>(reply_.data() + kLengthPrefixBytes, scan.body_len);
}

Expected<std::span<const std::byte>> SocketClient::round_trip(std::span<const std::byte> frame, SocketOpcode opcode) {
  if (auto usable = check_usable(opcode); !usable) return std::unexpected(usable.error());
  last_server_error_ = 0;
  if (auto sent = send_all(frame, opcode); !sent) {
    if (sent.error().code != ErrorCode::peer_gone) return std::unexpected(sent.error());
    // The server may have refused the frame and closed before taking all of it: its error
    // reply says why, which beats "connection reset".
    auto reply = read_reply(opcode, true);
    if (!reply && last_server_error_ != 0) return reply;
    return broken_by(ErrorCode::peer_gone, sent.error().message);
  }
  return read_reply(opcode, false);
}

Expected<std::vector<BacktestResult>> SocketClient::sweep(std::span<const double> close, std::span<const Combo> combos) {
  request_.clear();
  if (auto built = append_request(SocketOpcode::sweep, close, combos, request_); !built)
    return std::unexpected(built.error());
  auto body = round_trip(request_, SocketOpcode::sweep);
  if (!body) return std::unexpected(body.error());
  std::vector<BacktestResult> results(combos.size());
  if (!decode_sweep_reply(*body, results))
    return broken_by(ErrorCode::protocol, fmt::format("{} answered a sweep of {} combos with {} bytes instead of {}",
                                                      server_, combos.size(), body->size(), 16 * combos.size()));
  return results;
}

Expected<void> SocketClient::echo_into(std::span<const double> close, std::span<double> out) {
  if (out.size() != close.size())
    return fail(ErrorCode::invalid_argument, "echo_into: the output holds {} values for {} sent", out.size(), close.size());
  request_.clear();
  if (auto built = append_request(SocketOpcode::echo, close, {}, request_); !built) return std::unexpected(built.error());
  auto body = round_trip(request_, SocketOpcode::echo);
  if (!body) return std::unexpected(body.error());
  if (body->size() != 8 * close.size())
    return broken_by(ErrorCode::protocol, fmt::format("{} echoed {} bytes for the {} sent", server_, body->size(),
                                                      8 * close.size()));
  copy_close(*body, out);
  return {};
}

Expected<std::vector<double>> SocketClient::echo(std::span<const double> close) {
  std::vector<double> out(close.size());
  if (auto echoed = echo_into(close, out); !echoed) return std::unexpected(echoed.error());
  return out;
}

Expected<LoadReply> SocketClient::load(std::span<const double> close) {
  request_.clear();
  if (auto built = append_request(SocketOpcode::load, close, {}, request_); !built) return std::unexpected(built.error());
  auto body = round_trip(request_, SocketOpcode::load);
  if (!body) return std::unexpected(body.error());
  const auto reply = decode_load_reply(*body);
  if (!reply)
    return broken_by(ErrorCode::protocol, fmt::format("{} answered load with {} bytes instead of {}", server_,
                                                      body->size(), kLoadReplyBodyBytes));
  return *reply;
}

Expected<ServerSeries> SocketClient::use_preloaded() {
  request_.clear();
  if (auto built = append_request(SocketOpcode::use_preloaded, {}, {}, request_); !built)
    return std::unexpected(built.error());
  auto body = round_trip(request_, SocketOpcode::use_preloaded);
  if (!body) return std::unexpected(body.error());
  const auto reply = decode_preloaded_reply(*body);
  if (!reply)
    return broken_by(ErrorCode::protocol, fmt::format("{} answered use_preloaded with a malformed {}-byte reply", server_,
                                                      body->size()));
  return ServerSeries{reply->checksum, reply->fee, reply->n_bars, std::string(reply->name)};
}

Expected<ServerStrategy> SocketClient::use_strategy(std::string_view name) {
  request_.clear();
  if (auto built = append_use_strategy_request(name, request_); !built) return std::unexpected(built.error());
  auto body = round_trip(request_, SocketOpcode::use_strategy);
  if (!body) return std::unexpected(body.error());
  const auto reply = decode_use_strategy_reply(*body);
  if (!reply)
    return broken_by(ErrorCode::protocol, fmt::format("{} answered use_strategy with a malformed {}-byte reply", server_,
                                                      body->size()));
  ServerStrategy strategy;
  strategy.index = reply->index;
  for (std::uint32_t k = 0; k < reply->param_count; ++k) strategy.params.emplace_back(reply->params[k]);
  return strategy;
}

Expected<std::vector<BacktestResult>> SocketClient::sweep_loaded(std::span<const Combo> combos) {
  request_.clear();
  if (auto built = append_request(SocketOpcode::sweep_loaded, {}, combos, request_); !built)
    return std::unexpected(built.error());
  auto body = round_trip(request_, SocketOpcode::sweep_loaded);
  if (!body) return std::unexpected(body.error());
  std::vector<BacktestResult> results(combos.size());
  if (!decode_sweep_reply(*body, results))
    return broken_by(ErrorCode::protocol, fmt::format("{} answered sweep_loaded of {} combos with {} bytes instead of {}",
                                                      server_, combos.size(), body->size(), 16 * combos.size()));
  return results;
}

Expected<Combo> SocketClient::echo_params(const Combo& combo) {
  std::array<std::byte, kEchoParamsRequestBytes> frame;
  encode_echo_params_request(combo, frame);
  auto body = round_trip(frame, SocketOpcode::echo_params);
  if (!body) return std::unexpected(body.error());
  if (body->size() != kComboWireBytes)
    return broken_by(ErrorCode::protocol,
                     fmt::format("{} answered echo_params with {} bytes instead of 48", server_, body->size()));
  Combo echoed;
  std::memcpy(&echoed, body->data(), sizeof echoed);
  return echoed;
}

}  // namespace ipcfloor
