// The engine's compute workers (engine/worker_pool.hpp) and the serving loop around them
// (engine/shm_server.hpp): the pool on its own (one job, a stress stream, the queues wrapping, a
// stalled worker), and the engine with 0, 1 and 3 workers: parity with the in-process sweep, the
// order of each lane's answers, two clients at once, a lane that floods the engine, a client
// killed while its combos are at the workers, shutdown with work queued, a new client attaching
// while another streams, the default bound admitting the default grid, and live bars whose
// signal work goes to the workers in shares.
//
// Timing bounds here are derived from one combo's measured compute on this host (a verdict of the
// engine never depends on timing; these bounds check how long a client waits).

#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <span>
#include <thread>
#include <vector>

#include "bench/engine_child.hpp"
#include "bench/thread_probe.hpp"
#include "clients/pipelined_sweep.hpp"
#include "clients/shm_client.hpp"
#include "common/affinity.hpp"
#include "common/tsc_clock.hpp"
#include "data/gbm.hpp"
#include "data/grid.hpp"
#include "engine/dispatch.hpp"
#include "engine/shm_engine.hpp"
#include "engine/worker_pool.hpp"
#include "kernel/cost.hpp"
#include "kernel/kernel.hpp"

namespace ipcfloor {
namespace {

using Clock = std::chrono::steady_clock;

// The engine under test: IPCFLOOR_BINARY, or $IPCFLOOR_TEST_BINARY (another build, such as the one
// before a fix, to see a test fail).
std::string binary_under_test() {
  const char* other = std::getenv("IPCFLOOR_TEST_BINARY");
  return other != nullptr && *other != '\0' ? other : IPCFLOOR_BINARY;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// ---- the pool alone -------------------------------------------------------------------------

// A runner that needs no series: the answer is a function of the job, so a lost, repeated or
// misdelivered answer shows.
class ArithmeticRunner final : public JobRunner {
 public:
  void run(const WorkerJob& job, KernelWorkspace&, WorkerDone& done) const noexcept override {
    done.result.status = Status::ok;
    done.result.pnl = static_cast<double>(job.compute.params.h) * 0.5;
    done.result.trades = job.compute.params.L * 3 + static_cast<std::int64_t>(job.ticket.seq);
  }
};
const ArithmeticRunner kArithmetic;

WorkerPoolConfig arithmetic_pool(std::vector<int> cpus) {
  WorkerPoolConfig config;
  config.cpus = std::move(cpus);
  config.wait = WaitMode::backoff;
  config.workspace_bytes = 128;
  config.ns_per_tick = TscClock::calibrate(5).ns_per_tick();
  return config;
}

WorkerJob arithmetic_job(std::uint64_t n) {
  WorkerJob job;
  job.ticket.seq = n;
  job.ticket.position = n;
  job.runner = &kArithmetic;
  job.compute.params = Combo{static_cast<std::int64_t>(n), static_cast<std::int64_t>(n % 977), 1, 1, 1, 1};
  return job;
}

// Writes `job` into worker `w`'s mailbox and hands it over, as WorkerDispatch does.
void hand(WorkerPool& pool, std::uint32_t w, const WorkerJob& job) {
  pool.job_at(w) = job;
  pool.hand(w);
}

bool answers_job(const WorkerDone& done, std::uint64_t n) {
  return done.ticket.seq == n && done.result.pnl == static_cast<double>(n) * 0.5 &&
         done.result.trades == static_cast<std::int64_t>(n % 977) * 3 + static_cast<std::int64_t>(n);
}

// Collects until `want` answers came or a deadline passed.
template <class Sink>
bool collect_until(WorkerPool& pool, std::size_t want, Sink&& sink, std::chrono::seconds limit = std::chrono::seconds(30)) {
  const auto deadline = Clock::now() + limit;
  std::size_t got = 0;
  while (got < want && Clock::now() < deadline) {
    const std::size_t now = pool.collect(sink);
    got += now;
    if (now == 0) std::this_thread::yield();
  }
  return got == want;
}

std::vector<int> some_cpus(std::size_t count) {
  const std::vector<int> allowed = allowed_cpus();
  std::vector<int> cpus;
  for (std::size_t i = 0; i < count; ++i) cpus.push_back(allowed[i % allowed.size()]);
  return cpus;
}

}  // namespace

TEST_CASE("a worker takes one job and gives its answer back under the job's ticket") {
  auto pool = WorkerPool::make(arithmetic_pool(some_cpus(1)));
  REQUIRE_MESSAGE(pool.has_value(), (pool ? "" : pool.error().message));
  WorkerPool& workers = **pool;
  REQUIRE(workers.size() == 1);
  CHECK(workers.idle_count() == 1);
  CHECK(workers.next_idle(0) == 0);
  hand(workers, 0, arithmetic_job(41));
  CHECK(workers.idle_count() == 0);
  CHECK(workers.next_idle(0) == workers.size());  // none idle
  WorkerDone seen{};
  REQUIRE(collect_until(workers, 1, [&](const WorkerDone& done) { seen = done; }));
  CHECK(answers_job(seen, 41));
  CHECK(seen.worker == 0);
  CHECK(workers.idle_count() == 1);
  CHECK(workers.jobs_done() == 1);
}

TEST_CASE("worker pool stress: 200,000 jobs over three workers, each answered once with its own result") {
  auto pool = WorkerPool::make(arithmetic_pool(some_cpus(3)));
  REQUIRE(pool.has_value());
  WorkerPool& workers = **pool;
  constexpr std::uint64_t kJobs = 200'000;
  std::vector<std::uint8_t> answered(kJobs, 0);
  std::uint64_t next = 0;
  std::uint64_t got = 0;
  bool all_right = true;
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (got < kJobs && Clock::now() < deadline) {
    for (std::uint32_t w = workers.next_idle(0); next < kJobs && w < workers.size(); w = workers.next_idle(w))
      hand(workers, w, arithmetic_job(next++));
    got += workers.collect([&](const WorkerDone& done) {
      const std::uint64_t n = done.ticket.seq;
      all_right = all_right && n < kJobs && answered[n] == 0 && answers_job(done, n);
      if (n < kJobs) ++answered[n];
    });
  }
  CHECK(got == kJobs);
  CHECK(all_right);
  CHECK(workers.jobs_done() == kJobs);
}

TEST_CASE("a worker's mailbox takes job after job, its counts wrapping past 2^32, each answered in order") {
  auto pool = WorkerPool::make(arithmetic_pool(some_cpus(1)));
  REQUIRE(pool.has_value());
  WorkerPool& workers = **pool;
  // One job at a time through the one slot: 10,000 in a row, each published and answered by the
  // mailbox's counts, never confused with the one before.
  bool in_order = true;
  for (std::uint64_t n = 0; n < 10'000; ++n) {
    hand(workers, 0, arithmetic_job(n));
    REQUIRE(collect_until(workers, 1, [&](const WorkerDone& done) { in_order = in_order && answers_job(done, n); }));
  }
  CHECK(in_order);
}

TEST_CASE("a stalled worker's job is taken back once, its late answer dropped, and the worker serves again") {
  WorkerPoolConfig config = arithmetic_pool(some_cpus(2));
  config.stall_worker_for_test = 0;
  auto pool = WorkerPool::make(config);
  REQUIRE(pool.has_value());
  WorkerPool& workers = **pool;
  WorkerJob job = arithmetic_job(7);
  job.cost = 1'000;
  hand(workers, 0, job);
  CHECK(workers.health(TscClock::now()) == 0);  // just handed: not stalled
  // The keeper looks again long after the limit (2 s plus 2 ns per unit).
  const double ticks_per_ns = 1.0 / config.ns_per_tick;
  const auto later = TscClock::now() + static_cast<std::uint64_t>(static_cast<double>(stall_limit_ns(1'000) + 1'000'000) * ticks_per_ns);
  CHECK(workers.health(later) == 1);
  std::vector<std::uint64_t> taken;
  CHECK(workers.reclaim_stalled([&](const WorkerJob& stuck) {
    taken.push_back(stuck.ticket.seq);
    return true;
  }) == 1);
  CHECK(taken == std::vector<std::uint64_t>{7});  // the job as it was handed, to compute elsewhere
  CHECK(workers.reclaim_stalled([&](const WorkerJob&) { return true; }) == 0);  // once only
  CHECK(workers.reclaimed() == 1);
  CHECK(workers.idle_count() == 1);  // the stuck worker gets no more work ...
  CHECK(workers.next_idle(0) == 1);  // ... the other one does
  hand(workers, 1, arithmetic_job(8));
  WorkerDone seen{};
  REQUIRE(collect_until(workers, 1, [&](const WorkerDone& done) { seen = done; }));
  CHECK(answers_job(seen, 8));
  // The worker runs again (the host scheduled it): its late answer is dropped, and it is free.
  workers.release_stalled_for_test();
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  std::size_t passed = 0;
  while (workers.idle_count() != 2 && Clock::now() < deadline)
    passed += workers.collect([](const WorkerDone&) {});
  CHECK(passed == 0);
  CHECK(workers.idle_count() == 2);
  hand(workers, 0, arithmetic_job(9));
  REQUIRE(collect_until(workers, 1, [&](const WorkerDone& done) { seen = done; }));
  CHECK(answers_job(seen, 9));
  workers.stop();
  CHECK(workers.left_behind() == 0);
}

TEST_CASE("a stalled worker's job the taker declines stays the worker's, and its answer arrives") {
  WorkerPoolConfig config = arithmetic_pool(some_cpus(1));
  config.stall_worker_for_test = 0;
  auto pool = WorkerPool::make(config);
  REQUIRE(pool.has_value());
  WorkerPool& workers = **pool;
  hand(workers, 0, arithmetic_job(5));
  const double ticks_per_ns = 1.0 / config.ns_per_tick;
  const auto later = TscClock::now() + static_cast<std::uint64_t>(static_cast<double>(stall_limit_ns(0) + 1'000'000) * ticks_per_ns);
  CHECK(workers.health(later) == 1);
  int offered = 0;
  CHECK(workers.reclaim_stalled([&](const WorkerJob&) { return ++offered, false; }) == 0);
  CHECK(workers.reclaim_stalled([&](const WorkerJob&) { return ++offered, false; }) == 0);
  CHECK(offered == 1);  // offered once per stall, not on every pass
  workers.release_stalled_for_test();
  WorkerDone seen{};
  REQUIRE(collect_until(workers, 1, [&](const WorkerDone& done) { seen = done; }));
  CHECK(answers_job(seen, 5));
}

namespace {

// ---- the engine around the workers -------------------------------------------------------------

// An engine in this process, with its keeper on a thread: for worker counts the command line
// would refuse on a small host (three workers sharing one cpu).
class InProcessEngine {
 public:
  // `tweak` changes the configuration last (live mode, the inline bound).
  InProcessEngine(std::span<const double> series, std::vector<int> worker_cpus, int stall_worker = -1,
                  const std::function<void(ShmEngineConfig&)>& tweak = {}) {
    ShmEngineConfig config;
    config.segment.name = unique_segment_name("workers");
    config.segment.series = series;
    config.segment.fee = kDefaultFee;
    config.segment.hugepages = HugePagesMode::off;
    config.segment.mlock = MlockMode::off;
    config.segment.lanes = 4;
    config.segment.ring_capacity = 16;
    config.wait = WaitMode::backoff;
    config.cpu = allowed_cpus().back();
    config.worker_cpus = std::move(worker_cpus);
    config.stall_worker_for_test = stall_worker;
    if (tweak) tweak(config);
    auto started = ShmEngine::start(std::move(config));
    REQUIRE_MESSAGE(started.has_value(), (started ? "" : started.error().message));
    engine_ = std::move(*started);
    keeper_ = std::thread([this] {
      // relaxed: a plain flag.
      while (!stop_.load(std::memory_order_relaxed)) {
        engine_->service();
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  ~InProcessEngine() {
    stop_.store(true, std::memory_order_relaxed);  // relaxed: a plain flag
    keeper_.join();
    engine_->stop();
  }
  InProcessEngine(const InProcessEngine&) = delete;
  InProcessEngine& operator=(const InProcessEngine&) = delete;
  [[nodiscard]] const std::string& name() const { return engine_->segment().name(); }
  [[nodiscard]] const ShmEngine& engine() const { return *engine_; }
  // The stalled worker (stall_worker) returns: it finishes the job it held.
  void release_stalled_worker() { engine_->release_stalled_worker_for_test(); }

 private:
  std::unique_ptr<ShmEngine> engine_;
  std::atomic<bool> stop_{false};
  std::thread keeper_;
};

ShmClientOptions patient_client(std::chrono::seconds timeout = std::chrono::seconds(30)) {
  ShmClientOptions options;
  options.wait = WaitMode::backoff;
  options.timeout = timeout;
  return options;
}

std::vector<double> series_of(std::size_t bars, std::uint64_t seed) {
  GbmParams params;
  params.bars = bars;
  params.seed = seed;
  auto close = generate_gbm(params);
  REQUIRE(close.has_value());
  return std::move(*close);
}

std::vector<Combo> combos_of(std::span<const std::int64_t> lengths) {
  std::vector<Combo> combos;
  for (const std::int64_t length : lengths) combos.push_back(combo_from_length(length));
  return combos;
}

// Every answer equals the in-process kernel's, bit for bit.
void check_parity(std::span<const ResponseSlot> answers, std::span<const BacktestResult> expected) {
  REQUIRE(answers.size() == expected.size());
  for (std::size_t i = 0; i < answers.size(); ++i) {
    CAPTURE(i);
    CHECK(answers[i].status == static_cast<std::uint16_t>(Status::ok));
    CHECK(answers[i].pnl == expected[i].pnl);
    CHECK(answers[i].trades == expected[i].trades);
  }
}

}  // namespace

TEST_CASE("with 0, 1 and 3 workers, and two clients sweeping at once, every combo is bit-identical to the "
          "in-process sweep") {
  const std::vector<double> series = series_of(20'000, 7);
  std::vector<std::int64_t> lengths;
  for (std::int64_t l = 2; l <= 400; l += 5) lengths.push_back(l);  // cheap ones stay inline, dear ones go out
  const std::vector<Combo> combos = combos_of(lengths);
  auto expected = run_sweep(builtin(), series, combos, kDefaultFee, 1);
  REQUIRE(expected.has_value());
  const int serving = allowed_cpus().back();
  const int other = allowed_cpus().front();
  for (const std::size_t workers : {0u, 1u, 3u}) {
    CAPTURE(workers);
    InProcessEngine engine(series, std::vector<int>(workers, other == serving ? allowed_cpus().front() : other));
    CHECK(engine.engine().worker_cpus().size() == workers);
    std::vector<ResponseSlot> first;
    std::vector<ResponseSlot> second;
    std::thread other_client([&] {
      auto client = ShmClient::connect(engine.name(), patient_client());
      REQUIRE(client.has_value());
      auto answers = run_all(*client, combos, Opcode::backtest);
      REQUIRE_MESSAGE(answers.has_value(), (answers ? "" : answers.error().message));
      second = std::move(*answers);
    });
    auto client = ShmClient::connect(engine.name(), patient_client());
    REQUIRE(client.has_value());
    auto answers = run_all(*client, combos, Opcode::backtest);
    REQUIRE_MESSAGE(answers.has_value(), (answers ? "" : answers.error().message));
    first = std::move(*answers);
    other_client.join();
    check_parity(first, *expected);
    check_parity(second, *expected);
    // A blocking call, through the exchange line, on a dear combo and on a cheap one.
    for (const std::size_t i : {std::size_t{0}, combos.size() - 1}) {
      ResponseSlot answer{};
      RequestSlot request{};
      request.opcode = static_cast<std::uint16_t>(Opcode::backtest);
      request.params = combos[i];
      REQUIRE(client->call(request, answer) == CallStatus::ok);
      CHECK(answer.pnl == (*expected)[i].pnl);
      CHECK(answer.trades == (*expected)[i].trades);
    }
  }
}

TEST_CASE("a lane's answers come back in the order of its requests, dear and cheap mixed, each under its own seq") {
  const std::vector<double> series = series_of(30'000, 11);
  InProcessEngine engine(series, std::vector<int>(3, allowed_cpus().front()));
  auto client = ShmClient::connect(engine.name(), patient_client());
  REQUIRE(client.has_value());
  // Dear combos of decreasing cost (so later ones finish first at the workers), ECHOs and bad
  // frames between them, all answered on the serving thread at once.
  std::vector<SweepRequest> requests;
  std::vector<Combo> payloads;
  payloads.reserve(300);
  for (int i = 0; i < 300; ++i) {
    const int kind = i % 3;
    payloads.push_back(kind == 0   ? combo_from_length(600 - i)
                       : kind == 1 ? Combo{i, i + 1, i + 2, i + 3, i + 4, i + 5}
                                   : Combo{0, 1, 1, 1, 1, 1});  // a window of 0: refused
  }
  for (int i = 0; i < 300; ++i)
    requests.push_back(SweepRequest{i % 3 == 1 ? Opcode::echo : Opcode::backtest, 0, payload_of(payloads[static_cast<std::size_t>(i)])});
  KernelWorkspace workspace(hma_workspace_bytes(series.size()));
  bool right = true;
  const SweepEnd end = pipelined_sweep(
      *client, requests.size(), [&](std::size_t i) { return requests[i]; },
      [&](std::size_t i, const ResponseSlot& answer) {
        CAPTURE(i);
        right = right && answer.seq == i + 1;  // the lane's own numbering, in order
        if (i % 3 == 1) {
          right = right && answer.opcode == static_cast<std::uint16_t>(Opcode::echo) && answer.echo() == payloads[i];
        } else if (i % 3 == 2) {
          right = right && answer.status == static_cast<std::uint16_t>(Status::window_out_of_range);
        } else {
          BacktestResult result;
          REQUIRE(run_backtest(series, payloads[i], kDefaultFee, workspace, result) == KernelStatus::ok);
          right = right && answer.status == 0 && answer.pnl == result.pnl && answer.trades == result.trades;
        }
      });
  CHECK(end.status == CallStatus::ok);  // an answer out of order would end it: out_of_order
  CHECK(end.answered == requests.size());
  CHECK(right);
}

TEST_CASE("a stalled worker's job is taken back after its limit and computed elsewhere: the right answer, never "
          "engine_error, and status counts it") {
  const std::vector<double> series = series_of(20'000, 3);
  InProcessEngine engine(series, std::vector<int>(2, allowed_cpus().front()), /*stall_worker=*/0);
  auto client = ShmClient::connect(engine.name(), patient_client(std::chrono::seconds(60)));
  REQUIRE(client.has_value());
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::backtest);
  request.params = combo_from_length(300);
  const std::vector<Combo> one{request.params};
  const auto expected = run_sweep(builtin(), series, one, kDefaultFee, 1);
  REQUIRE(expected.has_value());
  ResponseSlot answer{};
  const auto start = Clock::now();
  REQUIRE(client->call(request, answer) == CallStatus::ok);  // worker 0 takes it, and does not return
  const double waited_ms = ms_since(start);
  MESSAGE("the stuck job was answered after " << waited_ms << " ms, by another worker or the serving thread");
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  CHECK(answer.pnl == (*expected)[0].pnl);
  CHECK(answer.trades == (*expected)[0].trades);
  const double limit_ms = static_cast<double>(stall_limit_ns(backtest_cost(request.params, series.size()))) / 1e6;
  CHECK(waited_ms >= 0.99 * limit_ms);  // taken back at its limit, not before (the TSC rate is calibrated to ~0.1%)
  CHECK(waited_ms < limit_ms + 8'000.0);
  // The keeper publishes the counts on its next pass (status reads them from the header).
  const DataHeader& header = client->segment().header();
  const auto seen_by = Clock::now() + std::chrono::seconds(10);
  while ((header.workers_stalled.load() != 1 || header.jobs_reclaimed.load() != 1) && Clock::now() < seen_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(header.workers_stalled.load() == 1);
  CHECK(header.jobs_reclaimed.load() == 1);
  // The other worker serves the next ones; the stalled one, once back, drops its late answer.
  for (int i = 0; i < 3; ++i) {
    REQUIRE(client->call(request, answer) == CallStatus::ok);
    CHECK(answer.status == 0);
    CHECK(answer.pnl == (*expected)[0].pnl);
  }
  engine.release_stalled_worker();
  for (int i = 0; i < 4; ++i) {
    REQUIRE(client->call(request, answer) == CallStatus::ok);
    CHECK(answer.status == 0);
    CHECK(answer.trades == (*expected)[0].trades);
  }
  const auto back_by = Clock::now() + std::chrono::seconds(10);
  while (header.workers_stalled.load() != 0 && Clock::now() < back_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(header.workers_stalled.load() == 0);
}

namespace {

// A dear combo for a series of `bars`: about `target_ms` of compute on this host, measured.
struct Measured {
  Combo combo;
  double ms;
};

Measured dear_combo(std::span<const double> series, double target_ms) {
  KernelWorkspace workspace(hma_workspace_bytes(series.size()));
  BacktestResult result;
  std::int64_t length = 100;
  double ms = 0.0;
  for (int round = 0; round < 12; ++round) {
    const auto start = Clock::now();
    REQUIRE(run_backtest(series, combo_from_length(length), kDefaultFee, workspace, result) == KernelStatus::ok);
    ms = ms_since(start);
    if (ms >= target_ms || length * 2 > static_cast<std::int64_t>(series.size()) / 2) break;
    length *= 2;
  }
  return {combo_from_length(length), ms};
}

}  // namespace

TEST_CASE("a lane flooding the engine delays another lane's blocking calls by at most one combo") {
  const std::vector<double> series = series_of(200'000, 5);
  const Measured dear = dear_combo(series, 15.0);
  EngineChild engine(binary_under_test(), unique_segment_name("flood"), {"--wait", "backoff", "--bars", "200000",
                                                                      "--seed", "5", "--workers", "1"});
  REQUIRE(engine.up());
  std::atomic<bool> flooding{true};
  std::thread flood([&] {
    auto client = ShmClient::connect(engine.name(), patient_client());
    REQUIRE(client.has_value());
    const std::vector<Combo> combos(400, dear.combo);
    std::size_t done = 0;
    // relaxed: a plain flag.
    const SweepEnd end = pipelined_sweep(
        *client, combos.size(),
        [&](std::size_t i) { return SweepRequest{Opcode::backtest, 0, payload_of(combos[i])}; },
        [&](std::size_t, const ResponseSlot&) { ++done; });
    (void)end;
    flooding.store(false, std::memory_order_relaxed);
  });
  auto client = ShmClient::connect(engine.name(), patient_client());
  REQUIRE(client.has_value());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the flood is under way
  // The flood's combos, one at a time, as this host runs them now (the machine may be loaded).
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::backtest);
  request.params = dear.combo;
  ResponseSlot answer{};
  double worst_dear = 0.0;
  double worst_echo = 0.0;
  for (int i = 0; i < 5 && flooding.load(std::memory_order_relaxed); ++i) {  // relaxed: a plain flag
    auto start = Clock::now();
    REQUIRE(client->call(request, answer) == CallStatus::ok);
    CHECK(answer.status == 0);
    worst_dear = std::max(worst_dear, ms_since(start));
    RequestSlot echo{};
    echo.opcode = static_cast<std::uint16_t>(Opcode::echo);
    start = Clock::now();
    REQUIRE(client->call(echo, answer) == CallStatus::ok);
    worst_echo = std::max(worst_echo, ms_since(start));
  }
  const bool still_flooding = flooding.load(std::memory_order_relaxed);  // relaxed: a plain flag
  engine.stop(SIGTERM);
  flood.join();
  MESSAGE("one dear combo alone: " << dear.ms << " ms; under the flood, a dear blocking call took at most "
                                    << worst_dear << " ms and an ECHO " << worst_echo << " ms");
  CHECK(still_flooding);  // measured while the other lane streamed
  // Its own combo plus at most one of the flood's, with room for a loaded host; the flood holds
  // 400 combos, so waiting behind it would take seconds.
  CHECK(worst_dear < 2.0 * dear.ms * 3.0 + 100.0);
  // An ECHO is answered by the serving thread, which never computes a dear combo.
  CHECK(worst_echo < dear.ms + 50.0);
}

TEST_CASE("one client flooding from three lanes delays another client's blocking call by about one combo, not three: "
          "heavy work is shared per client, not per lane, and the flooding client's three lanes take turns") {
  const std::vector<double> series = series_of(200'000, 5);
  const Measured dear = dear_combo(series, 15.0);
  EngineChild engine(binary_under_test(), unique_segment_name("lanes"), {"--wait", "backoff", "--bars", "200000",
                                                                      "--seed", "5", "--workers", "1"});
  REQUIRE(engine.up());
  // The flooding client: another process (a client is the process that holds the lanes), three
  // lanes, each keeping its ring full of dear combos until it is killed, counting its answers in
  // memory it shares with the test.
  void* shared = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(shared != MAP_FAILED);
  auto* answered = new (shared) std::atomic<std::uint64_t>[3]{};
  const pid_t flooder = ::fork();
  REQUIRE(flooder >= 0);
  if (flooder == 0) {
    std::vector<std::thread> lanes;
    for (int lane = 0; lane < 3; ++lane)
      lanes.emplace_back([&engine, &dear, count = &answered[lane]] {
        auto client = ShmClient::connect(engine.name(), patient_client());
        if (!client) return;
        const std::vector<Combo> combos(2'000, dear.combo);
        (void)pipelined_sweep(
            *client, combos.size(),
            [&](std::size_t i) { return SweepRequest{Opcode::backtest, 0, payload_of(combos[i])}; },
            // relaxed: a count the test reads once the flood is over.
            [count](std::size_t, const ResponseSlot&) { count->fetch_add(1, std::memory_order_relaxed); });
      });
    for (std::thread& t : lanes) t.join();
    ::_exit(0);
  }
  auto client = ShmClient::connect(engine.name(), patient_client());
  REQUIRE(client.has_value());
  const auto flood_lanes = [&] {
    std::uint32_t held = 0;
    for (std::uint32_t lane = 0; lane < client->segment().lane_count(); ++lane)
      held += client->segment().lane_status(lane).owner_pid == flooder;  // the keeper's, at hand-off
    return held;
  };
  const auto seen_by = Clock::now() + std::chrono::seconds(10);
  while (flood_lanes() < 3 && Clock::now() < seen_by) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  REQUIRE(flood_lanes() == 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the three rings are full
  // The flooding client's answers as the engine counts them (LaneStatus::requests, stored when
  // an answer is pushed): how many of its combos finished while one blocking call waited is the
  // measure of the sharing, whatever the host's speed.
  const auto flood_answered = [&] {
    std::uint64_t total = 0;
    for (std::uint32_t lane = 0; lane < client->segment().lane_count(); ++lane) {
      const LaneStatus& status = client->segment().lane_status(lane);
      // relaxed: counters the serving thread stores; a stale read only moves a combo between calls.
      if (status.owner_pid == flooder) total += status.requests.load(std::memory_order_relaxed);
    }
    return total;
  };
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::backtest);
  request.params = dear.combo;
  ResponseSlot answer{};
  std::vector<double> waits;
  std::vector<std::uint64_t> flood_during;
  for (int i = 0; i < 7; ++i) {
    const std::uint64_t before = flood_answered();
    const auto start = Clock::now();
    REQUIRE(client->call(request, answer) == CallStatus::ok);
    CHECK(answer.status == 0);
    waits.push_back(ms_since(start));
    flood_during.push_back(flood_answered() - before);
  }
  ::kill(flooder, SIGKILL);
  ::waitpid(flooder, nullptr, 0);
  std::uint64_t per_lane[3];
  for (int lane = 0; lane < 3; ++lane) per_lane[lane] = answered[lane].load(std::memory_order_relaxed);  // relaxed: as above
  ::munmap(shared, 4096);
  std::sort(waits.begin(), waits.end());
  std::sort(flood_during.begin(), flood_during.end());
  const double median = waits[waits.size() / 2];
  const std::uint64_t median_flood = flood_during[flood_during.size() / 2];
  MESSAGE("one dear combo alone: " << dear.ms << " ms; behind one client's three flooding lanes a dear blocking call "
                                    "took a median of " << median << " ms (worst " << waits.back() << " ms), while "
                                    "a median of " << median_flood << " (most " << flood_during.back() << ") of the "
                                    "flood's combos finished; the flooding lanes completed " << per_lane[0] << ", "
                                    << per_lane[1] << " and " << per_lane[2] << " combos");
  // Its own combo after the one of the flooding client's that runs when it arrives: one of the
  // flood's finishes meanwhile (two when one ends just as the call is sent). Shared per lane it
  // would wait for three of the flood's. Counted, not timed: a loaded host slows every combo
  // alike (the 3x-in-ms bound this replaces failed at load 7 on main's build too).
  CHECK(median_flood <= 2);
  // The flooding client's lanes took turns: before, its first lane took every one of its starts
  // while the other client made calls ([20, 0, 0] in the review).
  const auto [fewest, most] = std::minmax({per_lane[0], per_lane[1], per_lane[2]});
  CHECK(fewest >= 2);
  CHECK(most <= 2 * fewest + 2);
}

TEST_CASE("a client that attaches while another streams is served within one combo, with and without workers") {
  const std::vector<double> series = series_of(200'000, 6);
  const Measured dear = dear_combo(series, 15.0);
  for (const char* workers : {"0", "1"}) {
    CAPTURE(workers);
    EngineChild engine(binary_under_test(), unique_segment_name("pickup"),
                       {"--wait", "backoff", "--bars", "200000", "--seed", "6", "--workers", workers});
    REQUIRE(engine.up());
    std::atomic<bool> streaming{true};
    std::thread stream([&] {
      auto client = ShmClient::connect(engine.name(), patient_client());
      REQUIRE(client.has_value());
      const std::vector<Combo> combos(300, dear.combo);
      (void)pipelined_sweep(
          *client, combos.size(),
          [&](std::size_t i) { return SweepRequest{Opcode::backtest, 0, payload_of(combos[i])}; },
          [&](std::size_t, const ResponseSlot&) {});
      streaming.store(false, std::memory_order_relaxed);  // relaxed: a plain flag
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(150));  // the stream is under way
    const auto start = Clock::now();
    auto late = ShmClient::connect(engine.name(), patient_client());
    REQUIRE(late.has_value());
    RequestSlot echo{};
    echo.opcode = static_cast<std::uint16_t>(Opcode::echo);
    ResponseSlot answer{};
    REQUIRE(late->call(echo, answer) == CallStatus::ok);
    const double first_ms = ms_since(start);
    const bool still_streaming = streaming.load(std::memory_order_relaxed);  // relaxed: a plain flag
    engine.stop(SIGTERM);
    stream.join();
    MESSAGE("workers " << std::string(workers) << ": attach and first answer in " << first_ms << " ms; one combo takes "
                       << dear.ms << " ms; the stream holds 300");
    CHECK(still_streaming);
    // At most one combo of the other lane (three times over for a loaded host), never the stream.
    CHECK(first_ms < 3.0 * dear.ms + 100.0);
  }
}

TEST_CASE("a client killed while its combos sit at the workers: its answers are dropped, its lane is reclaimed, and "
          "nothing lands in the lane's next owner") {
  const std::vector<double> series = series_of(200'000, 8);
  const Measured dear = dear_combo(series, 20.0);
  EngineChild engine(binary_under_test(), unique_segment_name("killed"),
                     {"--wait", "backoff", "--bars", "200000", "--seed", "8", "--lanes", "1", "--workers", "1",
                      "--ring-capacity", "8"});
  REQUIRE(engine.up());
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t victim = ::fork();
  REQUIRE(victim >= 0);
  if (victim == 0) {
    ::close(ready[0]);
    auto client = ShmClient::connect(engine.name(), patient_client());
    if (!client) ::_exit(3);
    RequestSlot request{};
    request.opcode = static_cast<std::uint16_t>(Opcode::backtest);
    request.params = dear.combo;
    std::uint64_t seq = 0;
    for (int i = 0; i < 8; ++i)
      if (client->submit(request, seq) != CallStatus::ok) ::_exit(4);
    (void)!::write(ready[1], "s", 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char byte = 0;
  REQUIRE(::read(ready[0], &byte, 1) == 1);
  ::close(ready[0]);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // its first combo is at the worker
  REQUIRE(::kill(victim, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(victim, &status, 0) == victim);
  // The only lane comes back to the next client; its requests are answered, each its own.
  auto next = ShmClient::connect(engine.name(), patient_client(std::chrono::seconds(30)));
  REQUIRE_MESSAGE(next.has_value(), (next ? "" : next.error().message));
  std::vector<Combo> mine;
  for (int i = 0; i < 12; ++i) mine.push_back(Combo{100 + i, 2, 3, 4, 5, 6});
  auto echoes = run_all(*next, mine, Opcode::echo);
  REQUIRE_MESSAGE(echoes.has_value(), (echoes ? "" : echoes.error().message));
  for (std::size_t i = 0; i < mine.size(); ++i) {
    CHECK((*echoes)[i].seq == i + 1);
    CHECK((*echoes)[i].echo() == mine[i]);
  }
  // Long enough for every combo the victim left behind to have come back from the worker: still
  // nothing of it reaches this client, and dear combos of its own come back right.
  std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(dear.ms * 4)));
  KernelWorkspace workspace(hma_workspace_bytes(series.size()));
  BacktestResult expected;
  REQUIRE(run_backtest(series, combo_from_length(50), kDefaultFee, workspace, expected) == KernelStatus::ok);
  auto answers = run_all(*next, std::vector<Combo>(3, combo_from_length(50)), Opcode::backtest);
  REQUIRE_MESSAGE(answers.has_value(), (answers ? "" : answers.error().message));
  for (const ResponseSlot& answer : *answers) {
    CHECK(answer.pnl == expected.pnl);
    CHECK(answer.trades == expected.trades);
  }
  ResponseSlot stray{};
  CHECK(next->poll(stray) == CallStatus::empty);
}

TEST_CASE("SIGTERM with combos queued at the workers ends the engine after the combo in progress, not the queue") {
  const std::vector<double> series = series_of(200'000, 9);
  const Measured dear = dear_combo(series, 40.0);
  EngineChild engine(binary_under_test(), unique_segment_name("stop"),
                     {"--wait", "backoff", "--bars", "200000", "--seed", "9", "--workers", "1",
                      "--ring-capacity", "32"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), patient_client());
  REQUIRE(client.has_value());
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::backtest);
  request.params = dear.combo;
  std::uint64_t seq = 0;
  for (int i = 0; i < 32; ++i) REQUIRE(client->submit(request, seq) == CallStatus::ok);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const auto start = Clock::now();
  const int status = engine.stop(SIGTERM);
  const double stop_ms = ms_since(start);
  MESSAGE("SIGTERM to exit with 32 combos of " << dear.ms << " ms queued: " << stop_ms << " ms");
  CHECK(WIFEXITED(status));
  // One combo in progress, a heartbeat, the exit, and room for a loaded host; the queue alone
  // would take 32 combos.
  CHECK(stop_ms < 3.0 * dear.ms + 500.0);
  CHECK(stop_ms < 16.0 * dear.ms);
}

TEST_CASE("serve's default workers take every other cpu once, the serving core's SMT siblings last") {
  // The whole order (farthest from the serving pair first) is checked on canned topologies in
  // test_topology.cpp; here, that this host's order is a permutation with the siblings at its end.
  for (const int serving : allowed_cpus()) {
    const std::vector<int> order = default_worker_cpus(serving);
    std::vector<int> expected = allowed_cpus();
    std::erase(expected, serving);
    std::vector<int> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == expected);  // each other cpu once, the serving one never
    const std::vector<int> siblings = smt_siblings(serving);
    const auto is_sibling = [&](int cpu) { return std::find(siblings.begin(), siblings.end(), cpu) != siblings.end(); };
    for (std::size_t i = 1; i < order.size(); ++i)
      CHECK((is_sibling(order[i - 1]) <= is_sibling(order[i])));  // siblings come after the rest
  }
}

TEST_CASE("the default bound admits every combo of the default grid and of 6:2000:200 on a million bars, on any host") {
  // A pure function of the combo and the bars: the verdict cannot depend on the host.
  auto grid = parse_grid("6:200:80");
  REQUIRE(grid.has_value());
  for (const std::int64_t length : *grid)
    CHECK(builtin().accepts(combo_from_length(length), 150'000));
  for (const std::int64_t length : *grid)
    CHECK(builtin().cost(combo_from_length(length), 150'000) <= kDefaultMaxFrameCost);
  auto wide = parse_grid("6:2000:200");
  REQUIRE(wide.has_value());
  for (const std::int64_t length : *wide)
    CHECK(builtin().cost(combo_from_length(length), 1'000'000) <= kDefaultMaxFrameCost);
  // End to end, an engine with every option at its default answers the whole default grid.
  EngineChild engine(binary_under_test(), unique_segment_name("admit"), {"--wait", "backoff"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), patient_client());
  REQUIRE(client.has_value());
  CHECK(client->segment().header().max_frame_cost == kDefaultMaxFrameCost);
  auto answers = run_all(*client, combos_of(*grid), Opcode::backtest);
  REQUIRE_MESSAGE(answers.has_value(), (answers ? "" : answers.error().message));
  for (const ResponseSlot& answer : *answers) CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  CHECK((*answers)[0].pnl == -5165.577039790348);
  CHECK((*answers)[0].trades == 57029);
}

}  // namespace ipcfloor

namespace ipcfloor {
namespace {

// A live engine in this process: `preload` bars of `series`, room for all of them, and
// `worker_count` workers on one cpu; inline_cost 1 sends every APPEND's signal work to them (in
// as many shares as there are workers), the default keeps it on the serving thread.
std::unique_ptr<InProcessEngine> live_engine(std::span<const double> series, std::size_t preload, std::size_t worker_count,
                                             std::uint64_t inline_cost, int stall_worker = -1) {
  return std::make_unique<InProcessEngine>(
      series.first(preload), std::vector<int>(worker_count, allowed_cpus().front()), stall_worker,
      [&](ShmEngineConfig& config) {
        config.segment.live = true;
        config.segment.capacity_bars = series.size();
        config.segment.signal_capacity = 1 << 16;
        config.inline_cost = inline_cost;
      });
}

bool same_signal(const SignalSlot& a, const SignalSlot& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Two readers subscribe (5 and 4 combos), the writer appends the rest of `series`; returns every
// signal each reader got, in order, and checks that none was lost and that the workers ran
// `worker_jobs` jobs (the shares of every bar; none when the serving thread computes them).
std::vector<std::vector<SignalSlot>> stream_live(const InProcessEngine& engine, std::span<const double> series,
                                                 std::size_t preload, std::uint64_t worker_jobs) {
  auto writer = ShmClient::connect(engine.name(), patient_client());
  REQUIRE(writer.has_value());
  std::vector<ShmClient> readers;
  const std::vector<std::vector<std::int64_t>> lengths{{6, 9, 20, 47, 100}, {7, 12, 31, 64}};
  for (const auto& wanted : lengths) {
    auto reader = ShmClient::connect(engine.name(), patient_client());
    REQUIRE(reader.has_value());
    for (const std::int64_t length : wanted) {
      ResponseSlot answer{};
      REQUIRE(reader->subscribe(combo_from_length(length), answer) == CallStatus::ok);
      REQUIRE(answer.status == static_cast<std::uint16_t>(Status::ok));
    }
    readers.push_back(std::move(*reader));
  }
  std::vector<std::vector<SignalSlot>> got(readers.size());
  for (std::size_t sent = preload; sent < series.size();) {
    for (const std::size_t end = std::min(series.size(), sent + 500); sent < end; ++sent) {
      ResponseSlot answer{};
      REQUIRE(writer->append(series[sent], sent, answer) == CallStatus::ok);
      REQUIRE(answer.status == static_cast<std::uint16_t>(Status::ok));
      REQUIRE(answer.trades == static_cast<std::int64_t>(sent + 1));
    }
    for (std::size_t r = 0; r < readers.size(); ++r) {
      SignalSlot signal{};
      while (readers[r].poll_signal(signal) == CallStatus::ok) got[r].push_back(signal);
    }
  }
  for (std::size_t r = 0; r < readers.size(); ++r) {
    CHECK(readers[r].signals_dropped() == 0);
    CHECK(got[r].size() == lengths[r].size() * (series.size() - preload));
  }
  // The keeper copies the workers' count into the header once a pass.
  const auto& jobs = writer->segment().header().worker_jobs;
  const auto seen_by = Clock::now() + std::chrono::seconds(10);
  while (jobs.load() != worker_jobs && Clock::now() < seen_by) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(jobs.load() == worker_jobs);
  return got;
}

}  // namespace

TEST_CASE("a live bar's signal work split over three workers gives every subscriber the signals the serving thread "
          "alone gives, bit for bit and in order") {
  const std::vector<double> series = series_of(8'000, 17);
  const std::size_t preload = 5'000;
  // Nine subscriptions of these lengths cost under the default inline bound per bar: computed by
  // the serving thread. With a bound of 1 unit each bar goes out in three shares.
  const auto alone = stream_live(*live_engine(series, preload, 3, kDefaultInlineCost), series, preload, 0);
  const auto shared = stream_live(*live_engine(series, preload, 3, 1), series, preload, 3 * (series.size() - preload));
  REQUIRE(alone.size() == shared.size());
  for (std::size_t r = 0; r < alone.size(); ++r) {
    REQUIRE(alone[r].size() == shared[r].size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < alone[r].size(); ++i) differ += same_signal(alone[r][i], shared[r][i]) ? 0 : 1;
    CAPTURE(r);
    CHECK(differ == 0);
  }
  // And the last signal of each combo is the batch kernel's result on the whole series.
  const auto batch = run_sweep(builtin(), series, std::vector<Combo>{combo_from_length(6), combo_from_length(100)}, kDefaultFee, 1);
  REQUIRE(batch.has_value());
  const SignalSlot& last6 = shared[0][shared[0].size() - 5];
  const SignalSlot& last100 = shared[0].back();
  CHECK(last6.subscription == 0);
  CHECK(last6.trades == (*batch)[0].trades);
  CHECK(last6.pnl == (*batch)[0].pnl);
  CHECK(last100.subscription == 4);
  CHECK(last100.trades == (*batch)[1].trades);
  CHECK(last100.pnl == (*batch)[1].pnl);
}

TEST_CASE("subscribers that come and go while bars are out at the workers leave the others' signals whole") {
  const std::vector<double> series = series_of(6'000, 23);
  const std::size_t preload = 4'000;
  auto engine = live_engine(series, preload, 2, 1);
  auto writer = ShmClient::connect(engine->name(), patient_client());
  auto reader = ShmClient::connect(engine->name(), patient_client());
  REQUIRE(writer.has_value());
  REQUIRE(reader.has_value());
  ResponseSlot answer{};
  REQUIRE(reader->subscribe(combo_from_length(40), answer) == CallStatus::ok);
  REQUIRE(answer.status == static_cast<std::uint16_t>(Status::ok));
  std::atomic<bool> done{false};
  std::atomic<int> visits{0};
  std::thread churn([&] {
    // Each visitor takes a lane, subscribes (its state replays the bars so far) and leaves,
    // often while a bar's shares are at the workers.
    while (!done.load()) {
      auto visitor = ShmClient::connect(engine->name(), patient_client());
      REQUIRE(visitor.has_value());
      ResponseSlot subscribed{};
      REQUIRE(visitor->subscribe(combo_from_length(25), subscribed) == CallStatus::ok);
      CHECK(subscribed.status == static_cast<std::uint16_t>(Status::ok));
      ++visits;
    }
  });
  std::vector<SignalSlot> got;
  for (std::size_t sent = preload; sent < series.size(); ++sent) {
    REQUIRE(writer->append(series[sent], sent, answer) == CallStatus::ok);
    REQUIRE(answer.status == static_cast<std::uint16_t>(Status::ok));
    SignalSlot signal{};
    while (reader->poll_signal(signal) == CallStatus::ok) got.push_back(signal);
  }
  done.store(true);
  churn.join();
  SignalSlot signal{};
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (got.size() < series.size() - preload && Clock::now() < deadline)
    if (reader->poll_signal(signal) == CallStatus::ok) got.push_back(signal);
  MESSAGE(visits.load() << " visitors came and went during " << series.size() - preload << " bars");
  CHECK(visits.load() > 0);
  REQUIRE(got.size() == series.size() - preload);
  for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i].bar == preload + i);
  const auto batch = run_sweep(builtin(), series, std::vector<Combo>{combo_from_length(40)}, kDefaultFee, 1);
  REQUIRE(batch.has_value());
  CHECK(got.back().trades == (*batch)[0].trades);
  CHECK(got.back().pnl == (*batch)[0].pnl);
}

TEST_CASE("while a live bar's share is at a stalled worker, other lanes are served and backtests go on; the APPEND "
          "waits for the worker, and the book recovers with no signal lost or reordered") {
  const std::vector<double> series = series_of(4'000, 5);
  auto engine = live_engine(series, 3'000, 2, 1, /*stall_worker=*/0);
  auto writer = ShmClient::connect(engine->name(), patient_client(std::chrono::seconds(60)));
  auto reader = ShmClient::connect(engine->name(), patient_client(std::chrono::seconds(60)));
  auto other = ShmClient::connect(engine->name(), patient_client());
  REQUIRE(writer.has_value());
  REQUIRE(reader.has_value());
  REQUIRE(other.has_value());
  ResponseSlot answer{};
  REQUIRE(reader->subscribe(combo_from_length(20), answer) == CallStatus::ok);
  REQUIRE(answer.status == static_cast<std::uint16_t>(Status::ok));

  // One subscription, so one share: worker 0 takes it and does not return until released.
  ResponseSlot appended{};
  CallStatus append_status = CallStatus::ok;
  std::thread appending([&] { append_status = writer->append(series[3'000], 3'000, appended); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the share is out by now
  const auto asked = Clock::now();
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::echo);
  request.params = Combo{4, 4, 4, 4, 4, 4};
  REQUIRE(other->call(request, answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  request.opcode = static_cast<std::uint16_t>(Opcode::backtest);
  request.params = combo_from_length(30);
  REQUIRE(other->call(request, answer) == CallStatus::ok);  // worker 1
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  const double others_ms = ms_since(asked);
  const double limit_ms = static_cast<double>(stall_limit_ns(0)) / 1e6;  // the share's limit is at least this
  CHECK(others_ms < limit_ms - 500.0);  // while the share was out

  // Past its limit the bar waits for the worker, shown in the header (status's degraded block).
  const DataHeader& header = reader->segment().header();
  const auto waiting_by = Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(limit_ms) + 10'000);
  while (header.live_bar_waiting.load() != 1 && Clock::now() < waiting_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(header.live_bar_waiting.load() == 1);
  REQUIRE(other->call(request, answer) == CallStatus::ok);  // backtests still go on
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  engine->release_stalled_worker();
  appending.join();
  REQUIRE(append_status == CallStatus::ok);
  CHECK(appended.status == static_cast<std::uint16_t>(Status::ok));
  CHECK(header.live_bar_waiting.load() == 0);

  // Every bar's signal, in order, and the last equals the batch kernel on the series so far.
  REQUIRE(writer->append(series[3'001], 3'001, answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  SignalSlot signal{};
  for (const std::uint64_t bar : {3'000u, 3'001u}) {
    REQUIRE(reader->wait_signal(signal) == CallStatus::ok);
    CHECK(signal.bar == bar);
    CHECK(signal.dropped == 0);
  }
  const std::vector<Combo> one{combo_from_length(20)};
  const auto batch = run_sweep(builtin(), std::span<const double>(series).first(3'002), one, kDefaultFee, 1);
  REQUIRE(batch.has_value());
  CHECK(signal.pnl == (*batch)[0].pnl);
  CHECK(signal.trades == (*batch)[0].trades);
  REQUIRE(reader->subscribe(combo_from_length(8), answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
}

TEST_CASE("with the only worker stalled on a live bar's share, another lane's dear BACKTEST is computed at once, "
          "not after the worker") {
  const std::vector<double> series = series_of(4'000, 7);
  auto engine = live_engine(series, 3'000, 1, 1, /*stall_worker=*/0);
  auto writer = ShmClient::connect(engine->name(), patient_client(std::chrono::seconds(60)));
  auto reader = ShmClient::connect(engine->name(), patient_client());
  auto other = ShmClient::connect(engine->name(), patient_client(std::chrono::seconds(5)));
  REQUIRE(writer.has_value());
  REQUIRE(reader.has_value());
  REQUIRE(other.has_value());
  ResponseSlot answer{};
  REQUIRE(reader->subscribe(combo_from_length(20), answer) == CallStatus::ok);
  ResponseSlot appended{};
  CallStatus append_status = CallStatus::ok;
  std::thread appending([&] { append_status = writer->append(series[3'000], 3'000, appended); });
  const DataHeader& header = reader->segment().header();
  const double limit_ms = static_cast<double>(stall_limit_ns(0)) / 1e6;
  const auto waiting_by = Clock::now() + std::chrono::milliseconds(static_cast<std::int64_t>(limit_ms) + 10'000);
  while (header.live_bar_waiting.load() != 1 && Clock::now() < waiting_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  REQUIRE(header.live_bar_waiting.load() == 1);
  // Before: the BACKTEST waited for the only worker, stopped for as long as the share was: a timeout here.
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::backtest);
  request.params = combo_from_length(30);
  const auto asked = Clock::now();
  REQUIRE(other->call(request, answer) == CallStatus::ok);
  const double waited_ms = ms_since(asked);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  CHECK(waited_ms < 1000.0);
  const auto expected = run_sweep(builtin(), std::span<const double>(series).first(3'000), std::vector<Combo>{request.params},
                                  kDefaultFee, 1);
  REQUIRE(expected.has_value());
  CHECK(answer.pnl == (*expected)[0].pnl);
  engine->release_stalled_worker();
  appending.join();
  CHECK(append_status == CallStatus::ok);
  CHECK(appended.status == static_cast<std::uint16_t>(Status::ok));
}

TEST_CASE("a worker the host does not run (its thread stopped from outside, as a busy host leaves it) is not a "
          "fault: its BACKTEST is computed elsewhere and answered right, and the worker serves again once it runs") {
  EngineChild engine(binary_under_test(), unique_segment_name("starved"),
                     {"--wait", "backoff", "--bars", "20000", "--workers", "1"});
  REQUIRE(engine.up());
  const pid_t worker = find_thread(engine.pid(), "ipcf-worker");
  REQUIRE(worker > 0);
  // Stop that one thread, and only it: a ptrace stop, as if the scheduler never picked it.
  if (::ptrace(PTRACE_SEIZE, worker, nullptr, nullptr) != 0) {
    MESSAGE("skipped: this process may not trace the engine's worker thread: " << std::strerror(errno));
    return;
  }
  REQUIRE(::ptrace(PTRACE_INTERRUPT, worker, nullptr, nullptr) == 0);
  int stopped = 0;
  REQUIRE(::waitpid(worker, &stopped, __WALL) == worker);
  REQUIRE(WIFSTOPPED(stopped));

  auto client = ShmClient::connect(engine.name(), patient_client(std::chrono::seconds(60)));
  REQUIRE(client.has_value());
  const std::vector<double> series(client->segment().series().begin(), client->segment().series().end());
  RequestSlot request{};
  request.opcode = static_cast<std::uint16_t>(Opcode::backtest);
  request.params = combo_from_length(300);  // dear: it goes to the worker
  const std::vector<Combo> one{request.params};
  const auto expected = run_sweep(builtin(), series, one, client->segment().header().fee, 1);
  REQUIRE(expected.has_value());
  ResponseSlot answer{};
  const auto start = Clock::now();
  REQUIRE(client->call(request, answer) == CallStatus::ok);
  const double waited_ms = ms_since(start);
  MESSAGE("answered " << waited_ms << " ms after the call, with the worker stopped");
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  CHECK(answer.pnl == (*expected)[0].pnl);
  CHECK(answer.trades == (*expected)[0].trades);
  const DataHeader& header = client->segment().header();
  CHECK(header.jobs_reclaimed.load() == 1);
  // The next dear BACKTEST does not wait for the stopped worker either (before: it waited for the
  // worker to run again, here forever: a timeout). It is computed at once, by the serving thread.
  auto impatient = ShmClient::connect(engine.name(), patient_client(std::chrono::seconds(5)));
  REQUIRE(impatient.has_value());
  const auto next_start = Clock::now();
  REQUIRE(impatient->call(request, answer) == CallStatus::ok);
  const double next_ms = ms_since(next_start);
  MESSAGE("the next dear BACKTEST, with the worker still stopped: answered after " << next_ms << " ms");
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  CHECK(answer.pnl == (*expected)[0].pnl);
  CHECK(next_ms < 1000.0);
  CHECK(header.jobs_reclaimed.load() == 1);  // nothing more was handed to it

  REQUIRE(::ptrace(PTRACE_DETACH, worker, nullptr, nullptr) == 0);  // the host runs it again
  for (int i = 0; i < 3; ++i) {
    REQUIRE(client->call(request, answer) == CallStatus::ok);
    CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
    CHECK(answer.pnl == (*expected)[0].pnl);
  }
  const auto back_by = Clock::now() + std::chrono::seconds(10);
  while (header.workers_stalled.load() != 0 && Clock::now() < back_by)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(header.workers_stalled.load() == 0);
}

}  // namespace ipcfloor
