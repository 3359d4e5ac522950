#include "app/metrics_http.hpp"

#include <httplib.h>

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "app/metrics_gate.hpp"
#include "app/status_command.hpp"
#include "shm/segment.hpp"
#include "socket/tcp_endpoint.hpp"
#include "socket_server/socket_listener.hpp"

namespace ipcfloor {
namespace {

// Prometheus's text format, version 0.0.4.
constexpr const char* kExpositionType = "text/plain; version=0.0.4; charset=utf-8";
// A scrape waits this long at most for the engine to take the observer's hand-off.
constexpr auto kAttachTimeout = std::chrono::seconds(2);

// cpp-httplib answers the requests the gate admitted: routing, HEAD, the headers of the answer.
// Its own accept loop is not used (it holds a connection per queued request, with no deadline
// for a head and no bound on a body); the gate hands it each head through process_request.
class HttpAnswers final : public httplib::Server {
 public:
  using httplib::Server::process_request;
};

// A connection as cpp-httplib sees it: the head the gate read, then the socket for the answer,
// written within the request's deadline.
class GatedStream final : public httplib::Stream {
 public:
  explicit GatedStream(const GateRequest& request) noexcept : request_(request) {}
  bool is_readable() const override { return read_ < request_.head.size(); }
  bool is_writable() const override { return std::chrono::steady_clock::now() < request_.write_by; }
  ssize_t read(char* ptr, size_t size) override {
    const std::size_t n = std::min(size, request_.head.size() - read_);
    std::memcpy(ptr, request_.head.data() + read_, n);
    read_ += n;
    return static_cast<ssize_t>(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    for (std::size_t sent = 0; sent < size;) {
      const ssize_t n = ::send(request_.fd, ptr + sent, size - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n > 0) {
        sent += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(request_.write_by -
                                                                             std::chrono::steady_clock::now());
      pollfd writable{request_.fd, POLLOUT, 0};
      if (left.count() <= 0 || ::poll(&writable, 1, static_cast<int>(left.count())) <= 0) return -1;
    }
    return static_cast<ssize_t>(size);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    ip = request_.peer_ip;
    port = request_.peer_port;
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    ip.clear();
    port = 0;
  }
  socket_t socket() const override { return request_.fd; }

 private:
  const GateRequest& request_;
  std::size_t read_ = 0;
};

}  // namespace

struct MetricsServer::State {
  MetricsConfig config;
  TcpEndpoint endpoint;
  HttpAnswers http;
  std::unique_ptr<MetricsGate> gate;
  std::mutex attach_mutex;  // guards segment: the workers scrape one at a time
  std::optional<Attachment> segment;

  // The exposition now: the engine's status, or ipcfloor_up 0 alone when it cannot be read.
  std::string scrape() {
    const std::lock_guard lock(attach_mutex);
    if (segment && segment->engine_hung_up()) segment.reset();
    if (!segment) {
      AttachOptions attach;
      attach.socket_dir = config.socket_dir;
      attach.role = HandoffRole::observer;
      attach.timeout = kAttachTimeout;
      if (auto attached = Attachment::attach(config.engine, attach)) segment.emplace(std::move(*attached));
    }
    if (!segment) return prometheus_exposition(config.engine, nullptr);
    const nlohmann::json status = describe_segment(*segment);
    return prometheus_exposition(config.engine, &status);
  }

  void answer(const GateRequest& request) {
    GatedStream stream(request);
    bool closed = false;
    (void)http.process_request(stream, true, closed, nullptr);
  }
};

MetricsServer::MetricsServer(std::unique_ptr<State> state) noexcept : state_(std::move(state)) {}

MetricsServer::~MetricsServer() { stop(); }

Expected<std::unique_ptr<MetricsServer>> MetricsServer::start(const MetricsConfig& config) {
  auto endpoint = parse_tcp_endpoint(config.endpoint);
  if (!endpoint) return std::unexpected(endpoint.error());
  auto state = std::make_unique<State>();
  state->config = config;
  state->endpoint = *endpoint;
  HttpAnswers& http = state->http;
  // The gate admits no body; this is the second lock on the same door.
  http.set_payload_max_length(0);
  State* self = state.get();
  http.Get("/metrics", [self](const httplib::Request&, httplib::Response& response) {
    response.set_content(self->scrape(), kExpositionType);
  });
  http.set_error_handler([](const httplib::Request& request, httplib::Response& response) {
    if (response.status == 404)
      response.set_content(fmt::format("ipcfloor serves GET /metrics; {} is not here\n", request.path), "text/plain");
  });
  std::uint16_t bound_port = 0;
  auto listener = socket_detail::open_tcp_listener(*endpoint, bound_port);
  if (!listener)
    return fail(ErrorCode::busy, "--metrics {}: cannot listen on {} port {} (in use, or not an address of this host): {}",
                config.endpoint, endpoint->host, endpoint->port, listener.error().message);
  state->endpoint.port = bound_port;
  auto gate = MetricsGate::start(UniqueFd(*listener), config.limits, config.cpus,
                                 [self](const GateRequest& request) { self->answer(request); });
  if (!gate) return std::unexpected(gate.error());
  state->gate = std::move(*gate);
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(state)));
}

void MetricsServer::stop() noexcept {
  if (state_ && state_->gate) state_->gate->stop();
}

std::string MetricsServer::url() const {
  const std::string& host = state_->endpoint.host;
  const bool ipv6 = host.find(':') != std::string::npos;
  return fmt::format("http://{}{}{}:{}/metrics", ipv6 ? "[" : "", host, ipv6 ? "]" : "", state_->endpoint.port);
}

}  // namespace ipcfloor
