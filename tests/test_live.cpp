// Live mode against a real engine process: bars appended through one lane, signals streamed to
// another, checked against the batch kernel on the whole series.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench/engine_child.hpp"
#include "clients/shm_client.hpp"
#include "data/gbm.hpp"
#include "kernel/cost.hpp"
#include "kernel/kernel.hpp"
#include "kernel/live_signal.hpp"

using namespace ipcfloor;

namespace {

std::string unique_name(const char* what) { return unique_segment_name(std::string("live-") + what); }

ShmClientOptions backoff_client() {
  ShmClientOptions options;
  options.wait = WaitMode::backoff;
  options.timeout = std::chrono::seconds(10);
  return options;
}

// A temporary .f64 file holding `close`.
struct SeriesFile {
  explicit SeriesFile(std::span<const double> close, const std::string& name)
      : path((std::filesystem::temp_directory_path() / (name + ".f64")).string()) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(close.data()), static_cast<std::streamsize>(close.size_bytes()));
  }
  ~SeriesFile() { std::filesystem::remove(path); }
  std::string path;
};

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The parity data sets: (bars, seed, mu, sigma), the same series the batch parity gate uses.
struct DataSet {
  std::size_t bars;
  std::uint64_t seed;
  double mu;
  double sigma;
};
constexpr DataSet kDataSets[] = {{150'000, 42, 0.05, 0.30}, {60'000, 7, 0.10, 0.50}, {20'000, 2024, 0.05, 0.20},
                                 {1'000, 99, 0.05, 0.30}};

Status status_of(const ResponseSlot& response) { return static_cast<Status>(response.status); }

// `count` clients of engine `name`, each on its own lane, every one attached (REQUIREd).
std::vector<ShmClient> connect_clients(const std::string& name, int count) {
  std::vector<ShmClient> clients;
  for (int i = 0; i < count; ++i) {
    auto client = ShmClient::connect(name, backoff_client());
    REQUIRE_MESSAGE(client.has_value(), (client ? "" : client.error().message));
    clients.push_back(std::move(*client));
  }
  return clients;
}

// A live engine of 1,000 bars whose lanes have 8 signal slots, a writer, and a reader that
// subscribed L=6 and L=9: four bars fill the reader's ring.
class EightSlotRing {
 public:
  explicit EightSlotRing(const char* what)
      : engine_(IPCFLOOR_BINARY, unique_name(what), {"--wait", "backoff", "--lanes", "3", "--bars", "1000", "--live",
                                                     "--capacity", "1100", "--signal-capacity", "8"}) {
    REQUIRE(engine_.up());
    clients_ = connect_clients(engine_.name(), 2);
    ResponseSlot answer{};
    for (const std::int64_t length : {6, 9}) {
      REQUIRE(reader()->subscribe(combo_from_length(length), answer) == CallStatus::ok);
      REQUIRE(status_of(answer) == Status::ok);
    }
  }
  [[nodiscard]] ShmClient* writer() { return &clients_[0]; }
  [[nodiscard]] ShmClient* reader() { return &clients_[1]; }

 private:
  EngineChild engine_;
  std::vector<ShmClient> clients_;
};

}  // namespace

TEST_CASE("a series replayed through feed gives every subscribed combo exactly the batch kernel's trades and pnl, "
          "bit for bit, on the four parity data sets, from a preload of part of each") {
  for (const DataSet& set : kDataSets) {
    CAPTURE(set.seed);
    GbmParams params;
    params.bars = set.bars;
    params.seed = set.seed;
    params.mu = set.mu;
    params.sigma = set.sigma;
    const std::vector<double> close = *generate_gbm(params);
    const std::size_t preload = close.size() * 3 / 5;
    const std::string name = unique_name("parity");
    SeriesFile file(std::span<const double>(close).first(preload), name);
    EngineChild engine(IPCFLOOR_BINARY, name,
                       {"--wait", "backoff", "--lanes", "2", "--live", "--capacity", std::to_string(close.size()),
                        "--signal-capacity", "65536", "--data", file.path});
    REQUIRE(engine.up());
    auto writer = ShmClient::connect(name, backoff_client());
    auto reader = ShmClient::connect(name, backoff_client());
    REQUIRE(writer.has_value());
    REQUIRE(reader.has_value());
    REQUIRE(reader->live());

    std::vector<Combo> combos;
    for (const std::int64_t length : {6, 8, 31, 100})
      if (static_cast<std::size_t>(length) * 2 < close.size()) combos.push_back(combo_from_length(length));
    for (std::size_t i = 0; i < combos.size(); ++i) {
      ResponseSlot answer{};
      REQUIRE(reader->subscribe(combos[i], answer) == CallStatus::ok);
      REQUIRE(status_of(answer) == Status::ok);
      CHECK(answer.extra[0] == static_cast<std::int64_t>(i));
      CHECK(answer.extra[1] == static_cast<std::int64_t>(preload));
      // The state after the preloaded bars is the batch kernel's on them.
      const auto batch = run_sweep(builtin(), std::span<const double>(close).first(preload), std::span(combos).subspan(i, 1), kDefaultFee, 1);
      REQUIRE(batch.has_value());
      CHECK(answer.trades == (*batch)[0].trades);
      CHECK(same_bits(answer.pnl, (*batch)[0].pnl));
    }

    // Bars in chunks, the signals drained after each: the ring never fills, so none is lost.
    std::vector<LiveBar> last(combos.size());
    std::vector<std::uint64_t> next_bar(combos.size(), preload);
    std::map<std::uint64_t, std::size_t> crossings;  // bar -> crossings seen there
    std::size_t sent = preload;
    while (sent < close.size()) {
      const std::size_t chunk_end = std::min(close.size(), sent + 8000);
      for (; sent < chunk_end; ++sent) {
        ResponseSlot answer{};
        REQUIRE(writer->append(close[sent], sent, answer) == CallStatus::ok);
        REQUIRE(status_of(answer) == Status::ok);
        REQUIRE(answer.trades == static_cast<std::int64_t>(sent + 1));
      }
      SignalSlot signal{};
      std::size_t got = 0;
      while (reader->poll_signal(signal) == CallStatus::ok) {
        ++got;
        REQUIRE(signal.subscription < combos.size());
        const std::size_t k = signal.subscription;
        CHECK(signal.flags == 0);
        CHECK(signal.dropped == 0);
        REQUIRE(signal.bar == next_bar[k]);
        CHECK(signal.tick == signal.bar);  // the append's tick, carried back
        ++next_bar[k];
        if (signal.cross != 0) ++crossings[signal.bar];
        last[k] = LiveBar{{signal.value[0], signal.value[1], signal.cross}, signal.position, signal.pnl, signal.trades};
      }
      CHECK(got > 0);
    }
    for (std::size_t k = 0; k < combos.size(); ++k) {
      CAPTURE(combos[k].L);
      CHECK(next_bar[k] == close.size());
      const auto batch = run_sweep(builtin(), close, std::span(combos).subspan(k, 1), kDefaultFee, 1);
      REQUIRE(batch.has_value());
      CHECK(last[k].trades == (*batch)[0].trades);
      CHECK_MESSAGE(same_bits(last[k].pnl, (*batch)[0].pnl), last[k].pnl << " vs " << (*batch)[0].pnl);
    }
    CHECK(reader->signals_dropped() == 0);
    CHECK_FALSE(crossings.empty());
  }
}

TEST_CASE("appends past --capacity get capacity_full and overwrite nothing; a second writer, a bad price and a "
          "non-live engine are refused by name") {
  const std::string name = unique_name("refusals");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--lanes", "3", "--bars", "500", "--live",
                                             "--capacity", "503"});
  REQUIRE(engine.up());
  auto writer = ShmClient::connect(name, backoff_client());
  auto other = ShmClient::connect(name, backoff_client());
  REQUIRE(writer.has_value());
  REQUIRE(other.has_value());
  ResponseSlot answer{};
  REQUIRE(writer->append(std::nan(""), 0, answer) == CallStatus::ok);
  CHECK(status_of(answer) == Status::bad_price);
  REQUIRE(writer->append(-1.0, 0, answer) == CallStatus::ok);
  CHECK(status_of(answer) == Status::bad_price);
  for (const double price : {101.0, 102.0, 103.0}) {
    REQUIRE(writer->append(price, 0, answer) == CallStatus::ok);
    CHECK(status_of(answer) == Status::ok);
  }
  REQUIRE(other->append(99.0, 0, answer) == CallStatus::ok);
  CHECK(status_of(answer) == Status::not_the_writer);
  REQUIRE(writer->append(104.0, 0, answer) == CallStatus::ok);
  CHECK(status_of(answer) == Status::capacity_full);
  const auto series = other->segment().published_series();
  REQUIRE(series.size() == 503);
  CHECK(series[500] == 101.0);
  CHECK(series[502] == 103.0);
  // The writer leaves: the next client to append becomes the writer (and finds the series full).
  writer = std::unexpected(Error{ErrorCode::io, "closed"});
  bool took_over = false;
  for (int i = 0; i < 300 && !took_over; ++i) {
    REQUIRE(other->append(99.0, 0, answer) == CallStatus::ok);
    took_over = status_of(answer) == Status::capacity_full;
    if (!took_over) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(took_over);

  const std::string plain = unique_name("not-live");
  EngineChild frozen(IPCFLOOR_BINARY, plain, {"--wait", "backoff", "--bars", "500"});
  REQUIRE(frozen.up());
  auto client = ShmClient::connect(plain, backoff_client());
  REQUIRE(client.has_value());
  CHECK_FALSE(client->live());
  REQUIRE(client->append(100.0, 0, answer) == CallStatus::ok);
  CHECK(status_of(answer) == Status::not_live);
  REQUIRE(client->subscribe(combo_from_length(6), answer) == CallStatus::ok);
  CHECK(status_of(answer) == Status::not_live);
}

TEST_CASE("a slow subscriber loses frames, counted and flagged, never stalls the writer or another subscriber, and "
          "a snapshot re-synchronises it; a lane that subscribes nothing is untouched") {
  const std::string name = unique_name("slow");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--lanes", "4", "--bars", "2000", "--live",
                                             "--capacity", "12000", "--signal-capacity", "64"});
  REQUIRE(engine.up());
  auto clients = connect_clients(name, 3);
  ShmClient* writer = &clients[0];
  ShmClient* slow = &clients[1];
  ShmClient* idle = &clients[2];
  ResponseSlot answer{};
  REQUIRE(slow->subscribe(combo_from_length(6), answer) == CallStatus::ok);
  REQUIRE(status_of(answer) == Status::ok);
  // 1,000 bars and nobody reads: the 64-slot ring fills and the rest are dropped; every append
  // is still answered.
  const auto series = writer->segment().published_series();
  for (int i = 0; i < 1000; ++i) {
    REQUIRE(writer->append(series[static_cast<std::size_t>(i)], 0, answer) == CallStatus::ok);
    REQUIRE(status_of(answer) == Status::ok);
  }
  CHECK(slow->signals_dropped() == 1000 - 64);
  SignalSlot signal{};
  int delivered = 0;
  while (slow->poll_signal(signal) == CallStatus::ok) {
    ++delivered;
    CHECK(signal.flags == 0);
  }
  CHECK(delivered == 64);
  // The next frame says what was lost.
  REQUIRE(writer->append(100.0, 0, answer) == CallStatus::ok);
  REQUIRE(slow->poll_signal(signal) == CallStatus::ok);
  CHECK((signal.flags & kSignalGap) != 0);
  CHECK(signal.dropped == 1000 - 64);
  CHECK(signal.bar == 3000);
  // A snapshot brings the state after the last bar, which is the batch kernel's.
  REQUIRE(slow->snapshot(answer) == CallStatus::ok);
  CHECK(answer.trades == 1);
  REQUIRE(slow->poll_signal(signal) == CallStatus::ok);
  CHECK((signal.flags & kSignalSnapshot) != 0);
  CHECK(signal.bar == 3000);
  const auto whole = writer->segment().published_series();
  REQUIRE(whole.size() == 3001);
  const auto batch = run_sweep(builtin(), whole, std::vector<Combo>{combo_from_length(6)}, kDefaultFee, 1);
  REQUIRE(batch.has_value());
  CHECK(signal.trades == (*batch)[0].trades);
  CHECK(same_bits(signal.pnl, (*batch)[0].pnl));
  // The lane that subscribed nothing never had a frame written to its signal ring.
  CHECK(idle->poll_signal(signal) == CallStatus::empty);
  // relaxed: the engine's position, read after everything it wrote was answered.
  CHECK(idle->segment().lane().view().signal_ring->produced.load(std::memory_order_relaxed) == 0);
}

TEST_CASE("a SNAPSHOT that its lane's full signal ring has no room for is answered signals_full, nothing dropped; "
          "drained, the same SNAPSHOT delivers one frame per subscription") {
  EightSlotRing live("full");
  ShmClient* writer = live.writer();
  ShmClient* reader = live.reader();
  ResponseSlot answer{};
  // Four bars, two subscriptions: the 8-slot ring is full and nothing was dropped yet.
  const auto series = writer->segment().published_series();
  for (int i = 0; i < 4; ++i) {
    REQUIRE(writer->append(series[static_cast<std::size_t>(i)], 0, answer) == CallStatus::ok);
    REQUIRE(status_of(answer) == Status::ok);
  }
  REQUIRE(reader->snapshot(answer) == CallStatus::ok);
  CHECK(status_of(answer) == Status::signals_full);
  CHECK(reader->signals_dropped() == 0);  // the snapshot was refused, not written and lost
  SignalSlot signal{};
  int delivered = 0;
  while (reader->poll_signal(signal) == CallStatus::ok) {
    CHECK((signal.flags & kSignalSnapshot) == 0);  // the eight bar signals, no snapshot among them
    ++delivered;
  }
  CHECK(delivered == 8);
  REQUIRE(reader->snapshot(answer) == CallStatus::ok);
  CHECK(status_of(answer) == Status::ok);
  int snapshots = 0;
  while (reader->poll_signal(signal) == CallStatus::ok) snapshots += (signal.flags & kSignalSnapshot) != 0;
  CHECK(snapshots == 2);
}

TEST_CASE("a paced APPEND is taken only while every subscription's signal fits its ring: otherwise it is answered "
          "subscribers_behind naming the lane, with nothing appended or dropped; an unpaced one drops instead") {
  EightSlotRing live("paced");
  ShmClient* writer = live.writer();
  ShmClient* reader = live.reader();
  ResponseSlot answer{};
  const auto series = writer->segment().published_series();
  // Two subscriptions, eight slots: four paced bars fit, the fifth does not.
  for (int i = 0; i < 4; ++i) {
    REQUIRE(writer->append(series[static_cast<std::size_t>(i)], 0, answer, kAppendPaced) == CallStatus::ok);
    REQUIRE(status_of(answer) == Status::ok);
  }
  REQUIRE(writer->append(series[4], 0, answer, kAppendPaced) == CallStatus::ok);
  CHECK(status_of(answer) == Status::subscribers_behind);
  CHECK(answer.extra[0] == reader->lane());
  CHECK(answer.extra[1] == 8);  // its unread signals
  CHECK(answer.extra[2] == 2);  // its subscriptions
  CHECK(writer->segment().published_series().size() == 1004);  // nothing appended
  CHECK(reader->signals_dropped() == 0);
  // Drained by one bar's worth, the same paced APPEND is taken.
  SignalSlot signal{};
  REQUIRE(reader->poll_signal(signal) == CallStatus::ok);
  REQUIRE(reader->poll_signal(signal) == CallStatus::ok);
  REQUIRE(writer->append(series[4], 0, answer, kAppendPaced) == CallStatus::ok);
  CHECK(status_of(answer) == Status::ok);
  CHECK(answer.trades == 1005);
  // Unpaced, the engine never waits for anyone: the bar is taken and the full ring drops.
  REQUIRE(writer->append(series[5], 0, answer) == CallStatus::ok);
  CHECK(status_of(answer) == Status::ok);
  CHECK(reader->signals_dropped() == 2);
  // A paced APPEND with any other flag bit is refused as such.
  REQUIRE(writer->append(series[6], 0, answer, kAppendPaced | 0x0100) == CallStatus::ok);
  CHECK(status_of(answer) == Status::reserved_bits_set);
}

TEST_CASE("a subscriber that writes an impossible position on its signal ring is quarantined alone; the writer and "
          "other subscribers go on") {
  const std::string name = unique_name("hostile");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--lanes", "3", "--bars", "1000", "--live",
                                             "--capacity", "2000", "--signal-capacity", "64"});
  REQUIRE(engine.up());
  auto clients = connect_clients(name, 3);
  ShmClient* writer = &clients[0];
  ShmClient* hostile = &clients[1];
  ShmClient* good = &clients[2];
  ResponseSlot answer{};
  REQUIRE(hostile->subscribe(combo_from_length(6), answer) == CallStatus::ok);
  REQUIRE(good->subscribe(combo_from_length(8), answer) == CallStatus::ok);
  RingControl& ring = *hostile->segment().lane().view().signal_ring;
  // relaxed: a hostile write; the engine bounds-checks it when the ring looks full.
  ring.consumed.store(12345, std::memory_order_relaxed);
  SignalSlot signal{};
  for (int i = 0; i < 100; ++i) {
    REQUIRE(writer->append(100.0 + i, 0, answer) == CallStatus::ok);
    REQUIRE(status_of(answer) == Status::ok);
    REQUIRE(good->poll_signal(signal) == CallStatus::ok);
    CHECK(signal.bar == 1000u + static_cast<unsigned>(i));
  }
  auto watch = hostile->segment().header().lanes_corrupt.load(std::memory_order_relaxed);  // relaxed: polled
  CHECK(watch == 1);
}

TEST_CASE("a writer SIGKILLed mid-stream leaves a consistent series: the subscriber's signals cover every published "
          "bar and equal the batch kernel's on them, backtests on another lane go on, and a new writer takes over") {
  const std::string name = unique_name("writer-dies");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--lanes", "3", "--bars", "5000", "--live",
                                             "--capacity", "300000", "--signal-capacity", "262144"});
  REQUIRE(engine.up());
  auto reader = ShmClient::connect(name, backoff_client());
  REQUIRE(reader.has_value());
  ResponseSlot answer{};
  REQUIRE(reader->subscribe(combo_from_length(8), answer) == CallStatus::ok);
  REQUIRE(status_of(answer) == Status::ok);
  auto analyst = ShmClient::connect(name, backoff_client());
  REQUIRE(analyst.has_value());

  const pid_t writer = ::fork();
  if (writer == 0) {
    auto client = ShmClient::connect(name, backoff_client());
    if (!client) ::_exit(3);
    double close = client->segment().published_series().back();
    // At most 200,000 bars (the subscriber's ring holds them all), then it waits to be killed.
    for (std::uint64_t i = 0; i < 200'000; ++i) {
      close *= (i % 7 < 3) ? 1.0007 : 0.9996;
      ResponseSlot reply{};
      if (client->append(close, i, reply) != CallStatus::ok || static_cast<Status>(reply.status) != Status::ok)
        ::_exit(4);
    }
    for (;;) ::pause();
  }
  REQUIRE(writer > 0);
  // Let it write for a while, asking backtests of the growing series meanwhile: 300 ms and at
  // least 11 answers (a sanitizer build computes some twenty times slower; 30 s at most).
  std::size_t backtests = 0;
  const auto started = std::chrono::steady_clock::now();
  const auto busy_for = [&] { return std::chrono::steady_clock::now() - started; };
  while ((busy_for() < std::chrono::milliseconds(300) || backtests <= 10) && busy_for() < std::chrono::seconds(30)) {
    RequestSlot backtest{};
    backtest.opcode = static_cast<std::uint16_t>(Opcode::backtest);
    backtest.params = combo_from_length(20);
    REQUIRE(analyst->call(backtest, answer) == CallStatus::ok);
    CHECK(status_of(answer) == Status::ok);
    ++backtests;
  }
  ::kill(writer, SIGKILL);
  int status = 0;
  REQUIRE(::waitpid(writer, &status, 0) == writer);
  CHECK(WIFSIGNALED(status));
  MESSAGE(backtests << " backtests answered in "
                     << std::chrono::duration<double, std::milli>(busy_for()).count() << " ms while the writer streamed");
  CHECK(backtests > 10);

  // Whatever moment it died at, the published series is whole and the signals match it.
  const auto series = reader->segment().published_series();
  REQUIRE(series.size() > 5000);
  SignalSlot signal{};
  std::uint64_t next_bar = 5000;
  std::optional<SignalSlot> last;
  while (reader->poll_signal(signal) == CallStatus::ok) {
    REQUIRE(signal.bar == next_bar);
    ++next_bar;
    last = signal;
  }
  REQUIRE(last.has_value());
  CHECK(next_bar == series.size());
  for (const double close : series) REQUIRE((std::isfinite(close) && close > 0.0));
  const auto batch = run_sweep(builtin(), series, std::vector<Combo>{combo_from_length(8)}, kDefaultFee, 1);
  REQUIRE(batch.has_value());
  CHECK(last->trades == (*batch)[0].trades);
  CHECK(same_bits(last->pnl, (*batch)[0].pnl));

  // Its lane is reclaimed, and the next client to append is the writer.
  auto successor = ShmClient::connect(name, backoff_client());
  REQUIRE(successor.has_value());
  bool appended = false;
  for (int i = 0; i < 300 && !appended; ++i) {
    REQUIRE(successor->append(series.back(), 0, answer) == CallStatus::ok);
    appended = status_of(answer) == Status::ok;
    if (!appended) {
      CHECK(status_of(answer) == Status::not_the_writer);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  CHECK(appended);
  CHECK(answer.trades == static_cast<std::int64_t>(series.size() + 1));
}

TEST_CASE("subscriptions are refused too_costly once one APPEND would cost them more than the bound per bar, so "
          "no client can make every bar hold the serving thread") {
  const std::string name = unique_name("costly");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--lanes", "2", "--bars", "2", "--live",
                                             "--capacity", "1000000", "--max-bar-cost", "120000"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(name, backoff_client());
  REQUIRE(client.has_value());
  const std::uint64_t bound = client->segment().header().max_bar_cost;
  REQUIRE(bound == 120'000);  // as given, in work units: the same verdicts on every host
  // Long windows where nothing is stored (h, L, p3, p2), short ones where history is (s, p).
  const std::int64_t w = std::clamp<std::int64_t>(static_cast<std::int64_t>(bound / 12), 1, 1'000'000);
  const Combo heavy{w, w, 1, w, w, 1};
  const std::uint64_t per_bar = backtest_cost(heavy, 1);
  REQUIRE(2 * per_bar <= bound);  // its replay of the 2 preloaded bars fits
  std::uint64_t accepted = 0;
  ResponseSlot answer{};
  for (int i = 0; i < 64; ++i) {
    REQUIRE(client->subscribe(heavy, answer) == CallStatus::ok);
    if (status_of(answer) != Status::ok) break;
    ++accepted;
  }
  CHECK(status_of(answer) == Status::too_costly);
  CHECK(accepted >= 1);
  CHECK(accepted * per_bar <= bound);
  CHECK((accepted + 1) * per_bar > bound);
  // The subscriptions it holds still get their signals.
  REQUIRE(client->append(100.0, 7, answer) == CallStatus::ok);
  REQUIRE(status_of(answer) == Status::ok);
  SignalSlot signal{};
  std::uint64_t signals = 0;
  while (client->poll_signal(signal) == CallStatus::ok) {
    CHECK(signal.tick == 7);
    ++signals;
  }
  CHECK(signals == accepted);
}
