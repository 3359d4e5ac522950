#include "app/serve_command.hpp"

#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "app/cli_common.hpp"
#include "app/doctor.hpp"
#include "app/metrics_http.hpp"
#include "app/readiness.hpp"
#include "app/topology_command.hpp"
#include "common/affinity.hpp"
#include "common/checksum.hpp"
#include "common/log.hpp"
#include "data/gbm.hpp"
#include "data/series_set.hpp"
#include "engine/telemetry.hpp"
#include "host/engine_host.hpp"
#include "kernel/cost_rate.hpp"
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

// The socket server takes at most this many threads of each kind (socket_server/socket_server.cpp).
constexpr unsigned kMaxSocketThreads = 64;

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
  socket.max_per_peer = options.max_per_peer;
  socket.min_frame_rate = options.min_frame_rate;
  socket.idle_timeout = options.idle_timeout;
  socket.max_loaded_bytes = options.max_loaded_bytes;
  socket.threads = options.socket_threads;
  socket.sweep_threads = options.sweep_threads;
  socket.any_uid = options.socket_any_uid;
  socket.peers = options.peers;
  socket.log = !options.quiet;
  if (options.socket_cpu) {
    socket.cpus = {*options.socket_cpu};
  } else if (options.shm) {
    for (const int cpu : allowed_cpus())
      if (cpu != shm_cpu) socket.cpus.push_back(cpu);
  }
  return socket;
}

// The workers' cpus: --worker-cpus as given (each allowed, none twice, not the serving cpu), or
// --workers of the default ones (default_worker_cpus: every allowed cpu but the serving one, in
// its order), or all of them.
Expected<std::vector<int>> choose_worker_cpus(const ServeOptions& options, int serving_cpu, int client_cpu) {
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
  std::vector<int> cpus = default_worker_cpus(serving_cpu, client_cpu);
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

// What serve builds before anything starts: the series, the servers' configurations and the
// serving cpu.
struct ServePlan {
  int cpu = 0;
  std::vector<int> near_cpus;  // nearest the serving cpu first; empty: the engine ranks them
  std::shared_ptr<PreloadedSeries> series;  // null: sockets only, holding no series of their own
  SeriesColumns main_others;                 // the main series' other columns (its close is in `series`)
  std::vector<SeriesColumns> more;           // the further --data series, which host.shm views
  std::shared_ptr<const StrategyCatalog> strategies;  // the built-in one and every --strategy, loaded
  EngineHostConfig host;
};

// The main series' closes, shared by the segment (which copies them in) and every socket
// connection (which serves closes alone); its other columns go to `others` (for the segment).
Expected<std::shared_ptr<PreloadedSeries>> load_main_series(const ServeOptions& options, SeriesColumns& others) {
  auto loaded = load_series_source(options.source);
  if (!loaded) return std::unexpected(loaded.error());
  auto series = std::make_shared<PreloadedSeries>();
  series->checksum = fnv1a64(std::as_bytes(std::span<const double>(loaded->close)));
  series->close = std::move(loaded->close);
  series->name = std::move(loaded->description);
  others = std::move(static_cast<SeriesColumns&>(*loaded));
  return series;
}

// `close` with the other columns of `others` (each as long as `close`, else left out).
Bars with_columns(std::span<const double> close, const SeriesColumns& others) noexcept {
  Bars bars(close);
  const auto present = [&close](const std::vector<double>& c) { return c.size() == close.size() ? c.data() : nullptr; };
  bars.open = present(others.open);
  bars.high = present(others.high);
  bars.low = present(others.low);
  bars.volume = present(others.volume);
  return bars;
}

// The segment's configuration: the main series, every further --data series, the engine's
// geometry and its serving thread.
Expected<ShmEngineConfig> shm_config_for(const ServeOptions& options, ServePlan& plan, const SeriesSet& names) {
  ShmEngineConfig config;
  SegmentConfig& segment = config.segment;
  segment.name = options.name;
  segment.lanes = options.lanes;
  auto worker_cpus = choose_worker_cpus(options, plan.cpu, plan.near_cpus.empty() ? -1 : plan.near_cpus.front());
  if (!worker_cpus) return std::unexpected(worker_cpus.error());
  config.worker_cpus = *worker_cpus;
  segment.ring_capacity = serve_ring_capacity(options, worker_cpus->size());
  segment.bulk_bytes = options.bulk_bytes;
  segment.hugepages = options.hugepages;
  segment.mlock = options.mlock;
  segment.series = with_columns(plan.series->close, plan.main_others);
  segment.series_name = plan.series->name;
  segment.series_key = names.names().front();
  for (std::size_t i = 1; i < names.size(); ++i) {
    auto loaded = names.load(i);
    if (!loaded) return std::unexpected(loaded.error());
    plan.more.push_back(std::move(static_cast<SeriesColumns&>(*loaded)));
  }
  for (std::size_t i = 0; i < plan.more.size(); ++i)
    segment.more_series.push_back({names.names()[i + 1], plan.more[i].bars()});
  segment.fee = options.fee;
  segment.bars_per_year = options.bars_per_year;
  segment.heartbeat_interval_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(options.heartbeat).count());
  segment.socket_dir = options.socket_dir;
  segment.peers = options.peers;
  segment.live = options.live;
  segment.capacity_bars = !options.live            ? 0
                          : options.capacity_bars == 0 ? plan.series->close.size() + kDefaultLiveRoom
                                                       : options.capacity_bars;
  segment.signal_capacity = options.live ? options.signal_capacity : 0;
  config.subscriptions_per_lane = options.subscriptions_per_lane;
  config.wait = options.wait;
  config.cpu = plan.cpu;
  config.near_cpus = plan.near_cpus;
  config.fifo = options.fifo;
  config.fifo_priority = options.fifo_priority;
  config.max_frame_cost = options.max_frame_cost;
  config.max_frame_time = options.max_frame_time;
  config.inline_cost = options.inline_cost;
  config.max_bar_cost = options.max_bar_cost;
  if (!options.journal_dir.empty()) config.journal = ShmEngineConfig::Journal{options.journal_dir, options.fsync};
  return config;
}

// The socket sweeps run on the socket threads, but a combo that holds one for minutes still
// delays every connection of that thread and shutdown: the same bound per combo as the
// segment's, measured on the series served (or a default-length generated one).
std::uint64_t socket_combo_bound(const ServeOptions& options, const PreloadedSeries* series) {
  std::vector<double> generated;
  std::span<const double> calibration;
  if (series != nullptr) {
    calibration = series->close;
  } else if (auto made = generate_gbm(GbmParams{}); made) {
    generated = std::move(*made);
    calibration = generated;
  }
  return max_cost_for(measure_cost_rate(calibration), options.max_frame_time);
}

// Every --strategy, loaded and checked (include/ipcfloor/strategy.h); the first refusal ends serve
// with exit 6, naming the file and the reason.
// While they load, SIGINT and SIGTERM end serve at once (their default action): a self-check runs
// the researcher's code, nothing is served or made yet, and the keeper that takes the signals
// later does not exist. No thread starts meanwhile.
Expected<std::shared_ptr<const StrategyCatalog>> load_strategies(const ServeOptions& options) {
  auto catalog = std::make_shared<StrategyCatalog>();
  if (options.strategies.empty()) return catalog;
  const auto check_close = strategy_check_series();
  if (!check_close) return std::unexpected(check_close.error());
  unblock_stop_signals();
  for (const std::string& path : options.strategies) {
    auto loaded = catalog->load(path, *check_close);
    if (!loaded) {
      block_stop_signals();
      return std::unexpected(loaded.error());
    }
  }
  block_stop_signals();
  return catalog;
}

// The serving cpu: --cpu N, --cpu auto (the floor matrix's choice) or the last allowed cpu; and
// the cpus nearest it, by the saved or measured matrix when there is one.
Expected<EnginePlacement> serving_placement(const ServeOptions& options) {
  if (options.cpu_auto) return auto_engine_placement(options.topology);
  const auto allowed = allowed_cpus();
  EnginePlacement placement;
  placement.serving_cpu = options.cpu.value_or(allowed.empty() ? 0 : allowed.back());
  auto near = saved_near_cpus(placement.serving_cpu, options.topology);
  if (!near) return std::unexpected(near.error());
  placement.near_cpus = std::move(*near);
  return placement;
}

Expected<ServePlan> plan_serve(const ServeOptions& options) {
  ServePlan plan;
  auto strategies = load_strategies(options);
  if (!strategies) return std::unexpected(strategies.error());
  plan.strategies = *strategies;
  if (auto placed = serving_placement(options); placed) {
    plan.cpu = placed->serving_cpu;
    plan.near_cpus = std::move(placed->near_cpus);
  } else {
    return std::unexpected(placed.error());
  }
  const bool sockets = !options.socket_path.empty() || !options.tcp_endpoint.empty();
  if (options.shm || (sockets && options.socket_series)) {
    auto series = load_main_series(options, plan.main_others);
    if (!series) return std::unexpected(series.error());
    plan.series = std::move(*series);
  }
  // Every --data file, named as `sweep --series` names them; the first is the main series.
  std::vector<std::string> paths;
  if (options.source.data_path) paths.push_back(*options.source.data_path);
  paths.insert(paths.end(), options.more_data.begin(), options.more_data.end());
  auto names = SeriesSet::make(paths, options.source.gbm, options.source.column);
  if (!names) return std::unexpected(names.error());
  if (sockets) {
    auto socket = socket_options_for(options, plan.cpu);
    if (!socket) return std::unexpected(socket.error());
    if (options.socket_series) socket->preloaded = plan.series;
    socket->strategies = *strategies;
    socket->max_combo_cost = options.max_frame_cost;
    if (options.max_frame_time.count() > 0) socket->max_combo_cost = socket_combo_bound(options, plan.series.get());
    plan.host.sockets = std::move(*socket);
  }
  if (options.shm) {
    auto shm = shm_config_for(options, plan, *names);
    if (!shm) return std::unexpected(shm.error());
    shm->strategies = *strategies;
    plan.host.shm = std::move(*shm);
  }
  return plan;
}

// "fast, slow": a strategy's parameter names.
std::string strategy_params(const Strategy& strategy) {
  std::string names;
  for (std::uint32_t k = 0; k < strategy.param_count(); ++k) names += fmt::format("{}{}", k == 0 ? "" : ", ", strategy.param_name(k));
  return names;
}

// The lines that say what serves where, once everything serves.
void log_serving(const ServeOptions& options, const ServePlan& plan, const EngineHost& host) {
  if (const ShmEngine* shm = host.shm()) {
    for (const std::string& warning : shm->warnings()) log(LogLevel::warn, "serve: {}", warning);
    const Segment& segment = shm->segment();
    const DataHeader& header = segment.header();
    std::uint32_t lanes_locked = 0;
    for (std::uint32_t i = 0; i < segment.lane_count(); ++i)
      // relaxed: the keeper wrote it before the engine served.
      lanes_locked += segment.lane_status(i).object_locked.load(std::memory_order_relaxed) != 0 ? 1 : 0;
    log(LogLevel::info, "serve: engine {} on {} ({} bytes of data, {}), {} lanes x {} slots; {}", segment.name(),
        segment.socket_path(), segment.size(), backing_name(segment.backing()), header.lane_count,
        header.ring_capacity, memory_lock_text(segment.locked(), segment.backing(), lanes_locked, segment.lane_count()));
    if (segment.peers().admits_others())
      log(LogLevel::info, "serve: engine {} admits {} (socket mode 0666, each connection checked by SO_PEERCRED); "
          "their clients set {}={}", segment.name(), segment.peers().describe(), kEngineUidVariable, ::geteuid());
    log(LogLevel::info, "serve: series {} ({} bars, checksum {:016x}), fee {}", plan.series->name,
        plan.series->close.size(), header.series_checksum, options.fee);
    for (std::uint32_t i = 1; i < segment.series_count(); ++i)
      log(LogLevel::info, "serve: series {} {} ({} bars, checksum {:016x})", i, header.series_table[i].name,
          header.series_table[i].bars, header.series_table[i].checksum);
    if (options.live)
      log(LogLevel::info, "serve: live: room for {} bars ({} to append), {} signal slots and up to {} subscriptions "
          "per lane; `ipcfloor feed --name {}` appends, `ipcfloor signals --name {}` subscribes",
          header.capacity_bars, header.capacity_bars - header.n_bars, header.signal_capacity,
          options.subscriptions_per_lane, segment.name(), segment.name());
    if (!shm->journal_path().empty())
      log(LogLevel::info, "serve: journal {}: replayed {} bars in {:.1f} ms (engine start {} on it); every APPEND is "
          "written there before it is answered (--fsync {})", shm->journal_path(), header.journal_replayed,
          static_cast<double>(shm->journal_replay_time().count()) / 1000.0, header.journal_starts,
          to_string(options.fsync));
    for (const Strategy& strategy : shm->strategies().all())
      if (strategy.index() != 0)
        log(LogLevel::info, "serve: strategy {} {} ({} parameters: {}{}) from {}", strategy.index(), strategy.name(),
            strategy.param_count(), strategy_params(strategy), strategy.live() ? "; streams signals" : "",
            options.strategies[strategy.index() - 1]);
    if (shm->max_frame_cost() != 0 && options.max_frame_time.count() > 0)
      log(LogLevel::info, "serve: one BACKTEST may cost at most {} units (--max-frame-ms {} at the {:.3g} units per us "
          "measured here, fixed from now on); costlier ones get too_costly", shm->max_frame_cost(),
          options.max_frame_time.count(), shm->measured_cost_per_us());
    else if (shm->max_frame_cost() != 0)
      log(LogLevel::info, "serve: one BACKTEST may cost at most {} units (--max-frame-cost); costlier ones get "
          "too_costly", shm->max_frame_cost());
    log(LogLevel::info, "serve: {} workers on {}; BACKTESTs under {} units are computed on the serving thread",
        shm->worker_cpus().size(), shm->worker_cpus().empty() ? "no cpu" : cpu_list(shm->worker_cpus()),
        options.inline_cost);
    const std::vector<int> near = near_cpus_of(header);
    log(LogLevel::info, "serve: serving thread on cpu {} in {} mode, nearest it for clients {}; pid {}; Ctrl-C stops",
        plan.cpu, to_string(options.wait), near.empty() ? "no other cpu" : cpu_list(near), getpid());
  }
  if (const SocketServer* sockets = host.sockets()) {
    const SocketServerOptions& socket = *plan.host.sockets;
    log(LogLevel::info,
        "serve: sockets: {}; {} thread(s) on {}, max frame {} bytes, frame timeout {} ms, fee {}; pid {}{}",
        sockets->describe(), socket.threads, cpu_list(socket.cpus), socket.max_frame_bytes,
        socket.stall_timeout.count(), options.fee, getpid(), host.shm() ? "" : "; no segment (--no-shm); Ctrl-C stops");
    if (socket.preloaded && !host.shm())
      log(LogLevel::info, "serve: sockets: series {} ({} bars, checksum {:016x}) for use_preloaded",
          socket.preloaded->name, socket.preloaded->close.size(), socket.preloaded->checksum);
    if (!socket.preloaded)
      log(LogLevel::info, "serve: sockets: no series of their own (give --data or --bars to hold one); clients ship "
          "theirs");
  }
}

// The host checks `ipcfloor doctor` makes, summed up in one line (the same checks, so the two
// agree).
void log_host_checks(const ServeOptions& options, const ServePlan& plan) {
  DoctorOptions doctor;
  doctor.cpu = plan.cpu;
  doctor.bars = plan.series->close.size();
  doctor.lanes = options.lanes;
  doctor.ring_capacity = plan.host.shm ? plan.host.shm->segment.ring_capacity : options.ring_capacity;
  doctor.bulk_bytes = options.bulk_bytes;
  doctor.socket_dir = options.socket_dir;
  doctor.sample_seconds = 0.05;
  log(LogLevel::info, "serve: host checks: {}; `ipcfloor doctor --cpu {}` explains and gives the fixes",
      summarize(run_host_checks(doctor)), plan.cpu);
}

// The `ready {...}` line's facts: the same keys whatever serves, null where a key does not apply
// (no segment with --no-shm, no sockets without --socket/--tcp, no capacity or published bars
// unless live, no journal without --journal).
nlohmann::json ready_facts(const ServeOptions& options, const ServePlan& plan, const EngineHost& host,
                           const MetricsServer* metrics) {
  nlohmann::json facts{{"pid", getpid()},   {"engine", nullptr},  {"socket", nullptr},   {"lanes", nullptr},
                       {"wait", nullptr},   {"cpu", nullptr},     {"workers", nullptr},  {"worker_cpus", nullptr},
                       {"bars", nullptr},   {"checksum", nullptr}, {"capacity", nullptr}, {"sockets", nullptr},
                       {"metrics", nullptr}, {"strategies", nullptr}, {"published", nullptr}, {"journal", nullptr}};
  if (plan.series) {
    facts["bars"] = plan.series->close.size();
    facts["checksum"] = fmt::format("{:016x}", plan.series->checksum);
  }
  if (const ShmEngine* shm = host.shm()) {
    facts["engine"] = shm->segment().name();
    facts["socket"] = shm->segment().socket_path();
    facts["lanes"] = shm->segment().lane_count();
    facts["wait"] = to_string(options.wait);
    facts["cpu"] = plan.cpu;
    facts["workers"] = shm->worker_cpus().size();
    facts["worker_cpus"] = shm->worker_cpus();
    if (options.live) {
      facts["capacity"] = shm->segment().header().capacity_bars;
      // relaxed: nothing appends before the ready line's clients attach; the preloaded and replayed bars.
      facts["published"] = shm->segment().header().bars_published.load(std::memory_order_relaxed);
    }
    if (!shm->journal_path().empty()) facts["journal"] = shm->journal_path();
  }
  if (const SocketServer* sockets = host.sockets()) facts["sockets"] = sockets->describe();
  if (metrics != nullptr) facts["metrics"] = metrics->url();
  // What the segment and the sockets both serve, by index.
  if (plan.strategies) {
    nlohmann::json strategies = nlohmann::json::array();
    for (const Strategy& strategy : plan.strategies->set().all()) strategies.push_back(std::string(strategy.name()));
    facts["strategies"] = std::move(strategies);
  }
  return facts;
}

// The descriptors the engine may need at once for its clients, which the metrics port must never
// take: per lane its lease, its lane object and the one that replaces it; the keeper's 64
// connections that hold no lane and its spare; the socket server's connections; and 64 for the
// segment, listeners, signalfd, log and the rest.
int engine_descriptors(const ServeOptions& options) {
  const bool sockets = !options.socket_path.empty() || !options.tcp_endpoint.empty();
  const std::size_t lanes = options.shm ? options.lanes : 0;
  return static_cast<int>(3 * lanes + 64 + 1 + (sockets ? options.max_connections : 0) + 64);
}

// Descriptors this process has open now.
std::size_t open_descriptors() {
  std::error_code ec;
  std::size_t count = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec))
    ++count;
  return count;
}

// `--metrics`: the exposition over HTTP on housekeeping threads, off the serving cpu. Null when
// not asked for. Its connections fit in what RLIMIT_NOFILE leaves beside the engine's own.
Expected<std::unique_ptr<MetricsServer>> start_metrics(const ServeOptions& options, int serving_cpu) {
  if (options.metrics.empty()) return std::unique_ptr<MetricsServer>();
  MetricsConfig config{options.metrics, options.name, options.socket_dir, allowed_cpus()};
  if (config.cpus.size() > 1) std::erase(config.cpus, serving_cpu);
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  config.limits.descriptor_reserve = engine_descriptors(options);
  // The port's own: its listener, the gate's eventfd and the workers' scrapes (an observer each).
  constexpr std::size_t kPortOwn = 8;
  const std::size_t room = MetricsGate::connections_within(files.rlim_cur, config.limits.descriptor_reserve,
                                                           open_descriptors() + kPortOwn, config.limits.max_connections);
  if (room < config.limits.workers)
    return fail(ErrorCode::resource, "--metrics {}: RLIMIT_NOFILE {} leaves no room for the metrics port beside the {} "
                "descriptors the engine keeps for its clients; raise it (ulimit -n, or LimitNOFILE= in the unit)",
                options.metrics, files.rlim_cur, config.limits.descriptor_reserve);
  config.limits.max_connections = room;
  return MetricsServer::start(config);
}

// The last lines: what each server served, and what it removed.
void log_stopped(const ServeOptions& options, const EngineHost& host, int signal_number) {
  const char* signal_name = signal_number == SIGINT ? "SIGINT" : signal_number == SIGTERM ? "SIGTERM" : "stop";
  const LogLevel level = options.quiet ? LogLevel::debug : LogLevel::info;
  if (const ShmEngine* shm = host.shm()) {
    const DataHeader& header = shm->segment().header();
    log(level, "serve: {} received; served {} requests ({} rejected); removed {}", signal_name,
        header.requests.load(std::memory_order_relaxed),    // relaxed: the writer has joined
        header.bad_frames.load(std::memory_order_relaxed),  // relaxed: as above
        shm->segment().socket_path());
  }
  if (const SocketServer* sockets = host.sockets())
    log(level, "serve: {}sockets: {}{}", host.shm() ? "" : fmt::format("{} received; ", signal_name),
        format_stats(sockets->stats()),
        sockets->unix_path().empty() ? "" : fmt::format("; removed {}", sockets->unix_path()));
}

}  // namespace

int run_serve(const ServeOptions& options) {
  // Before any thread exists (the log writer's included), so that SIGINT and SIGTERM reach the
  // keeper's signalfd only and the engine always stops cleanly.
  block_stop_signals();
  auto plan = plan_serve(options);
  if (!plan) return report_error(plan.error());
  if (options.live && plan->host.shm && plan->host.shm->segment.capacity_bars < plan->series->close.size())
    return usage_error("serve", fmt::format("--capacity {} is below the {} bars preloaded", options.capacity_bars,
                                            plan->series->close.size()));
  auto host = EngineHost::start(plan->host);
  if (!host) return report_error(host.error());
  // Once the name is ours (a name in use is refused first, with nothing said about cpus): the
  // other engines pinned to this serving cpu (its own thread is not counted).
  if (options.shm)
    if (const HostCheck shared = check_cpu_free(plan->cpu); shared.level != CheckLevel::ok)
      log(LogLevel::warn, "serve: {} (fix: {})", shared.finding, shared.fix);
  auto metrics = start_metrics(options, plan->cpu);
  if (!metrics) return report_error(metrics.error());
  log_serving(options, *plan, **host);
  if (*metrics) log(LogLevel::info, "serve: metrics on {}", (*metrics)->url());
  if (options.shm) log_host_checks(options, *plan);
  std::optional<PidFile> pidfile;
  if (!options.pidfile.empty()) {
    auto written = write_pidfile(options.pidfile);
    if (!written) return report_error(written.error());
    pidfile = std::move(*written);
  }
  print_ready_line(ready_facts(options, *plan, **host, metrics->get()));
  notify_systemd(fmt::format("READY=1\nMAINPID={}\nSTATUS=serving {}", getpid(),
                             (*host)->shm() ? (*host)->shm()->segment().name() : std::string("sockets")));

  // The keeper loop: engine work and signals (host/engine_host.hpp). Log lines go to a writer
  // thread of their own, so a stalled stderr cannot stop the heartbeat or the reaction to SIGTERM.
  EventLog events(options.quiet);
  const EngineEventSink sink = [&events](const EngineEvent& event) { events(event); };
  const int signal_number = (*host)->run(sink);
  notify_systemd("STOPPING=1");
  if (*metrics) (*metrics)->stop();
  (*host)->stop(sink);
  events.flush_suppressed();
  log_stopped(options, **host, signal_number);
  if (pidfile) remove_pidfile(*pidfile);
  return 0;
}

namespace {

// A Unix-domain socket path: not empty, and short enough for sockaddr_un (108 bytes with its NUL).
CLI::Validator unix_socket_path() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (!text.empty() && text.size() < 108) return {};
        return fmt::format("'{}' is not a Unix socket path of 1..107 bytes", text);
      },
      "a path of 1..107 bytes");
}

// --fsync every|interval:MS|none, as engine/bar_journal.hpp parses it.
CLI::Validator fsync_policy() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        auto parsed = parse_fsync_policy(text);
        return parsed ? std::string() : parsed.error().message;
      },
      "every|interval:MS|none");
}

// The engine itself: its name, series, geometry, serving thread and memory. Over 100 lines: one
// option declaration after another with its range and help, no logic; split by group (series,
// geometry, memory) when it grows again.
void add_engine_options(CLI::App& serve, ServeCli& cli) {
  ServeOptions& o = cli.options;
  serve.add_option("--name", o.name, "engine name: clients attach to it through the socket DIR/NAME")
      ->check(engine_name())
      ->capture_default_str();
  o.socket_dir = socket_dir_default();
  add_socket_dir_option(serve, o.socket_dir);
  serve.add_option("--allow-uid", cli.allow_uids,
                   "let this user's clients attach too (a name or a uid; repeatable): the engine's socket becomes "
                   "0666 and each connection is admitted by its SO_PEERCRED; clients set IPCFLOOR_ENGINE_UID to the "
                   "engine's user")
      ->type_name("USER")
      ->check(known_user())
      ->allow_extra_args(false);
  serve.add_option("--allow-group", cli.allow_groups,
                   "let the members of this group attach too (a name or a gid; repeatable; supplementary groups "
                   "count): as --allow-uid")
      ->type_name("GROUP")
      ->check(known_group())
      ->allow_extra_args(false);
  serve.add_option("--data", cli.data,
                   "close series: .csv with a close column, .f64 or .npy, or '-' for standard input (.npy or CSV); "
                   "repeat it to preload several (named after their files; a BACKTEST names one by index, the "
                   "first is 0)")
      ->check(file_path());
  add_column_option(serve, o.source.column);
  add_gbm_options(serve, o.source.gbm, &cli.gbm_given);
  serve.add_option_function<std::string>(
          "--cpu",
          [&o](const std::string& cpu) {
            o.cpu_auto = cpu == "auto";
            if (!o.cpu_auto) o.cpu = std::stoi(cpu);
          },
          "core for the serving thread, or auto: the one nearest a client cpu by the floor matrix (saved by "
          "`ipcfloor topology --save`, else measured at start), never cpu 0 (default: the last allowed core)")
      ->check(cpu_index_or("auto"));
  serve.add_option("--topology", o.topology,
                   "the saved floor matrix --cpu auto and the published near cpus go by (default: the one "
                   "`ipcfloor topology --save` wrote, if any)")
      ->check(file_path());
  serve.add_flag("--fifo", o.fifo, "run the serving thread under SCHED_FIFO (isolated cores only)");
  serve.add_option("--lanes", o.lanes, "client lanes")->check(in_range<std::uint32_t>(1, kMaxLanes))->capture_default_str();
  serve.add_option("--ring-capacity", o.ring_capacity,
                   "slots per ring (default: 8, or the power of two at or above twice the workers when that is more)")
      ->check(power_of_two(2, kMaxRingCapacity))
      ->each([&o](const std::string&) { o.ring_capacity_given = true; });
  serve.add_option("--bulk-bytes", o.bulk_bytes,
                   "bytes of each lane's bulk region for ECHO_BULK (rounded up to 4 KiB; 0 for none)")
      ->check(in_range<std::size_t>(0, kMaxBulkBytes))
      ->capture_default_str();
  serve.add_option("--fee", o.fee, "fee per round trip, percentage points")
      ->check(in_range(0.0, 100.0))
      ->capture_default_str();
  serve.add_option("--bars-per-year", o.bars_per_year,
                   "bars in a year, for the annualised statistics (sharpe, sortino, calmar) of requests that do "
                   "not say (252: daily bars; 98280: minute bars of a 6.5-hour session)")
      ->check(in_range(1e-9, kMaxBarsPerYear))
      ->capture_default_str();
  serve.add_option("--wait", cli.wait, "serving thread when idle")
      ->check(one_of({"spin", "backoff", "block"}))
      ->capture_default_str();
  serve.add_option("--hugepages", cli.hugepages, "2 MiB pages for the data object")
      ->check(one_of({"auto", "require", "off"}))
      ->capture_default_str();
  serve.add_option("--mlock", cli.mlock, "lock the engine's memory in RAM")
      ->check(one_of({"auto", "require", "off"}))
      ->capture_default_str();
  serve.add_option("--heartbeat-ms", cli.heartbeat_ms, "heartbeat and liveness-check interval")
      ->check(in_range(1u, 10'000u))
      ->capture_default_str();
  serve.add_option("--max-frame-cost", o.max_frame_cost,
                   "bound on one BACKTEST's work in units (about n_bars x the sum of its windows); 0: none")
      ->check(in_range<std::uint64_t>(0, std::uint64_t{1} << 62))
      ->capture_default_str();
  serve.add_option("--max-frame-ms", cli.max_frame_ms,
                   "opt-in instead of --max-frame-cost: a bound in ms, turned into units once at start by timing "
                   "this host's kernel (the verdicts then depend on the host); 0: not used")
      ->check(in_range(0u, 60'000u))
      ->capture_default_str();
  serve.add_option("--workers", cli.workers,
                   "compute workers, pinned one per cpu (default: every allowed cpu but the serving one; 0: the "
                   "serving thread computes everything)")
      ->check(in_range(0, static_cast<int>(kMaxWorkers)));
  serve.add_option("--worker-cpus", cli.worker_cpus, "the workers' cpus, a list such as 0-6,8 (default: see --workers)")
      ->check(cpu_list_spec());
  serve.add_option("--inline-cost", o.inline_cost,
                   "BACKTESTs, and live APPENDs' signal work, cheaper than this many units are computed on the "
                   "serving thread; dearer ones go to the workers")
      ->check(in_range<std::uint64_t>(0, std::uint64_t{1} << 62))
      ->capture_default_str();
  serve.add_option("--strategy", o.strategies,
                   "load a strategy from FILE.so (include/ipcfloor/strategy.h), served beside the built-in one; "
                   "repeat for several (up to 15). Refused unless only its owner or root may write it and its folders")
      ->check(file_path());
  serve.add_option("--pidfile", o.pidfile, "write the engine's pid here once it serves (removed at exit)")
      ->check(file_path());
  serve.add_option("--metrics", o.metrics,
                   "serve the Prometheus exposition (status --prometheus) over HTTP at HOST:PORT/metrics, on "
                   "housekeeping threads (host defaults to 127.0.0.1; port 0: a free one, named in the ready line)")
      ->check(tcp_endpoint());
  serve.add_option("--log-level", cli.log_level, "stderr's level (default info; warn with --quiet)")
      ->check(one_of({"debug", "info", "warn", "error", "off"}))
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  serve.add_flag("--quiet", o.quiet, "print only warnings and errors");
}

// Live mode: its room, its signal rings and its subscriptions.
void add_live_options(CLI::App& serve, ServeCli& cli) {
  ServeOptions& o = cli.options;
  const auto given = [&cli](const std::string&) { cli.live_options_given = true; };
  serve.add_flag("--live", o.live,
                 "live mode: clients append bars (ipcfloor feed) and subscribe combos to per-bar signals "
                 "(ipcfloor signals)");
  serve.add_option("--capacity", o.capacity_bars,
                   "live: room for this many bars in all, the preloaded ones included (default: preloaded + "
                   "1,000,000)")
      ->check(in_range<std::size_t>(2, 1'000'000'000))
      ->each(given);
  serve.add_option("--signal-capacity", o.signal_capacity,
                   "live: signal slots per lane; a subscriber this far behind loses frames, counted and flagged")
      ->check(power_of_two(2, kMaxRingCapacity))
      ->capture_default_str()
      ->each(given);
  serve.add_option("--subscriptions", o.subscriptions_per_lane, "live: combos one lane may subscribe")
      ->check(in_range<std::uint32_t>(1, kMaxSubscriptionsPerLane))
      ->capture_default_str()
      ->each(given);
  serve.add_option("--max-bar-cost", o.max_bar_cost,
                   "live: bound on one bar's work over every subscription, in units; 0: none")
      ->check(in_range<std::uint64_t>(0, std::uint64_t{1} << 62))
      ->capture_default_str()
      ->each(given);
  serve.add_option("--journal", o.journal_dir,
                   "live: write every appended bar to DIR/bars.journal before it is answered, and replay it at "
                   "start, so a restarted engine loses nothing (made mode 0700/0600 when missing)")
      ->check(file_path());
  serve.add_option("--fsync", cli.fsync,
                   "live --journal: when an APPEND's record counts as written, and so when it is answered: every "
                   "(after fdatasync; the default), interval:MS (after write(2), fdatasync every MS, 1..60000) or "
                   "none (after write(2))")
      ->check(fsync_policy());
}

// The socket baseline served beside (or instead of) the segment.
void add_socket_options(CLI::App& serve, ServeCli& cli) {
  ServeOptions& o = cli.options;
  serve.add_option("--socket", o.socket_path,
                   "also serve the socket protocol on this Unix-domain socket (mode 0600, own uid only)")
      ->check(unix_socket_path());
  serve.add_option("--tcp", o.tcp_endpoint, "also serve it on TCP HOST:PORT with TCP_NODELAY (host defaults to 127.0.0.1)")
      ->check(tcp_endpoint());
  serve.add_flag("--no-shm", cli.no_shm,
                 "serve the sockets only: no segment, no pinned spinning thread; the sockets hold a series "
                 "(use_preloaded) only when --data or --bars/--seed/... say which");
  serve.add_option("--socket-cpu", o.socket_cpu,
                   "core for the socket threads (default: every allowed core but the shm serving thread's; with "
                   "--no-shm, any)")
      ->check(cpu_index());
  serve.add_option("--socket-threads", o.socket_threads, "socket server threads")
      ->check(in_range(1u, kMaxSocketThreads))
      ->capture_default_str();
  serve.add_option("--sweep-threads", o.sweep_threads, "workers for one socket sweep of many combos")
      ->check(in_range(1u, kMaxSocketThreads))
      ->capture_default_str();
  serve.add_option("--max-frame", o.max_frame_bytes, "largest socket request body, bytes")
      ->check(in_range(kMinMaxFrameBytes, kMaxMaxFrameBytes))
      ->capture_default_str();
  serve.add_option("--frame-timeout-ms", cli.frame_timeout_ms,
                   "a socket frame must arrive, and a reply be read, within this long")
      ->check(in_range(1u, 3'600'000u))
      ->capture_default_str();
  serve.add_option("--max-connections", o.max_connections, "socket connections served at once")
      ->check(in_range<std::size_t>(1, 65'536))
      ->capture_default_str();
  serve.add_option("--owner-reserve", o.owner_reserve,
                   "of --max-connections, slots only Unix-socket peers of the server's own uid may take (TCP "
                   "peers, any local user, never get them; at most --max-connections - 1)")
      ->check(in_range<std::size_t>(0, 65'535))
      ->capture_default_str()
      ->each([&cli](const std::string&) { cli.owner_reserve_given = true; });
  serve.add_option("--max-per-peer", o.max_per_peer,
                   "of --max-connections, connections one TCP address (or, with --socket-any-uid, one other uid) may "
                   "hold")
      ->check(in_range<std::size_t>(1, 65'536))
      ->capture_default_str();
  serve.add_option("--min-frame-rate", o.min_frame_rate,
                   "bytes a second a socket frame must average once it has been arriving for 200 ms, or it is "
                   "dropped as stalled (0: no floor)")
      ->check(in_range<std::uint64_t>(0, kMaxMinFrameRate))
      ->capture_default_str();
  serve.add_option("--idle-timeout-s", cli.idle_timeout_s,
                   "close a socket connection that sends no request for this long (0: never)")
      ->check(in_range(0u, 604'800u))
      ->capture_default_str();
  serve.add_option("--max-loaded-mb", cli.max_loaded_mb,
                   "MiB of series all socket connections together may hold through load (opcode 2)")
      ->check(in_range<std::uint64_t>(0, std::uint64_t{1} << 20))
      ->capture_default_str();
  serve.add_flag("--socket-any-uid", o.socket_any_uid, "let any uid use the Unix socket (mode 0666, no SO_PEERCRED check)");
}

// The rules between options that CLI11 cannot check one option at a time. Empty when they hold.
std::string conflicting_options(const ServeCli& cli) {
  const ServeOptions& o = cli.options;
  const bool sockets = !o.socket_path.empty() || !o.tcp_endpoint.empty();
  if (cli.no_shm && !sockets) return "--no-shm leaves nothing to serve: add --socket PATH and/or --tcp HOST:PORT";
  if (cli.no_shm && o.live) return "--live needs the segment: drop --no-shm";
  if (cli.no_shm && !o.metrics.empty()) return "--metrics serves the segment's figures: drop --no-shm";
  if (cli.no_shm && cli.data.size() > 1)
    return "several --data series need the segment: the socket server holds one (drop --no-shm)";
  if (!o.live && cli.live_options_given) return "--capacity, --signal-capacity and --subscriptions need --live";
  if (!o.live && !o.journal_dir.empty()) return "--journal keeps appended bars: it needs --live";
  if (o.journal_dir.empty() && !cli.fsync.empty()) return "--fsync says how --journal writes: it needs --journal DIR";
  if (cli.owner_reserve_given && o.owner_reserve >= o.max_connections)
    return fmt::format("--owner-reserve {} must be below --max-connections {} (TCP peers need a slot too)",
                       o.owner_reserve, o.max_connections);
  if (std::count(cli.data.begin(), cli.data.end(), "-") > 1) return "--data - (standard input) may be given once";
  return {};
}

}  // namespace

CLI::App* add_serve_subcommand(CLI::App& app, ServeCli& cli) {
  auto* serve = app.add_subcommand("serve", "Preload the series into a shared-memory segment and serve combos");
  add_engine_options(*serve, cli);
  add_live_options(*serve, cli);
  add_socket_options(*serve, cli);
  return serve;
}

int run_serve_command(ServeCli& cli) {
  if (const std::string conflict = conflicting_options(cli); !conflict.empty()) return usage_error("serve", conflict);
  ServeOptions& options = cli.options;
  if (!cli.data.empty()) {
    options.source.data_path = cli.data.front();
    options.more_data.assign(cli.data.begin() + 1, cli.data.end());
  }
  options.heartbeat = std::chrono::milliseconds(cli.heartbeat_ms);
  // The spellings were checked by the options' validators; these cannot fail.
  options.wait = parse_wait_mode(cli.wait).value_or(WaitMode::spin);
  options.hugepages = parse_hugepages_mode(cli.hugepages).value_or(HugePagesMode::automatic);
  options.mlock = parse_mlock_mode(cli.mlock).value_or(MlockMode::automatic);
  options.shm = !cli.no_shm;
  options.socket_series = options.shm || !cli.data.empty() || cli.gbm_given;
  options.frame_timeout = std::chrono::milliseconds(cli.frame_timeout_ms);
  options.max_frame_time = std::chrono::milliseconds(cli.max_frame_ms);
  // The spelling was checked by its validator; this cannot fail.
  if (!cli.fsync.empty()) options.fsync = parse_fsync_policy(cli.fsync).value_or(JournalSync{});
  if (cli.workers >= 0) options.workers = static_cast<std::uint32_t>(cli.workers);
  if (!cli.worker_cpus.empty()) {
    options.worker_cpus = parse_cpu_list(cli.worker_cpus);
    if (options.worker_cpus.empty())
      return usage_error("serve", fmt::format("--worker-cpus '{}' is not a cpu list such as 0-6,8", cli.worker_cpus));
  }
  options.idle_timeout = std::chrono::milliseconds(std::uint64_t{cli.idle_timeout_s} * 1000);
  options.max_loaded_bytes = cli.max_loaded_mb << 20;
  if (cli.options.socket_any_uid && !(cli.allow_uids.empty() && cli.allow_groups.empty()))
    return usage_error("serve", "--socket-any-uid already lets every user in: drop --allow-uid and --allow-group");
  auto peers = PeerPolicy::make(cli.allow_uids, cli.allow_groups);
  if (!peers) return usage_error("serve", peers.error().message);
  options.peers = std::move(*peers);
  auto level = parse_log_level(cli.log_level.empty() ? (options.quiet ? "warn" : "info") : cli.log_level);
  log_configure(level.value_or(LogLevel::info));
  const int code = run_serve(options);
  // The last lines get one heartbeat to reach stderr: plenty for any sink that is read, and a
  // sink nobody reads cannot hold the exit longer (SIGTERM ends the engine within one bounded
  // frame plus one heartbeat).
  log_shutdown(static_cast<unsigned>(std::max<std::int64_t>(1, options.heartbeat.count())));
  return code;
}

}  // namespace ipcfloor
