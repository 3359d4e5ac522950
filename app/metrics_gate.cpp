#include "app/metrics_gate.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "common/affinity.hpp"
#include "common/log.hpp"
#include "socket/http_request_head.hpp"

namespace ipcfloor {
namespace {

// Connections accepted per wake-up, so that a flood of connects cannot keep the acceptor from the
// heads that have arrived.
constexpr int kAcceptsPerPass = 64;
// A refusal the gate logs at most this often.
constexpr auto kWarnEvery = std::chrono::seconds(1);

std::string_view status_text(int status) noexcept {
  switch (status) {
    case 400: return "Bad Request";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Error";
  }
}

// Answers `status` without waiting (a peer that does not read loses the answer, never the gate's
// time) and closes. Unread bytes (a body) make the close a reset: the engine never reads them.
void refuse_and_close(int fd, int status, std::string_view reason) noexcept {
  const std::string body = fmt::format("ipcfloor serves GET /metrics: {}\n", reason);
  const std::string answer =
      fmt::format("HTTP/1.1 {} {}\r\n{}Content-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\n"
                  "Connection: close\r\n\r\n{}",
                  status, status_text(status), status == 405 ? "Allow: GET, HEAD\r\n" : "", body.size(), body);
  (void)::send(fd, answer.data(), answer.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  (void)::shutdown(fd, SHUT_WR);
  ::close(fd);
}

void describe_peer(const sockaddr_storage& address, std::string& ip, int& port) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(address);
    ::inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    port = ntohs(v4.sin_port);
  } else if (address.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(address);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    port = ntohs(v6.sin6_port);
  }
  ip = text;
}

}  // namespace

struct MetricsGate::Pending {
  int fd = -1;
  std::string received;
  std::chrono::steady_clock::time_point accepted;
  std::string peer_ip;
  int peer_port = 0;
};

std::size_t MetricsGate::connections_within(rlim_t limit, int reserve, std::size_t in_use, std::size_t wanted) noexcept {
  if (limit == RLIM_INFINITY) return wanted;
  const auto spare = static_cast<std::int64_t>(limit) - reserve - static_cast<std::int64_t>(in_use);
  return spare <= 0 ? 0 : std::min(wanted, static_cast<std::size_t>(spare));
}

MetricsGate::MetricsGate(UniqueFd listener, const GateLimits& limits, std::vector<int> cpus, Serve serve)
    : listener_(std::move(listener)), limits_(limits), cpus_(std::move(cpus)), serve_(std::move(serve)) {}

Expected<std::unique_ptr<MetricsGate>> MetricsGate::start(UniqueFd listener, const GateLimits& limits,
                                                          std::vector<int> cpus, Serve serve) {
  std::unique_ptr<MetricsGate> gate(new MetricsGate(std::move(listener), limits, std::move(cpus), std::move(serve)));
  gate->wake_.reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!gate->wake_) return fail(ErrorCode::io, "--metrics: cannot make an eventfd: {}", std::strerror(errno));
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  gate->descriptor_ceiling_ = files.rlim_cur == RLIM_INFINITY || files.rlim_cur > INT32_MAX
                                  ? INT32_MAX
                                  : static_cast<int>(files.rlim_cur) - limits.descriptor_reserve;
  MetricsGate* self = gate.get();
  gate->acceptor_ = std::thread([self] {
    pthread_setname_np(pthread_self(), "ipcf-metrics");
    if (!self->cpus_.empty()) (void)restrict_current_thread(self->cpus_);  // best effort
    self->run_acceptor();
  });
  for (std::size_t i = 0; i < limits.workers; ++i)
    gate->workers_.emplace_back([self] {
      pthread_setname_np(pthread_self(), "ipcf-metrics-w");
      if (!self->cpus_.empty()) (void)restrict_current_thread(self->cpus_);
      self->run_worker();
    });
  return gate;
}

MetricsGate::~MetricsGate() { stop(); }

void MetricsGate::stop() noexcept {
  {
    const std::lock_guard lock(mutex_);
    if (stopping_) return;
    stopping_ = true;
  }
  const std::uint64_t one = 1;
  (void)::write(wake_.get(), &one, sizeof one);
  queued_.notify_all();
  if (acceptor_.joinable()) acceptor_.join();
  for (std::thread& worker : workers_)
    if (worker.joinable()) worker.join();
  for (const GateRequest& request : queue_) ::close(request.fd);
  queue_.clear();
}

GateCounts MetricsGate::counts() const {
  const std::lock_guard lock(mutex_);
  return counts_;
}

void MetricsGate::release_connection(int fd) noexcept {
  ::close(fd);
  const std::lock_guard lock(mutex_);
  --open_;
}

void MetricsGate::run_acceptor() noexcept {
  std::vector<Pending> pending;
  std::vector<pollfd> polled;
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    // Heads past their deadline: 408.
    std::erase_if(pending, [&](Pending& p) {
      if (now - p.accepted < limits_.head_deadline) return false;
      refuse_and_close(p.fd, 408, "the request head did not arrive in time");
      const std::lock_guard lock(mutex_);
      --open_;
      ++counts_.timed_out;
      return true;
    });
    polled.assign({{wake_.get(), POLLIN, 0}, {listener_.get(), POLLIN, 0}});
    auto wait = std::chrono::milliseconds(-1);
    for (const Pending& p : pending) {
      polled.push_back({p.fd, POLLIN, 0});
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(p.accepted + limits_.head_deadline - now) +
                        std::chrono::milliseconds(1);
      if (wait.count() < 0 || left < wait) wait = left;
    }
    const int ready = ::poll(polled.data(), polled.size(), static_cast<int>(wait.count()));
    if ((ready < 0 && errno != EINTR) || polled[0].revents != 0) break;  // stop(), or poll itself failed
    // Heads first, then newcomers: a newcomer may close the oldest pending connection.
    std::size_t index = 2;
    std::erase_if(pending, [&](Pending& p) { return polled[index++].revents != 0 && read_head(p); });
    if (polled[1].revents != 0) accept_waiting(pending);
  }
  for (const Pending& p : pending) release_connection(p.fd);
}

void MetricsGate::accept_waiting(std::vector<Pending>& pending) {
  static auto last_warning = std::chrono::steady_clock::time_point{};
  for (int i = 0; i < kAcceptsPerPass; ++i) {
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    const int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&address), &length, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EMFILE || errno == ENFILE) {
        // Nothing to spare: the peers wait in the backlog (or give up) until descriptors free.
        if (std::chrono::steady_clock::now() - last_warning > kWarnEvery) {
          last_warning = std::chrono::steady_clock::now();
          log(LogLevel::warn, "serve: --metrics: out of file descriptors; scrapes wait");
        }
        ::poll(nullptr, 0, 10);
      }
      return;
    }
    // The descriptors above the ceiling are the engine's clients': never the port's.
    if (fd >= descriptor_ceiling_) {
      refuse_and_close(fd, 503, "the engine keeps its last file descriptors for its clients");
      const std::lock_guard lock(mutex_);
      ++counts_.refused;
      continue;
    }
    {
      const std::lock_guard lock(mutex_);
      if (open_ >= limits_.max_connections && !pending.empty()) {
        // The head that has been arriving longest makes room: pending is in accept order.
        ::close(pending.front().fd);
        pending.erase(pending.begin());
        --open_;
        ++counts_.evicted;
      }
      if (open_ >= limits_.max_connections) {  // every slot is being answered: come back later
        ++counts_.refused;
        refuse_and_close(fd, 503, "every connection slot is being answered");
        continue;
      }
      ++open_;
    }
    Pending p;
    p.fd = fd;
    p.accepted = std::chrono::steady_clock::now();
    describe_peer(address, p.peer_ip, p.peer_port);
    if (!read_head(p)) pending.push_back(std::move(p));
  }
}

bool MetricsGate::read_head(Pending& p) {
  char buffer[kMaxRequestHead];
  const std::size_t room = kMaxRequestHead - std::min(p.received.size(), kMaxRequestHead);
  const ssize_t got = ::recv(p.fd, buffer, std::max<std::size_t>(room, 1), 0);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return false;
  if (got <= 0) {  // the peer left, or the connection broke
    release_connection(p.fd);
    return true;
  }
  p.received.append(buffer, static_cast<std::size_t>(got));
  const HeadEnd end = find_head_end(p.received);
  if (end.state == HeadEnd::State::incomplete) return false;
  if (end.state == HeadEnd::State::too_large) {
    refuse_and_close(p.fd, 431, "the request head is larger than the server reads");
    const std::lock_guard lock(mutex_);
    --open_;
    ++counts_.refused;
    return true;
  }
  admit(p, end.length);
  return true;
}

void MetricsGate::admit(Pending& p, std::size_t head_bytes) {
  const HeadVerdict verdict = judge_request_head(std::string_view(p.received).substr(0, head_bytes));
  const std::lock_guard lock(mutex_);
  if (verdict.status != 0 || queue_.size() >= limits_.max_queued || stopping_) {
    refuse_and_close(p.fd, verdict.status != 0 ? verdict.status : 503,
                     verdict.status != 0 ? verdict.reason : std::string_view("too many scrapes at once"));
    --open_;
    ++counts_.refused;
    return;
  }
  p.received.resize(head_bytes);
  queue_.push_back(GateRequest{p.fd, std::move(p.received), std::move(p.peer_ip), p.peer_port,
                               std::chrono::steady_clock::now() + limits_.write_deadline});
  ++counts_.served;
  queued_.notify_one();
}

void MetricsGate::run_worker() noexcept {
  for (;;) {
    GateRequest request;
    {
      std::unique_lock lock(mutex_);
      queued_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;  // stop() closes what still waits
      request = std::move(queue_.front());
      queue_.pop_front();
    }
    // The connection was non-blocking for the gate; the worker writes with a deadline of its own.
    try {
      serve_(request);
    } catch (...) {  // an answer that could not be built: the peer sees the connection close
    }
    release_connection(request.fd);
  }
}

}  // namespace ipcfloor
