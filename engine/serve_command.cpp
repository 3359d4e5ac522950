#include "engine/serve_command.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "engine/affinity.hpp"
#include "engine/shm_server.hpp"
#include "engine/socket_server.hpp"
#include "engine/telemetry.hpp"
#include "shm/liveness.hpp"

namespace ipcfloor {
namespace {

int report_error(const Error& error) {
  fmt::print(stderr, "ipcfloor serve: {}\n", error.message);
  return 1;
}

void print_event(const TelemetryEvent& event) {
  switch (event.kind) {
    case TelemetryEvent::Kind::bad_frame:
      fmt::print(stderr, "ipcfloor serve: lane {} (pid {}): rejected request seq {}: {}\n", event.lane, event.pid,
                 event.seq, to_string(static_cast<Status>(event.status)));
      break;
    case TelemetryEvent::Kind::lane_released:
      fmt::print(stderr, "ipcfloor serve: lane {} released by pid {}\n", event.lane, event.pid);
      break;
    case TelemetryEvent::Kind::lane_reclaimed:
      fmt::print(stderr, "ipcfloor serve: lane {} reclaimed from dead client pid {}\n", event.lane, event.pid);
      break;
    case TelemetryEvent::Kind::ring_corrupt:
      fmt::print(stderr, "ipcfloor serve: lane {} (pid {}) wrote impossible ring positions; lane reset\n",
                 event.lane, event.pid);
      break;
  }
}

// Marks lanes whose owner died as reclaiming; the serving thread then drains and frees them.
// Reporter thread only (it reads /proc).
void reclaim_dead_lanes(Segment& segment) {
  SegmentHeader& header = segment.header();
  // The validated lane count, never the header's: a peer can rewrite shared memory.
  for (std::uint32_t i = 0; i < segment.lane_count(); ++i) {
    LaneControl& lane = *segment.lane(i).control;
    // acquire: pairs with the client's acq_rel claim CAS, so its start ticks store is visible.
    std::uint64_t owner = lane.owner.load(std::memory_order_acquire);
    if (owner_state(owner) != LaneState::claimed) continue;
    // relaxed: written once by the client right after its claim; zero just means "pid only".
    const std::uint64_t ticks = lane.owner_start_ticks.load(std::memory_order_relaxed);
    if (process_alive(owner_pid(owner), ticks)) continue;
    // acq_rel: only if the lane is still claimed by that pid (it may have released meanwhile);
    // pairs with the serving thread's acquire load in ShmServer::serve_lane.
    if (lane.owner.compare_exchange_strong(owner, pack_owner(LaneState::reclaiming, owner_pid(owner)),
                                           std::memory_order_acq_rel, std::memory_order_relaxed) &&
        header.wait_mode == static_cast<std::uint32_t>(WaitMode::block))
      detail::notify_channel({header.doorbell, header.engine_sleeping});
  }
}

// The shared-memory side: the segment, its pinned serving thread and the telemetry it emits.
// Lives at a fixed address: the server holds references into it.
struct ShmSide {
  explicit ShmSide(Segment created) : segment(std::move(created)) {}
  ShmSide(const ShmSide&) = delete;
  ShmSide& operator=(const ShmSide&) = delete;
  ~ShmSide() {
    stop.store(true, std::memory_order_relaxed);  // relaxed: a plain flag; join() orders the rest
    if (serving.joinable()) serving.join();
  }

  Segment segment;
  TelemetryQueue telemetry{kTelemetryQueueCapacity};
  std::unique_ptr<ShmServer> server;
  std::atomic<bool> stop{false};
  std::thread serving;
};

// Creates the segment and starts its pinned serving thread; returns once the thread serves.
Expected<std::unique_ptr<ShmSide>> start_shm(const ServeOptions& options, const LoadedSeries& series, int cpu) {
  SegmentConfig config;
  config.name = options.name;
  config.lanes = options.lanes;
  config.ring_capacity = options.ring_capacity;
  config.bulk_bytes = options.bulk_bytes;
  config.hugepages = options.hugepages;
  config.mlock = options.mlock;
  config.series = series.close;
  config.series_name = series.description;
  config.fee = options.fee;
  config.wait_mode = static_cast<std::uint32_t>(options.wait);
  config.heartbeat_interval_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(options.heartbeat).count());
  config.tmpfs_dir = options.tmpfs_dir;
  auto segment = Segment::create(config);
  if (!segment) return std::unexpected(segment.error());
  for (const std::string& warning : segment->warnings()) fmt::print(stderr, "ipcfloor serve: warning: {}\n", warning);

  auto side = std::make_unique<ShmSide>(std::move(*segment));
  auto server = ShmServer::make(side->segment, options.wait, side->telemetry);
  if (!server) return std::unexpected(server.error());
  side->server = std::move(*server);

  // The serving thread pins itself before its first poll; setup results come back through
  // these, published by the release store of `started`.
  std::atomic<int> started{0};  // 0 pending, 1 serving, -1 failed to pin
  Error setup_error{ErrorCode::io, ""};
  std::string fifo_warning;
  ShmSide& s = *side;
  s.serving = std::thread([&] {
    pthread_setname_np(pthread_self(), "ipcf-serve");  // benchmarks find the serving thread by name
    if (auto pinned = pin_current_thread(cpu); !pinned) {
      setup_error = pinned.error();
      started.store(-1, std::memory_order_release);  // release: publishes setup_error; pairs with acquire below
      return;
    }
    if (options.fifo)
      if (auto fifo = set_fifo_priority(options.fifo_priority); !fifo) fifo_warning = fifo.error().message;
    ShmServer& shm_server = *s.server;
    started.store(1, std::memory_order_release);  // release: publishes fifo_warning; pairs with acquire below
    shm_server.run(s.stop);
  });
  // acquire: pairs with the serving thread's release store of `started`.
  while (started.load(std::memory_order_acquire) == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  if (started.load(std::memory_order_acquire) < 0) {  // acquire: as above
    s.serving.join();
    return std::unexpected(setup_error);
  }
  if (!fifo_warning.empty()) fmt::print(stderr, "ipcfloor serve: warning: {}\n", fifo_warning);
  if (!cpu_isolated(cpu))
    fmt::print(stderr,
               "ipcfloor serve: warning: cpu {} is not isolated (isolcpus/nohz_full); other tasks may "
               "preempt the serving thread and widen the tail\n",
               cpu);
  return side;
}

// The socket server's options from the serve options; the cpus keep it off the shm thread's core.
Expected<SocketServerOptions> socket_options_for(const ServeOptions& options, int shm_cpu) {
  SocketServerOptions socket;
  socket.unix_path = options.socket_path;
  if (!options.tcp_endpoint.empty()) {
    auto endpoint = parse_tcp_endpoint(options.tcp_endpoint);
    if (!endpoint) return std::unexpected(endpoint.error());
    socket.tcp = *endpoint;
  }
  socket.fee = options.fee;
  socket.max_frame_bytes = options.max_frame_bytes;
  socket.stall_timeout = options.frame_timeout;
  socket.max_connections = options.max_connections;
  socket.threads = options.socket_threads;
  socket.sweep_threads = options.sweep_threads;
  socket.any_uid = options.socket_any_uid;
  socket.log = !options.quiet;
  if (options.socket_cpu) {
    socket.cpus = {*options.socket_cpu};
  } else if (options.shm) {
    for (const int cpu : allowed_cpus())
      if (cpu != shm_cpu) socket.cpus.push_back(cpu);
  }
  return socket;
}

std::string cpu_list(const std::vector<int>& cpus) {
  if (cpus.empty()) return "any cpu";
  std::string text = cpus.size() == 1 ? "cpu " : "cpus ";
  for (std::size_t i = 0; i < cpus.size(); ++i) text += fmt::format("{}{}", i == 0 ? "" : ",", cpus[i]);
  return text;
}

}  // namespace

int run_serve(const ServeOptions& options) {
  if (!std::isfinite(options.fee))
    return report_error(Error{ErrorCode::invalid_argument, fmt::format("fee {} is not a finite number", options.fee)});
  if (options.heartbeat.count() < 1 || options.heartbeat.count() > 10'000)
    return report_error(Error{ErrorCode::invalid_argument,
                              fmt::format("heartbeat {} ms is outside 1..10000", options.heartbeat.count())});
  const bool sockets = !options.socket_path.empty() || !options.tcp_endpoint.empty();
  if (!options.shm && !sockets)
    return report_error(Error{ErrorCode::invalid_argument,
                              "--no-shm leaves nothing to serve: add --socket PATH and/or --tcp HOST:PORT"});

  const auto allowed = allowed_cpus();
  const int cpu = options.cpu.value_or(allowed.empty() ? 0 : allowed.back());
  std::optional<SocketServerOptions> socket_options;
  if (sockets) {
    auto built = socket_options_for(options, cpu);
    if (!built) return report_error(built.error());
    socket_options = std::move(*built);
  }
  std::optional<LoadedSeries> series;
  if (options.shm) {
    auto loaded = load_series_source(options.source);
    if (!loaded) return report_error(loaded.error());
    series = std::move(*loaded);
  } else if (options.source.data_path && !options.quiet) {
    fmt::print(stderr, "ipcfloor serve: note: --data is not used with --no-shm; socket clients ship their series\n");
  }

  // Signals go to the reporter (this thread) only: block them before any thread exists.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  // Sockets first: a socket path held by a live server fails before a segment exists.
  std::unique_ptr<SocketServer> socket_server;
  if (socket_options) {
    auto started = SocketServer::start(*socket_options);
    if (!started) return report_error(started.error());
    socket_server = std::move(*started);
  }
  std::unique_ptr<ShmSide> shm;
  if (options.shm) {
    auto started = start_shm(options, *series, cpu);
    if (!started) return report_error(started.error());  // ~SocketServer removes the socket file
    shm = std::move(*started);
  }

  if (!options.quiet) {
    if (shm) {
      const Segment& segment = shm->segment;
      const SegmentHeader& header = segment.header();
      fmt::print(stderr,
                 "ipcfloor serve: segment {} at {} ({} bytes, {}, {}), {} lanes x {} slots\n"
                 "ipcfloor serve: series {} ({} bars, checksum {:016x}), fee {}\n"
                 "ipcfloor serve: serving thread on cpu {} in {} mode; pid {}; Ctrl-C stops\n",
                 segment.name(), segment.path(), segment.size(), backing_name(segment.backing()),
                 segment.locked() ? "locked in RAM" : "NOT locked", header.lane_count, header.ring_capacity,
                 series->description, series->close.size(), header.series_checksum, options.fee, cpu,
                 to_string(options.wait), header.engine_pid);
    }
    if (socket_server)
      fmt::print(stderr,
                 "ipcfloor serve: sockets: {}; {} thread(s) on {}, max frame {} bytes, frame timeout {} ms, "
                 "fee {}; pid {}{}\n",
                 socket_server->describe(), socket_options->threads, cpu_list(socket_options->cpus),
                 socket_options->max_frame_bytes, socket_options->stall_timeout.count(), options.fee, getpid(),
                 shm ? "" : "; no segment (--no-shm); Ctrl-C stops");
  }

  // Without a segment there is no heartbeat to keep: the loop only waits for a signal.
  const auto interval = shm ? options.heartbeat : std::chrono::milliseconds(200);
  const timespec tick{static_cast<time_t>(interval.count() / 1000), static_cast<long>(interval.count() % 1000) * 1'000'000};
  const auto drain_telemetry = [&] {
    TelemetryEvent event{};
    while (shm->telemetry.try_dequeue(event))
      if (!options.quiet || event.kind != TelemetryEvent::Kind::lane_released) print_event(event);
  };
  int signal_number = 0;
  while (true) {
    if (shm) {
      // relaxed: a timestamp whose age clients compare; nothing is published through it.
      shm->segment.header().heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
      reclaim_dead_lanes(shm->segment);
      drain_telemetry();
    }
    signal_number = sigtimedwait(&stop_signals, nullptr, &tick);
    if (signal_number > 0) break;
  }
  const char* signal_name = signal_number == SIGINT ? "SIGINT" : "SIGTERM";

  if (shm) {
    SegmentHeader& header = shm->segment.header();
    shm->segment.mark_stopping();
    shm->stop.store(true, std::memory_order_relaxed);  // relaxed: a plain flag; join() orders the rest
    if (options.wait == WaitMode::block) detail::notify_channel({header.doorbell, header.engine_sleeping});
    shm->serving.join();
    drain_telemetry();
    if (!options.quiet)
      fmt::print(stderr, "ipcfloor serve: {} received; served {} requests ({} rejected); removed {}\n", signal_name,
                 header.requests.load(std::memory_order_relaxed),    // relaxed: the writer has joined
                 header.bad_frames.load(std::memory_order_relaxed),  // relaxed: as above
                 shm->segment.path());
  }
  if (socket_server) {
    socket_server->stop();
    if (!options.quiet)
      fmt::print(stderr, "ipcfloor serve: {}sockets: {}{}\n", shm ? "" : fmt::format("{} received; ", signal_name),
                 format_stats(socket_server->stats()),
                 socket_server->unix_path().empty() ? "" : fmt::format("; removed {}", socket_server->unix_path()));
  }
  return 0;
}

}  // namespace ipcfloor
