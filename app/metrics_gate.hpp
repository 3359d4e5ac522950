#pragma once
// The door of the metrics port (`serve --metrics`): one thread that accepts its connections and
// reads each request head before anything serves it, so that no peer can make the engine hold
// more than a few KiB, a few seconds or a few descriptors for it:
//
//   - at most `max_connections` connections are open at once (accepted and not yet closed,
//     those being answered included); a newcomer at the cap closes the connection whose head
//     has been arriving longest (a scrape sends its head at once, so it is never the one);
//   - a descriptor is taken only while `descriptor_reserve` more stay free below RLIMIT_NOFILE,
//     so the port can never take the descriptors that the engine's clients attach with;
//   - a head must arrive whole within `head_deadline` of the accept and within kMaxRequestHead
//     bytes (socket/http_request_head.hpp), else 408 or 431; only GET and HEAD without a body
//     pass (405, 413 otherwise: a body is never read);
//   - an admitted head waits for a worker in a queue of `max_queued`; past it, 503.
//
// Admitted requests go to the `serve` callback on the worker threads, with the connection
// (blocking, closed by the gate after the callback returns) and the head.
//
// Threads: start()/stop() belong to the caller (the keeper); the gate runs one acceptor thread
// and `workers` worker threads, restricted to `cpus`. None of them is the serving thread.

#include <sys/resource.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/error.hpp"
#include "common/unique_fd.hpp"

namespace ipcfloor {

struct GateLimits {
  std::size_t max_connections = 32;
  std::size_t max_queued = 4;
  std::size_t workers = 2;
  std::chrono::milliseconds head_deadline{2000};
  std::chrono::milliseconds write_deadline{2000};
  int descriptor_reserve = 0;  // descriptors that must stay free below RLIMIT_NOFILE
};

// One admitted request, as a worker gets it.
struct GateRequest {
  int fd = -1;             // the connection, blocking; the gate closes it afterwards
  std::string head;        // the request head, its blank line included
  std::string peer_ip;
  int peer_port = 0;
  std::chrono::steady_clock::time_point write_by;  // answer before this
};

// What the gate counts, for the log and the tests.
struct GateCounts {
  std::uint64_t served = 0;     // passed to a worker
  std::uint64_t refused = 0;    // answered by the gate (4xx, 503) or closed at once
  std::uint64_t evicted = 0;    // closed at the cap to make room
  std::uint64_t timed_out = 0;  // their head did not arrive within the deadline
};

class MetricsGate {
 public:
  using Serve = std::function<void(const GateRequest&)>;

  // Starts the acceptor and the workers on `listener` (bound and listening, non-blocking), which
  // the gate then owns. Setup path.
  [[nodiscard]] static Expected<std::unique_ptr<MetricsGate>> start(UniqueFd listener, const GateLimits& limits,
                                                                    std::vector<int> cpus, Serve serve);
  MetricsGate(const MetricsGate&) = delete;
  MetricsGate& operator=(const MetricsGate&) = delete;
  ~MetricsGate();  // stop()

  // Stops accepting, closes what waits, lets the requests being served finish and joins every
  // thread. Idempotent.
  void stop() noexcept;
  [[nodiscard]] GateCounts counts() const;
  // The descriptors the gate lets the port hold under `limit` (RLIMIT_NOFILE's soft value) with
  // `reserve` kept free and `in_use` open now: at most `wanted`, 0 when none can be spared.
  [[nodiscard]] static std::size_t connections_within(rlim_t limit, int reserve, std::size_t in_use,
                                                      std::size_t wanted) noexcept;

 private:
  struct Pending;
  MetricsGate(UniqueFd listener, const GateLimits& limits, std::vector<int> cpus, Serve serve);
  void run_acceptor() noexcept;
  void run_worker() noexcept;
  void accept_waiting(std::vector<Pending>& pending);
  // Reads what arrived on `p`; true when it is done with (served, refused or gone).
  bool read_head(Pending& p);
  void admit(Pending& p, std::size_t head_bytes);
  void release_connection(int fd) noexcept;

  UniqueFd listener_;
  UniqueFd wake_;  // eventfd: stop() wakes the acceptor through it
  GateLimits limits_;
  std::vector<int> cpus_;
  Serve serve_;
  int descriptor_ceiling_ = 0;  // accepted descriptors at or above this are closed at once
  mutable std::mutex mutex_;    // guards queue_, open_, counts_, stopping_
  std::condition_variable queued_;
  std::deque<GateRequest> queue_;
  std::size_t open_ = 0;  // connections accepted and not yet closed
  GateCounts counts_;
  bool stopping_ = false;
  std::thread acceptor_;
  std::vector<std::thread> workers_;
};

}  // namespace ipcfloor
