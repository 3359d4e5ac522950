// The C++ facade (include/ipcfloor/client.hpp) as a consumer sees it: compiled as C++20 with
// nothing but the public header, linked to the shared libipcfloorcpp, against a live engine.

#include <doctest/doctest.h>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <new>
#include <cstdio>
#include <cstring>
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
void operator delete(void* memory) noexcept { std::free(memory); }
void operator delete(void* memory, std::size_t) noexcept { std::free(memory); }

namespace {

constexpr int kBars = 2000;

struct Row {
  ipcfloor::Params params;
  double pnl;
  std::int64_t trades;
};

std::vector<Row> reference(const std::string& lengths) {
  const std::string command = std::string(IPCFLOOR_BINARY) + " sweep --inproc --json --bars " +
                              std::to_string(kBars) + " --seed 3 --lengths " + lengths;
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

// `ipcfloor serve` for the length of a test case; SIGINT and a bounded reap on the way out.
class Engine {
 public:
  explicit Engine(std::string name) : name_(std::move(name)) {
    const std::string bars = std::to_string(kBars);
    std::vector<std::string> args = {IPCFLOOR_BINARY, "serve", "--name", name_, "--bars", bars, "--seed", "3",
                                     "--wait", "backoff", "--quiet"};
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
    CHECK(std::string(error.what()).find("window h (position 0) is 2001") != std::string::npos);
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
