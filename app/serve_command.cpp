#include "app/serve_command.hpp"

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

#include "app/cli_common.hpp"
#include "common/affinity.hpp"
#include "common/checksum.hpp"
#include "engine/shm_engine.hpp"
#include "engine/socket_server.hpp"
#include "engine/telemetry.hpp"
#include "shm/liveness.hpp"

namespace ipcfloor {
namespace {

int report_error(const Error& error) { return ipcfloor::report_error("serve", error); }

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
      fmt::print(stderr, "ipcfloor serve: lane {} (pid {}) wrote impossible ring positions; lane quarantined until its owner leaves\n",
                 event.lane, event.pid);
      break;
    case TelemetryEvent::Kind::owner_corrupt:
      fmt::print(stderr, "ipcfloor serve: lane {} held an owner word no client writes (pid field {}); lane reset\n",
                 event.lane, event.pid);
      break;
  }
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
  // One copy of the series serves the segment (which copies it in) and every socket connection.
  std::shared_ptr<PreloadedSeries> series;
  if (options.shm || (sockets && options.socket_series)) {
    auto loaded = load_series_source(options.source);
    if (!loaded) return report_error(loaded.error());
    series = std::make_shared<PreloadedSeries>();
    series->checksum = fnv1a64(std::as_bytes(std::span<const double>(loaded->close)));
    series->close = std::move(loaded->close);
    series->name = std::move(loaded->description);
    if (socket_options && options.socket_series) socket_options->preloaded = series;
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
  std::unique_ptr<ShmEngine> shm;
  if (options.shm) {
    ShmEngineConfig config;
    config.segment.name = options.name;
    config.segment.lanes = options.lanes;
    config.segment.ring_capacity = options.ring_capacity;
    config.segment.bulk_bytes = options.bulk_bytes;
    config.segment.hugepages = options.hugepages;
    config.segment.mlock = options.mlock;
    config.segment.series = series->close;
    config.segment.series_name = series->name;
    config.segment.fee = options.fee;
    config.segment.heartbeat_interval_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(options.heartbeat).count());
    config.segment.tmpfs_dir = options.tmpfs_dir;
    config.wait = options.wait;
    config.cpu = cpu;
    config.fifo = options.fifo;
    config.fifo_priority = options.fifo_priority;
    auto started = ShmEngine::start(std::move(config));
    if (!started) return report_error(started.error());  // ~SocketServer removes the socket file
    shm = std::move(*started);
    for (const std::string& warning : shm->warnings()) fmt::print(stderr, "ipcfloor serve: warning: {}\n", warning);
  }

  if (!options.quiet) {
    if (shm) {
      const Segment& segment = shm->segment();
      const SegmentHeader& header = segment.header();
      fmt::print(stderr,
                 "ipcfloor serve: segment {} at {} ({} bytes, {}, {}), {} lanes x {} slots\n"
                 "ipcfloor serve: series {} ({} bars, checksum {:016x}), fee {}\n"
                 "ipcfloor serve: serving thread on cpu {} in {} mode; pid {}; Ctrl-C stops\n",
                 segment.name(), segment.path(), segment.size(), backing_name(segment.backing()),
                 segment.locked() ? "locked in RAM" : "NOT locked", header.lane_count, header.ring_capacity,
                 series->name, series->close.size(), header.series_checksum, options.fee, cpu,
                 to_string(options.wait), header.engine_pid);
    }
    if (socket_server) {
      fmt::print(stderr,
                 "ipcfloor serve: sockets: {}; {} thread(s) on {}, max frame {} bytes, frame timeout {} ms, "
                 "fee {}; pid {}{}\n",
                 socket_server->describe(), socket_options->threads, cpu_list(socket_options->cpus),
                 socket_options->max_frame_bytes, socket_options->stall_timeout.count(), options.fee, getpid(),
                 shm ? "" : "; no segment (--no-shm); Ctrl-C stops");
      if (socket_options->preloaded && !shm)
        fmt::print(stderr, "ipcfloor serve: sockets: series {} ({} bars, checksum {:016x}) for use_preloaded\n",
                   series->name, series->close.size(), series->checksum);
      if (!socket_options->preloaded)
        fmt::print(stderr, "ipcfloor serve: sockets: no series of their own (give --data or --bars to hold one); "
                           "clients ship theirs\n");
    }
  }

  // Without a segment there is no heartbeat to keep: the loop only waits for a signal.
  const auto interval = shm ? options.heartbeat : std::chrono::milliseconds(200);
  const timespec tick{static_cast<time_t>(interval.count() / 1000), static_cast<long>(interval.count() % 1000) * 1'000'000};
  const auto drain_telemetry = [&] {
    shm->drain_telemetry([&](const TelemetryEvent& event) {
      if (!options.quiet || event.kind != TelemetryEvent::Kind::lane_released) print_event(event);
    });
  };
  int signal_number = 0;
  while (true) {
    if (shm) {
      shm->beat();
      drain_telemetry();
    }
    signal_number = sigtimedwait(&stop_signals, nullptr, &tick);
    if (signal_number > 0) break;
  }
  const char* signal_name = signal_number == SIGINT ? "SIGINT" : "SIGTERM";

  if (shm) {
    shm->stop();
    drain_telemetry();
    const SegmentHeader& header = shm->segment().header();
    if (!options.quiet)
      fmt::print(stderr, "ipcfloor serve: {} received; served {} requests ({} rejected); removed {}\n", signal_name,
                 header.requests.load(std::memory_order_relaxed),    // relaxed: the writer has joined
                 header.bad_frames.load(std::memory_order_relaxed),  // relaxed: as above
                 shm->segment().path());
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

CLI::App* add_serve_subcommand(CLI::App& app, ServeCli& cli) {
  ServeOptions& o = cli.options;
  auto* serve = app.add_subcommand("serve", "Preload the series into a shared-memory segment and serve combos");
  serve->add_option("--name", o.name, "segment name: /dev/shm/NAME or <hugetlbfs>/NAME")->capture_default_str();
  serve->add_option("--data", cli.data, "close series: .csv with a close column, .f64 or .npy")->check(CLI::ExistingFile);
  add_gbm_options(*serve, o.source.gbm, &cli.gbm_given);
  serve->add_option("--cpu", cli.cpu, "core for the serving thread (default: the last allowed core)");
  serve->add_flag("--fifo", o.fifo, "run the serving thread under SCHED_FIFO (isolated cores only)");
  serve->add_option("--lanes", o.lanes, "client lanes")->capture_default_str();
  serve->add_option("--ring-capacity", o.ring_capacity, "slots per ring (power of two)")->capture_default_str();
  serve->add_option("--bulk-bytes", o.bulk_bytes,
                    "bytes of each lane's bulk region for ECHO_BULK (rounded up to 4 KiB; 0 for none)")
      ->capture_default_str();
  serve->add_option("--fee", o.fee, "fee per round trip, percentage points")->capture_default_str();
  serve->add_option("--wait", cli.wait, "serving thread when idle: spin, backoff or block")->capture_default_str();
  serve->add_option("--hugepages", cli.hugepages, "auto, require or off")->capture_default_str();
  serve->add_option("--mlock", cli.mlock, "auto, require or off")->capture_default_str();
  serve->add_option("--heartbeat-ms", cli.heartbeat_ms, "heartbeat and liveness-check interval")->capture_default_str();
  serve->add_flag("--quiet", o.quiet, "print only warnings and errors");
  serve->add_option("--socket", o.socket_path,
                    "also serve the socket protocol on this Unix-domain socket (mode 0600, own uid only)");
  serve->add_option("--tcp", o.tcp_endpoint,
                    "also serve it on TCP HOST:PORT with TCP_NODELAY (host defaults to 127.0.0.1)");
  serve->add_flag("--no-shm", cli.no_shm,
                  "serve the sockets only: no segment, no pinned spinning thread; the sockets hold a series "
                  "(use_preloaded) only when --data or --bars/--seed/... say which");
  serve->add_option("--socket-cpu", cli.socket_cpu,
                    "core for the socket threads (default: every allowed core but the shm serving thread's; "
                    "with --no-shm, any)");
  serve->add_option("--socket-threads", o.socket_threads, "socket server threads")->capture_default_str();
  serve->add_option("--sweep-threads", o.sweep_threads, "workers for one socket sweep of many combos")
      ->capture_default_str();
  serve->add_option("--max-frame", o.max_frame_bytes, "largest socket request body, bytes")
      ->capture_default_str();
  serve->add_option("--frame-timeout-ms", cli.frame_timeout_ms,
                    "a socket frame must arrive, and a reply be read, within this long")
      ->capture_default_str();
  serve->add_option("--max-connections", o.max_connections, "socket connections served at once")
      ->capture_default_str();
  serve->add_flag("--socket-any-uid", o.socket_any_uid,
                  "let any uid use the Unix socket (mode 0666, no SO_PEERCRED check)");

  return serve;
}

int run_serve_command(ServeCli& cli) {
  ServeOptions& options = cli.options;
  if (!cli.data.empty()) options.source.data_path = cli.data;
  if (cli.cpu >= 0) options.cpu = cli.cpu;
  options.heartbeat = std::chrono::milliseconds(cli.heartbeat_ms);
  auto wait = parse_wait_mode(cli.wait);
  if (!wait) return report_error(wait.error());
  auto hugepages = parse_hugepages_mode(cli.hugepages);
  if (!hugepages) return report_error(hugepages.error());
  auto mlock = parse_mlock_mode(cli.mlock);
  if (!mlock) return report_error(mlock.error());
  options.wait = *wait;
  options.hugepages = *hugepages;
  options.mlock = *mlock;
  options.shm = !cli.no_shm;
  options.socket_series = options.shm || !cli.data.empty() || cli.gbm_given;
  if (cli.socket_cpu >= 0) options.socket_cpu = cli.socket_cpu;
  options.frame_timeout = std::chrono::milliseconds(cli.frame_timeout_ms);
  return run_serve(options);
}

}  // namespace ipcfloor
