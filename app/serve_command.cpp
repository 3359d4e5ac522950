#include "app/serve_command.hpp"

#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "app/cli_common.hpp"
#include "app/doctor.hpp"
#include "app/readiness.hpp"
#include "common/log.hpp"
#include "common/unique_fd.hpp"
#include "common/affinity.hpp"
#include "common/checksum.hpp"
#include "kernel/cost_rate.hpp"
#include "kernel/gbm.hpp"
#include "kernel/series_set.hpp"
#include "engine/shm_engine.hpp"
#include "engine/socket_server.hpp"
#include "engine/telemetry.hpp"
#include "shm/liveness.hpp"

namespace ipcfloor {
namespace {

int report_error(const Error& error) { return ipcfloor::report_error("serve", error); }

// Turns engine events into log lines. Rejected frames are rate-limited per second (a client
// that sends garbage as fast as it can must not turn into as many log lines); the rest are rare.
class EventLog {
 public:
  explicit EventLog(bool quiet) : quiet_(quiet) {}

  void operator()(const EngineEvent& event) {
    using Kind = EngineEvent::Kind;
    switch (event.kind) {
      case Kind::bad_frame: {
        const auto now = std::chrono::steady_clock::now();
        if (now >= window_end_) {
          flush_suppressed();
          window_end_ = now + std::chrono::seconds(1);
          lines_in_window_ = 0;
        }
        if (lines_in_window_ >= kBadFrameLinesPerSecond) {
          ++suppressed_;
          return;
        }
        ++lines_in_window_;
        log(LogLevel::warn, "serve: lane {} (pid {}): rejected request seq {}: {}", event.lane, event.pid, event.seq,
            to_string(static_cast<Status>(event.status)));
        return;
      }
      case Kind::lane_corrupt:
        log(LogLevel::warn, "serve: lane {} (pid {}) wrote impossible ring positions or an impossible exchange "
            "stamp; lane quarantined until its client leaves", event.lane, event.pid);
        return;
      case Kind::lane_claimed:
        if (!quiet_) log(LogLevel::info, "serve: lane {} handed to pid {}", event.lane, event.pid);
        return;
      case Kind::lane_released:
        if (!quiet_) log(LogLevel::info, "serve: lane {} released by pid {}", event.lane, event.pid);
        return;
      case Kind::lane_reclaimed:
        log(LogLevel::info, "serve: lane {} reclaimed from pid {}, which left without releasing it (died?)", event.lane,
            event.pid);
        return;
      case Kind::refused: log(LogLevel::warn, "serve: {}", event.text); return;
      case Kind::warning: log(LogLevel::warn, "serve: {}", event.text); return;
    }
  }

  void flush_suppressed() {
    if (suppressed_ != 0)
      log(LogLevel::warn, "serve: {} more rejected requests in the last second (not logged one by one)", suppressed_);
    suppressed_ = 0;
  }

 private:
  static constexpr unsigned kBadFrameLinesPerSecond = 20;
  bool quiet_;
  std::chrono::steady_clock::time_point window_end_{};
  unsigned lines_in_window_ = 0;
  std::uint64_t suppressed_ = 0;
};

// Room for appended bars when --live gives no --capacity.
constexpr std::size_t kDefaultLiveRoom = 1'000'000;

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
  socket.owner_reserve = options.owner_reserve;
  socket.idle_timeout = options.idle_timeout;
  socket.max_loaded_bytes = options.max_loaded_bytes;
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

// The workers' cpus: --worker-cpus as given (each allowed, none twice, not the serving cpu), or
// the first --workers of the default ones (every allowed cpu but the serving one), or all of them.
Expected<std::vector<int>> choose_worker_cpus(const ServeOptions& options, int serving_cpu) {
  const std::vector<int> allowed = allowed_cpus();
  if (!options.worker_cpus.empty()) {
    std::vector<int> seen;
    for (const int cpu : options.worker_cpus) {
      if (std::find(allowed.begin(), allowed.end(), cpu) == allowed.end())
        return fail(ErrorCode::invalid_argument, "--worker-cpus: cpu {} is not one this process may use ({})", cpu,
                    cpu_list(allowed));
      if (cpu == serving_cpu)
        return fail(ErrorCode::invalid_argument,
                    "--worker-cpus: cpu {} is the serving cpu (--cpu): the serving core must stay free", cpu);
      if (std::find(seen.begin(), seen.end(), cpu) != seen.end())
        return fail(ErrorCode::invalid_argument, "--worker-cpus: cpu {} is listed twice", cpu);
      seen.push_back(cpu);
    }
    if (options.workers && *options.workers != seen.size())
      return fail(ErrorCode::invalid_argument, "--workers {} disagrees with the {} cpus of --worker-cpus",
                  *options.workers, seen.size());
    return seen;
  }
  std::vector<int> cpus = default_worker_cpus(serving_cpu);
  if (options.workers && *options.workers > cpus.size())
    return fail(ErrorCode::invalid_argument,
                "--workers {}: this process may use {} cpus besides the serving cpu {} ({}); a worker needs a cpu of "
                "its own",
                *options.workers, cpus.size(), serving_cpu, cpus.empty() ? "none" : cpu_list(cpus));
  if (options.workers) cpus.resize(*options.workers);
  return cpus;
}

// Slots per ring: --ring-capacity as given, else 8, or the power of two at or above twice the
// workers when that is more, so that one client's pipeline can keep every worker busy.
std::uint32_t serve_ring_capacity(const ServeOptions& options, std::size_t workers) {
  if (options.ring_capacity_given) return options.ring_capacity;
  const auto wanted = static_cast<std::uint32_t>(std::bit_ceil(std::max<std::size_t>(2 * workers, 1)));
  return std::max(options.ring_capacity, std::min(wanted, kMaxRingCapacity));
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
  // More --data files: further series of the segment, named as `sweep --series` names them.
  std::vector<std::string> paths;
  if (options.source.data_path) paths.push_back(*options.source.data_path);
  paths.insert(paths.end(), options.more_data.begin(), options.more_data.end());
  auto names = SeriesSet::make(paths, options.source.gbm);
  if (!names) return report_error(names.error());
  std::vector<LoadedSeries> more_series;
  for (std::size_t i = 1; i < names->size(); ++i) {
    auto loaded = names->load(i);
    if (!loaded) return report_error(loaded.error());
    more_series.push_back(std::move(*loaded));
  }
  if (!more_series.empty() && !options.shm)
    return report_error(Error{ErrorCode::invalid_argument,
                              "several --data series need the segment: the socket server holds one (drop --no-shm)"});
  // The socket sweeps run on the socket threads, but a combo that holds one for minutes still
  // delays every connection of that thread and shutdown: the same bound per combo as the
  // segment's, measured on the series served (or a default-length generated one).
  if (socket_options) socket_options->max_combo_cost = options.max_frame_cost;
  if (socket_options && options.max_frame_time.count() > 0) {
    std::vector<double> generated;
    std::span<const double> calibration;
    if (series) {
      calibration = series->close;
    } else if (auto made = generate_gbm(GbmParams{}); made) {
      generated = std::move(*made);
      calibration = generated;
    }
    socket_options->max_combo_cost = max_cost_for(measure_cost_rate(calibration), options.max_frame_time);
  }

  // Signals go to the keeper (this thread) only, through a signalfd: block them before any
  // thread exists so that every thread inherits the mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  UniqueFd signals(::signalfd(-1, &stop_signals, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signals) return report_error(Error{ErrorCode::io, fmt::format("signalfd failed: {}", std::strerror(errno))});

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
    auto worker_cpus = choose_worker_cpus(options, cpu);
    if (!worker_cpus) return report_error(worker_cpus.error());
    config.worker_cpus = *worker_cpus;
    config.segment.ring_capacity = serve_ring_capacity(options, worker_cpus->size());
    config.segment.bulk_bytes = options.bulk_bytes;
    config.segment.hugepages = options.hugepages;
    config.segment.mlock = options.mlock;
    config.segment.series = series->close;
    config.segment.series_name = series->name;
    config.segment.series_key = names->names().front();
    for (std::size_t i = 0; i < more_series.size(); ++i)
      config.segment.more_series.push_back({names->names()[i + 1], more_series[i].close});
    config.segment.fee = options.fee;
    config.segment.heartbeat_interval_ns = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(options.heartbeat).count());
    config.segment.socket_dir = options.socket_dir;
    config.segment.live = options.live;
    config.segment.capacity_bars = 0;
    if (options.live) {
      config.segment.capacity_bars = options.capacity_bars == 0 ? series->close.size() + kDefaultLiveRoom
                                                                 : options.capacity_bars;
      if (config.segment.capacity_bars < series->close.size())
        return report_error(Error{ErrorCode::invalid_argument,
                                  fmt::format("--capacity {} is below the {} bars preloaded", options.capacity_bars,
                                              series->close.size())});
    }
    config.segment.signal_capacity = options.live ? options.signal_capacity : 0;
    config.subscriptions_per_lane = options.subscriptions_per_lane;
    config.wait = options.wait;
    config.cpu = cpu;
    config.fifo = options.fifo;
    config.fifo_priority = options.fifo_priority;
    config.max_frame_cost = options.max_frame_cost;
    config.max_frame_time = options.max_frame_time;
    config.inline_cost = options.inline_cost;
    config.max_bar_cost = options.max_bar_cost;
    auto started = ShmEngine::start(std::move(config));
    if (!started) return report_error(started.error());  // ~SocketServer removes the socket file
    shm = std::move(*started);
    for (const std::string& warning : shm->warnings()) log(LogLevel::warn, "serve: {}", warning);
  }

  if (shm) {
    const Segment& segment = shm->segment();
    const DataHeader& header = segment.header();
    log(LogLevel::info, "serve: engine {} on {} ({} bytes of data, {}, {}), {} lanes x {} slots", segment.name(),
        segment.socket_path(), segment.size(), backing_name(segment.backing()),
        segment.locked() ? "locked in RAM" : "NOT locked", header.lane_count, header.ring_capacity);
    log(LogLevel::info, "serve: series {} ({} bars, checksum {:016x}), fee {}", series->name,
        series->close.size(), header.series_checksum, options.fee);
    for (std::uint32_t i = 1; i < segment.series_count(); ++i)
      log(LogLevel::info, "serve: series {} {} ({} bars, checksum {:016x})", i, header.series_table[i].name,
          header.series_table[i].bars, header.series_table[i].checksum);
    if (options.live)
      log(LogLevel::info, "serve: live: room for {} bars ({} to append), {} signal slots and up to {} subscriptions "
          "per lane; `ipcfloor feed --name {}` appends, `ipcfloor signals --name {}` subscribes",
          header.capacity_bars, header.capacity_bars - header.n_bars, header.signal_capacity,
          options.subscriptions_per_lane, segment.name(), segment.name());
    if (shm->max_frame_cost() != 0 && options.max_frame_time.count() > 0)
      log(LogLevel::info, "serve: one BACKTEST may cost at most {} units (--max-frame-ms {} at the {:.3g} units per us "
          "measured here, fixed from now on); costlier ones get too_costly", shm->max_frame_cost(),
          options.max_frame_time.count(), shm->measured_cost_per_us());
    else if (shm->max_frame_cost() != 0)
      log(LogLevel::info, "serve: one BACKTEST may cost at most {} units (--max-frame-cost); costlier ones get "
          "too_costly", shm->max_frame_cost());
    log(LogLevel::info, "serve: {} workers on cpu {}; BACKTESTs under {} units are computed on the serving thread",
        shm->worker_cpus().size(), shm->worker_cpus().empty() ? "(none)" : cpu_list(shm->worker_cpus()),
        options.inline_cost);
    log(LogLevel::info, "serve: serving thread on cpu {} in {} mode; pid {}; Ctrl-C stops", cpu,
        to_string(options.wait), getpid());
  }
  if (socket_server) {
    log(LogLevel::info,
        "serve: sockets: {}; {} thread(s) on {}, max frame {} bytes, frame timeout {} ms, fee {}; pid {}{}",
        socket_server->describe(), socket_options->threads, cpu_list(socket_options->cpus),
        socket_options->max_frame_bytes, socket_options->stall_timeout.count(), options.fee, getpid(),
        shm ? "" : "; no segment (--no-shm); Ctrl-C stops");
    if (socket_options->preloaded && !shm)
      log(LogLevel::info, "serve: sockets: series {} ({} bars, checksum {:016x}) for use_preloaded", series->name,
          series->close.size(), series->checksum);
    if (!socket_options->preloaded)
      log(LogLevel::info, "serve: sockets: no series of their own (give --data or --bars to hold one); clients ship "
          "theirs");
  }

  if (options.shm) {
    DoctorOptions doctor;
    doctor.cpu = cpu;
    doctor.bars = series->close.size();
    doctor.lanes = options.lanes;
    doctor.ring_capacity = shm->segment().ring_capacity();
    doctor.bulk_bytes = options.bulk_bytes;
    doctor.socket_dir = options.socket_dir;
    doctor.sample_seconds = 0.05;
    log(LogLevel::info, "serve: host checks: {}; `ipcfloor doctor --cpu {}` explains and gives the fixes",
        summarize(run_host_checks(doctor)), cpu);
  }

  if (!options.pidfile.empty())
    if (auto written = write_pidfile(options.pidfile); !written) return report_error(written.error());
  nlohmann::json facts{{"pid", getpid()}};
  if (shm) {
    facts["engine"] = shm->segment().name();
    facts["socket"] = shm->segment().socket_path();
    facts["lanes"] = shm->segment().lane_count();
    facts["wait"] = to_string(options.wait);
    facts["cpu"] = cpu;
    facts["workers"] = shm->worker_cpus().size();
    facts["worker_cpus"] = shm->worker_cpus();
    facts["bars"] = series->close.size();
    facts["checksum"] = fmt::format("{:016x}", shm->segment().header().series_checksum);
    if (options.live) facts["capacity"] = shm->segment().header().capacity_bars;
  }
  if (socket_server) facts["sockets"] = socket_server->describe();
  print_ready_line(facts);
  notify_systemd(fmt::format("READY=1\nMAINPID={}\nSTATUS=serving {}", getpid(),
                             shm ? shm->segment().name() : std::string("sockets")));

  // The keeper loop: engine work (hand-offs, departures, heartbeat) and signals, never blocking
  // longer than the engine asks. Log lines go to a writer thread of their own, so a stalled
  // stderr cannot stop the heartbeat or the reaction to SIGTERM.
  EventLog events(options.quiet);
  int signal_number = 0;
  while (signal_number == 0) {
    pollfd watch[2] = {{signals.get(), POLLIN, 0}, {shm ? shm->event_fd() : -1, POLLIN, 0}};
    const auto timeout = shm ? shm->service_timeout() : std::chrono::milliseconds(1000);
    (void)::poll(watch, 2, static_cast<int>(timeout.count()));
    if (shm) {
      shm->service();
      shm->drain_events(events);
    }
    signalfd_siginfo info{};
    if (::read(signals.get(), &info, sizeof info) == static_cast<ssize_t>(sizeof info))
      signal_number = static_cast<int>(info.ssi_signo);
  }
  const char* signal_name = signal_number == SIGINT ? "SIGINT" : "SIGTERM";
  notify_systemd("STOPPING=1");

  if (shm) {
    shm->stop();
    shm->drain_events(events);
    events.flush_suppressed();
    const DataHeader& header = shm->segment().header();
    log(options.quiet ? LogLevel::debug : LogLevel::info,
        "serve: {} received; served {} requests ({} rejected); removed {}", signal_name,
        header.requests.load(std::memory_order_relaxed),    // relaxed: the writer has joined
        header.bad_frames.load(std::memory_order_relaxed),  // relaxed: as above
        shm->segment().socket_path());
  }
  if (socket_server) {
    socket_server->stop();
    log(options.quiet ? LogLevel::debug : LogLevel::info, "serve: {}sockets: {}{}",
        shm ? "" : fmt::format("{} received; ", signal_name), format_stats(socket_server->stats()),
        socket_server->unix_path().empty() ? "" : fmt::format("; removed {}", socket_server->unix_path()));
  }
  if (!options.pidfile.empty()) std::remove(options.pidfile.c_str());
  return 0;
}

CLI::App* add_serve_subcommand(CLI::App& app, ServeCli& cli) {
  ServeOptions& o = cli.options;
  auto* serve = app.add_subcommand("serve", "Preload the series into a shared-memory segment and serve combos");
  serve->add_option("--name", o.name, "engine name: clients attach to it through the socket DIR/NAME")
      ->capture_default_str();
  serve->add_option("--socket-dir", o.socket_dir, "DIR for the engine's socket and lock file")->capture_default_str();
  serve->add_option("--max-frame-cost", o.max_frame_cost,
                    "bound on one BACKTEST's work in units (about n_bars x the sum of its windows); 0: none")
      ->capture_default_str();
  serve->add_option("--max-frame-ms", cli.max_frame_ms,
                    "opt-in instead of --max-frame-cost: a bound in ms, turned into units once at start by timing "
                    "this host's kernel (the verdicts then depend on the host)");
  serve->add_option("--workers", cli.workers,
                    "compute workers, pinned one per cpu (default: every allowed cpu but the serving one; 0: the "
                    "serving thread computes everything)")
      ->check(CLI::Range(0, static_cast<int>(kMaxWorkers)));
  serve->add_option("--worker-cpus", cli.worker_cpus, "the workers' cpus, a list such as 0-6,8 (default: see --workers)");
  serve->add_option("--inline-cost", o.inline_cost,
                    "BACKTESTs cheaper than this many units are computed on the serving thread")
      ->capture_default_str();
  serve->add_option("--max-bar-cost", o.max_bar_cost,
                    "live: bound on one bar's work over every subscription, in units; 0: none")
      ->capture_default_str();
  serve->add_flag("--live", o.live,
                  "live mode: clients append bars (ipcfloor feed) and subscribe combos to per-bar signals "
                  "(ipcfloor signals)");
  serve->add_option("--capacity", o.capacity_bars,
                    "live: room for this many bars in all, the preloaded ones included (default: preloaded + "
                    "1,000,000)");
  serve->add_option("--signal-capacity", o.signal_capacity,
                    "live: signal slots per lane (a power of two); a subscriber this far behind loses frames, "
                    "counted and flagged")
      ->capture_default_str();
  serve->add_option("--subscriptions", o.subscriptions_per_lane, "live: combos one lane may subscribe")
      ->capture_default_str();
  serve->add_option("--pidfile", o.pidfile, "write the engine's pid here once it serves (removed at exit)");
  serve->add_option("--log-level", cli.log_level, "debug, info, warn, error or off (default info; warn with --quiet)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  serve->add_option("--data", cli.data,
                    "close series: .csv with a close column, .f64 or .npy; repeat it to preload several (named "
                    "after their files; a BACKTEST names one by index, the first is 0)")
      ->check(CLI::ExistingFile);
  add_gbm_options(*serve, o.source.gbm, &cli.gbm_given);
  serve->add_option("--cpu", cli.cpu, "core for the serving thread (default: the last allowed core)");
  serve->add_flag("--fifo", o.fifo, "run the serving thread under SCHED_FIFO (isolated cores only)");
  serve->add_option("--lanes", o.lanes, "client lanes")->capture_default_str();
  serve->add_option("--ring-capacity", o.ring_capacity,
                    "slots per ring (power of two; default 8, or twice the workers when that is more)")
      ->each([&o](const std::string&) { o.ring_capacity_given = true; });
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
  serve->add_option("--owner-reserve", o.owner_reserve,
                    "of --max-connections, slots only Unix-socket peers of the server's own uid may take (TCP "
                    "peers, any local user, never get them; at most --max-connections - 1)")
      ->capture_default_str();
  serve->add_option("--idle-timeout-s", cli.idle_timeout_s,
                    "close a socket connection that sends no request for this long (0: never)")
      ->capture_default_str();
  serve->add_option("--max-loaded-mb", cli.max_loaded_mb,
                    "MiB all socket connections together may hold: series loaded (opcode 2), frames being read, "
                    "replies and sweep scratch")
      ->capture_default_str();
  serve->add_flag("--socket-any-uid", o.socket_any_uid,
                  "let any uid use the Unix socket (mode 0666, no SO_PEERCRED check)");

  return serve;
}

int run_serve_command(ServeCli& cli) {
  ServeOptions& options = cli.options;
  if (!cli.data.empty()) {
    options.source.data_path = cli.data.front();
    options.more_data.assign(cli.data.begin() + 1, cli.data.end());
  }
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
  options.max_frame_time = std::chrono::milliseconds(cli.max_frame_ms);
  if (cli.workers >= 0) options.workers = static_cast<std::uint32_t>(cli.workers);
  if (!cli.worker_cpus.empty()) {
    options.worker_cpus = parse_cpu_list(cli.worker_cpus);
    if (options.worker_cpus.empty())
      return report_error(Error{ErrorCode::invalid_argument,
                                fmt::format("--worker-cpus '{}' is not a cpu list such as 0-6,8", cli.worker_cpus)});
  }
  options.idle_timeout = std::chrono::milliseconds(std::uint64_t{cli.idle_timeout_s} * 1000);
  if (!options.live && (options.capacity_bars != 0))
    return report_error(Error{ErrorCode::invalid_argument, "--capacity needs --live"});
  if (options.live && (options.signal_capacity < 2 || (options.signal_capacity & (options.signal_capacity - 1)) != 0 ||
                       options.signal_capacity > kMaxRingCapacity))
    return report_error(Error{ErrorCode::invalid_argument,
                              fmt::format("--signal-capacity {} is not a power of two in 2..{}", options.signal_capacity,
                                          kMaxRingCapacity)});
  if (options.live && cli.no_shm)
    return report_error(Error{ErrorCode::invalid_argument, "--live needs the segment: drop --no-shm"});
  options.max_loaded_bytes = cli.max_loaded_mb << 20;
  auto level = parse_log_level(cli.log_level.empty() ? (options.quiet ? "warn" : "info") : cli.log_level);
  if (!level) return report_error(level.error());
  log_configure(*level);
  const int code = run_serve(options);
  // The last lines get one heartbeat to reach stderr: plenty for any sink that is read, and a
  // sink nobody reads cannot hold the exit longer (SIGTERM ends the engine within one bounded
  // frame plus one heartbeat).
  log_shutdown(static_cast<unsigned>(std::max<std::int64_t>(1, options.heartbeat.count())));
  return code;
}

}  // namespace ipcfloor
