#include "engine/socket_connection.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/log.hpp"

namespace ipcfloor::socket_detail {
namespace {

constexpr std::size_t kInitialInBytes = 16 * 1024;
// Buffers above this size are released once idle, so a connection that sent one huge frame does
// not hold its memory forever; below it they are kept, so the chatty pattern (a 1.2 MB series
// per call) does not pay an allocation per call.
constexpr std::size_t kRetainedBufferBytes = std::size_t{4} << 20;
// After a fatal error reply the server stops writing and waits this long for the peer's EOF
// before closing, so the reply is not lost to a reset caused by unread input.
constexpr std::chrono::milliseconds kLinger{1000};
constexpr unsigned kLogLinesPerSecond = 20;

}  // namespace

void ThreadStats::add_to(SocketServerStats& stats) const noexcept {
  stats.connections_accepted += accepted.get();
  stats.connections_refused += refused.get();
  stats.connections_dropped += dropped.get();
  for (std::size_t i = 0; i < kSocketOpcodeCount; ++i) stats.served[i] += served[i].get();
  for (std::size_t i = 0; i < kSocketErrorSlots; ++i) stats.rejected[i] += rejected[i].get();
  stats.bytes_in += bytes_in.get();
  stats.bytes_out += bytes_out.get();
}

void RateLimitedLog::line(const std::string& text) {
  if (!enabled_) return;
  const auto now = Clock::now();
  if (now - window_ >= std::chrono::seconds(1)) {
    if (suppressed_ > 0) log(LogLevel::warn, "serve: socket: {} more messages suppressed", suppressed_);
    window_ = now;
    lines_ = 0;
    suppressed_ = 0;
  }
  if (lines_ < kLogLinesPerSecond) {
    ++lines_;
    log(LogLevel::warn, "serve: socket {}", text);
  } else {
    ++suppressed_;
  }
}

void InBuffer::make_room(std::size_t need) {
  if (capacity_ - begin_ >= need) return;
  if (capacity_ >= need) {
    std::memmove(data_.get(), data_.get() + begin_, size());
    end_ -= begin_;
    begin_ = 0;
    return;
  }
  const std::size_t capacity = std::max(need, kInitialInBytes);
  auto grown = std::make_unique_for_overwrite<std::byte[]>(capacity);
  if (size() > 0) std::memcpy(grown.get(), data_.get() + begin_, size());
  end_ -= begin_;
  begin_ = 0;
  data_ = std::move(grown);
  capacity_ = capacity;
}

void InBuffer::release_if_large() noexcept {
  if (size() == 0 && capacity_ > kRetainedBufferBytes) {
    data_.reset();
    capacity_ = 0;
    begin_ = end_ = 0;
  }
}

void Connection::on_events(std::uint32_t what, Clock::time_point now) {
  // A hang-up while a reply is pending goes to the writer too: its send fails and drops
  // the connection, instead of the hang-up firing on every wait until the timeout.
  constexpr std::uint32_t kHangUp = EPOLLHUP | EPOLLERR;
  if (want_write_ && (what & (EPOLLOUT | kHangUp)) != 0) on_writable(now);
  if (!dead_ && !want_write_ && (what & (EPOLLIN | EPOLLRDHUP | kHangUp)) != 0) on_readable(now);
}

void Connection::check_deadline(Clock::time_point now) {
  if (dead_) return;
  if (closing_) {
    if (now >= close_deadline_) dead_ = true;
    return;
  }
  const auto stall_timeout = context_.options.stall_timeout;
  if (want_write_) {
    if (now - reply_started_ >= stall_timeout) {
      context_.stats.rejected[static_cast<std::size_t>(SocketError::stalled)].add();
      drop(fmt::format("did not read its {}-byte reply within {} ms; dropped", out_.size(), stall_timeout.count()));
    }
    return;
  }
  if (in_.size() > 0 && now - frame_started_ >= stall_timeout) {
    SocketFault fault;
    fault.error = SocketError::stalled;
    fault.limit = static_cast<std::uint64_t>(stall_timeout.count());
    fault.actual = in_.size();
    fault.expected = announced_frame_bytes();
    close_with_error(fault.error, ipcfloor::describe(fault), now);
    return;
  }
  const auto idle_timeout = context_.options.idle_timeout;
  if (idle_timeout.count() > 0 && in_.size() == 0 && now - last_activity_ >= idle_timeout) {
    SocketFault fault;
    fault.error = SocketError::idle_timeout;
    fault.limit = static_cast<std::uint64_t>(idle_timeout.count());
    close_with_error(fault.error, ipcfloor::describe(fault), now);
  }
}

void Connection::close_with_error(SocketError error, const std::string& message, Clock::time_point now) {
  context_.stats.rejected[static_cast<std::size_t>(error)].add();
  if (error != SocketError::permission_denied && error != SocketError::too_many_connections)
    context_.stats.dropped.add();
  context_.log.line(fmt::format("{}: {} ({}); closing the connection", peer_, message, to_string(error)));
  in_.clear();
  in_.release_if_large();
  out_.resize(out_sent_);  // anything not yet sent is superseded by the error
  append_error_reply(error, message, out_);
  closing_ = true;
  close_deadline_ = now + std::min<Clock::duration>(kLinger, context_.options.stall_timeout);
  flush(now);
}

void Connection::drop(const std::string& why) {
  if (dead_) return;
  context_.stats.dropped.add();
  context_.log.line(fmt::format("{}: {}", peer_, why));
  dead_ = true;
}

void Connection::on_readable(Clock::time_point now) {
  if (closing_) {
    discard_input();
    return;
  }
  for (;;) {
    const RequestScan scan = scan_request(in_.view(), context_.options.max_frame_bytes);
    if (scan.state != ScanState::need_more) {  // a frame is already whole: serve it first
      serve_buffered(now);
      if (dead_ || closing_ || want_write_) return;
      continue;
    }
    in_.make_room(in_.size() >= kLengthPrefixBytes ? kLengthPrefixBytes + scan.body_len : kLengthPrefixBytes);
    const std::span<std::byte> tail = in_.tail();
    const ssize_t got = recv(fd_, tail.data(), tail.size(), 0);
    if (got == 0) {
      on_eof(now);
      return;
    }
    if (got < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == EINTR) continue;
      drop(fmt::format("recv failed: {}", os_error(errno)));
      return;
    }
    if (in_.size() == 0) frame_started_ = now;
    last_activity_ = now;
    in_.produced(static_cast<std::size_t>(got));
    context_.stats.bytes_in.add(static_cast<std::uint64_t>(got));
    serve_buffered(now);
    if (dead_ || closing_ || want_write_) return;
    if (static_cast<std::size_t>(got) < tail.size()) return;  // drained; epoll says when more comes
  }
}

void Connection::on_writable(Clock::time_point now) {
  flush(now);
  if (!dead_ && !want_write_ && !closing_) serve_buffered(now);  // frames pipelined meanwhile
}

void Connection::on_eof(Clock::time_point now) {
  if (in_.size() == 0) {
    dead_ = true;  // an orderly goodbye
    return;
  }
  SocketFault fault;
  fault.error = SocketError::truncated;
  fault.actual = in_.size();
  fault.expected = announced_frame_bytes();
  close_with_error(fault.error, ipcfloor::describe(fault), now);
}

std::uint64_t Connection::announced_frame_bytes() const noexcept {
  const RequestScan scan = scan_request(in_.view(), context_.options.max_frame_bytes);
  return in_.size() >= kLengthPrefixBytes ? kLengthPrefixBytes + std::uint64_t{scan.body_len} : kLengthPrefixBytes;
}

void Connection::serve_buffered(Clock::time_point now) {
  while (!dead_ && !closing_ && !want_write_) {
    const RequestScan scan = scan_request(in_.view(), context_.options.max_frame_bytes);
    if (scan.state == ScanState::need_more) {
      if (in_.size() == 0) in_.release_if_large();
      return;
    }
    if (scan.state == ScanState::too_large) {
      SocketFault fault;
      fault.error = SocketError::frame_too_large;
      fault.actual = scan.body_len;
      fault.expected = context_.options.max_frame_bytes;
      close_with_error(fault.error, ipcfloor::describe(fault), now);
      return;
    }
    serve_frame(in_.view().subspan(kLengthPrefixBytes, scan.body_len));
    in_.consume(scan.frame_bytes);
    if (in_.size() > 0) frame_started_ = now;  // the next frame's bytes are already here
    flush(now);
  }
}

void Connection::serve_frame(std::span<const std::byte> body) {
  const auto served = context_.requests.serve(body, session_, out_);
  if (!served) {
    reject(served.error());
    return;
  }
  context_.stats.served[static_cast<std::size_t>(*served)].add();
}

void Connection::reject(const Rejection& rejection) {
  context_.stats.rejected[static_cast<std::size_t>(rejection.error)].add();
  context_.log.line(fmt::format("{}: rejected a frame ({}): {}", peer_, to_string(rejection.error), rejection.message));
  append_error_reply(rejection.error, rejection.message, out_);
}

void Connection::flush(Clock::time_point now) {
  while (out_sent_ < out_.size()) {
    const ssize_t sent = send(fd_, out_.data() + out_sent_, out_.size() - out_sent_, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (sent > 0) {
      out_sent_ += static_cast<std::size_t>(sent);
      context_.stats.bytes_out.add(static_cast<std::uint64_t>(sent));
      continue;
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!want_write_) {
        want_write_ = true;
        reply_started_ = now;
        watch(EPOLLOUT);
      }
      return;
    }
    if (closing_) {
      dead_ = true;  // the peer is gone already; the error had nobody to read it
    } else {
      drop(fmt::format("send failed: {}", os_error(errno)));
    }
    return;
  }
  out_.clear();
  out_sent_ = 0;
  last_activity_ = now;  // the idle clock starts when the reply has left, not when the request came
  if (out_.capacity() > kRetainedBufferBytes) std::vector<std::byte>().swap(out_);
  if (closing_ && !write_shut_) {
    shutdown(fd_, SHUT_WR);
    write_shut_ = true;
  }
  if (want_write_) {
    want_write_ = false;
    watch(EPOLLIN | EPOLLRDHUP);
  }
}

void Connection::discard_input() {
  std::array<std::byte, 4096> sink;
  for (;;) {
    const ssize_t got = recv(fd_, sink.data(), sink.size(), 0);
    if (got > 0) {
      context_.stats.bytes_in.add(static_cast<std::uint64_t>(got));
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    dead_ = true;
    return;
  }
}

void Connection::watch(std::uint32_t events) {
  if (!context_.epoll.modify(fd_, events)) drop(fmt::format("epoll_ctl(MOD) failed: {}", os_error(errno)));
}

}  // namespace ipcfloor::socket_detail
