#include "app/metrics_http.hpp"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "app/status_command.hpp"
#include "common/affinity.hpp"
#include "shm/segment.hpp"
#include "socket/tcp_endpoint.hpp"

namespace ipcfloor {
namespace {

// Prometheus's text format, version 0.0.4.
constexpr const char* kExpositionType = "text/plain; version=0.0.4; charset=utf-8";
// A scrape waits this long at most for the engine to take the observer's hand-off.
constexpr auto kAttachTimeout = std::chrono::seconds(2);
// One worker for the scrape, one for whoever else asks (curl beside Prometheus).
constexpr std::size_t kWorkers = 2;

}  // namespace

struct MetricsServer::State {
  MetricsConfig config;
  TcpEndpoint endpoint;
  httplib::Server http;
  std::thread listener;
  std::atomic<bool> listener_done{false};  // listen_after_bind returned
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
};

MetricsServer::MetricsServer(std::unique_ptr<State> state) noexcept : state_(std::move(state)) {}

MetricsServer::~MetricsServer() { stop(); }

Expected<std::unique_ptr<MetricsServer>> MetricsServer::start(const MetricsConfig& config) {
  auto endpoint = parse_tcp_endpoint(config.endpoint);
  if (!endpoint) return std::unexpected(endpoint.error());
  auto state = std::make_unique<State>();
  state->config = config;
  state->endpoint = *endpoint;
  httplib::Server& http = state->http;
  http.new_task_queue = [] { return new httplib::ThreadPool(kWorkers); };
  // One request per connection and short timeouts: a client that holds a connection open cannot
  // keep a worker from the next scrape for long.
  http.set_keep_alive_max_count(1);
  http.set_read_timeout(2, 0);
  http.set_write_timeout(2, 0);
  State* self = state.get();
  http.Get("/metrics", [self](const httplib::Request&, httplib::Response& response) {
    response.set_content(self->scrape(), kExpositionType);
  });
  http.set_error_handler([](const httplib::Request& request, httplib::Response& response) {
    if (response.status == 404)
      response.set_content(fmt::format("ipcfloor serves GET /metrics; {} is not here\n", request.path), "text/plain");
  });
  const TcpEndpoint& at = state->endpoint;
  if (at.port == 0) {
    const int port = http.bind_to_any_port(at.host);
    if (port <= 0)
      return fail(ErrorCode::busy, "--metrics {}: cannot listen on {} (not an address of this host?)", config.endpoint,
                  at.host);
    state->endpoint.port = static_cast<std::uint16_t>(port);
  } else if (!http.bind_to_port(at.host, at.port)) {
    return fail(ErrorCode::busy, "--metrics {}: cannot listen on {} port {} (in use, or not an address of this host)",
                config.endpoint, at.host, at.port);
  }
  // The workers start inside listen_after_bind, on this thread: they inherit its cpus.
  state->listener = std::thread([self] {
    if (!self->config.cpus.empty()) (void)restrict_current_thread(self->config.cpus);  // best effort
    self->http.listen_after_bind();
    // release: pairs with the acquire load below; nothing is published through it.
    self->listener_done.store(true, std::memory_order_release);
  });
  // stop() before the listener runs would not reach it: return once it runs (a thread's start
  // away), or has already ended.
  // acquire: pairs with the release store in the listener thread above.
  while (!http.is_running() && !state->listener_done.load(std::memory_order_acquire))
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return std::unique_ptr<MetricsServer>(new MetricsServer(std::move(state)));
}

void MetricsServer::stop() noexcept {
  if (!state_ || !state_->listener.joinable()) return;
  state_->http.stop();
  state_->listener.join();
}

std::string MetricsServer::url() const {
  const std::string& host = state_->endpoint.host;
  const bool ipv6 = host.find(':') != std::string::npos;
  return fmt::format("http://{}{}{}:{}/metrics", ipv6 ? "[" : "", host, ipv6 ? "]" : "", state_->endpoint.port);
}

}  // namespace ipcfloor
