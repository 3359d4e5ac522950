#include "engine/shm_engine.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/affinity.hpp"
#include "common/placement.hpp"
#include "common/topology.hpp"
#include "common/tsc_clock.hpp"
#include "kernel/cost.hpp"
#include "kernel/cost_rate.hpp"
#include "kernel/kernel.hpp"
#include "kernel/live_signal.hpp"
#include "shm/doorbell.hpp"
#include "shm/liveness.hpp"

namespace ipcfloor {
namespace {

// A connection must send its hand-off request this soon after connecting, and an observer's
// connection is closed this soon after its reply (it needs nothing more): an idle connection
// would otherwise hold a slot for nothing.
constexpr std::chrono::milliseconds kHandoffPatience{1000};
// Connections that are not a lane's lease (observers and hand-offs in progress). At the cap the
// longest idle of them is closed to make room: nginx's rule for idle keep-alive connections.
constexpr std::size_t kMaxExtraConnections = 64;
// How soon service() runs again while a lane waits for its fresh object.
constexpr std::chrono::milliseconds kReplaceRetry{1};

// Live mode's subscription book (engine/live_book.hpp), which LiveBook::make allocates whole at
// start: every lane's subscription slots and history arena. Nothing when not live.
std::vector<MemoryNeed> live_book_needs(const ShmEngineConfig& config) {
  std::vector<MemoryNeed> needs;
  if (!config.segment.live) return needs;
  const std::uint64_t lanes = config.segment.lanes;
  const std::uint64_t per_lane = std::uint64_t{config.subscriptions_per_lane} * sizeof(std::optional<LiveBacktest>) +
                                 LiveBookLimits{}.arena_doubles_per_lane * sizeof(double);
  needs.push_back({fmt::format("the live subscription book ({} lanes of {} subscriptions)", lanes,
                               config.subscriptions_per_lane),
                   lanes * per_lane, fmt::format("--subscriptions {} or --lanes {}", config.subscriptions_per_lane, lanes)});
  return needs;
}

// The kernel workspaces, which ShmServer::make and WorkerPool::make allocate whole at start: the
// serving thread's and one per worker, each for the longest series a BACKTEST may run on (live:
// every bar of --capacity).
MemoryNeed workspace_need(const ShmEngineConfig& config) {
  const SegmentConfig& segment = config.segment;
  std::size_t longest = segment.live ? std::max(segment.capacity_bars, segment.series.size()) : segment.series.size();
  for (const SegmentConfig::NamedSeries& more : segment.more_series) longest = std::max(longest, more.close.size());
  const std::size_t count = 1 + config.worker_cpus.size();
  const std::string length = segment.live && segment.capacity_bars > segment.series.size()
                                 ? fmt::format("--capacity {}", segment.capacity_bars)
                                 : fmt::format("the series ({} bars; --bars or --data)", longest);
  return {fmt::format("{} kernel workspace{} of {} bars (the serving thread's and one per worker)", count,
                      count == 1 ? "" : "s", longest),
          count * KernelWorkspace::bytes_for(longest),
          count > 1 ? fmt::format("{} or --workers {}", length, count - 1) : length};
}

}  // namespace

ShmEngine::ShmEngine(Segment segment, WaitMode wait, int cpu) : segment_(std::move(segment)), wait_(wait), cpu_(cpu) {}

// One lane object per lane, each at its first generation; a single warning for those that could
// not be locked, naming how many.
Expected<void> ShmEngine::make_lane_objects() {
  std::uint32_t unlocked_lanes = 0;
  std::string lane_warning;
  for (std::uint32_t i = 0; i < segment_.lane_count(); ++i) {
    auto object = segment_.make_lane_object(i, ++generations_[i]);
    if (!object) return std::unexpected(object.error());
    if (!object->warnings().empty()) {
      ++unlocked_lanes;
      if (lane_warning.empty()) lane_warning = object->warnings().front();
    }
    lanes_.lanes[i].view = object->view();
    lanes_.lanes[i].generation = object->generation();
    objects_[i].emplace(std::move(*object));
  }
  if (unlocked_lanes > 0)
    warnings_.push_back(unlocked_lanes == segment_.lane_count()
                            ? fmt::format("{} (and the same for every lane object)", lane_warning)
                            : fmt::format("{} (and the same for {} of {} lane objects)", lane_warning,
                                          unlocked_lanes, segment_.lane_count()));
  return {};
}

Expected<std::unique_ptr<ShmEngine>> ShmEngine::start(ShmEngineConfig config) {
  // Not dumpable: another process of the same user can then neither ptrace the engine nor open
  // its descriptors through /proc/PID/fd, which would hand it every lane object. Only root can.
  (void)::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // Everything the engine will allocate, checked against what the host can back before any of it
  // exists: the segment's objects, the kernel workspaces and, live, the subscription book.
  std::vector<MemoryNeed> needs = live_book_needs(config);
  needs.push_back(workspace_need(config));
  if (auto fits = Segment::check_memory(config.segment, needs); !fits) return std::unexpected(fits.error());
  double rate = 0.0;
  std::uint64_t max_cost = config.max_frame_cost;
  if (config.max_frame_time.count() > 0) {
    // The opt-in time bound: this host's kernel speed, measured once, fixes the units for good.
    rate = measure_cost_rate(config.segment.series);
    max_cost = max_cost_for(rate, config.max_frame_time);
  }
  config.segment.wait_mode = static_cast<std::uint32_t>(config.wait);
  config.segment.serving_cpu = config.cpu;
  config.segment.near_cpus = config.near_cpus.empty() ? near_cpus(read_topology(""), nullptr, config.cpu) : config.near_cpus;
  config.segment.max_frame_cost = max_cost;
  auto segment = Segment::create(config.segment);
  if (!segment) return std::unexpected(segment.error());
  std::unique_ptr<ShmEngine> engine(new ShmEngine(std::move(*segment), config.wait, config.cpu));
  ShmEngine& e = *engine;
  e.warnings_ = e.segment_.warnings();
  e.max_frame_cost_ = max_cost;
  e.cost_per_us_ = rate;

  e.epoll_ = UniqueFd(::epoll_create1(EPOLL_CLOEXEC));
  if (!e.epoll_) return fail(ErrorCode::io, "epoll_create1 failed: {}", std::strerror(errno));
  e.reserve_fd_ = UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  epoll_event listen_event{};
  listen_event.events = EPOLLIN;
  listen_event.data.fd = e.segment_.listen_fd();
  if (::epoll_ctl(e.epoll_.get(), EPOLL_CTL_ADD, e.segment_.listen_fd(), &listen_event) != 0)
    return fail(ErrorCode::io, "cannot watch {}: {}", e.segment_.socket_path(), std::strerror(errno));
  if (auto lanes = e.make_lane_objects(); !lanes) return std::unexpected(lanes.error());

  const TscClock clock = TscClock::calibrate(20);
  ShmServerConfig server_config;
  server_config.mode = config.wait;
  server_config.max_frame_cost = max_cost;
  server_config.inline_cost = config.inline_cost;
  server_config.ns_per_tick = clock.ns_per_tick();
  if (config.segment.live) {
    server_config.live.emplace();
    server_config.live->subscriptions_per_lane = config.subscriptions_per_lane;
    server_config.live->max_bar_cost = config.max_bar_cost;
  }
  auto server = ShmServer::make(e.segment_, e.lanes_, e.telemetry_, server_config);
  if (!server) return std::unexpected(server.error());
  e.server_ = std::move(*server);
  if (auto workers = e.start_workers(config); !workers) return std::unexpected(workers.error());

  // The serving thread pins itself before its first poll; setup results come back through
  // these, published by the release store of `started`.
  std::atomic<int> started{0};  // 0 pending, 1 serving, -1 failed to pin
  Error setup_error{ErrorCode::io, ""};
  std::string fifo_warning;
  e.serving_ = std::thread([&e, &started, &setup_error, &fifo_warning, &config] {
    pthread_setname_np(pthread_self(), "ipcf-serve");  // benchmarks find the serving thread by name
    if (auto pinned = pin_current_thread(config.cpu); !pinned) {
      setup_error = pinned.error();
      started.store(-1, std::memory_order_release);  // release: publishes setup_error; pairs with acquire below
      return;
    }
    if (config.fifo)
      if (auto fifo = set_fifo_priority(config.fifo_priority); !fifo) fifo_warning = fifo.error().message;
    ShmServer& serving_server = *e.server_;
    started.store(1, std::memory_order_release);  // release: publishes fifo_warning; pairs with acquire below
    serving_server.run(e.stop_);
  });
  // acquire: pairs with the serving thread's release store of `started`.
  while (started.load(std::memory_order_acquire) == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  if (started.load(std::memory_order_acquire) < 0) {  // acquire: as above
    e.serving_.join();
    return std::unexpected(setup_error);
  }
  if (!fifo_warning.empty()) e.warnings_.push_back(fifo_warning);
  if (!cpu_isolated(config.cpu))
    e.warnings_.push_back(fmt::format("cpu {} is not isolated (isolcpus/nohz_full); other tasks may preempt the "
                                      "serving thread and widen the tail",
                                      config.cpu));
  e.next_beat_ = std::chrono::steady_clock::now();
  e.service();
  return engine;
}

std::vector<int> default_worker_cpus(int serving_cpu, int client_cpu) {
  HostTopology topology = read_topology("");
  topology.allowed = allowed_cpus();
  if (client_cpu < 0)
    if (const std::vector<int> near = near_cpus(topology, nullptr, serving_cpu); !near.empty()) client_cpu = near.front();
  return worker_order(topology, topology.allowed, serving_cpu, client_cpu);
}

Expected<void> ShmEngine::start_workers(const ShmEngineConfig& config) {
  for (const int cpu : config.worker_cpus)
    if (cpu == config.cpu)
      return fail(ErrorCode::invalid_argument,
                  "worker cpu {} is the serving cpu (--cpu {}): the serving core must stay free to move frames", cpu,
                  config.cpu);
  worker_cpus_ = config.worker_cpus;
  DataHeader& header = segment_.header();
  // relaxed: for people; the keeper writes these before any client can have attached.
  header.inline_cost.store(config.inline_cost, std::memory_order_relaxed);
  header.max_bar_cost.store(config.segment.live ? config.max_bar_cost : 0, std::memory_order_relaxed);
  header.workers.store(static_cast<std::uint32_t>(worker_cpus_.size()), std::memory_order_relaxed);
  for (std::size_t i = 0; i < worker_cpus_.size() && i < kMaxWorkerCpus; ++i)
    header.worker_cpus[i] = static_cast<std::uint16_t>(worker_cpus_[i]);
  if (worker_cpus_.empty()) return {};
  WorkerPoolConfig pool_config = server_->workers_config(worker_cpus_);
  pool_config.stall_worker_for_test = config.stall_worker_for_test;
  auto pool = WorkerPool::make(pool_config);
  if (!pool) return std::unexpected(pool.error());
  pool_ = std::move(*pool);
  server_->attach_workers(pool_.get());
  return {};
}

void ShmEngine::watch_workers() noexcept {
  if (!pool_) return;
  const std::uint32_t stalled = pool_->health(TscClock::now());
  if (stalled > workers_stalled_)
    note({EngineEvent::Kind::warning, 0, 0, 0, 0,
          fmt::format("{} of {} workers are stuck on a job far past its cost's limit; their jobs were answered "
                      "engine_error and they get no more work until they return",
                      stalled, pool_->size())});
  workers_stalled_ = stalled;
  DataHeader& header = segment_.header();
  // relaxed: for people.
  header.workers_stalled.store(stalled, std::memory_order_relaxed);
  header.worker_jobs.store(pool_->jobs_done(), std::memory_order_relaxed);
}

ShmEngine::~ShmEngine() {
  stop();
  connections_.clear();  // clients see their connection end: the engine is gone
  if (pool_ && pool_->left_behind() != 0) {
    // A stuck worker may still run its job: it reads the server (its runner's context) and the
    // series. Both stay, never freed, until the process exits; lane objects it never reads.
    (void)server_.release();
    segment_.keep_data_mapped();
  }
}

EngineEvent ShmEngine::from_telemetry(const TelemetryEvent& event) {
  EngineEvent out{};
  switch (event.kind) {
    case TelemetryEvent::Kind::bad_frame: out.kind = EngineEvent::Kind::bad_frame; break;
    case TelemetryEvent::Kind::ring_corrupt: out.kind = EngineEvent::Kind::lane_corrupt; break;
  }
  out.status = event.status;
  out.lane = event.lane;
  out.pid = event.pid;
  out.seq = event.seq;
  return out;
}

void ShmEngine::note(EngineEvent event) noexcept {
  try {
    events_.push_back(std::move(event));
  } catch (...) {
    // Out of memory for a report: the counters in the segment still count.
  }
}

std::chrono::milliseconds ShmEngine::service_timeout() const noexcept {
  const auto now = std::chrono::steady_clock::now();
  auto until = next_beat_;
  for (std::uint32_t i = 0; i < segment_.lane_count(); ++i) {
    const LanePhase phase = load_phase(lanes_.lanes[i]);
    if (phase == LanePhase::draining || phase == LanePhase::drained) until = std::min(until, now + kReplaceRetry);
  }
  for (const Connection& connection : connections_)
    if (connection.role != Connection::Role::lane) until = std::min(until, connection.deadline);
  if (until <= now) return std::chrono::milliseconds(0);
  return std::chrono::ceil<std::chrono::milliseconds>(until - now);
}

void ShmEngine::service() noexcept {
  epoll_event ready[32];
  for (;;) {
    const int count = ::epoll_wait(epoll_.get(), ready, 32, 0);
    if (count <= 0) break;
    for (int i = 0; i < count; ++i) {
      if (ready[i].data.fd == segment_.listen_fd()) {
        accept_connections();
      } else {
        handle_readable(ready[i].data.fd);
      }
    }
    if (count < 32) break;
  }
  expire_idle();
  replace_drained_lanes();
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_beat_) {
    // relaxed: a timestamp whose age clients compare; nothing is published through it.
    segment_.header().heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
    next_beat_ = now + std::chrono::nanoseconds(segment_.header().heartbeat_interval_ns);
    watch_workers();
  }
}

void ShmEngine::accept_connections() noexcept {
  for (;;) {
    UniqueFd fd(::accept4(segment_.listen_fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!fd) {
      const int error = errno;
      if (error == EINTR || error == ECONNABORTED) continue;
      if (error == EAGAIN || error == EWOULDBLOCK) return;
      if (error == EMFILE || error == ENFILE) {
        // accept4 fails so before it looks at the backlog: shed a peer if one waits, else nothing
        // was lost and there is nothing to say.
        if (shed_connection(error)) continue;
        return;
      }
      warn_at_most_once_a_second(fmt::format("accept failed: {}", std::strerror(error)));
      return;
    }
    auto peer = peer_credentials(fd.get());
    Connection connection;
    connection.fd = std::move(fd);
    connection.last_active = std::chrono::steady_clock::now();
    connection.deadline = connection.last_active + kHandoffPatience;
    if (peer) {
      connection.pid = peer->pid;
      connection.uid = peer->uid;
    }
    if (!peer || peer->uid != ::geteuid()) {
      reply(connection, HandoffStatus::refused,
            fmt::format("engine {} serves uid {} only", segment_.name(), ::geteuid()));
      note({EngineEvent::Kind::refused, 0, 0, connection.pid, 0,
            fmt::format("refused a connection from uid {} (pid {})", connection.uid, connection.pid)});
      continue;  // closed with `connection`
    }
    make_room();
    epoll_event event{};
    event.events = EPOLLIN | EPOLLRDHUP;
    event.data.fd = connection.fd.get();
    if (::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, connection.fd.get(), &event) != 0) continue;
    try {
      connections_.push_back(std::move(connection));
    } catch (...) {
      // No memory to track it: closing it tells the client.
    }
  }
}

bool ShmEngine::shed_connection(int error) noexcept {
  // The listener stays readable while a peer waits in its backlog: without a descriptor to
  // accept it with, the keeper would wake at once, forever. The reserve is that descriptor.
  if (!reserve_fd_) {
    reserve_fd_ = UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));  // a descriptor freed since?
    warn_at_most_once_a_second(fmt::format("out of file descriptors ({}) and no reserve left: new connections "
                                           "wait in the backlog", std::strerror(error)));
    return false;
  }
  reserve_fd_.reset();
  Connection connection;
  connection.fd = UniqueFd(::accept4(segment_.listen_fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
  if (connection.fd) {
    reply(connection, HandoffStatus::internal,
          fmt::format("engine {} is out of file descriptors ({}); it keeps serving its clients: try again later, or "
                      "raise its RLIMIT_NOFILE (ulimit -n)", segment_.name(), std::strerror(error)));
  }
  const bool shed = static_cast<bool>(connection.fd);
  if (shed) {
    // Closing a Unix socket with an unread request resets the peer, which would then lose the
    // answer: stop the peer's sends first (SHUT_RD makes them fail), then drop what already came.
    (void)::shutdown(connection.fd.get(), SHUT_RDWR);
    std::byte sink[sizeof(HandoffRequest)];
    while (::recv(connection.fd.get(), sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
  }
  connection.fd.reset();
  reserve_fd_ = UniqueFd(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  // accept4 fails with EMFILE before it looks at the backlog: nobody may be waiting at all.
  if (!shed) return false;
  warn_at_most_once_a_second(fmt::format("out of file descriptors ({}): told a new connection to try again later",
                                         std::strerror(error)));
  return static_cast<bool>(reserve_fd_);
}

void ShmEngine::warn_at_most_once_a_second(std::string text) noexcept {
  const auto now = std::chrono::steady_clock::now();
  if (now < next_fd_warning_) return;
  next_fd_warning_ = now + std::chrono::seconds(1);
  note({EngineEvent::Kind::warning, 0, 0, 0, 0, std::move(text)});
}

void ShmEngine::handle_readable(int fd) noexcept {
  for (;;) {
    const auto found = std::find_if(connections_.begin(), connections_.end(),
                                    [fd](const Connection& c) { return c.fd.get() == fd; });
    if (found == connections_.end()) return;
    Connection& connection = *found;
    HandoffRequest request{};
    const ssize_t got = ::recv(fd, &request, sizeof request, MSG_DONTWAIT);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (got <= 0) {  // EOF or an error: the client is gone
      close_connection(fd);
      return;
    }
    connection.last_active = std::chrono::steady_clock::now();
    if (connection.role != Connection::Role::pending) {
      // A lane's client may say it leaves on purpose; anything else it sends is ignored.
      ReleaseNotice notice{};
      std::memcpy(&notice, &request, sizeof notice);
      if (connection.role == Connection::Role::lane && static_cast<std::size_t>(got) == sizeof notice &&
          notice.magic == kHandoffMagic && notice.kind == 1)
        connection.released = true;
      continue;
    }
    if (static_cast<std::size_t>(got) != sizeof request || request.magic != kHandoffMagic) {
      reply(connection, HandoffStatus::bad_request, "a hand-off request is 16 bytes starting with the ipcfloor magic");
      close_connection(fd);
      return;
    }
    if (request.version != kHandoffVersion || request.layout_version != kLayoutVersion) {
      reply(connection, HandoffStatus::version_mismatch,
            fmt::format("the engine speaks hand-off version {} with layout {}", kHandoffVersion, kLayoutVersion));
      close_connection(fd);
      return;
    }
    if (request.role == static_cast<std::uint16_t>(HandoffRole::observer)) {
      connection.role = Connection::Role::observer;
      connection.deadline = connection.last_active + kHandoffPatience;
      const int fds[] = {segment_.data_fd()};
      reply(connection, HandoffStatus::ok, "", fds);
      continue;
    }
    if (request.role != static_cast<std::uint16_t>(HandoffRole::lane)) {
      reply(connection, HandoffStatus::bad_request, fmt::format("unknown role {}", request.role));
      close_connection(fd);
      return;
    }
    handle_request(connection);
    if (connection.role != Connection::Role::lane) {
      close_connection(fd);
      return;
    }
  }
}

void ShmEngine::handle_request(Connection& connection) noexcept {
  if (stopping_) {
    reply(connection, HandoffStatus::stopping, fmt::format("engine {} is stopping", segment_.name()));
    return;
  }
  bool draining = false;
  for (std::uint32_t i = 0; i < segment_.lane_count(); ++i) {
    EngineLane& lane = lanes_.lanes[i];
    const LanePhase phase = load_phase(lane);
    if (phase == LanePhase::draining || phase == LanePhase::drained) draining = true;
    if (phase != LanePhase::free || !objects_[i]) continue;
    const LaneObject& object = *objects_[i];
    const int fds[] = {segment_.data_fd(), object.fd()};
    // Claimed from here on, even if the client is already gone: it may hold the object, so the
    // lane goes through draining (when its EOF is read) and gets a fresh object before reuse.
    // The owner and the phase are recorded before the reply, so that a client (or `status`)
    // never sees its own lane as free once its attach returned.
    LaneStatus& status = segment_.lane_status(i);
    status.owner_pid = connection.pid;
    status.owner_uid = connection.uid;
    // relaxed (all): a report for people; the lane table decides what is served.
    status.generation.store(object.generation(), std::memory_order_relaxed);
    status.claimed_unix_ns.store(unix_ns(), std::memory_order_relaxed);
    status.state.store(static_cast<std::uint32_t>(LaneState::claimed), std::memory_order_relaxed);
    connection.role = Connection::Role::lane;
    connection.lane = i;
    set_phase(lane, LanePhase::active);
    announce_lane_change(lanes_, wait_);
    reply(connection, HandoffStatus::ok, "", fds, i, object.generation());
    note({EngineEvent::Kind::lane_claimed, 0, i, connection.pid, 0, {}});
    return;
  }
  if (draining) {
    reply(connection, HandoffStatus::lane_draining, "a lane is being freed");
  } else {
    reply(connection, HandoffStatus::no_free_lane,
          fmt::format("all {} lanes are taken; start the engine with more --lanes", segment_.lane_count()));
  }
}

void ShmEngine::reply(Connection& connection, HandoffStatus status, std::string_view message, std::span<const int> fds,
                      std::uint32_t lane, std::uint64_t generation) noexcept {
  HandoffReply answer{};
  answer.magic = kHandoffMagic;
  answer.version = kHandoffVersion;
  answer.status = static_cast<std::uint16_t>(status);
  answer.layout_version = kLayoutVersion;
  answer.lane = lane;
  answer.generation = generation;
  answer.data_bytes = segment_.size();
  answer.lane_bytes = fds.size() > 1 ? segment_.geometry().lane_bytes : 0;
  const std::size_t length = std::min(message.size(), kHandoffMessageBytes - 1);
  std::memcpy(answer.message, message.data(), length);
  // A client that vanished or stopped reading loses its answer; the engine goes on either way.
  (void)send_handoff(connection.fd.get(), std::as_bytes(std::span(&answer, 1)), fds);
}

void ShmEngine::close_connection(int fd) noexcept {
  const auto found = std::find_if(connections_.begin(), connections_.end(),
                                  [fd](const Connection& c) { return c.fd.get() == fd; });
  if (found == connections_.end()) return;
  if (found->role == Connection::Role::lane) {
    const std::uint32_t i = found->lane;
    DataHeader& header = segment_.header();
    relaxed_increment(found->released ? header.lanes_released : header.lanes_reclaimed);
    // relaxed: a report for people.
    segment_.lane_status(i).state.store(static_cast<std::uint32_t>(LaneState::draining), std::memory_order_relaxed);
    set_phase(lanes_.lanes[i], LanePhase::draining);
    announce_lane_change(lanes_, wait_);
    note({found->released ? EngineEvent::Kind::lane_released : EngineEvent::Kind::lane_reclaimed, 0, i, found->pid, 0,
          {}});
  }
  connections_.erase(found);  // closes the descriptor, which also leaves the epoll set
}

void ShmEngine::expire_idle() noexcept {
  const auto now = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < connections_.size();) {
    Connection& connection = connections_[i];
    if (connection.role != Connection::Role::lane && now >= connection.deadline) {
      note({EngineEvent::Kind::refused, 0, 0, connection.pid, 0,
            connection.role == Connection::Role::pending
                ? fmt::format("dropped pid {}: no hand-off request within {} ms", connection.pid, kHandoffPatience.count())
                : fmt::format("closed pid {}'s observer connection: idle for {} ms after its hand-off", connection.pid,
                              kHandoffPatience.count())});
      close_connection(connection.fd.get());
      continue;
    }
    ++i;
  }
}

void ShmEngine::make_room() noexcept {
  for (;;) {
    std::size_t extra = 0;
    const Connection* victim = nullptr;
    for (const Connection& connection : connections_) {
      if (connection.role == Connection::Role::lane) continue;
      ++extra;
      if (victim == nullptr || connection.last_active < victim->last_active) victim = &connection;
    }
    if (extra < kMaxExtraConnections || victim == nullptr) return;
    const int fd = victim->fd.get();
    if (victim->role == Connection::Role::pending) {
      // A request that already arrived is not idle: serve it (it becomes a lease, an observer
      // or closed) and look again.
      std::byte peek[1];
      if (::recv(fd, peek, sizeof peek, MSG_PEEK | MSG_DONTWAIT) > 0) {
        handle_readable(fd);
        continue;
      }
      shed_idle(fd);
    } else {
      close_connection(fd);  // an observer has had its reply; it needs nothing more
    }
    ++shed_since_note_;
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_shed_note_) {
      next_shed_note_ = now + std::chrono::seconds(1);
      note({EngineEvent::Kind::refused, 0, 0, 0, 0,
            fmt::format("at the cap of {} connections without a lane: closed {} idle one(s), the longest idle first, "
                        "to make room for new ones", kMaxExtraConnections, std::exchange(shed_since_note_, 0))});
    }
  }
}

void ShmEngine::shed_idle(int fd) noexcept {
  const auto found = std::find_if(connections_.begin(), connections_.end(),
                                  [fd](const Connection& c) { return c.fd.get() == fd; });
  if (found == connections_.end()) return;
  reply(*found, HandoffStatus::busy,
        fmt::format("engine {} has {} connections open that hold no lane and closed this one, the longest idle; ask again",
                    segment_.name(), kMaxExtraConnections));
  // As in shed_connection: a request that arrives between the reply and the close would reset
  // the peer and lose the answer; stop its sends first, then drop what came.
  (void)::shutdown(fd, SHUT_RDWR);
  std::byte sink[sizeof(HandoffRequest)];
  while (::recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
  }
  close_connection(fd);
}

bool ShmEngine::prepare_lane(std::uint32_t lane) noexcept {
  Expected<LaneObject> object = std::unexpected(Error{ErrorCode::io, ""});
  try {
    object = segment_.make_lane_object(lane, generations_[lane] + 1);
  } catch (...) {
    object = std::unexpected(Error{ErrorCode::resource, "out of memory"});
  }
  if (!object) {
    note({EngineEvent::Kind::warning, 0, lane, 0, 0,
          fmt::format("cannot make a fresh object for lane {}: {}; retrying", lane, object.error().message)});
    return false;
  }
  ++generations_[lane];
  EngineLane& shared = lanes_.lanes[lane];
  shared.view = object->view();
  shared.generation = object->generation();
  objects_[lane].emplace(std::move(*object));
  // relaxed: a report for people.
  segment_.lane_status(lane).owner_pid = 0;
  segment_.lane_status(lane).owner_uid = 0;
  segment_.lane_status(lane).state.store(static_cast<std::uint32_t>(LaneState::free), std::memory_order_relaxed);
  set_phase(shared, LanePhase::free);
  return true;
}

void ShmEngine::replace_drained_lanes() noexcept {
  for (std::uint32_t i = 0; i < segment_.lane_count(); ++i) {
    if (load_phase(lanes_.lanes[i]) != LanePhase::drained) continue;
    // The serving thread let go (phase drained, acquired): nothing points into the old object.
    objects_[i].reset();
    (void)prepare_lane(i);
  }
}

void ShmEngine::stop() noexcept {
  if (stopping_) return;
  stopping_ = true;
  segment_.mark_stopping();
  stop_.store(true, std::memory_order_relaxed);  // relaxed: a plain flag; join() orders the rest
  if (wait_ == WaitMode::block) wake_serving_thread(lanes_.keeper_word);
  if (serving_.joinable()) serving_.join();
  // After the serving thread: nothing hands out work any more; each worker ends its combo.
  if (pool_) pool_->stop();
}

}  // namespace ipcfloor
