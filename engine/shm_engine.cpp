#include "engine/shm_engine.hpp"

#include <pthread.h>

#include <chrono>
#include <utility>

#include <fmt/format.h>

#include "common/affinity.hpp"
#include "shm/lane.hpp"
#include "shm/liveness.hpp"

namespace ipcfloor {

ShmEngine::ShmEngine(Segment segment, WaitMode wait, int cpu)
    : segment_(std::move(segment)), wait_(wait), cpu_(cpu) {}

Expected<std::unique_ptr<ShmEngine>> ShmEngine::start(ShmEngineConfig config) {
  config.segment.wait_mode = static_cast<std::uint32_t>(config.wait);
  auto segment = Segment::create(config.segment);
  if (!segment) return std::unexpected(segment.error());
  std::unique_ptr<ShmEngine> engine(new ShmEngine(std::move(*segment), config.wait, config.cpu));
  engine->warnings_ = engine->segment_.warnings();
  auto server = ShmServer::make(engine->segment_, config.wait, engine->telemetry_);
  if (!server) return std::unexpected(server.error());
  engine->server_ = std::move(*server);

  // The serving thread pins itself before its first poll; setup results come back through
  // these, published by the release store of `started`.
  std::atomic<int> started{0};  // 0 pending, 1 serving, -1 failed to pin
  Error setup_error{ErrorCode::io, ""};
  std::string fifo_warning;
  ShmEngine& e = *engine;
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
  return engine;
}

ShmEngine::~ShmEngine() { stop(); }

void ShmEngine::beat() noexcept {
  SegmentHeader& header = segment_.header();
  // relaxed: a timestamp whose age clients compare; nothing is published through it.
  header.heartbeat_ns.store(monotonic_ns(), std::memory_order_relaxed);
  bool reclaimed = false;
  // The validated lane count, never the header's: a peer can rewrite shared memory.
  for (std::uint32_t i = 0; i < segment_.lane_count(); ++i) reclaimed |= reclaim_if_owner_dead(*segment_.lane(i).control);
  if (reclaimed && wait_ == WaitMode::block) ring_engine_doorbell(header);
}

void ShmEngine::stop() noexcept {
  if (!serving_.joinable()) return;
  segment_.mark_stopping();
  stop_.store(true, std::memory_order_relaxed);  // relaxed: a plain flag; join() orders the rest
  if (wait_ == WaitMode::block) ring_engine_doorbell(segment_.header());
  serving_.join();
}

}  // namespace ipcfloor
