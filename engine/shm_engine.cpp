#include "engine/shm_engine.hpp"

#include <pthread.h>
#include <sys/prctl.h>
#include <sys/stat.h>
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
#include "common/checksum.hpp"
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

// How soon service() runs again while a lane waits for its fresh object.
constexpr std::chrono::milliseconds kReplaceRetry{1};

// Live mode's subscription book (engine/live_book.hpp), which LiveBook::make allocates whole at
// start: every lane's subscription slots and history arena. Nothing when not live.
std::vector<MemoryNeed> live_book_needs(const ShmEngineConfig& config) {
  std::vector<MemoryNeed> needs;
  if (!config.segment.live) return needs;
  const std::uint64_t lanes = config.segment.lanes;
  const std::uint64_t per_lane = std::uint64_t{config.subscriptions_per_lane} * 64 + LiveBookLimits{}.arena_bytes_per_lane;
  needs.push_back({fmt::format("the live subscription book ({} lanes of {} subscriptions)", lanes,
                               config.subscriptions_per_lane),
                   lanes * per_lane, fmt::format("--subscriptions {} or --lanes {}", config.subscriptions_per_lane, lanes)});
  return needs;
}

// The kernel workspaces, which ShmServer::make and WorkerPool::make allocate whole at start: the
// serving thread's and one per worker, each for the longest series a BACKTEST may run on (live:
// every bar of --capacity).
MemoryNeed workspace_need(const ShmEngineConfig& config, const StrategySet& strategies) {
  const SegmentConfig& segment = config.segment;
  std::size_t longest = segment.live ? std::max(segment.capacity_bars, segment.series.size()) : segment.series.size();
  for (const SegmentConfig::NamedSeries& more : segment.more_series) longest = std::max(longest, more.bars.size());
  const std::size_t count = 1 + config.worker_cpus.size();
  const std::string length = segment.live && segment.capacity_bars > segment.series.size()
                                 ? fmt::format("--capacity {}", segment.capacity_bars)
                                 : fmt::format("the series ({} bars; --bars or --data)", longest);
  return {fmt::format("{} kernel workspace{} of {} bars (the serving thread's and one per worker)", count,
                      count == 1 ? "" : "s", longest),
          count * strategies.workspace_bytes(longest),
          count > 1 ? fmt::format("{} or --workers {}", length, count - 1) : length};
}

// What replaying a journal allocates before its bars are copied into the segment: 8 bytes per bar
// it may hold (bounded by the room --capacity leaves and by its file's records). Nothing without
// a journal, or while none exists yet.
std::vector<MemoryNeed> journal_needs(const ShmEngineConfig& config) {
  std::vector<MemoryNeed> needs;
  if (!config.journal || !config.segment.live) return needs;
  struct stat info {};
  const std::string path = config.journal->dir + "/" + kJournalFileName;
  if (::lstat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode) || info.st_size < static_cast<off_t>(kJournalHeaderBytes))
    return needs;
  const std::uint64_t records = (static_cast<std::uint64_t>(info.st_size) - kJournalHeaderBytes) / kJournalRecordBytes;
  const std::uint64_t room = config.segment.capacity_bars > config.segment.series.size()
                                 ? config.segment.capacity_bars - config.segment.series.size()
                                 : 0;
  needs.push_back({fmt::format("the journal's bars, read before they are replayed ({})", path),
                   std::min(records, room) * sizeof(double), fmt::format("--journal {}", config.journal->dir)});
  return needs;
}

// Opens the journal for the main series the segment will hold, and reads its bars. Setup path.
Expected<BarJournal> open_journal(const ShmEngineConfig& config) {
  const SegmentConfig& segment = config.segment;
  BarJournal::Options options;
  options.dir = config.journal->dir;
  options.base = {segment.series.size(), fnv1a64(std::as_bytes(segment.series.close)), segment.series_key,
                  segment.series_name};
  options.room = segment.capacity_bars > segment.series.size() ? segment.capacity_bars - segment.series.size() : 0;
  return BarJournal::open(options);
}

// The journal's facts for the segment header's journal line.
SegmentConfig::JournalFacts journal_facts(const BarJournal& journal, const JournalSync& sync) {
  SegmentConfig::JournalFacts facts;
  facts.path = journal.path();
  facts.fsync = static_cast<std::uint32_t>(sync.policy);
  facts.interval_ms = static_cast<std::uint64_t>(sync.interval.count());
  facts.records = journal.contents().closes.size();
  facts.bytes = journal.bytes();
  facts.torn_bytes = journal.contents().torn_bytes;
  facts.starts = journal.contents().start_records + 1;  // this start, recorded once it serves
  return facts;
}

// The strategy table clients read from the segment header: each strategy's name, parameter
// names, an example combo and whether it has a live step, in index order.
std::vector<StrategyEntry> strategy_entries(const StrategyCatalog& catalog) {
  std::vector<StrategyEntry> entries;
  for (const Strategy& strategy : catalog.set().all()) {
    StrategyEntry entry{};
    const auto copy = [](char (&to)[kStrategyNameBytes], std::string_view from) {
      from.copy(to, kStrategyNameBytes - 1);
    };
    copy(entry.name, strategy.name());
    for (std::uint32_t k = 0; k < strategy.param_count(); ++k) copy(entry.param_names[k], strategy.param_name(k));
    for (int k = 0; k < 2; ++k) copy(entry.value_names[k], strategy.value_name(k));
    const Combo example = strategy.example();
    std::memcpy(entry.example, &example, sizeof entry.example);
    entry.param_count = strategy.param_count();
    entry.live = strategy.live() ? 1 : 0;
    entry.required_columns = strategy.required_columns();
    entry.abi_version = strategy.abi_version();
    const Sha256& digest = catalog.digest(strategy.index());
    std::copy(digest.begin(), digest.end(), entry.sha256);
    entries.push_back(entry);
  }
  return entries;
}

// A strategy timed at load far slower than its cost says runs at a worker only: without workers
// it would have nowhere to run but the serving thread.
Expected<void> check_workers_for(const StrategySet& strategies, const ShmEngineConfig& config) {
  if (!config.worker_cpus.empty()) return {};
  for (const Strategy& strategy : strategies.all())
    if (strategy.workers_only())
      return fail(ErrorCode::strategy,
                  "strategy {}: at load its run() took {:.0f} times the built-in's time per work unit its cost() "
                  "counts, so it runs at a worker only, and --workers 0 leaves none: give it workers, or fix its "
                  "cost()", strategy.name(), strategy.timing().slowdown);
  return {};
}

// Which strategies run at a worker only, and how much slower per unit than the built-in each one
// measured at load: for status.
void record_strategy_timing(DataHeader& header, const StrategySet& strategies) {
  std::uint32_t at_workers = 0;
  for (const Strategy& strategy : strategies.all()) {
    if (strategy.workers_only()) at_workers |= std::uint32_t{1} << strategy.index();
    header.strategy_slowdown[strategy.index()] =
        static_cast<std::uint32_t>(std::min(strategy.timing().slowdown + 0.5, 4e9));
  }
  // relaxed: for people; written before any client can have attached.
  header.strategies_at_workers.store(at_workers, std::memory_order_relaxed);
}

}  // namespace

ShmEngine::ShmEngine(Segment segment, WaitMode wait, int cpu)
    : segment_(std::move(segment)), wait_(wait), cpu_(cpu), lanes_(segment_, wait, events_) {}

// Over 100 lines since the journal and the series' columns joined it: the start's steps in their
// required order (segment, strategies, journal replay, workers, serving thread), each a few lines;
// not yet split into one function per step.
Expected<std::unique_ptr<ShmEngine>> ShmEngine::start(ShmEngineConfig config) {
  // Not dumpable: another process of the same user can then neither ptrace the engine nor open
  // its descriptors through /proc/PID/fd, which would hand it every lane object. Only root can.
  (void)::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  // Everything the engine will allocate, checked against what the host can back before any of it
  // exists: the segment's objects, the kernel workspaces and, live, the subscription book.
  if (!config.strategies) config.strategies = std::make_shared<const StrategyCatalog>();
  const StrategySet& strategies = config.strategies->set();
  if (auto placed = check_workers_for(strategies, config); !placed) return std::unexpected(placed.error());
  if (config.journal && !config.segment.live)
    return fail(ErrorCode::invalid_argument, "a journal holds appended bars: it needs a live engine (--live)");
  std::vector<MemoryNeed> needs = live_book_needs(config);
  needs.push_back(workspace_need(config, strategies));
  for (MemoryNeed& need : journal_needs(config)) needs.push_back(std::move(need));
  if (auto fits = Segment::check_memory(config.segment, needs); !fits) return std::unexpected(fits.error());
  double rate = 0.0;
  std::uint64_t max_cost = config.max_frame_cost;
  if (config.max_frame_time.count() > 0) {
    // The opt-in time bound: this host's kernel speed, measured once, fixes the units for good.
    rate = measure_cost_rate(config.segment.series.close);
    max_cost = max_cost_for(rate, config.max_frame_time);
  }
  config.segment.wait_mode = static_cast<std::uint32_t>(config.wait);
  config.segment.strategies = strategy_entries(*config.strategies);
  config.segment.serving_cpu = config.cpu;
  config.segment.near_cpus = config.near_cpus.empty() ? near_cpus(read_topology(""), nullptr, config.cpu) : config.near_cpus;
  config.segment.max_frame_cost = max_cost;
  // The journal first: its bars go into the segment after the preloaded ones, published with them.
  std::optional<BarJournal> journal;
  const auto read_start = std::chrono::steady_clock::now();
  if (config.journal) {
    auto opened = open_journal(config);
    if (!opened) return std::unexpected(opened.error());
    journal.emplace(std::move(*opened));
    config.segment.replayed = journal->contents().closes;
    config.segment.journal = journal_facts(*journal, config.journal->sync);
  }
  const auto replay_time =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - read_start);
  auto segment = Segment::create(config.segment);
  if (!segment) return std::unexpected(segment.error());
  std::unique_ptr<ShmEngine> engine(new ShmEngine(std::move(*segment), config.wait, config.cpu));
  ShmEngine& e = *engine;
  e.warnings_ = e.segment_.warnings();
  e.strategies_ = config.strategies;
  e.max_frame_cost_ = max_cost;
  e.cost_per_us_ = rate;

  auto handoff = HandoffServer::make(e.segment_, e.lanes_, e.events_);
  if (!handoff) return std::unexpected(handoff.error());
  e.handoff_.emplace(std::move(*handoff));
  if (auto lanes = e.lanes_.make_objects(e.warnings_); !lanes) return std::unexpected(lanes.error());

  const TscClock clock = TscClock::calibrate(20);
  e.ns_per_tick_ = clock.ns_per_tick();
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
  auto server = ShmServer::make(e.segment_, e.lanes_.lanes(), strategies, e.telemetry_, server_config);
  if (!server) return std::unexpected(server.error());
  e.server_ = std::move(*server);
  record_strategy_timing(e.segment_.header(), strategies);
  if (auto workers = e.start_workers(config); !workers) return std::unexpected(workers.error());
  if (journal) {
    for (const std::string& note : journal->notes()) e.warnings_.push_back(note);
    e.replay_time_ = replay_time;
    if (auto started = e.start_journal(std::move(*journal), config); !started) return std::unexpected(started.error());
  }

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
  WorkerPoolConfig pool_config;
  pool_config.cpus = worker_cpus_;
  pool_config.wait = config.wait;
  pool_config.workspace_bytes = server_->workspace_bytes();
  // A TRADES page a worker computes holds what the serving thread's would: a lane's bulk region.
  pool_config.trade_page_trades = header.lane_bulk_bytes / sizeof(ipcfloor_trade);
  pool_config.ns_per_tick = ns_per_tick_;
  pool_config.engine_word = &lanes_.lanes().keeper_word;
  pool_config.stall_worker_for_test = config.stall_worker_for_test;
  auto pool = WorkerPool::make(pool_config);
  if (!pool) return std::unexpected(pool.error());
  pool_ = std::move(*pool);
  server_->attach_workers(pool_.get());
  return {};
}

Expected<void> ShmEngine::start_journal(BarJournal journal, const ShmEngineConfig& config) {
  journal.forget_closes();  // they are in the segment now
  if (auto recorded = journal.record_start(); !recorded) return std::unexpected(recorded.error());
  journal_path_ = journal.path();
  JournalWriterConfig writer;
  writer.sync = config.journal->sync;
  writer.wait = config.wait;
  writer.engine_word = &lanes_.lanes().keeper_word;
  for (const int cpu : allowed_cpus())
    if (cpu != config.cpu) writer.cpus.push_back(cpu);  // never on the serving core
  auto started = JournalWriter::start(std::move(journal), writer, segment_.header());
  if (!started) return std::unexpected(started.error());
  journal_ = std::move(*started);
  server_->attach_journal(journal_.get());
  return {};
}

void ShmEngine::watch_workers() noexcept {
  if (!pool_) return;
  const std::uint32_t stalled = pool_->health(TscClock::now());
  if (stalled > workers_stalled_)
    events_.note({EngineEvent::Kind::warning, 0, 0, 0, 0,
          fmt::format("{} of {} workers have held a job far past its cost's limit (the host does not run them): "
                      "their backtests are computed elsewhere (on another worker, else the serving thread), a live "
                      "bar's share waits for its worker, and they get no more work until they run again",
                      stalled, pool_->size())});
  workers_stalled_ = stalled;
  DataHeader& header = segment_.header();
  // relaxed: for people.
  header.workers_stalled.store(stalled, std::memory_order_relaxed);
  header.worker_jobs.store(pool_->jobs_done(), std::memory_order_relaxed);
}

ShmEngine::~ShmEngine() {
  stop();
  if (handoff_) handoff_->close_all();  // clients see their connection end: the engine is gone
  if (pool_ && pool_->left_behind() != 0) {
    // A stuck worker may still run its job: it reads the server (its runner's context) and the
    // series. Both stay, never freed, until the process exits; lane objects it never reads.
    (void)server_.release();
    segment_.keep_data_mapped();
    (void)new std::shared_ptr<const StrategyCatalog>(strategies_);  // its code and tables stay too
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

std::chrono::milliseconds ShmEngine::service_timeout() const noexcept {
  const auto now = std::chrono::steady_clock::now();
  auto until = std::min(next_beat_, handoff_->next_deadline());
  if (lanes_.replacing()) until = std::min(until, now + kReplaceRetry);
  if (until <= now) return std::chrono::milliseconds(0);
  return std::chrono::ceil<std::chrono::milliseconds>(until - now);
}

void ShmEngine::service() noexcept {
  handoff_->service();
  lanes_.replace_drained();
  const auto now = std::chrono::steady_clock::now();
  if (now >= next_beat_) {
    // relaxed: a timestamp whose age clients compare; nothing is published through it.
    segment_.header().heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
    next_beat_ = now + std::chrono::nanoseconds(segment_.header().heartbeat_interval_ns);
    watch_workers();
    watch_serving();
  }
}

void ShmEngine::watch_serving() noexcept {
  const ServingWatch& watch = server_->watch();
  // acquire: pairs with the serving thread's release store of `since` (ShmServer::answer).
  const std::uint64_t since = watch.since.load(std::memory_order_acquire);
  const std::uint64_t now = TscClock::now();
  // relaxed: published by the acquire load above.
  const std::uint64_t cost = watch.cost.load(std::memory_order_relaxed);
  const std::uint32_t strategy = watch.strategy.load(std::memory_order_relaxed);
  const double in_ns = since != 0 && now > since ? static_cast<double>(now - since) * ns_per_tick_ : 0.0;
  const bool stuck = in_ns > static_cast<double>(serving_stall_limit_ns(cost));
  DataHeader& header = segment_.header();
  // relaxed (all): for people.
  if (stuck && since != serving_stuck_since_) {
    serving_stuck_since_ = since;
    relaxed_increment(header.serving_stalls);
    const Strategy* held = strategies_->set().at(strategy);
    events_.note({EngineEvent::Kind::warning, 0, 0, 0, 0,
                  fmt::format("the serving thread has been inside one BACKTEST of strategy {} for {:.0f} ms, past "
                              "the {:.0f} ms its cost of {} units allows: every client waits meanwhile (a strategy "
                              "whose cost() understates its run() holds the engine)",
                              held != nullptr ? held->name() : std::string_view("?"), in_ns / 1e6,
                              static_cast<double>(serving_stall_limit_ns(cost)) / 1e6, cost)});
  }
  header.serving_stuck_strategy.store(stuck ? strategy : 0, std::memory_order_relaxed);
  header.serving_stuck_ns.store(stuck ? static_cast<std::uint64_t>(in_ns) : 0, std::memory_order_relaxed);
}

void ShmEngine::stop() noexcept {
  if (stopping_) return;
  stopping_ = true;
  if (handoff_) handoff_->set_stopping();
  segment_.mark_stopping();
  stop_.store(true, std::memory_order_relaxed);  // relaxed: a plain flag; join() orders the rest
  if (wait_ == WaitMode::block) wake_serving_thread(lanes_.lanes().keeper_word);
  if (serving_.joinable()) serving_.join();
  // After the serving thread: nothing hands the journal a record any more; what it was handed is
  // written and synced (an APPEND in flight now is never answered, but its bar is replayed at the
  // next start, as after a crash).
  if (journal_) journal_->stop();
  // After the serving thread: nothing hands out work any more; each worker ends its combo.
  if (pool_) pool_->stop();
}

}  // namespace ipcfloor
