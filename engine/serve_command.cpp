#include "engine/serve_command.hpp"

#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cerrno>
#include <thread>

#include <fmt/format.h>

#include "engine/affinity.hpp"
#include "engine/shm_server.hpp"
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
  for (std::uint32_t i = 0; i < header.lane_count; ++i) {
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

}  // namespace

int run_serve(const ServeOptions& options) {
  auto series = load_series_source(options.source);
  if (!series) return report_error(series.error());
  if (!std::isfinite(options.fee))
    return report_error(Error{ErrorCode::invalid_argument, fmt::format("fee {} is not a finite number", options.fee)});
  if (options.heartbeat.count() < 1 || options.heartbeat.count() > 10'000)
    return report_error(Error{ErrorCode::invalid_argument,
                              fmt::format("heartbeat {} ms is outside 1..10000", options.heartbeat.count())});

  const auto allowed = allowed_cpus();
  const int cpu = options.cpu.value_or(allowed.empty() ? 0 : allowed.back());

  // Signals go to the reporter (this thread) only: block them before any thread exists.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  SegmentConfig config;
  config.name = options.name;
  config.lanes = options.lanes;
  config.ring_capacity = options.ring_capacity;
  config.hugepages = options.hugepages;
  config.mlock = options.mlock;
  config.series = series->close;
  config.series_name = series->description;
  config.fee = options.fee;
  config.wait_mode = static_cast<std::uint32_t>(options.wait);
  config.heartbeat_interval_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(options.heartbeat).count());
  config.tmpfs_dir = options.tmpfs_dir;
  auto segment = Segment::create(config);
  if (!segment) return report_error(segment.error());
  for (const std::string& warning : segment->warnings()) fmt::print(stderr, "ipcfloor serve: warning: {}\n", warning);

  TelemetryQueue telemetry(kTelemetryQueueCapacity);
  auto server = ShmServer::make(*segment, options.wait, telemetry);
  if (!server) return report_error(server.error());

  // The serving thread pins itself before its first poll; setup results come back through
  // these, published by the release store of `started`.
  std::atomic<bool> stop{false};
  std::atomic<int> started{0};  // 0 pending, 1 serving, -1 failed to pin
  Error setup_error{ErrorCode::io, ""};
  std::string fifo_warning;
  std::thread serving([&] {
    pthread_setname_np(pthread_self(), "ipcf-serve");  // benchmarks find the serving thread by name
    if (auto pinned = pin_current_thread(cpu); !pinned) {
      setup_error = pinned.error();
      started.store(-1, std::memory_order_release);  // release: publishes setup_error; pairs with acquire below
      return;
    }
    if (options.fifo)
      if (auto fifo = set_fifo_priority(options.fifo_priority); !fifo) fifo_warning = fifo.error().message;
    started.store(1, std::memory_order_release);  // release: publishes fifo_warning; pairs with acquire below
    (*server)->run(stop);
  });
  // acquire: pairs with the serving thread's release store of `started`.
  while (started.load(std::memory_order_acquire) == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
  if (started.load(std::memory_order_acquire) < 0) {  // acquire: as above
    serving.join();
    return report_error(setup_error);
  }
  if (!fifo_warning.empty()) fmt::print(stderr, "ipcfloor serve: warning: {}\n", fifo_warning);
  if (!cpu_isolated(cpu))
    fmt::print(stderr,
               "ipcfloor serve: warning: cpu {} is not isolated (isolcpus/nohz_full); other tasks may "
               "preempt the serving thread and widen the tail\n",
               cpu);

  SegmentHeader& header = segment->header();
  if (!options.quiet) {
    fmt::print(stderr,
               "ipcfloor serve: segment {} at {} ({} bytes, {}, {}), {} lanes x {} slots\n"
               "ipcfloor serve: series {} ({} bars, checksum {:016x}), fee {}\n"
               "ipcfloor serve: serving thread on cpu {} in {} mode; pid {}; Ctrl-C stops\n",
               segment->name(), segment->path(), segment->size(), backing_name(segment->backing()),
               segment->locked() ? "locked in RAM" : "NOT locked", header.lane_count, header.ring_capacity,
               series->description, series->close.size(), header.series_checksum, options.fee, cpu,
               to_string(options.wait), header.engine_pid);
  }

  const timespec tick{0, static_cast<long>(config.heartbeat_interval_ns)};
  int signal_number = 0;
  while (true) {
    // relaxed: a timestamp whose age clients compare; nothing is published through it.
    header.heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
    reclaim_dead_lanes(*segment);
    TelemetryEvent event{};
    while (telemetry.try_dequeue(event))
      if (!options.quiet || event.kind != TelemetryEvent::Kind::lane_released) print_event(event);
    signal_number = sigtimedwait(&stop_signals, nullptr, &tick);
    if (signal_number > 0) break;
  }

  segment->mark_stopping();
  stop.store(true, std::memory_order_relaxed);  // relaxed: a plain flag; join() orders the rest
  if (options.wait == WaitMode::block) detail::notify_channel({header.doorbell, header.engine_sleeping});
  serving.join();
  TelemetryEvent event{};
  while (telemetry.try_dequeue(event))
    if (!options.quiet || event.kind != TelemetryEvent::Kind::lane_released) print_event(event);
  if (!options.quiet)
    fmt::print(stderr, "ipcfloor serve: {} received; served {} requests ({} rejected); removed {}\n",
               signal_number == SIGINT ? "SIGINT" : "SIGTERM",
               header.requests.load(std::memory_order_relaxed),     // relaxed: the writer has joined
               header.bad_frames.load(std::memory_order_relaxed),   // relaxed: as above
               segment->path());
  return 0;
}

}  // namespace ipcfloor
