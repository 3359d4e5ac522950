// The C++ facade (include/ipcfloor/client.hpp) as a consumer sees it: compiled as C++20 with
// nothing but the public header, linked to the shared libipcfloorcpp, against a live engine.

#include <doctest/doctest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <new>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "ipcfloor/client.hpp"

extern char** environ;

// Every operator new in the process, the shared library's included (it calls the global one
// through the dynamic linker, which finds this definition first).
namespace {
std::atomic<std::uint64_t> g_allocations{0};
}  // namespace

void* operator new(std::size_t bytes) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);  // relaxed: a count read after the calls
  if (void* memory = std::malloc(bytes == 0 ? 1 : bytes)) return memory;
  throw std::bad_alloc();
}
// GCC 12 inlines these into callers and then warns that free() does not match operator new,
// which is exactly the malloc these replacements pair it with.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }
#pragma GCC diagnostic pop

namespace {

constexpr int kBars = 2000;

struct Row {
  ipcfloor::Params params;
  double pnl;
  std::int64_t trades;
};

// `ipcfloor sweep --inproc --json --quiet ARGS`: one row per combo.
std::vector<Row> reference_rows(const std::string& args) {
  const std::string command = std::string(IPCFLOOR_BINARY) + " sweep --inproc --json --quiet " + args;
  std::vector<Row> rows;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char line[512];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    Row row{};
    long long length = 0;
    long long p[6];
    long long trades = 0;
    if (std::sscanf(line, "{\"L\":%lld,\"params\":[%lld,%lld,%lld,%lld,%lld,%lld],\"pnl\":%lf,\"trades\":%lld}", &length,
                    &p[0], &p[1], &p[2], &p[3], &p[4], &p[5], &row.pnl, &trades) == 9) {
      for (int k = 0; k < 6; ++k) row.params[static_cast<std::size_t>(k)] = p[k];
      row.trades = trades;
      rows.push_back(row);
    }
  }
  pclose(pipe);
  return rows;
}

std::vector<Row> reference(const std::string& lengths, int bars = kBars) {
  return reference_rows("--bars " + std::to_string(bars) + " --seed 3 --lengths " + lengths);
}

// `ipcfloor serve` for the length of a test case; SIGINT and a bounded reap on the way out.
// bars 0: no generated series (extra names the --data files).
class Engine {
 public:
  explicit Engine(std::string name, int bars = kBars, const std::vector<std::string>& extra = {})
      : name_(std::move(name)) {
    std::vector<std::string> args = {IPCFLOOR_BINARY, "serve", "--name", name_, "--wait", "backoff", "--quiet"};
    if (bars > 0) args.insert(args.end(), {"--bars", std::to_string(bars), "--seed", "3"});
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    REQUIRE(posix_spawn(&pid_, IPCFLOOR_BINARY, nullptr, nullptr, argv.data(), environ) == 0);
  }
  ~Engine() { stop(); }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  ipcfloor::Client attach() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (;;) {
      try {
        return ipcfloor::Client::attach(name_, {std::chrono::seconds(5), ipcfloor::Wait::backoff});
      } catch (const ipcfloor::ClientError& error) {
        if (std::chrono::steady_clock::now() > deadline) FAIL("no engine within 10 s: " << error.what());
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }
  }

  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGINT);
    int status = 0;
    for (int i = 0; i < 1000 && waitpid(pid_, &status, WNOHANG) != pid_; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (kill(pid_, 0) == 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, &status, 0);
    }
    pid_ = -1;
  }

  [[nodiscard]] const std::string& name() const { return name_; }
  [[nodiscard]] pid_t pid() const { return pid_; }

 private:
  std::string name_;
  pid_t pid_ = -1;
};

}  // namespace

TEST_CASE("ipcfloor::Client: series, backtest and sweep equal `sweep --inproc` bit for bit; errors are ClientError") {
  static_assert(__cplusplus == 202002L, "this suite checks the public header under C++20");
  const auto rows = reference("6,9,14,30,77,150,200");
  REQUIRE(rows.size() == 7);

  Engine engine("ipcfloor-cpptest-" + std::to_string(getpid()));
  ipcfloor::Client client = engine.attach();
  CHECK(client.bars() == kBars);
  CHECK(client.series().size() == kBars);
  CHECK(client.fee() == 0.09);
  CHECK(client.series_name().find("gbm") != std::string_view::npos);
  CHECK(client.engine_name() == engine.name());
  CHECK(client.engine_pid() == engine.pid());
  // Where the engine runs: its serving cpu and the cpus nearest it; a thread pinned near it gets the first.
  const std::vector<std::int32_t> near = client.near_cpus();
  CHECK(client.serving_cpu() >= 0);
  CHECK(std::find(near.begin(), near.end(), client.serving_cpu()) == near.end());
  if (!near.empty()) {
    std::int32_t pinned = -1;
    std::thread([&] {
      try {
        pinned = client.pin_near();
      } catch (const ipcfloor::ClientError&) {
      }
    }).join();
    CHECK(pinned == near.front());
  }
  CHECK(client.series_count() == 1);
  CHECK(client.series_key(0) == "default");
  CHECK(client.series_at(0).data() == client.series().data());
  CHECK(client.series_at(0).size() == kBars);
  CHECK(ipcfloor::params_from_length(6) == ipcfloor::Params{3, 6, 2, 1, 2, 3});

  std::vector<ipcfloor::Params> grid;
  for (const Row& row : rows) grid.push_back(row.params);
  std::vector<ipcfloor::Result> results(grid.size());
  CHECK(client.sweep(grid, results) == 0);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    CAPTURE(i);
    CHECK(results[i].status == IPCFLOOR_OK);
    CHECK(std::memcmp(&results[i].pnl, &rows[i].pnl, sizeof(double)) == 0);
    CHECK(results[i].trades == rows[i].trades);
    const ipcfloor::Result one = client.backtest(grid[i]);
    CHECK(std::memcmp(&one.pnl, &rows[i].pnl, sizeof(double)) == 0);
    CHECK(one.trades == rows[i].trades);
  }

  // The request path allocates nothing: backtest, sweep and echo, many times over.
  {
    const auto before = g_allocations.load(std::memory_order_relaxed);
    for (int i = 0; i < 200; ++i) {
      (void)client.backtest(grid[static_cast<std::size_t>(i) % grid.size()]);
      (void)client.echo(grid[0]);
      (void)client.sweep(grid, results);
    }
    CHECK(g_allocations.load(std::memory_order_relaxed) == before);
  }

  // A refused combo is a per-combo status in a sweep and a ClientError from backtest.
  grid[2][0] = kBars + 1;
  CHECK(client.sweep(grid, results) == 1);
  CHECK(results[2].status == IPCFLOOR_E_WINDOW);
  CHECK(std::isnan(results[2].pnl));
  CHECK(results[3].trades == rows[3].trades);
  const auto before_refusal = g_allocations.load(std::memory_order_relaxed);
  try {
    (void)client.backtest(grid[2]);
    FAIL("a window past the bars must throw");
  } catch (const ipcfloor::ClientError& error) {
    // The error's message is built inside the library: the counter sees what the library allocates.
    CHECK(g_allocations.load(std::memory_order_relaxed) > before_refusal);
    CHECK(error.code() == IPCFLOOR_E_WINDOW);
    CHECK(std::string(error.what()).find("parameter h (position 0) is 2001") != std::string::npos);
  }
  CHECK_THROWS_AS(client.sweep(grid, std::span(results).first(2)), ipcfloor::ClientError);
  const ipcfloor::Params odd{-1, 0, 1, std::numeric_limits<std::int64_t>::min(), 5,
                             std::numeric_limits<std::int64_t>::max()};
  CHECK(client.echo(odd) == odd);

  // Moving keeps the lane; the engine going away is a ClientError naming it.
  ipcfloor::Client moved = std::move(client);
  CHECK(moved.backtest(grid[0]).trades == rows[0].trades);
  engine.stop();
  try {
    (void)moved.backtest(grid[0]);
    FAIL("a stopped engine must throw");
  } catch (const ipcfloor::ClientError& error) {
    CHECK(error.code() == IPCFLOOR_E_ENGINE_GONE);
    CHECK(std::string(error.what()).find(engine.name()) != std::string::npos);
  }
}

TEST_CASE("ipcfloor::Client::attach names what is missing") {
  const std::string name = "ipcfloor-cpptest-nobody-" + std::to_string(getpid());
  try {
    (void)ipcfloor::Client::attach(name);
    FAIL("attach without an engine must throw");
  } catch (const ipcfloor::ClientError& error) {
    CHECK(error.code() == IPCFLOOR_E_NO_ENGINE);
    CHECK(std::string(error.what()).find(name) != std::string::npos);
  }
  CHECK_THROWS_AS((void)ipcfloor::Client::attach(name, {std::chrono::nanoseconds(0), ipcfloor::Wait::spin}),
                  ipcfloor::ClientError);
  CHECK_THROWS_AS((void)ipcfloor::params_from_length(0), ipcfloor::ClientError);
}

namespace {

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// `ipcfloor gen --bars N --seed SEED -o PATH`, read back (PATH removed unless keep).
std::vector<double> generated(int bars, int seed = 3, const std::string& path_given = "", bool keep = false) {
  const std::string path =
      path_given.empty() ? "/tmp/ipcfloor-cpptest-" + std::to_string(getpid()) + ".f64" : path_given;
  const std::string command = std::string(IPCFLOOR_BINARY) + " gen --bars " + std::to_string(bars) + " --seed " +
                              std::to_string(seed) + " -o " + path + " >/dev/null 2>&1";
  REQUIRE(std::system(command.c_str()) == 0);
  std::vector<double> close(static_cast<std::size_t>(bars));
  FILE* file = std::fopen(path.c_str(), "rb");
  REQUIRE(file != nullptr);
  const std::size_t read = std::fread(close.data(), sizeof(double), close.size(), file);
  std::fclose(file);
  if (!keep) std::remove(path.c_str());
  REQUIRE(read == close.size());
  return close;
}

// Files removed however the test case ends (a FAIL throws past its last lines).
struct RemovedAtEnd {
  std::vector<std::string> paths;
  ~RemovedAtEnd() {
    for (const std::string& path : paths) std::remove(path.c_str());
  }
};

template <class Call>
ipcfloor::ClientError thrown_by(Call&& call) {
  try {
    call();
  } catch (const ipcfloor::ClientError& error) {
    return error;
  }
  FAIL("no ClientError was thrown");
  return ipcfloor::ClientError(IPCFLOOR_OK, "");
}

bool says(const ipcfloor::ClientError& error, std::string_view part) {
  return std::string_view(error.what()).find(part) != std::string_view::npos;
}

}  // namespace

TEST_CASE("ipcfloor::Client live: appended bars stream signals whose pnl and trades equal `sweep --inproc` bit for "
          "bit; append and poll_signal allocate nothing; every refusal is a ClientError saying what was wrong") {
  constexpr int kPreload = 200;
  constexpr int kLive = 240;
  const auto before = reference("6", kPreload);
  const auto after = reference("6", kLive);
  REQUIRE(before.size() == 1);
  REQUIRE(after.size() == 1);
  const std::vector<double> close = generated(kLive);

  Engine engine("ipcfloor-cpptest-live-" + std::to_string(getpid()), kPreload,
                {"--live", "--capacity", std::to_string(kLive), "--lanes", "3", "--subscriptions", "1"});
  ipcfloor::Client writer = engine.attach();
  ipcfloor::Client reader = engine.attach();
  CHECK(reader.live());
  CHECK(reader.capacity() == kLive);
  REQUIRE(reader.published_series().size() == kPreload);
  CHECK(std::memcmp(reader.published_series().data(), close.data(), kPreload * sizeof(double)) == 0);

  // Nothing pending: nothing returned, at once, and nothing allocated.
  auto allocations = g_allocations.load(std::memory_order_relaxed);
  const auto polled_at = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) CHECK_FALSE(reader.poll_signal().has_value());
  CHECK(std::chrono::steady_clock::now() - polled_at < std::chrono::milliseconds(50));
  CHECK(g_allocations.load(std::memory_order_relaxed) == allocations);

  const ipcfloor::Subscription sub = reader.subscribe(ipcfloor::params_from_length(6));
  CHECK(sub.id == 0);
  CHECK(sub.state.bar == kPreload - 1);
  CHECK(sub.state.flags == IPCFLOOR_SIGNAL_SNAPSHOT);
  CHECK(sub.state.trades == before[0].trades);
  CHECK(same_bits(sub.state.pnl, before[0].pnl));
  auto error = thrown_by([&] { (void)reader.subscribe(ipcfloor::params_from_length(8)); });
  CHECK(error.code() == IPCFLOOR_E_NO_ROOM);
  CHECK(says(error, "already holds 1 subscriptions"));
  error = thrown_by([&] { (void)reader.subscribe({3, kLive + 1, 2, 1, 2, 3}); });
  CHECK(error.code() == IPCFLOOR_E_WINDOW);
  CHECK(says(error, "parameter L (position 1) is 241, refused by strategy hma for a series of 240 bars"));

  error = thrown_by([&] { (void)writer.append(0.0); });
  CHECK(error.code() == IPCFLOOR_E_BAD_PRICE);
  CHECK(says(error, "close 0 on lane"));
  CHECK(says(error, "finite number > 0"));

  // The rest of the bars: the hot path allocates nothing.
  allocations = g_allocations.load(std::memory_order_relaxed);
  // Every other bar paced: the reader's ring has room, so each is taken at once.
  for (int i = kPreload; i < kLive; ++i) {
    const double bar = close[static_cast<std::size_t>(i)];
    CHECK((i % 2 == 0 ? writer.append(bar, 7) : writer.append_paced(bar, 7)) == std::uint64_t(i + 1));
  }
  CHECK(g_allocations.load(std::memory_order_relaxed) == allocations);
  error = thrown_by([&] { (void)reader.append(100.0); });
  CHECK(error.code() == IPCFLOOR_E_NOT_WRITER);
  CHECK(says(error, "another client is the series' writer"));
  error = thrown_by([&] { (void)writer.append(100.0); });
  CHECK(error.code() == IPCFLOOR_E_CAPACITY_FULL);
  CHECK(says(error, engine.name()));
  CHECK(says(error, "the series is full at its 240 bars"));
  CHECK(reader.published_series().size() == kLive);

  allocations = g_allocations.load(std::memory_order_relaxed);
  ipcfloor::Signal last{};
  std::uint64_t next_bar = kPreload;
  for (int i = 0; i < kLive - kPreload; ++i) {
    const std::optional<ipcfloor::Signal> got = i % 2 == 0 ? std::optional(reader.wait_signal()) : reader.poll_signal();
    REQUIRE(got.has_value());
    CHECK(got->bar == next_bar++);
    CHECK(got->tick == 7);
    CHECK(got->flags == 0);
    last = *got;
  }
  CHECK(g_allocations.load(std::memory_order_relaxed) == allocations);
  CHECK_FALSE(reader.poll_signal().has_value());
  CHECK(last.bar == kLive - 1);
  CHECK(last.trades == after[0].trades);
  CHECK_MESSAGE(same_bits(last.pnl, after[0].pnl), last.pnl << " vs " << after[0].pnl);

  CHECK(reader.snapshot() == 1);
  const ipcfloor::Signal now = reader.wait_signal();
  CHECK((now.flags & IPCFLOOR_SIGNAL_SNAPSHOT) != 0);
  CHECK(now.trades == after[0].trades);
  CHECK(same_bits(now.pnl, after[0].pnl));
  CHECK(reader.signals_dropped() == 0);
  CHECK(writer.snapshot() == 0);

  // A plain engine refuses every live call by name.
  Engine plain("ipcfloor-cpptest-plain-" + std::to_string(getpid()));
  ipcfloor::Client client = plain.attach();
  CHECK_FALSE(client.live());
  CHECK(client.capacity() == kBars);
  for (const auto& call : std::vector<std::function<void()>>{
           [&] { (void)client.append(100.0); }, [&] { (void)client.subscribe(ipcfloor::params_from_length(6)); },
           [&] { (void)client.snapshot(); }, [&] { (void)client.poll_signal(); }, [&] { (void)client.wait_signal(); }}) {
    error = thrown_by(call);
    CHECK(error.code() == IPCFLOOR_E_NOT_LIVE);
    CHECK(says(error, "is not live"));
    CHECK(says(error, "ipcfloor serve --name " + plain.name() + " --live"));
  }
}

TEST_CASE("ipcfloor::Client on an engine of two series: the table, zero-copy bars equal to the files, backtest and "
          "sweep on series 1 equal `sweep --inproc --data B` bit for bit, windows judged against the series named, "
          "and an index past the table is IPCFLOOR_E_NO_SUCH_SERIES") {
  const std::string a_key = "ipcfloor-cpptest-" + std::to_string(getpid()) + "-ES";
  const std::string b_key = "ipcfloor-cpptest-" + std::to_string(getpid()) + "-NQ";
  const std::string a_path = "/tmp/" + a_key + ".f64";
  const std::string b_path = "/tmp/" + b_key + ".f64";
  const RemovedAtEnd remove_files{{a_path, b_path}};
  const std::vector<double> a_close = generated(1200, 31, a_path, true);
  const std::vector<double> b_close = generated(1800, 32, b_path, true);
  const auto a_rows = reference_rows("--data " + a_path + " --grid 6:200:15");
  const auto b_rows = reference_rows("--data " + b_path + " --grid 6:200:15");
  REQUIRE(a_rows.size() == 15);
  REQUIRE(b_rows.size() == 15);

  Engine engine("ipcfloor-cpptest-two-" + std::to_string(getpid()), 0,
                {"--data", a_path, "--data", b_path, "--lanes", "1"});
  ipcfloor::Client client = engine.attach();
  REQUIRE(client.series_count() == 2);
  CHECK(client.series_key(0) == a_key);
  CHECK(client.series_key(1) == b_key);
  CHECK(client.series_key(2).empty());
  CHECK(client.series_at(0).data() == client.series().data());
  REQUIRE(client.series_at(0).size() == a_close.size());
  REQUIRE(client.series_at(1).size() == b_close.size());
  CHECK(std::memcmp(client.series_at(0).data(), a_close.data(), a_close.size() * sizeof(double)) == 0);
  CHECK(std::memcmp(client.series_at(1).data(), b_close.data(), b_close.size() * sizeof(double)) == 0);
  CHECK(client.series_at(2).empty());

  std::vector<ipcfloor::Params> grid;
  for (const Row& row : b_rows) grid.push_back(row.params);
  std::vector<ipcfloor::Result> results(grid.size());
  const auto allocations = g_allocations.load(std::memory_order_relaxed);
  CHECK(client.sweep(grid, results, 1) == 0);
  CHECK(g_allocations.load(std::memory_order_relaxed) == allocations);
  for (std::size_t i = 0; i < grid.size(); ++i) {
    CAPTURE(i);
    CHECK(results[i].status == IPCFLOOR_OK);
    CHECK(same_bits(results[i].pnl, b_rows[i].pnl));
    CHECK(results[i].trades == b_rows[i].trades);
    const ipcfloor::Result one = client.backtest(grid[i], 1);
    CHECK(same_bits(one.pnl, b_rows[i].pnl));
    CHECK(one.trades == b_rows[i].trades);
    const ipcfloor::Result main = client.backtest(grid[i]);
    CHECK(same_bits(main.pnl, a_rows[i].pnl));
    CHECK(main.trades == a_rows[i].trades);
  }
  CHECK(client.sweep(grid, results, 0) == 0);
  for (std::size_t i = 0; i < grid.size(); ++i) CHECK(same_bits(results[i].pnl, a_rows[i].pnl));

  // L = 1500 fits series 1 (1800 bars), not series 0 (1200).
  const ipcfloor::Params long_window{3, 1500, 2, 1, 2, 3};
  (void)client.backtest(long_window, 1);
  auto error = thrown_by([&] { (void)client.backtest(long_window); });
  CHECK(error.code() == IPCFLOOR_E_WINDOW);
  CHECK(says(error, "parameter L (position 1) is 1500, refused by strategy hma for a series of 1200 bars"));
  error = thrown_by([&] { (void)client.backtest({3, 1801, 2, 1, 2, 3}, 1); });
  CHECK(error.code() == IPCFLOOR_E_WINDOW);
  CHECK(says(error, "on series 1 (" + b_key + ")"));
  CHECK(says(error, "is 1801, refused by strategy hma for a series of 1800 bars"));

  error = thrown_by([&] { (void)client.backtest(grid[0], 2); });
  CHECK(error.code() == IPCFLOOR_E_NO_SUCH_SERIES);
  CHECK(says(error, "holds no series 2"));
  CHECK(says(error, "it holds 2 series, indices 0 to 1"));
  CHECK(says(error, engine.name()));
  error = thrown_by([&] { (void)client.sweep(grid, results, 2); });
  CHECK(error.code() == IPCFLOOR_E_NO_SUCH_SERIES);
  error = thrown_by([&] { (void)client.sweep({}, {}, 2); });
  CHECK(error.code() == IPCFLOOR_E_NO_SUCH_SERIES);
  error = thrown_by([&] { (void)client.backtest(grid[0], 256); });
  CHECK(error.code() == IPCFLOOR_E_NO_SUCH_SERIES);
  CHECK(says(error, "holds no series 256"));
  CHECK(same_bits(client.backtest(grid[0], 1).pnl, b_rows[0].pnl));

  engine.stop();
}

namespace {

// Figure `name` of a `sweep --stats --json` row: null is NaN, "inf"/"-inf" the infinities.
double json_figure(const std::string& row, const std::string& name) {
  const std::size_t at = row.find("\"" + name + "\":");
  REQUIRE(at != std::string::npos);
  const char* value = row.c_str() + at + name.size() + 3;
  if (std::strncmp(value, "null", 4) == 0) return std::numeric_limits<double>::quiet_NaN();
  if (*value == '"') ++value;
  return std::strtod(value, nullptr);
}

std::vector<std::string> stats_rows(const std::string& args) {
  const std::string command = std::string(IPCFLOOR_BINARY) + " sweep --inproc --stats --json --quiet " + args;
  std::vector<std::string> rows;
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr)
    if (line[0] == '{') rows.emplace_back(line);
  pclose(pipe);
  return rows;
}

bool same_stats(const ipcfloor::Stats& a, const ipcfloor::Stats& b) { return std::memcmp(&a, &b, sizeof a) == 0; }

}  // namespace

TEST_CASE("ipcfloor::Client statistics, ranges and trade lists: stats and sweep with stats equal `sweep --inproc "
          "--stats --json` bit for bit; a range equals its bars loaded as their own series; a trade list sums to the "
          "combo's pnl; refusals say why") {
  constexpr int kAll = 1500;
  constexpr std::uint64_t kFrom = 300;
  constexpr std::uint64_t kTo = 1300;
  const std::string key = "ipcfloor-cpptest-stats-" + std::to_string(getpid());
  const std::string whole_path = "/tmp/" + key + ".f64";
  const std::string part_path = "/tmp/" + key + "-part.f64";
  const RemovedAtEnd remove_files{{whole_path, part_path}};
  const std::vector<double> close = generated(kAll, 41, whole_path, true);
  FILE* part = std::fopen(part_path.c_str(), "wb");
  REQUIRE(part != nullptr);
  REQUIRE(std::fwrite(close.data() + kFrom, sizeof(double), kTo - kFrom, part) == kTo - kFrom);
  std::fclose(part);

  const std::vector<std::string> rows = stats_rows("--data " + whole_path + " --lengths 6,20,50 --fee 0.2 "
                                                   "--bars-per-year 252");
  REQUIRE(rows.size() == 3);
  Engine engine("ipcfloor-cpptest-stats-" + std::to_string(getpid()), 0,
                {"--data", whole_path, "--data", part_path, "--lanes", "1"});
  ipcfloor::Client client = engine.attach();
  const std::vector<ipcfloor::Params> grid = {ipcfloor::params_from_length(6), ipcfloor::params_from_length(20),
                                              ipcfloor::params_from_length(50)};
  ipcfloor::Request given;
  given.fee = 0.2;
  given.bars_per_year = 252.0;
  std::vector<ipcfloor::Stats> stats(grid.size());
  std::vector<int> status(grid.size(), -1);
  std::vector<ipcfloor::Reason> reasons(grid.size());
  const auto allocations = g_allocations.load(std::memory_order_relaxed);
  CHECK(client.sweep(grid, stats, given, status, reasons) == 0);
  CHECK(g_allocations.load(std::memory_order_relaxed) == allocations);
  for (std::size_t i = 0; i < grid.size(); ++i) {
    CAPTURE(i);
    CHECK(status[i] == IPCFLOOR_OK);
    CHECK(reasons[i][0] == '\0');
    const ipcfloor::Stats& s = stats[i];
    CHECK(same_bits(s.pnl, json_figure(rows[i], "pnl")));
    CHECK(s.trades == static_cast<std::int64_t>(json_figure(rows[i], "trades")));
    CHECK(same_bits(s.win_rate, json_figure(rows[i], "win_rate")));
    CHECK(same_bits(s.profit_factor, json_figure(rows[i], "profit_factor")));
    CHECK(same_bits(s.max_drawdown, json_figure(rows[i], "max_drawdown")));
    CHECK(s.max_drawdown_bars == static_cast<std::int64_t>(json_figure(rows[i], "max_drawdown_bars")));
    CHECK(same_bits(s.sharpe, json_figure(rows[i], "sharpe")));
    CHECK(same_bits(s.sortino, json_figure(rows[i], "sortino")));
    CHECK(same_bits(s.calmar, json_figure(rows[i], "calmar")));
    CHECK(s.bars == static_cast<std::uint64_t>(kAll));
    CHECK(same_stats(client.stats(grid[i], given), s));
    const ipcfloor::Result plain = client.backtest(grid[i], given);
    CHECK(same_bits(plain.pnl, s.pnl));
    CHECK(plain.trades == s.trades);

    // The bars [kFrom, kTo) of series 0 are series 1: the same statistics and trade list, bit for bit.
    ipcfloor::Request range;
    range.from_bar = kFrom;
    range.to_bar = kTo;
    ipcfloor::Request second;
    second.series = 1;
    const ipcfloor::Stats on_range = client.stats(grid[i], range);
    CHECK(same_stats(on_range, client.stats(grid[i], second)));
    CHECK(on_range.bars == kTo - kFrom);
    const ipcfloor::TradeList full = client.trades(grid[i], range);
    const ipcfloor::TradeList alone = client.trades(grid[i], second);
    REQUIRE(full.trades.size() == static_cast<std::size_t>(on_range.trades));
    REQUIRE(alone.trades.size() == full.trades.size());
    CHECK(std::memcmp(full.trades.data(), alone.trades.data(), full.trades.size() * sizeof(ipcfloor::Trade)) == 0);
    CHECK(full.equity.size() == kTo - kFrom);
    CHECK(std::memcmp(full.equity.data(), alone.equity.data(), full.equity.size() * sizeof(double)) == 0);
    double summed = 0.0;
    for (const ipcfloor::Trade& trade : full.trades) summed += trade.pnl;
    CHECK(same_bits(summed, on_range.pnl));
    CHECK(same_stats(full.stats, on_range));
  }
  std::vector<ipcfloor::Result> results(grid.size());
  ipcfloor::Request range;
  range.from_bar = kFrom;
  range.to_bar = kTo;
  CHECK(client.sweep(grid, results, range) == 0);
  std::vector<ipcfloor::Result> alone(grid.size());
  CHECK(client.sweep(grid, alone, 1) == 0);
  for (std::size_t i = 0; i < grid.size(); ++i) CHECK(same_bits(results[i].pnl, alone[i].pnl));

  // Refusals: a combo the strategy refuses says why in its row; bad options throw before sending.
  std::vector<ipcfloor::Params> bad = grid;
  bad[1][1] = kAll + 1;
  CHECK(client.sweep(bad, stats, {}, status, reasons) == 1);
  CHECK(status[1] == IPCFLOOR_E_WINDOW);
  CHECK(std::string_view(reasons[1].data()).find("L") != std::string_view::npos);
  CHECK(std::isnan(stats[1].sharpe));
  CHECK(stats[1].trades == 0);
  CHECK(status[0] == IPCFLOOR_OK);
  CHECK(thrown_by([&] { (void)client.stats(bad[1]); }).code() == IPCFLOOR_E_WINDOW);
  ipcfloor::Request short_range;
  short_range.from_bar = 10;
  short_range.to_bar = 11;
  CHECK(thrown_by([&] { (void)client.stats(grid[0], short_range); }).code() == IPCFLOOR_E_BAD_RANGE);
  ipcfloor::Request past;
  past.to_bar = kAll + 1;
  CHECK(thrown_by([&] { (void)client.trades(grid[0], past); }).code() == IPCFLOOR_E_BAD_RANGE);
  ipcfloor::Request dear;
  dear.fee = 101.0;
  CHECK(thrown_by([&] { (void)client.stats(grid[0], dear); }).code() == IPCFLOOR_E_INVALID);
  std::vector<int> short_status(1);
  CHECK(thrown_by([&] { (void)client.sweep(grid, stats, {}, short_status); }).code() == IPCFLOOR_E_INVALID);
  engine.stop();
}
