#include "engine/socket_server.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>
#include <expected>
#include <optional>
#include <span>
#include <system_error>
#include <unordered_map>

#include <fmt/format.h>

#include "common/log.hpp"
#include "kernel/cost.hpp"
#include "shm/segment.hpp"

namespace ipcfloor {
// What every server thread shares besides the connection limit: the bytes of series all
// connections hold (against max_loaded_bytes) and whether the server is stopping.
struct SharedBudget {
  std::atomic<std::uint64_t> loaded_bytes{0};
  std::atomic<bool> stopping{false};
};

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kInitialInBytes = 16 * 1024;
// Buffers and workspaces above these sizes are released once idle, so a connection that sent
// one huge frame does not hold its memory forever; below them they are kept, so the chatty
// pattern (a 1.2 MB series per call) does not pay an allocation per call.
constexpr std::size_t kRetainedBufferBytes = std::size_t{4} << 20;
constexpr std::size_t kRetainedWorkspaceBars = std::size_t{1} << 21;
constexpr int kListenBacklog = 128;
constexpr int kMaxEvents = 64;
// After a fatal error reply the server stops writing and waits this long for the peer's EOF
// before closing, so the reply is not lost to a reset caused by unread input.
constexpr std::chrono::milliseconds kLinger{1000};
constexpr unsigned kLogLinesPerSecond = 20;
constexpr unsigned kMaxThreads = 64;

std::string os_error(int error) { return std::error_code(error, std::generic_category()).message(); }

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
  void make_room(std::size_t need) {
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

  // Gives a large buffer back once it holds nothing.
  void release_if_large() noexcept {
    if (size() == 0 && capacity_ > kRetainedBufferBytes) {
      data_.reset();
      capacity_ = 0;
      begin_ = end_ = 0;
    }
  }

 private:
  std::unique_ptr<std::byte[]> data_;
  std::size_t capacity_ = 0;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
};

// A counter with one writer (its server thread) and readers on any thread.
class Counter {
 public:
  void add(std::uint64_t n = 1) noexcept {
    // relaxed: a statistic with a single writer; stats() reads it relaxed on any thread and
    // nothing is published through it (plain load + store: no locked RMW on the serving path).
    value_.store(value_.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t get() const noexcept {
    return value_.load(std::memory_order_relaxed);  // relaxed: pairs with add()'s relaxed store
  }

 private:
  std::atomic<std::uint64_t> value_{0};
};

Expected<int> open_unix_listener(const std::string& path, bool any_uid, std::uint64_t& dev, std::uint64_t& ino) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path)
    return fail(ErrorCode::invalid_argument, "socket path '{}' must be 1..{} bytes", path, sizeof address.sun_path - 1);
  std::memcpy(address.sun_path, path.data(), path.size());
  const auto* raw = reinterpret_cast<const sockaddr*>(&address);
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);

  struct stat existing {};
  if (lstat(path.c_str(), &existing) == 0) {
    if (!S_ISSOCK(existing.st_mode))
      return fail(ErrorCode::busy, "{} exists and is not a socket; refusing to replace it", path);
    const int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (probe < 0) return fail(ErrorCode::io, "cannot create a socket to probe {}: {}", path, os_error(errno));
    const int connected = connect(probe, raw, length);
    const int probe_error = errno;
    close(probe);
    if (connected == 0)
      return fail(ErrorCode::busy, "a server is already listening on {}; stop it or pick another --socket path", path);
    if (probe_error != ECONNREFUSED)
      return fail(ErrorCode::io, "cannot tell whether {} is stale: connecting to it failed with {}", path,
                  os_error(probe_error));
    // Nobody listens: a crashed server left it behind.
    if (unlink(path.c_str()) != 0 && errno != ENOENT)
      return fail(ErrorCode::io, "cannot remove the stale socket {}: {}", path, os_error(errno));
  } else if (errno != ENOENT) {
    return fail(ErrorCode::io, "cannot inspect {}: {}", path, os_error(errno));
  }

  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return fail(ErrorCode::io, "cannot create a Unix socket: {}", os_error(errno));
  const auto give_up = [&](std::string what, int error, bool created) -> Expected<int> {
    close(fd);
    if (created) unlink(path.c_str());
    return fail(ErrorCode::io, "{} {}: {}", what, path, os_error(error));
  };
  if (bind(fd, raw, length) != 0) return give_up("cannot bind", errno, false);
  // No peer can connect before listen(), so setting the mode here leaves no window in which
  // the umask's wider mode admits anyone.
  if (chmod(path.c_str(), any_uid ? 0666 : 0600) != 0) return give_up("cannot set the mode of", errno, true);
  struct stat created {};
  if (lstat(path.c_str(), &created) != 0) return give_up("cannot inspect", errno, true);
  if (listen(fd, kListenBacklog) != 0) return give_up("cannot listen on", errno, true);
  dev = static_cast<std::uint64_t>(created.st_dev);
  ino = static_cast<std::uint64_t>(created.st_ino);
  return fd;
}

Expected<int> open_tcp_listener(const TcpEndpoint& endpoint, std::uint16_t& bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(endpoint.port);
  if (const int rc = getaddrinfo(endpoint.host.c_str(), port.c_str(), &hints, &found); rc != 0)
    return fail(ErrorCode::invalid_argument, "cannot resolve tcp host '{}': {}", endpoint.host, gai_strerror(rc));
  std::string last_error = "no address";
  int fd = -1;
  for (const addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last_error = os_error(errno);
      continue;
    }
    const int one = 1;
    // A restarted server must not wait out TIME_WAIT of its previous life.
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, kListenBacklog) == 0) break;
    last_error = os_error(errno);
    close(fd);
    fd = -1;
  }
  freeaddrinfo(found);
  if (fd < 0)
    return fail(ErrorCode::io, "cannot listen on tcp {}:{}: {}", endpoint.host, endpoint.port, last_error);
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof bound;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) {
    const int error = errno;
    close(fd);
    return fail(ErrorCode::io, "cannot read the bound tcp port: {}", os_error(error));
  }
  bound_port = bound.ss_family == AF_INET6 ? ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port)
                                           : ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
  return fd;
}

std::string tcp_peer_name(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = "?";
  std::uint16_t port = 0;
  if (address.ss_family == AF_INET) {
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&address);
    inet_ntop(AF_INET, &v4->sin_addr, text, sizeof text);
    port = ntohs(v4->sin_port);
    return fmt::format("tcp peer {}:{}", text, port);
  }
  if (address.ss_family == AF_INET6) {
    const auto* v6 = reinterpret_cast<const sockaddr_in6*>(&address);
    inet_ntop(AF_INET6, &v6->sin6_addr, text, sizeof text);
    port = ntohs(v6->sin6_port);
    return fmt::format("tcp peer [{}]:{}", text, port);
  }
  return "tcp peer (unknown address)";
}

// ---- What one server thread's connections share ----------------------------------------------

// One server thread's counters; SocketServer::stats() sums them over the threads.
struct ThreadStats {
  Counter accepted, refused, dropped, bytes_in, bytes_out;
  std::array<Counter, kSocketOpcodeCount> served;
  std::array<Counter, kSocketErrorSlots> rejected;

  void add_to(SocketServerStats& stats) const noexcept {
    stats.connections_accepted += accepted.get();
    stats.connections_refused += refused.get();
    stats.connections_dropped += dropped.get();
    for (std::size_t i = 0; i < kSocketOpcodeCount; ++i) stats.served[i] += served[i].get();
    for (std::size_t i = 0; i < kSocketErrorSlots; ++i) stats.rejected[i] += rejected[i].get();
    stats.bytes_in += bytes_in.get();
    stats.bytes_out += bytes_out.get();
  }
};

// Lines to the log (which queues and never blocks), at most kLogLinesPerSecond a second, so a flood of bad peers cannot turn the
// server into a log writer; what was held back is reported as a count before the next line.
class RateLimitedLog {
 public:
  explicit RateLimitedLog(bool enabled) : enabled_(enabled) {}

  void line(const std::string& text) {
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

 private:
  const bool enabled_;
  Clock::time_point window_{};
  unsigned lines_ = 0;
  std::uint64_t suppressed_ = 0;
};

// One server thread's epoll set, keyed by fd.
class EpollSet {
 public:
  EpollSet() = default;
  EpollSet(const EpollSet&) = delete;
  EpollSet& operator=(const EpollSet&) = delete;
  ~EpollSet() {
    if (fd_ >= 0) close(fd_);
  }

  Expected<void> open() {
    fd_ = epoll_create1(EPOLL_CLOEXEC);
    if (fd_ < 0) return fail(ErrorCode::io, "epoll_create1 failed: {}", os_error(errno));
    return {};
  }

  Expected<void> add(int fd, std::uint32_t events) {
    epoll_event event{};
    event.events = events;
    event.data.fd = fd;
    if (epoll_ctl(fd_, EPOLL_CTL_ADD, fd, &event) != 0)
      return fail(ErrorCode::io, "epoll_ctl(ADD) failed: {}", os_error(errno));
    return {};
  }

  // False, with errno set, when the kernel refused.
  bool modify(int fd, std::uint32_t events) noexcept {
    epoll_event event{};
    event.events = events;
    event.data.fd = fd;
    return epoll_ctl(fd_, EPOLL_CTL_MOD, fd, &event) == 0;
  }

  int wait(std::span<epoll_event> events, int timeout_ms) noexcept {
    return epoll_wait(fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
  }

 private:
  int fd_ = -1;
};

// ---- Requests --------------------------------------------------------------------------------

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

Rejection rejection_for(const SocketFault& fault) { return {fault.error, ipcfloor::describe(fault)}; }

// Request handling for one server thread: decodes a frame's body, runs it (on the kernel for
// the sweeps) and encodes the reply. Knows nothing of sockets; the scratch it keeps across
// requests spares the chatty pattern an allocation per call.
class RequestHandler {
 public:
  RequestHandler(const SocketServerOptions& options, SharedBudget& budget) : options_(options), budget_(budget) {}

  // The session's series no longer counts against the cap (its connection closed).
  void forget(Session& session) noexcept {
    // relaxed: a count compared against the cap (pairs with the fetch_add in charge).
    if (session.charged != 0) budget_.loaded_bytes.fetch_sub(session.charged, std::memory_order_relaxed);
    session.charged = 0;
  }

  // Appends the reply to `out` and returns the opcode served, or returns why the frame is
  // refused and appends nothing.
  std::expected<SocketOpcode, Rejection> serve(std::span<const std::byte> body, Session& session,
                                               std::vector<std::byte>& out) {
    auto request = decode_request(body);
    if (!request) return std::unexpected(rejection_for(request.error()));
    const RequestView& r = *request;
    switch (r.opcode) {
      case SocketOpcode::sweep: {
        if (auto fault = check_costs(r.params, r.n_combos, r.n_bars)) return std::unexpected(rejection_for(*fault));
        close_.resize(r.n_bars);
        copy_close(r.close, close_);
        if (auto swept = sweep(close_, r.params, r.n_combos); !swept) return std::unexpected(std::move(swept.error()));
        append_sweep_reply(results_, out);
        break;
      }
      case SocketOpcode::echo: append_echo_reply(r.close, out); break;
      case SocketOpcode::load: {
        if (auto refused = charge(session, std::uint64_t{r.n_bars} * sizeof(double)); !refused)
          return std::unexpected(std::move(refused.error()));
        session.series.resize(r.n_bars);
        copy_close(r.close, session.series);
        session.active = session.series;
        session.loaded = true;
        append_load_reply(fnv1a64(r.close), options_.fee, out);
        break;
      }
      case SocketOpcode::use_preloaded: {
        if (!options_.preloaded) {
          SocketFault fault;
          fault.error = SocketError::no_preloaded_series;
          fault.opcode = static_cast<std::uint8_t>(r.opcode);
          return std::unexpected(rejection_for(fault));
        }
        std::vector<double>().swap(session.series);  // a series it loaded before is not needed any more
        forget(session);
        session.active = options_.preloaded->close;
        session.loaded = true;
        append_preloaded_reply(options_.preloaded->checksum, options_.fee, session.active.size(),
                               options_.preloaded->name, out);
        break;
      }
      case SocketOpcode::sweep_loaded: {
        if (!session.loaded) {
          SocketFault fault;
          fault.error = SocketError::no_series_loaded;
          fault.opcode = static_cast<std::uint8_t>(r.opcode);
          return std::unexpected(rejection_for(fault));
        }
        if (auto fault = check_windows(r.params, session.active.size())) return std::unexpected(rejection_for(*fault));
        if (auto fault = check_costs(r.params, r.n_combos, session.active.size()))
          return std::unexpected(rejection_for(*fault));
        if (auto swept = sweep(session.active, r.params, r.n_combos); !swept)
          return std::unexpected(std::move(swept.error()));
        append_sweep_reply(results_, out);
        break;
      }
      case SocketOpcode::echo_params: append_echo_params_reply(r.params, out); break;
    }
    return r.opcode;
  }

 private:
  // Counts a load of `bytes` against the cap in place of what the session held, or refuses it.
  std::expected<void, Rejection> charge(Session& session, std::uint64_t bytes) {
    // relaxed: a count compared against the cap; no data is published through it.
    const std::uint64_t held = budget_.loaded_bytes.fetch_add(bytes, std::memory_order_relaxed) - session.charged;
    if (bytes > session.charged && held + bytes > options_.max_loaded_bytes) {
      budget_.loaded_bytes.fetch_sub(bytes, std::memory_order_relaxed);  // relaxed: as above
      SocketFault fault;
      fault.error = SocketError::over_memory_cap;
      fault.actual = bytes;
      fault.expected = options_.max_loaded_bytes;
      fault.limit = held;
      return std::unexpected(rejection_for(fault));
    }
    forget(session);
    session.charged = bytes;
    return {};
  }

  // The first combo whose work exceeds the bound per combo, if any.
  std::optional<SocketFault> check_costs(std::span<const std::byte> params, std::uint32_t n, std::size_t n_bars) const {
    if (options_.max_combo_cost == 0) return std::nullopt;
    for (std::uint32_t i = 0; i < n; ++i) {
      Combo combo;
      std::memcpy(&combo, params.data() + std::size_t{i} * kComboWireBytes, sizeof combo);
      const std::uint64_t cost = backtest_cost(combo, n_bars);
      if (cost <= options_.max_combo_cost) continue;
      SocketFault fault;
      fault.error = SocketError::too_costly;
      fault.index = i;
      fault.actual = cost;
      fault.expected = options_.max_combo_cost;
      return fault;
    }
    return std::nullopt;
  }

  // Runs validated combos into results_. Fails (internal) if the kernel refused one anyway.
  std::expected<void, Rejection> sweep(std::span<const double> close, std::span<const std::byte> params,
                                       std::uint32_t n) {
    results_.resize(n);
    if (options_.sweep_threads > 1 && n > 1) {
      combos_.resize(n);
      std::memcpy(combos_.data(), params.data(), std::size_t{n} * kComboWireBytes);
      auto results = run_sweep(close, combos_, options_.fee, options_.sweep_threads);
      if (!results) return std::unexpected(Rejection{SocketError::internal, results.error().message});
      results_ = std::move(*results);
      return {};
    }
    if (!workspace_ || workspace_->capacity() < close.size()) {
      workspace_.reset();
      workspace_ = std::make_unique<KernelWorkspace>(close.size());
    }
    for (std::uint32_t i = 0; i < n; ++i) {
      // relaxed: a plain flag; stop() joins the threads afterwards. Shutdown waits for one combo.
      if (budget_.stopping.load(std::memory_order_relaxed))
        return std::unexpected(Rejection{SocketError::internal, "the server is stopping"});
      Combo combo;
      std::memcpy(&combo, params.data() + std::size_t{i} * kComboWireBytes, sizeof combo);
      const KernelStatus status = run_backtest(close, combo, options_.fee, *workspace_, results_[i]);
      if (status != KernelStatus::ok)
        return std::unexpected(
            Rejection{SocketError::internal, fmt::format("combo {}: the kernel refused it: {}", i, to_string(status))});
    }
    if (workspace_->capacity() > kRetainedWorkspaceBars) workspace_.reset();
    return {};
  }

  const SocketServerOptions& options_;
  SharedBudget& budget_;
  // Scratch reused across requests: the aligned close of a stateless sweep, results, combos.
  std::vector<double> close_;
  std::vector<BacktestResult> results_;
  std::vector<Combo> combos_;
  std::unique_ptr<KernelWorkspace> workspace_;
};

// ---- Connections -----------------------------------------------------------------------------

// What every connection of one server thread uses of it.
struct ThreadContext {
  const SocketServerOptions& options;
  ThreadStats& stats;
  RateLimitedLog& log;
  EpollSet& epoll;
  RequestHandler& requests;
};

// One peer on one server thread: its buffers, state and deadlines, and the steps that move it
// along (read, parse, serve, write, linger, close). A connection never closes its fd itself: it
// is marked dead, and its thread closes it after the event batch (SocketServer::Worker::reap).
class Connection {
 public:
  Connection(ThreadContext& context, int fd, std::string peer, Clock::time_point now)
      : context_(context), fd_(fd), peer_(std::move(peer)), last_activity_(now) {}
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection() { context_.requests.forget(session_); }

  [[nodiscard]] bool dead() const noexcept { return dead_; }
  [[nodiscard]] bool holds_slot() const noexcept { return holds_slot_; }
  void hold_slot() noexcept { holds_slot_ = true; }
  // Forgotten without a word, at the end of this event batch.
  void mark_dead() noexcept { dead_ = true; }

  void on_events(std::uint32_t what, Clock::time_point now) {
    // A hang-up while a reply is pending goes to the writer too: its send fails and drops
    // the connection, instead of the hang-up firing on every wait until the timeout.
    constexpr std::uint32_t kHangUp = EPOLLHUP | EPOLLERR;
    if (want_write_ && (what & (EPOLLOUT | kHangUp)) != 0) on_writable(now);
    if (!dead_ && !want_write_ && (what & (EPOLLIN | EPOLLRDHUP | kHangUp)) != 0) on_readable(now);
  }

  // A frame, a reply or a goodbye that is overdue ends the connection.
  void check_deadline(Clock::time_point now) {
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

  // A fatal error: the reply goes out, then the connection is shut down and closed.
  void close_with_error(SocketError error, const std::string& message, Clock::time_point now) {
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

  // Closes at once, without a reply (the peer is gone or cannot be written to).
  void drop(const std::string& why) {
    if (dead_) return;
    context_.stats.dropped.add();
    context_.log.line(fmt::format("{}: {}", peer_, why));
    dead_ = true;
  }

 private:
  void on_readable(Clock::time_point now) {
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

  void on_writable(Clock::time_point now) {
    flush(now);
    if (!dead_ && !want_write_ && !closing_) serve_buffered(now);  // frames pipelined meanwhile
  }

  void on_eof(Clock::time_point now) {
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

  // The bytes the buffered frame's length prefix announces, or just the prefix while it is
  // incomplete: what a stalled or truncated frame fell short of.
  [[nodiscard]] std::uint64_t announced_frame_bytes() const noexcept {
    const RequestScan scan = scan_request(in_.view(), context_.options.max_frame_bytes);
    return in_.size() >= kLengthPrefixBytes ? kLengthPrefixBytes + std::uint64_t{scan.body_len} : kLengthPrefixBytes;
  }

  // Serves every whole frame buffered, one reply at a time.
  void serve_buffered(Clock::time_point now) {
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

  void serve_frame(std::span<const std::byte> body) {
    const auto served = context_.requests.serve(body, session_, out_);
    if (!served) {
      reject(served.error());
      return;
    }
    context_.stats.served[static_cast<std::size_t>(*served)].add();
  }

  // A refused frame on a connection that stays usable.
  void reject(const Rejection& rejection) {
    context_.stats.rejected[static_cast<std::size_t>(rejection.error)].add();
    context_.log.line(fmt::format("{}: rejected a frame ({}): {}", peer_, to_string(rejection.error), rejection.message));
    append_error_reply(rejection.error, rejection.message, out_);
  }

  void flush(Clock::time_point now) {
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

  // Closing: read and forget until the peer's EOF (or the deadline).
  void discard_input() {
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

  void watch(std::uint32_t events) {
    if (!context_.epoll.modify(fd_, events)) drop(fmt::format("epoll_ctl(MOD) failed: {}", os_error(errno)));
  }

  ThreadContext& context_;
  const int fd_;
  bool holds_slot_ = false;  // holds a slot of the server's connection limit
  std::string peer_;         // "unix peer pid P uid U" or "tcp peer ADDR:PORT", for logs
  InBuffer in_;
  std::vector<std::byte> out_;  // the reply being sent (at most one: input waits for it)
  std::size_t out_sent_ = 0;
  Session session_;
  Clock::time_point frame_started_{};   // the first byte of the buffered frame arrived
  Clock::time_point reply_started_{};   // the pending reply first failed to leave whole
  Clock::time_point close_deadline_{};  // closing: give up waiting for the peer's EOF
  Clock::time_point last_activity_;     // the last byte in or the last reply out (or the accept)
  bool want_write_ = false;  // registered for EPOLLOUT (reply pending) instead of EPOLLIN
  bool closing_ = false;     // a fatal error reply is queued; then shut down and wait for EOF
  bool write_shut_ = false;
  bool dead_ = false;        // closed and forgotten at the end of this event batch
};

// ---- Accepting -------------------------------------------------------------------------------

// The server-wide limit on connections served, shared by every server thread.
class ConnectionLimit {
 public:
  ConnectionLimit(std::atomic<std::size_t>& open, std::size_t max, std::size_t owner_reserve) noexcept
      : open_(open), max_(max), others_max_(max - std::min(owner_reserve, max - 1)) {}

  // Takes a slot, or returns the refusal when every slot it may take is taken. A peer that is
  // not proven to be the server's own uid may not take the owner's reserve.
  std::optional<SocketFault> claim(bool owner) noexcept {
    const std::size_t limit = owner ? max_ : others_max_;
    // relaxed: a count compared against the limit (pairs with release's fetch_sub).
    if (open_.fetch_add(1, std::memory_order_relaxed) >= limit) {
      release();
      SocketFault fault;
      fault.error = SocketError::too_many_connections;
      fault.expected = limit;
      return fault;
    }
    return std::nullopt;
  }

  void release() noexcept {
    // relaxed: a count compared against the limit; nothing is published through it (pairs
    // with the relaxed fetch_add in claim).
    open_.fetch_sub(1, std::memory_order_relaxed);
  }

 private:
  std::atomic<std::size_t>& open_;
  const std::size_t max_;
  const std::size_t others_max_;
};

// Who a new connection comes from, and why it is refused if it is.
struct PeerCheck {
  std::string name;  // "unix peer pid P uid U" or "tcp peer ADDR:PORT", for logs
  std::optional<SocketFault> refusal;
};

}  // namespace

// ---- One server thread ------------------------------------------------------------------------

// One server thread: its epoll loop, the connections it accepted, and what they share (counters,
// log, request scratch).
class SocketServer::Worker {
 public:
  Worker(const SocketServerOptions& options, std::atomic<std::size_t>& open_connections, SharedBudget& budget,
         int unix_fd, int tcp_fd, int wake_fd)
      : options_(options),
        unix_fd_(unix_fd),
        tcp_fd_(tcp_fd),
        wake_fd_(wake_fd),
        tick_(std::clamp(options.stall_timeout / 4, std::chrono::milliseconds(1), std::chrono::milliseconds(100))),
        limit_(open_connections, options.max_connections, options.owner_reserve),
        log_(options.log),
        requests_(options, budget),
        context_{options, stats_, log_, epoll_, requests_} {}

  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  ~Worker() {
    close_all();
    if (reserve_fd_ >= 0) close(reserve_fd_);
  }

  // Closes every connection. Only once the thread has stopped.
  void close_all() noexcept {
    for (auto& [fd, connection] : connections_) {
      close(fd);
      if (connection->holds_slot()) limit_.release();
    }
    connections_.clear();
  }

  // Setup: the epoll set with the listeners and the wake-up eventfd.
  Expected<void> init() {
    if (auto opened = epoll_.open(); !opened) return opened;
    // Several threads share the listeners: EPOLLEXCLUSIVE wakes one of them per connection.
    for (const int fd : {unix_fd_, tcp_fd_})
      if (fd >= 0)
        if (auto added = epoll_.add(fd, EPOLLIN | EPOLLEXCLUSIVE); !added) return added;
    if (auto added = epoll_.add(wake_fd_, EPOLLIN); !added) return added;
    // Spare descriptor: when the process runs out, it is closed to accept and shed a peer
    // instead of spinning on a listener that stays readable.
    reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
    return {};
  }

  void run() noexcept {
    std::array<epoll_event, kMaxEvents> events{};
    auto next_check = Clock::now() + tick_;
    const int wait_ms = static_cast<int>(tick_.count());
    for (;;) {
      const int ready = epoll_.wait(events, wait_ms);
      if (ready < 0 && errno != EINTR) {
        log_.line(fmt::format("epoll_wait failed: {}; this server thread stops", os_error(errno)));
        return;
      }
      const auto now = Clock::now();
      for (int i = 0; i < ready; ++i) {
        const int fd = events[static_cast<std::size_t>(i)].data.fd;
        const std::uint32_t what = events[static_cast<std::size_t>(i)].events;
        if (fd == wake_fd_) return;
        if (fd == unix_fd_ || fd == tcp_fd_) {
          guarded(nullptr, [&] { accept_all(fd, now); });
          continue;
        }
        const auto found = connections_.find(fd);
        if (found == connections_.end() || found->second->dead()) continue;
        Connection& connection = *found->second;
        guarded(&connection, [&] { connection.on_events(what, now); });
      }
      if (now >= next_check) {
        check_deadlines(now);
        next_check = now + tick_;
      }
      reap();
    }
  }

  void add_to(SocketServerStats& stats) const noexcept { stats_.add_to(stats); }

 private:
  // Runs `work`; an exception (bad_alloc on a huge frame, say) costs that one connection only.
  template <class Work>
  void guarded(Connection* connection, Work&& work) noexcept {
    try {
      work();
    } catch (const std::exception& error) {
      if (connection != nullptr) {
        connection->drop(fmt::format("dropped after an internal error: {}", error.what()));
      } else {
        log_.line(fmt::format("accept failed: {}", error.what()));
      }
    } catch (...) {
      if (connection != nullptr) connection->mark_dead();
    }
  }

  void accept_all(int listen_fd, Clock::time_point now) {
    const bool is_unix = listen_fd == unix_fd_;
    for (;;) {
      sockaddr_storage address{};
      socklen_t length = sizeof address;
      const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (keeps_accepting(listen_fd, errno)) continue;
        return;
      }
      admit(fd, is_unix, address, now);
    }
  }

  // After accept4 failed with `error`: whether to call it again now.
  bool keeps_accepting(int listen_fd, int error) {
    if (error == EAGAIN || error == EWOULDBLOCK) return false;
    if (error == EINTR || error == ECONNABORTED || error == EPROTO) return true;
    if ((error == EMFILE || error == ENFILE) && reserve_fd_ >= 0) {
      close(reserve_fd_);
      const int shed = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (shed >= 0) close(shed);
      reserve_fd_ = open("/dev/null", O_RDONLY | O_CLOEXEC);
      log_.line("out of file descriptors: shed a new connection");
      stats_.refused.add();
      return true;
    }
    log_.line(fmt::format("accept failed: {}", os_error(error)));
    return false;
  }

  // A new connection is served, or, refused (wrong uid, every slot taken), sent its error.
  void admit(int fd, bool is_unix, const sockaddr_storage& address, Clock::time_point now) {
    auto peer = check_peer(fd, is_unix, address);
    if (!peer) return;
    auto connection = std::make_unique<Connection>(context_, fd, std::move(peer->name), now);
    std::optional<SocketFault> refusal = peer->refusal;
    if (!refusal) {
      // Only a Unix peer's uid is proven (SO_PEERCRED, checked above unless any_uid): TCP peers
      // are anyone's.
      refusal = limit_.claim(is_unix && !options_.any_uid);
      if (!refusal) connection->hold_slot();
    }
    // Refused peers linger briefly to receive their error; past this many, they are cut off.
    if (refusal && connections_.size() >= 2 * options_.max_connections + 16) {
      close(fd);
      stats_.refused.add();
      return;
    }
    Connection& added = *connection;
    connections_.emplace(fd, std::move(connection));
    if (auto registered = epoll_.add(fd, EPOLLIN | EPOLLRDHUP); !registered) {
      added.drop(registered.error().message);
      return;
    }
    if (refusal) {
      stats_.refused.add();
      added.close_with_error(refusal->error, ipcfloor::describe(*refusal), now);
    } else {
      stats_.accepted.add();
    }
  }

  // Names the peer and applies the uid rule (Unix) or sets TCP_NODELAY (TCP). Empty, the fd
  // closed and the peer counted as refused, when the socket cannot be asked or set up.
  std::optional<PeerCheck> check_peer(int fd, bool is_unix, const sockaddr_storage& address) {
    PeerCheck peer;
    if (is_unix) {
      ucred credentials{};
      socklen_t length = sizeof credentials;
      if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
        log_.line(fmt::format("SO_PEERCRED failed: {}; connection closed", os_error(errno)));
        close(fd);
        stats_.refused.add();
        return std::nullopt;
      }
      peer.name = fmt::format("unix peer pid {} uid {}", credentials.pid, credentials.uid);
      if (!options_.any_uid && credentials.uid != geteuid()) {
        SocketFault fault;
        fault.error = SocketError::permission_denied;
        fault.actual = credentials.uid;
        fault.expected = geteuid();
        peer.refusal = fault;
      }
      return peer;
    }
    peer.name = tcp_peer_name(address);
    const int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0) {
      log_.line(fmt::format("{}: TCP_NODELAY failed: {}; connection closed", peer.name, os_error(errno)));
      close(fd);
      stats_.refused.add();
      return std::nullopt;
    }
    return peer;
  }

  void check_deadlines(Clock::time_point now) {
    for (auto& [fd, connection] : connections_) connection->check_deadline(now);
  }

  // Closes the connections marked dead in this batch. Their fds stay open until here, so no
  // event of the batch can name a reused fd.
  void reap() {
    for (auto it = connections_.begin(); it != connections_.end();) {
      if (!it->second->dead()) {
        ++it;
        continue;
      }
      close(it->first);
      if (it->second->holds_slot()) limit_.release();
      it = connections_.erase(it);
    }
  }

  const SocketServerOptions& options_;
  const int unix_fd_;
  const int tcp_fd_;
  const int wake_fd_;
  const std::chrono::milliseconds tick_;
  ConnectionLimit limit_;
  ThreadStats stats_;
  RateLimitedLog log_;
  EpollSet epoll_;
  RequestHandler requests_;
  ThreadContext context_;  // refers to the members above; every connection of this thread holds it
  int reserve_fd_ = -1;
  std::unordered_map<int, std::unique_ptr<Connection>> connections_;
};

// ---- The server ------------------------------------------------------------------------------

std::uint64_t SocketServerStats::total_served() const noexcept {
  std::uint64_t sum = 0;
  for (const auto n : served) sum += n;
  return sum;
}

std::uint64_t SocketServerStats::total_rejected() const noexcept {
  std::uint64_t sum = 0;
  for (const auto n : rejected) sum += n;
  return sum;
}

std::string format_stats(const SocketServerStats& stats) {
  std::string served;
  for (std::size_t i = 0; i < kSocketOpcodeCount; ++i)
    if (stats.served[i] > 0)
      served += fmt::format("{}{} {}", served.empty() ? "" : ", ", to_string(static_cast<SocketOpcode>(i)), stats.served[i]);
  std::string rejected;
  for (std::size_t i = 1; i < kSocketErrorSlots; ++i)
    if (stats.rejected[i] > 0)
      rejected += fmt::format("{}{} {}", rejected.empty() ? "" : ", ", to_string(static_cast<SocketError>(i)),
                              stats.rejected[i]);
  return fmt::format("{} connections; served {} frames{}; rejected {}{}; {} dropped, {} refused; {} bytes in, {} out",
                     stats.connections_accepted, stats.total_served(), served.empty() ? "" : " (" + served + ")",
                     stats.total_rejected(), rejected.empty() ? "" : " (" + rejected + ")", stats.connections_dropped,
                     stats.connections_refused, stats.bytes_in, stats.bytes_out);
}

Expected<std::unique_ptr<SocketServer>> SocketServer::start(const SocketServerOptions& options) {
  if (options.unix_path.empty() && !options.tcp)
    return fail(ErrorCode::invalid_argument, "the socket server needs a Unix socket path or a tcp endpoint");
  if (options.max_frame_bytes < kMinMaxFrameBytes || options.max_frame_bytes > kMaxMaxFrameBytes)
    return fail(ErrorCode::invalid_argument, "max frame {} bytes is outside {}..{}", options.max_frame_bytes,
                kMinMaxFrameBytes, kMaxMaxFrameBytes);
  if (options.stall_timeout < std::chrono::milliseconds(1) || options.stall_timeout > std::chrono::hours(1))
    return fail(ErrorCode::invalid_argument, "frame timeout {} ms is outside 1..3600000", options.stall_timeout.count());
  if (options.threads < 1 || options.threads > kMaxThreads)
    return fail(ErrorCode::invalid_argument, "socket threads {} is outside 1..{}", options.threads, kMaxThreads);
  if (options.max_connections < 1)
    return fail(ErrorCode::invalid_argument, "the connection limit must be at least 1");
  if (!std::isfinite(options.fee))
    return fail(ErrorCode::invalid_argument, "fee {} is not a finite number", options.fee);
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  for (const int cpu : options.cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) return fail(ErrorCode::invalid_argument, "socket cpu {} is out of range", cpu);
    CPU_SET(cpu, &cpus);
  }

  std::unique_ptr<SocketServer> server(new SocketServer());
  server->budget_ = std::make_unique<SharedBudget>();
  server->options_ = options;
  server->wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (server->wake_fd_ < 0) return fail(ErrorCode::io, "eventfd failed: {}", os_error(errno));
  if (!options.unix_path.empty()) {
    auto fd = open_unix_listener(options.unix_path, options.any_uid, server->unix_dev_, server->unix_ino_);
    if (!fd) return std::unexpected(fd.error());
    server->unix_fd_ = *fd;
    server->unix_path_ = options.unix_path;
  }
  if (options.tcp) {
    auto fd = open_tcp_listener(*options.tcp, server->tcp_port_);
    if (!fd) return std::unexpected(fd.error());  // ~SocketServer removes the Unix socket
    server->tcp_fd_ = *fd;
    server->tcp_host_ = options.tcp->host;
  }
  for (unsigned i = 0; i < options.threads; ++i) {
    auto worker = std::make_unique<Worker>(server->options_, server->open_connections_, *server->budget_,
                                           server->unix_fd_, server->tcp_fd_, server->wake_fd_);
    if (auto ready = worker->init(); !ready) return std::unexpected(ready.error());
    server->workers_.push_back(std::move(worker));
  }
  try {
    for (auto& worker : server->workers_) {
      server->threads_.emplace_back([w = worker.get()] {
        pthread_setname_np(pthread_self(), "ipcf-sock");
        w->run();
      });
      if (!options.cpus.empty()) {
        if (const int rc = pthread_setaffinity_np(server->threads_.back().native_handle(), sizeof cpus, &cpus); rc != 0) {
          std::string list;
          for (const int cpu : options.cpus) list += fmt::format("{}{}", list.empty() ? "" : ",", cpu);
          return fail(ErrorCode::invalid_argument, "cannot pin the socket threads to cpu(s) {}: {}", list, os_error(rc));
        }
      }
    }
  } catch (const std::system_error& error) {
    return fail(ErrorCode::resource, "cannot start a socket server thread: {}", error.what());
  }
  return server;
}

SocketServer::~SocketServer() { stop(); }

void SocketServer::stop() noexcept {
  if (stopped_) return;
  stopped_ = true;
  // relaxed: a plain flag the sweeps poll between combos; the join below orders the rest.
  if (budget_) budget_->stopping.store(true, std::memory_order_relaxed);
  if (wake_fd_ >= 0) {
    const std::uint64_t one = 1;
    // The eventfd stays readable (nobody reads it), so every thread's epoll_wait returns.
    [[maybe_unused]] const ssize_t written = write(wake_fd_, &one, sizeof one);
  }
  for (auto& thread : threads_)
    if (thread.joinable()) thread.join();
  for (auto& worker : workers_) worker->close_all();  // the workers stay: stats() reads them
  if (unix_fd_ >= 0) close(unix_fd_);
  if (tcp_fd_ >= 0) close(tcp_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  unix_fd_ = tcp_fd_ = wake_fd_ = -1;
  if (!unix_path_.empty()) {
    // Only our own socket: a successor may already have replaced a file we left.
    struct stat current {};
    if (lstat(unix_path_.c_str(), &current) == 0 && static_cast<std::uint64_t>(current.st_dev) == unix_dev_ &&
        static_cast<std::uint64_t>(current.st_ino) == unix_ino_)
      unlink(unix_path_.c_str());
  }
}

SocketServerStats SocketServer::stats() const noexcept {
  SocketServerStats stats;
  for (const auto& worker : workers_) worker->add_to(stats);
  return stats;
}

std::string SocketServer::describe() const {
  std::string text;
  if (!unix_path_.empty())
    text = options_.any_uid ? fmt::format("unix socket {} (mode 0666, any uid)", unix_path_)
                            : fmt::format("unix socket {} (mode 0600, uid {} only)", unix_path_, geteuid());
  if (tcp_fd_ >= 0 || tcp_port_ != 0) {
    const bool v6 = tcp_host_.find(':') != std::string::npos;
    text += fmt::format("{}tcp {}{}{}:{} (TCP_NODELAY)", text.empty() ? "" : ", ", v6 ? "[" : "", tcp_host_,
                        v6 ? "]" : "", tcp_port_);
  }
  return text;
}

}  // namespace ipcfloor
