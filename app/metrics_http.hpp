#pragma once
// `serve --metrics HOST:PORT`: the engine's Prometheus exposition (prometheus_exposition in
// app/status_command.hpp, the text `status --prometheus` prints) served over HTTP at GET /metrics,
// as exporters serve it, by cpp-httplib. A missing host is loopback (127.0.0.1): other hosts reach
// it only when the user names such an address.
//
// Its door is a MetricsGate (app/metrics_gate.hpp): connections are capped and kept off the
// descriptors the engine's clients need, a request head must arrive whole within 2 s and 4 KiB,
// only GET and HEAD without a body pass. cpp-httplib answers what the gate admits.
//
// Threads: the gate's acceptor and its two workers, housekeeping threads that run on `cpus`
// (never the serving cpu) and that a stop signal never reaches (they inherit the keeper's blocked
// mask). A scrape reads the segment through an observer attachment, as `ipcfloor status` does:
// the serving thread never sees it. start() and stop() belong to the keeper thread.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "app/metrics_gate.hpp"
#include "common/error.hpp"

namespace ipcfloor {

struct MetricsConfig {
  std::string endpoint;    // HOST:PORT, :PORT or PORT (port 0: a free port the kernel picks)
  std::string engine;      // the engine whose segment the scrapes read
  std::string socket_dir;  // where its socket is
  std::vector<int> cpus;   // where the HTTP threads run; empty: anywhere
  GateLimits limits{};     // connections, deadlines and the descriptors kept for the engine
};

class MetricsServer {
 public:
  // Binds the endpoint and starts serving. Errors: invalid_argument for an endpoint that does not
  // parse; busy when the address cannot be bound (in use, or not an address of this host).
  [[nodiscard]] static Expected<std::unique_ptr<MetricsServer>> start(const MetricsConfig& config);

  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;
  ~MetricsServer();  // stop()

  // Stops listening, closes what waits, lets a scrape in progress finish, and joins the threads.
  // Idempotent.
  void stop() noexcept;

  // Where Prometheus scrapes: "http://127.0.0.1:9464/metrics" (the port bound, when 0 was asked).
  [[nodiscard]] std::string url() const;

 private:
  struct State;
  explicit MetricsServer(std::unique_ptr<State> state) noexcept;
  std::unique_ptr<State> state_;
};

}  // namespace ipcfloor
