#pragma once
// One peer of the socket server (socket_server/socket_server.hpp) on one server thread: its buffers,
// state and deadlines, and the steps that move it along (read, parse, serve, write, linger,
// close), plus what every connection of a thread shares (counters, a rate-limited log). Only
// the server thread that accepted a connection touches it; the counters are read by any thread.

#include <sys/epoll.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "socket_server/socket_listener.hpp"
#include "socket_server/socket_request_handler.hpp"
#include "socket_server/socket_options.hpp"
#include "socket/socket_protocol.hpp"

namespace ipcfloor::socket_detail {

using Clock = std::chrono::steady_clock;

// Connection::close_rank of one that is never closed for a newcomer.
inline constexpr std::int64_t kNeverClosedForNewcomer = std::numeric_limits<std::int64_t>::max();

// A counter with one writer (its server thread) and readers on any thread.
class Counter {
 public:
  void add(std::uint64_t n = 1) noexcept {
    // relaxed: a statistic with a single writer; get() reads it relaxed on any thread and
    // nothing is published through it (plain load + store: no locked RMW on the serving path).
    value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t get() const noexcept {
    // relaxed: a statistic; no memory is published through it, and an atomic load never tears,
    // so a reader sees some recent value, which is all a count for status needs.
    return value_.load(std::memory_order_relaxed);
  }

 private:
  std::atomic<std::uint64_t> value_{0};
};

// One server thread's counters; SocketServer::stats() sums them over the threads.
struct ThreadStats {
  Counter accepted, refused, dropped, bytes_in, bytes_out;
  std::array<Counter, kSocketOpcodeCount> served;
  std::array<Counter, kSocketErrorSlots> rejected;

  void add_to(SocketServerStats& stats) const noexcept;
};

// Lines to the log (which queues and never blocks), at most kLogLinesPerSecond a second, so a
// flood of bad peers cannot turn the server into a log writer; what was held back is reported
// as a count before the next line. One server thread's; allocates the lines it writes.
class RateLimitedLog {
 public:
  explicit RateLimitedLog(bool enabled) : enabled_(enabled) {}
  void line(const std::string& text);

 private:
  const bool enabled_;
  Clock::time_point window_{};
  unsigned lines_ = 0;
  std::uint64_t suppressed_ = 0;
};

// The read side of a connection: one contiguous buffer holding the current frame (and maybe the
// start of the next), grown only to a size whose length prefix already passed the limit.
class InBuffer {
 public:
  [[nodiscard]] std::span<const std::byte> view() const noexcept { return {data_.get() + begin_, end_ - begin_}; }
  [[nodiscard]] std::size_t size() const noexcept { return end_ - begin_; }
  [[nodiscard]] std::span<std::byte> tail() noexcept { return {data_.get() + end_, capacity_ - end_}; }
  void produced(std::size_t n) noexcept { end_ += n; }
  void consume(std::size_t n) noexcept {
    begin_ += n;
    if (begin_ == end_) begin_ = end_ = 0;
  }
  void clear() noexcept { begin_ = end_ = 0; }

  // Makes room for `need` bytes from the first buffered byte (need > size()): compacts, or
  // grows to max(need, kInitialInBytes). Allocates only when growing.
  void make_room(std::size_t need);

  // Gives a large buffer back once it holds nothing.
  void release_if_large() noexcept;

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_ = 0;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

// What every connection of one server thread uses of it.
struct ThreadContext {
  const SocketServerOptions& options;
  ThreadStats& stats;
  RateLimitedLog& log;
  EpollSet& epoll;
  RequestHandler& requests;
};

// One peer on one server thread. A connection never closes its fd itself: it is marked dead,
// and its thread closes it after the event batch (ServerThread::reap). Every call may allocate
// (replies, logs) and may throw bad_alloc; the thread catches it and drops this connection only.
//
// A connection handles one request at a time, in order: while a sweep runs (a chunk per turn,
// ServerThread::run_next_chunk) or a reply waits to leave, it is not read.
// 43 member functions, more than one role (framing, admission of a peer, the request state machine,
// timeouts): the split into a state machine of its own is pending, not yet done.
class Connection {
 public:
  // `owner`: the peer is proven to be the server's own uid. `id` is unique on its thread.
  Connection(ThreadContext& context, int fd, std::string peer, bool owner, std::uint64_t id, Clock::time_point now)
      : context_(context), fd_(fd), id_(id), owner_(owner), peer_(std::move(peer)), accepted_at_(now),
        last_activity_(now) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  [[nodiscard]] std::uint64_t id() const noexcept { return id_; }
  [[nodiscard]] bool owner() const noexcept { return owner_; }
  [[nodiscard]] bool dead() const noexcept { return dead_; }
  [[nodiscard]] bool holds_slot() const noexcept { return holds_slot_; }
  void hold_slot() noexcept { holds_slot_ = true; }
  // The slot was given back early (the connection was closed for a newcomer and lingers).
  void slot_returned() noexcept { holds_slot_ = false; }
  // Forgotten without a word, at the end of this event batch.
  void mark_dead() noexcept { dead_ = true; }

  // A sweep is running: the thread owes it chunks.
  [[nodiscard]] bool sweeping() const noexcept { return job_.running; }
  // Whether it waits in its thread's run queue (kept by the thread).
  [[nodiscard]] bool queued() const noexcept { return queued_; }
  void set_queued(bool queued) noexcept { queued_ = queued; }

  // One slot of its peer's PeerLimit (socket_listener.hpp), held under `key`.
  void hold_peer_slot(std::string key) noexcept {
    peer_key_ = std::move(key);
    holds_peer_slot_ = true;
  }
  [[nodiscard]] bool holds_peer_slot() const noexcept { return holds_peer_slot_; }
  [[nodiscard]] const std::string& peer_key() const noexcept { return peer_key_; }
  void peer_slot_returned() noexcept { holds_peer_slot_ = false; }

  // Where it stands in line to be closed for a newcomer at the connection limit, lowest first,
  // or kNeverClosedForNewcomer: first the connections that never completed a frame (those that
  // sent nothing before those inside their first frame), by when they connected; then those
  // with no request in flight (no frame
  // begun, no sweep, no reply pending) and idle for options.keep_active, longest idle first.
  // Never one that is closing or whose first request is a running sweep.
  [[nodiscard]] std::int64_t close_rank(Clock::time_point now) const noexcept;
  [[nodiscard]] bool served_a_frame() const noexcept { return served_; }
  [[nodiscard]] Clock::time_point accepted_at() const noexcept { return accepted_at_; }
  [[nodiscard]] Clock::time_point idle_since() const noexcept { return last_activity_; }

  // What epoll reported for this fd.
  void on_events(std::uint32_t what, Clock::time_point now);

  // Runs the next chunk of its sweep; when the sweep is done, sends its reply and goes on with
  // the frames buffered behind it.
  void run_chunk();

  // A frame, a reply or a goodbye that is overdue ends the connection.
  void check_deadline(Clock::time_point now);

  // A fatal error: the reply goes out, then the connection is shut down and closed.
  void close_with_error(SocketError error, const std::string& message, Clock::time_point now);

  // Closes at once, without a reply (the peer is gone or cannot be written to).
  void drop(const std::string& why);

 private:
  // Not waiting for a reply to leave, a sweep, or its close: the next frame may be read.
  [[nodiscard]] bool reading() const noexcept { return !dead_ && !closing_ && !want_write_ && !job_.running; }

  void on_readable(Clock::time_point now);
  void on_writable(Clock::time_point now);
  void on_eof(Clock::time_point now);
  // Reads up to the end of a refused frame's body into nowhere. False when there is nothing more
  // to read now.
  bool skip_input(Clock::time_point now);

  // Holds a slot and has no request in flight (no frame begun, no sweep, no reply pending).
  [[nodiscard]] bool idle() const noexcept;
  // A frame in progress for `elapsed` that has arrived slower than options.min_frame_rate.
  [[nodiscard]] bool below_frame_rate(Clock::duration elapsed) const noexcept;

  // The bytes the buffered frame's length prefix announces, or just the prefix while it is
  // incomplete: what a stalled or truncated frame fell short of.
  [[nodiscard]] std::uint64_t announced_frame_bytes() const noexcept;
  // A stalled or truncated fault with how much of the frame (buffered or skipped) arrived.
  [[nodiscard]] SocketFault partial_frame(SocketError error) const noexcept;

  // Serves every whole frame buffered, one reply at a time, and counts the next frame against
  // the memory cap once its length prefix is here.
  void serve_buffered(Clock::time_point now);
  // Serves the whole frame at the front of the buffer, or starts its sweep.
  void serve_frame(std::size_t frame_bytes, Clock::time_point now);
  // A frame refused from its length prefix (over the memory cap): its error reply, and its body
  // is read into nowhere as it comes.
  void refuse_frame(const SocketFault& fault, std::uint64_t frame_bytes, Clock::time_point now);
  // The front frame has been answered: its bytes leave the buffer.
  void consume_frame(std::size_t frame_bytes, Clock::time_point now);
  // A refused frame on a connection that stays usable.
  void reject(const Rejection& rejection);
  void flush(Clock::time_point now);
  // Closing: read and forget until the peer's EOF (or the deadline).
  void discard_input();
  // Tells epoll what this connection waits for now: a reply to leave, input, or nothing (a sweep).
  void sync_interest();

  ThreadContext& context_;
  const int fd_;
  const std::uint64_t id_;
  const bool owner_;
  bool holds_slot_ = false;  // holds a slot of the server's connection limit
  bool holds_peer_slot_ = false;
  bool served_ = false;      // has completed a frame (answered or rejected)
  std::string peer_key_;     // its PeerLimit key (empty: the server's own uid, no per-peer limit)
  bool queued_ = false;      // in its thread's run queue
  std::string peer_;         // "unix peer pid P uid U" or "tcp peer ADDR:PORT", for logs
  InBuffer in_;
  std::vector<std::byte> out_;  // the reply being sent (at most one: input waits for it)
  std::size_t out_sent_ = 0;
  Session session_;
  SweepJob job_;
  std::size_t job_frame_bytes_ = 0;  // the frame the running sweep came in (it stays buffered)
  bool front_counted_ = false;       // the front frame counts against the memory cap
  std::uint64_t skip_ = 0;           // bytes of a refused frame's body still to read into nowhere
  std::uint64_t skip_frame_bytes_ = 0;
  std::uint32_t interest_ = EPOLLIN | EPOLLRDHUP;  // what epoll watches for (ServerThread registers it so)
  Clock::time_point frame_started_{};   // the first byte of the buffered (or skipped) frame arrived
  Clock::time_point reply_started_{};   // the pending reply first failed to leave whole
  Clock::time_point close_deadline_{};  // closing: give up waiting for the peer's EOF
  const Clock::time_point accepted_at_;
  Clock::time_point last_activity_;     // the last byte in or the last reply out (or the accept)
  bool want_write_ = false;  // a reply is pending: registered for EPOLLOUT instead of EPOLLIN
  bool closing_ = false;     // a fatal error reply is queued; then shut down and wait for EOF
  bool write_shut_ = false;
  bool dead_ = false;        // closed and forgotten at the end of this event batch
};

}  // namespace ipcfloor::socket_detail
