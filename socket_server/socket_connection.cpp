#include "socket_server/socket_connection.hpp"

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
// After a fatal error reply the server stops writing and waits this long for the peer's EOF
// before closing, so the reply is not lost to a reset caused by unread input.
constexpr std::chrono::milliseconds kLinger{1000};
constexpr unsigned kLogLinesPerSecond = 20;
// A frame is held to the floor rate (options.min_frame_rate) once it has been arriving this
// long: a whole frame sent by one write is never near it.
constexpr std::chrono::milliseconds kFrameRateGrace{200};
// close_rank's classes, in order: connections that never sent a byte, those inside their first
// frame, idle ones that have completed a frame. Each adds steady-clock nanoseconds, far below
// 2^61 for decades of uptime.
constexpr std::int64_t kFirstFrameRankBase = std::int64_t{1} << 61;
constexpr std::int64_t kServedRankBase = std::int64_t{1} << 62;

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

Connection::~Connection() { context_.requests.forget(session_); }

bool Connection::idle() const noexcept {
  return holds_slot_ && !dead_ && !closing_ && !want_write_ && !job_.running && in_.size() == 0 && skip_ == 0 &&
         out_sent_ == out_.size();
}

std::int64_t Connection::close_rank(Clock::time_point now) const noexcept {
  if (!holds_slot_ || dead_ || closing_ || job_.running) return kNeverClosedForNewcomer;
  if (!served_) {
    const bool in_frame = in_.size() > 0 || skip_ > 0 || want_write_;
    return (in_frame ? kFirstFrameRankBase : 0) + accepted_at_.time_since_epoch().count();
  }
  if (!idle() || now - last_activity_ < context_.options.keep_active) return kNeverClosedForNewcomer;
  return kServedRankBase + last_activity_.time_since_epoch().count();
}

bool Connection::below_frame_rate(Clock::duration elapsed) const noexcept {
  const std::uint64_t floor = context_.options.min_frame_rate;
  if (floor == 0 || elapsed < kFrameRateGrace) return false;
  const auto elapsed_us = std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count();
  const std::uint64_t arrived = partial_frame(SocketError::stalled).actual;
  return static_cast<long double>(arrived) * 1e6L < static_cast<long double>(floor) * elapsed_us;
}

void Connection::on_events(std::uint32_t what, Clock::time_point now) {
  // A hang-up while a reply is pending goes to the writer too: its send fails and drops
  // the connection, instead of the hang-up firing on every wait until the timeout.
  constexpr std::uint32_t kHangUp = EPOLLHUP | EPOLLERR;
  if (job_.running) {  // only a hang-up is watched for: nobody is left to read the sweep's reply
    if ((what & kHangUp) != 0) {
      context_.requests.abandon(job_);
      drop("hung up while its sweep ran; the sweep is abandoned");
    }
    return;
  }
  if (want_write_ && (what & (EPOLLOUT | kHangUp)) != 0) on_writable(now);
  if (!dead_ && !want_write_ && (what & (EPOLLIN | EPOLLRDHUP | kHangUp)) != 0) on_readable(now);
  sync_interest();
}

void Connection::run_chunk() {
  if (dead_ || !job_.running) return;
  const auto step = context_.requests.run_chunk(job_);
  if (step && !*step) return;  // more chunks to come, in turn with other connections
  const auto now = Clock::now();
  if (step) {
    context_.stats.served[static_cast<std::size_t>(job_.opcode)].add();
    context_.requests.finish(job_, out_);
  } else {
    context_.requests.abandon(job_);
    reject(step.error());
  }
  consume_frame(job_frame_bytes_, now);
  flush(now);
  serve_buffered(now);  // frames pipelined behind the sweep
  sync_interest();
}

SocketFault Connection::partial_frame(SocketError error) const noexcept {
  SocketFault fault;
  fault.error = error;
  fault.actual = skip_ > 0 ? skip_frame_bytes_ - skip_ : in_.size();
  fault.expected = skip_ > 0 ? skip_frame_bytes_ : announced_frame_bytes();
  return fault;
}

void Connection::check_deadline(Clock::time_point now) {
  if (dead_) return;
  if (closing_) {
    if (now >= close_deadline_) dead_ = true;
    return;
  }
  if (job_.running) return;  // the server owes it work, not the other way round
  const auto stall_timeout = context_.options.stall_timeout;
  if (want_write_) {
    if (now - reply_started_ >= stall_timeout) {
      context_.stats.rejected[static_cast<std::size_t>(SocketError::stalled)].add();
      drop(fmt::format("did not read its {}-byte reply within {} ms; dropped", out_.size(), stall_timeout.count()));
    }
    return;
  }
  if (in_.size() > 0 || skip_ > 0) {
    const auto elapsed = now - frame_started_;
    const bool slow = below_frame_rate(elapsed);
    if (elapsed >= stall_timeout || slow) {
      SocketFault fault = partial_frame(SocketError::stalled);
      fault.limit = static_cast<std::uint64_t>(stall_timeout.count());
      if (slow && elapsed < stall_timeout) {
        fault.field = kBelowFrameRate;
        fault.index = context_.options.min_frame_rate;
        fault.limit = static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count());
      }
      close_with_error(fault.error, ipcfloor::describe(fault), now);
    }
    return;
  }
  const auto idle_timeout = context_.options.idle_timeout;
  if (idle_timeout.count() > 0 && in_.size() == 0 && skip_ == 0 && now - last_activity_ >= idle_timeout) {
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
  if (job_.running) context_.requests.abandon(job_);
  in_.clear();
  in_.release_if_large();
  skip_ = 0;
  out_.resize(out_sent_);  // anything not yet sent is superseded by the error
  append_error_reply(error, message, out_);
  closing_ = true;
  close_deadline_ = now + std::min<Clock::duration>(kLinger, context_.options.stall_timeout);
  flush(now);
  sync_interest();
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
    serve_buffered(now);  // whole frames first; a partial one's length prefix is counted here
    if (!reading()) return;
    if (skip_ > 0) {
      if (!skip_input(now)) return;
      continue;
    }
    const RequestScan scan = scan_request(in_.view(), context_.options.max_frame_bytes);
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
    if (static_cast<std::size_t>(got) < tail.size()) {  // drained; epoll says when more comes
      serve_buffered(now);
      return;
    }
  }
}

bool Connection::skip_input(Clock::time_point now) {
  std::array<std::byte, 16384> sink;
  const auto want = static_cast<std::size_t>(std::min<std::uint64_t>(skip_, sink.size()));
  const ssize_t got = recv(fd_, sink.data(), want, 0);
  if (got == 0) {
    on_eof(now);
    return false;
  }
  if (got < 0) {
    if (errno == EINTR) return true;
    if (errno != EAGAIN && errno != EWOULDBLOCK) drop(fmt::format("recv failed: {}", os_error(errno)));
    return false;
  }
  skip_ -= static_cast<std::uint64_t>(got);
  last_activity_ = now;
  context_.stats.bytes_in.add(static_cast<std::uint64_t>(got));
  return static_cast<std::size_t>(got) == want;
}

void Connection::on_writable(Clock::time_point now) {
  flush(now);
  if (!dead_ && !want_write_ && !closing_) serve_buffered(now);  // frames pipelined meanwhile
}

void Connection::on_eof(Clock::time_point now) {
  if (in_.size() == 0 && skip_ == 0) {
    dead_ = true;  // an orderly goodbye
    return;
  }
  const SocketFault fault = partial_frame(SocketError::truncated);
  close_with_error(fault.error, ipcfloor::describe(fault), now);
}

std::uint64_t Connection::announced_frame_bytes() const noexcept {
  const RequestScan scan = scan_request(in_.view(), context_.options.max_frame_bytes);
  return in_.size() >= kLengthPrefixBytes ? kLengthPrefixBytes + std::uint64_t{scan.body_len} : kLengthPrefixBytes;
}

void Connection::serve_buffered(Clock::time_point now) {
  while (reading() && skip_ == 0) {
    const RequestScan scan = scan_request(in_.view(), context_.options.max_frame_bytes);
    if (scan.state == ScanState::too_large) {
      SocketFault fault;
      fault.error = SocketError::frame_too_large;
      fault.actual = scan.body_len;
      fault.expected = context_.options.max_frame_bytes;
      close_with_error(fault.error, ipcfloor::describe(fault), now);
      return;
    }
    if (scan.state == ScanState::complete) {
      serve_frame(scan.frame_bytes, now);
      continue;
    }
    if (in_.size() >= kLengthPrefixBytes && !front_counted_) {  // before the buffer grows for it
      const std::uint64_t frame_bytes = kLengthPrefixBytes + std::uint64_t{scan.body_len};
      if (auto fault = context_.requests.admit_frame(session_, frame_bytes)) {
        refuse_frame(*fault, frame_bytes, now);
        continue;
      }
      front_counted_ = true;
    }
    if (in_.size() == 0) in_.release_if_large();
    return;
  }
}

void Connection::serve_frame(std::size_t frame_bytes, Clock::time_point now) {
  const auto body = in_.view().subspan(kLengthPrefixBytes, frame_bytes - kLengthPrefixBytes);
  const auto served = context_.requests.serve(body, session_, job_, out_);
  if (!served) {
    reject(served.error());
  } else if (job_.running) {  // a sweep: the frame stays buffered while its chunks run in turn
    job_frame_bytes_ = frame_bytes;
    sync_interest();
    return;
  } else {
    context_.stats.served[static_cast<std::size_t>(*served)].add();
  }
  consume_frame(frame_bytes, now);
  flush(now);
}

void Connection::refuse_frame(const SocketFault& fault, std::uint64_t frame_bytes, Clock::time_point now) {
  reject(rejection_for(fault));
  // Everything buffered belongs to this frame (it is not whole yet); the rest is read into nowhere.
  skip_frame_bytes_ = frame_bytes;
  skip_ = frame_bytes - in_.size();
  in_.clear();
  in_.release_if_large();
  flush(now);
}

void Connection::consume_frame(std::size_t frame_bytes, Clock::time_point now) {
  in_.consume(frame_bytes);
  front_counted_ = false;
  served_ = true;
  if (in_.size() > 0) frame_started_ = now;  // the next frame's bytes are already here
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
        sync_interest();
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
  if (!job_.running) context_.requests.request_done(session_);
  if (out_.capacity() > kRetainedBufferBytes) std::vector<std::byte>().swap(out_);
  if (closing_ && !write_shut_) {
    shutdown(fd_, SHUT_WR);
    write_shut_ = true;
  }
  want_write_ = false;
  sync_interest();
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

void Connection::sync_interest() {
  const std::uint32_t wanted = want_write_ ? EPOLLOUT : job_.running ? 0u : (EPOLLIN | EPOLLRDHUP);
  if (dead_ || wanted == interest_) return;
  if (!context_.epoll.modify(fd_, wanted)) {
    drop(fmt::format("epoll_ctl(MOD) failed: {}", os_error(errno)));
    return;
  }
  interest_ = wanted;
}

}  // namespace ipcfloor::socket_detail
