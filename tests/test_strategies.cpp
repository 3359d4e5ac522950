// Strategies a researcher loads (include/ipcfloor/strategy.h, `serve --strategy FILE.so`): every
// refusal at load names the file and the reason and exits 6; a request naming a strategy the
// engine lacks is answered no_such_strategy; a NaN pnl or negative trades become engine_error,
// never an answer marked ok; two clients sweeping two strategies at once each get the in-process
// sweep's answers bit for bit; SUBSCRIBE to a strategy without a live step is refused and one
// with a step streams its batch run's pnl bar by bar.
//
// The shared objects are tests/strategies/probe.c, built once per fault (tests/CMakeLists.txt),
// and the two examples of examples/strategies/.

#include <doctest/doctest.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <bit>

#include "bench/engine_child.hpp"
#include "bench/scaling_bench.hpp"
#include "clients/shm_client.hpp"
#include "common/exit_codes.hpp"
#include "data/gbm.hpp"
#include "kernel/kernel.hpp"
#include "kernel/strategy_loader.hpp"

namespace ipcfloor {
namespace {

namespace fs = std::filesystem;

std::string module(const std::string& name) { return std::string(IPCFLOOR_STRATEGY_DIR) + "/" + name + ".so"; }

// Loads `path` into `catalog` with the self-check series every caller uses.
Expected<const Strategy*> load(StrategyCatalog& catalog, const std::string& path) {
  const auto check_close = strategy_check_series();
  REQUIRE(check_close.has_value());
  return catalog.load(path, *check_close);
}

// The engine under test: IPCFLOOR_BINARY, or $IPCFLOOR_TEST_BINARY (another build, such as the one
// before a fix, to see a test fail).
std::string binary() {
  const char* other = std::getenv("IPCFLOOR_TEST_BINARY");
  return other != nullptr && *other != '\0' ? other : IPCFLOOR_BINARY;
}

struct Ran {
  int code = -1;
  std::string output;
};

// `ipcfloor serve` with `args`, its stdout and stderr together; it must end by itself (a refusal).
Ran serve(const std::vector<std::string>& args) {
  std::string command = binary() + " serve --name " + unique_segment_name("strategy") +
                        " --bars 1000 --wait backoff --workers 0";
  for (const std::string& a : args) command += " '" + a + "'";
  command += " 2>&1 </dev/null";
  Ran ran;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) ran.output += buffer;
  const int status = ::pclose(pipe);
  if (WIFEXITED(status)) ran.code = WEXITSTATUS(status);
  return ran;
}

// `ipcfloor serve` with `args` (and `env`: NAME=value), bounded: SIGKILLed after `limit` (code -1),
// or sent SIGTERM after `term_after` when given. Its stderr, and how long it ran after the SIGTERM.
struct Bounded {
  int code = -1;  // exit code; -1 killed by a signal or past the limit
  int signal = 0;
  std::string output;
  double after_term_s = -1;
};
Bounded serve_bounded(const std::vector<std::string>& args, const std::vector<std::string>& env = {},
                      std::chrono::milliseconds limit = std::chrono::seconds(10),
                      std::optional<std::chrono::milliseconds> term_after = std::nullopt) {
  std::vector<std::string> argv{binary(), "serve", "--name", unique_segment_name("strategy"), "--bars", "1000",
                                "--wait", "backoff", "--workers", "0", "--quiet"};
  argv.insert(argv.end(), args.begin(), args.end());
  char path[] = "/tmp/ipcfloor-strategy-err-XXXXXX";
  const int err = ::mkstemp(path);
  REQUIRE(err >= 0);
  ::unlink(path);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(err, STDERR_FILENO);
    ::dup2(err, STDOUT_FILENO);
    for (const std::string& entry : env) ::putenv(const_cast<char*>(entry.c_str()));
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  const auto started = std::chrono::steady_clock::now();
  std::optional<std::chrono::steady_clock::time_point> termed;
  int status = 0;
  Bounded ran;
  for (;;) {
    if (::waitpid(pid, &status, WNOHANG) == pid) break;
    const auto now = std::chrono::steady_clock::now();
    if (term_after && !termed && now - started >= *term_after) {
      ::kill(pid, SIGTERM);
      termed = now;
    }
    if (now - started > limit) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      status = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (termed) ran.after_term_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - *termed).count();
  if (status != -1 && WIFEXITED(status)) ran.code = WEXITSTATUS(status);
  if (status != -1 && WIFSIGNALED(status)) ran.signal = WTERMSIG(status);
  char buffer[4096];
  ::lseek(err, 0, SEEK_SET);
  for (ssize_t got; (got = ::read(err, buffer, sizeof buffer)) > 0;) ran.output.append(buffer, static_cast<std::size_t>(got));
  ::close(err);
  return ran;
}

// A private folder (0700) for copies of the modules with the modes a case needs.
struct Folder {
  Folder() {
    char pattern[] = "/tmp/ipcfloor-strategies-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    path = pattern;
  }
  ~Folder() {
    std::error_code ignored;
    fs::permissions(path, fs::perms::owner_all, ignored);
    fs::remove_all(path, ignored);
  }
  Folder(const Folder&) = delete;
  Folder& operator=(const Folder&) = delete;
  std::string copy(const std::string& name, const std::string& as) const {
    const std::string to = path + "/" + as;
    fs::copy_file(module(name), to);
    return to;
  }
  std::string path;
};

ShmClientOptions backoff_client() {
  ShmClientOptions options;
  options.wait = WaitMode::backoff;
  options.timeout = std::chrono::seconds(20);
  return options;
}

Combo params(std::int64_t a, std::int64_t b = 0) { return Combo{a, b, 0, 0, 0, 0}; }

Status status_of(const ResponseSlot& response) { return static_cast<Status>(response.status); }

Status backtest(ShmClient& client, std::uint32_t strategy, const Combo& combo, ResponseSlot& answer) {
  REQUIRE(client.call(Opcode::backtest, request_flags(0, strategy), payload_of(combo)) == CallStatus::ok);
  answer = client.answer();
  return status_of(answer);
}

}  // namespace

TEST_CASE("serve refuses each faulty strategy with exit 6 and a message naming the file and the reason") {
  Folder folder;
  const std::string not_elf = folder.path + "/notes.so";
  std::ofstream(not_elf) << "not a shared object\n";
  const std::string group_writable = folder.copy("probe", "group_writable.so");
  fs::permissions(group_writable, fs::perms::group_write, fs::perm_options::add);
  const std::string open_folder = folder.path + "/open";
  fs::create_directory(open_folder);
  const std::string in_open_folder = open_folder + "/probe.so";
  fs::copy_file(module("probe"), in_open_folder);
  fs::permissions(open_folder, fs::perms::all);  // 0777 and no sticky bit: anyone may swap the file

  struct Case {
    std::vector<std::string> files;
    std::string names;   // the file the message must name
    std::string reason;  // and a part of its reason
  };
  const std::vector<Case> cases{
      {{folder.path + "/missing.so"}, folder.path + "/missing.so", "No such file"},
      {{not_elf}, not_elf, "not a shared object"},
      {{module("probe_no_entry")}, module("probe_no_entry"),
       "exports no ipcfloor_strategy_v2 (or version 1's ipcfloor_strategy_v1) symbol"},
      {{module("probe_bad_abi")}, module("probe_bad_abi"), "strategy ABI version 99"},
      {{module("probe_bad_size")}, module("probe_bad_size"), "its table is"},
      {{module("probe"), module("probe")}, module("probe"), "already loaded"},
      {{group_writable}, group_writable, "may be written by users other than its owner"},
      {{in_open_folder}, in_open_folder, "may be written by users other than its owner"},
      {{module("probe_unbounded")}, module("probe_unbounded"), "every parameter must be bounded"},
      {{module("probe_cost_max")}, module("probe_cost_max"), "finite number of work units"},
      {{module("probe_self_nan")}, module("probe_self_nan"), "not finite"},
      {{module("trade_probe_miscount")}, module("trade_probe_miscount"),
       "break the rules of strategy.h: the trades reported are not as many as the trades counted"},
      {{module("trade_probe_bad_sum")}, module("trade_probe_bad_sum"),
       "the trades' pnl, summed in order, is not the pnl answered, bit for bit"},
      {{module("trade_probe_overlap")}, module("trade_probe_overlap"),
       "a trade enters before the previous one's exit"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.names);
    std::vector<std::string> args;
    for (const std::string& f : c.files) args.insert(args.end(), {"--strategy", f});
    const Ran ran = serve(args);
    CAPTURE(ran.output);
    CHECK(ran.code == kExitStrategy);
    CHECK(ran.output.find(c.names) != std::string::npos);
    CHECK(ran.output.find(c.reason) != std::string::npos);
    CHECK(ran.output.find("ready {") == std::string::npos);  // refused before it served anything
  }
}

TEST_CASE("a FIFO at a --strategy path, also through another user's link in a sticky folder, is refused at once "
          "without opening it") {
  Folder folder;
  const std::string fifo = folder.path + "/strategy.so";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Before: serve blocked in open(2) on the FIFO, past SIGTERM, until the test killed it.
  const Bounded direct = serve_bounded({"--strategy", fifo}, {}, std::chrono::seconds(5));
  CAPTURE(direct.output);
  CHECK(direct.code == kExitStrategy);
  CHECK(direct.output.find(fifo) != std::string::npos);
  CHECK(direct.output.find("a FIFO") != std::string::npos);

  const std::string sticky = folder.path + "/shared";
  fs::create_directory(sticky);
  fs::permissions(sticky, fs::perms::all | fs::perms::sticky_bit);
  const std::string link = sticky + "/their.so";
  REQUIRE(::symlink(fifo.c_str(), link.c_str()) == 0);
  REQUIRE(::lchown(link.c_str(), 65534, 65534) == 0);
  const Bounded linked = serve_bounded({"--strategy", link}, {}, std::chrono::seconds(5));
  CAPTURE(linked.output);
  CHECK(linked.code == kExitStrategy);
  CHECK(linked.output.find("the link " + link + " belongs to uid 65534") != std::string::npos);
}

TEST_CASE("another user's link to a root-owned strategy is refused, naming the link and its owner") {
  Folder folder;
  const std::string sticky = folder.path + "/shared";
  fs::create_directory(sticky);
  fs::permissions(sticky, fs::perms::all | fs::perms::sticky_bit);
  const std::string link = sticky + "/strategy.so";
  REQUIRE(::symlink(module("probe").c_str(), link.c_str()) == 0);
  REQUIRE(::lchown(link.c_str(), 65534, 65534) == 0);
  // Before: the link was resolved first and only its target checked: the engine served it.
  const Bounded ran = serve_bounded({"--strategy", link}, {}, std::chrono::seconds(10));
  CAPTURE(ran.output);
  CHECK(ran.code == kExitStrategy);
  CHECK(ran.output.find("the link " + link + " belongs to uid 65534") != std::string::npos);
  CHECK(ran.output.find("ready {") == std::string::npos);
  // The user's own link to the same file loads.
  const std::string own = folder.path + "/own.so";
  REQUIRE(::symlink(module("probe").c_str(), own.c_str()) == 0);
  StrategyCatalog catalog;
  auto loaded = load(catalog, own);
  CHECK_MESSAGE(loaded.has_value(), (loaded ? "" : loaded.error().message));
}

TEST_CASE("a file that does not export the entry is refused before dlopen runs any of its constructors") {
  Folder folder;
  const std::string marker = folder.path + "/constructor-ran";
  // Before: dlopen ran the file's constructor (the marker appeared), then the entry was found missing.
  const Bounded ran = serve_bounded({"--strategy", module("probe_constructor_no_entry")},
                                    {"IPCFLOOR_PROBE_MARKER=" + marker}, std::chrono::seconds(10));
  CAPTURE(ran.output);
  CHECK(ran.code == kExitStrategy);
  CHECK(ran.output.find("exports no ipcfloor_strategy_v2 (or version 1's ipcfloor_strategy_v1) symbol") != std::string::npos);
  CHECK_FALSE(fs::exists(marker));
  for (const char* library : {"/usr/lib/x86_64-linux-gnu/libz.so.1", "/lib/x86_64-linux-gnu/libz.so.1"}) {
    if (!fs::exists(library)) continue;
    CAPTURE(library);
    StrategyCatalog catalog;
    auto refused = load(catalog, library);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().message.find("exports no ipcfloor_strategy_v2 (or version 1's ipcfloor_strategy_v1) symbol") != std::string::npos);
    break;
  }
}

TEST_CASE("a parameter whose accepted cost grows without limit is refused, though INT64_MIN and INT64_MAX are") {
  // probe_liar_bounds refuses exactly INT64_MIN and INT64_MAX, accepts 2^62 and -5, and its cost
  // grows with the step's magnitude. Before: the self-check probed only the two extremes and loaded it.
  StrategyCatalog catalog;
  auto refused = load(catalog, module("probe_liar_bounds"));
  REQUIRE_FALSE(refused.has_value());
  CAPTURE(refused.error().message);
  CHECK(refused.error().code == ErrorCode::strategy);
  CHECK(refused.error().message.find("every parameter must be bounded") != std::string::npos);
  CHECK(refused.error().message.find("parameter 0 (step) = 4611686018427387904") != std::string::npos);
  CHECK(refused.error().message.find("more than at 2147483648") != std::string::npos);
  // The sound strategies keep loading: their windows stop at the series' length.
  for (const char* name : {"probe", "sma_cross", "donchian"}) {
    CAPTURE(name);
    auto loaded = load(catalog, module(name));
    CHECK_MESSAGE(loaded.has_value(), (loaded ? "" : loaded.error().message));
  }
}

TEST_CASE("serve stays stoppable while a strategy loads: SIGTERM during a slow self-check ends it at once") {
  // probe_spin_long's run() takes 1.5 s and the self-check runs it twice or more. Before: SIGTERM
  // waited blocked for the keeper, which comes after the load (seconds).
  const Bounded ran = serve_bounded({"--strategy", module("probe_spin_long")}, {}, std::chrono::seconds(20),
                                    std::chrono::milliseconds(400));
  CAPTURE(ran.output);
  CHECK(ran.signal == SIGTERM);
  CHECK(ran.after_term_s >= 0);
  CHECK(ran.after_term_s < 1.0);
}

TEST_CASE("the loader refuses nothing twice: a refused file adds no strategy and the catalog goes on") {
  StrategyCatalog catalog;
  CHECK_FALSE(load(catalog, module("probe_bad_abi")).has_value());
  CHECK(catalog.set().size() == 1);  // the built-in alone
  auto probe = load(catalog, module("probe"));
  REQUIRE_MESSAGE(probe.has_value(), (probe ? "" : probe.error().message));
  CHECK(catalog.set().size() == 2);
  CHECK((*probe)->name() == "probe");
  CHECK((*probe)->live());
}

TEST_CASE("the benchmark's strategy grid spreads the first two params from half to twice the example and skips "
          "refused pairs") {
  StrategyCatalog catalog;
  auto sma = load(catalog, module("sma_cross"));  // example fast 10, slow 40; slow must be above fast
  REQUIRE_MESSAGE(sma.has_value(), (sma ? "" : sma.error().message));
  auto grid = strategy_grid(**sma, 16, 1000);  // 4 x 4: fast 5, 8, 13, 20; slow 20, 32, 50, 80
  REQUIRE(grid.has_value());
  CHECK(grid->size() == 15);  // fast 20, slow 20 is refused
  CHECK(grid->front() == Combo{5, 20, 0, 0, 0, 0});
  CHECK(grid->back() == Combo{20, 80, 0, 0, 0, 0});
  for (const Combo& combo : *grid) CHECK((*sma)->accepts(combo, 1000));
  CHECK_FALSE(strategy_grid(**sma, 16, 4).has_value());  // no fast of 5 or more fits 4 bars
}

TEST_CASE("strategies an engine serves: no_such_strategy, engine_error for a NaN pnl or negative trades, and "
          "refusals named by the strategy") {
  EngineChild engine(binary(), unique_segment_name("strategy"),
                     {"--wait", "backoff", "--bars", "5000", "--workers", "0", "--strategy", module("probe")});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE_MESSAGE(client.has_value(), (client ? "" : client.error().message));
  const auto index = client->segment().find_strategy("probe");
  REQUIRE(index.has_value());
  CHECK(*index == 1);
  const std::span<const double> close = client->segment().series();

  ResponseSlot answer{};
  CHECK(backtest(*client, 7, params(10), answer) == Status::no_such_strategy);
  CHECK(backtest(*client, *index, params(10), answer) == Status::ok);
  CHECK(answer.pnl == (close.back() - close.front()) / 10.0);
  CHECK(answer.trades == static_cast<std::int64_t>(close.size()) / 10);
  CHECK(backtest(*client, *index, params(13), answer) == Status::engine_error);  // its run answers NaN
  CHECK(backtest(*client, *index, params(14), answer) == Status::engine_error);  // and here trades -1
  CHECK(backtest(*client, *index, params(1001), answer) == Status::window_out_of_range);
  CHECK(answer.extra[0] == 1);  // the parameter it refused, 1-based
  CHECK(backtest(*client, *index, params(10, 5), answer) == Status::window_out_of_range);  // an unused one is set
  // The same lane goes on serving after each of them.
  CHECK(backtest(*client, *index, params(20), answer) == Status::ok);
  CHECK(answer.trades == static_cast<std::int64_t>(close.size()) / 20);
}

TEST_CASE("a strategy whose run() far outlasts what its cost() says is timed at load and runs at a worker only: other "
          "clients' ECHOs are not held behind it, status shows it, and --workers 0 refuses it") {
  // probe_spin's run() takes 40 ms while its cost says 2 units a bar: 2,000 units on 1,000 bars, far
  // under --inline-cost. Before: the serving thread computed it, and every other client waited.
  EngineChild engine(binary(), unique_segment_name("spin"),
                     {"--wait", "backoff", "--bars", "1000", "--workers", "1", "--strategy", module("probe_spin")});
  REQUIRE(engine.up());
  auto sweeper = ShmClient::connect(engine.name(), backoff_client());
  auto other = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(sweeper.has_value());
  REQUIRE(other.has_value());
  const DataHeader& header = other->segment().header();
  CHECK(header.strategies_at_workers.load() == 2u);  // strategy 1, and not the built-in
  CHECK(header.strategy_slowdown[1] > 1000u);
  std::atomic<bool> done{false};
  std::thread sweeping([&] {
    ResponseSlot answer{};
    for (int i = 0; i < 12; ++i) CHECK(backtest(*sweeper, 1, params(10), answer) == Status::ok);
    done.store(true);
  });
  std::vector<double> echo_ms;
  RequestSlot echo{};
  echo.opcode = static_cast<std::uint16_t>(Opcode::echo);
  ResponseSlot echoed{};
  while (!done.load() && echo_ms.size() < 2000) {
    const auto start = std::chrono::steady_clock::now();
    REQUIRE(other->call(echo, echoed) == CallStatus::ok);
    echo_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  sweeping.join();
  REQUIRE(echo_ms.size() >= 10);
  std::sort(echo_ms.begin(), echo_ms.end());
  const double p50 = echo_ms[echo_ms.size() / 2];
  MESSAGE("ECHO p50 " << p50 << " ms, max " << echo_ms.back() << " ms over " << echo_ms.size()
                      << " calls while 40 ms BACKTESTs of probe_spin ran; slowdown at load "
                      << header.strategy_slowdown[1] << "x");
  CHECK(p50 < 15.0);  // before: about 40 ms, one spin of the strategy
  const std::string text = [&] {
    std::string out;
    FILE* pipe = ::popen((binary() + " status --name " + engine.name() + " 2>&1").c_str(), "r");
    char buffer[512];
    while (pipe != nullptr && std::fgets(buffer, sizeof buffer, pipe) != nullptr) out += buffer;
    if (pipe != nullptr) ::pclose(pipe);
    return out;
  }();
  CHECK_MESSAGE(text.find("probe_spin (step); streams signals; runs at a worker only") != std::string::npos, text);
  const Bounded refused = serve_bounded({"--strategy", module("probe_spin")}, {}, std::chrono::seconds(20));
  CAPTURE(refused.output);
  CHECK(refused.code == kExitStrategy);
  CHECK(refused.output.find("runs at a worker only, and --workers 0 leaves none") != std::string::npos);
}

TEST_CASE("a serving thread held inside one BACKTEST far past its cost's limit shows as degraded in status and the "
          "metrics, and no longer once it is out") {
  // probe_spin_step's run() takes 1.5 s for step 99 (2,000 units: the serving thread's to compute),
  // and no time for the example the load timed. Before: status said "health ok" throughout.
  EngineChild engine(binary(), unique_segment_name("stuck"),
                     {"--wait", "backoff", "--bars", "1000", "--workers", "1", "--heartbeat-ms", "10", "--strategy",
                      module("probe_spin_step")});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  const DataHeader& header = client->segment().header();
  CHECK(header.strategies_at_workers.load() == 0u);
  std::thread stuck([&] {
    ResponseSlot answer{};
    CHECK(backtest(*client, 1, params(99), answer) == Status::ok);
  });
  bool seen = false;
  for (int i = 0; i < 150 && !seen; ++i) {
    seen = header.serving_stuck_ns.load() > 0;
    if (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(seen);
  CHECK(header.serving_stuck_strategy.load() == 1u);
  std::string metrics;
  FILE* pipe = ::popen((binary() + " status --prometheus --name " + engine.name() + " 2>&1").c_str(), "r");
  char buffer[512];
  while (pipe != nullptr && std::fgets(buffer, sizeof buffer, pipe) != nullptr) metrics += buffer;
  if (pipe != nullptr) ::pclose(pipe);
  const std::string gauge = "state=\"serving_thread_stuck_ms\"} ";
  const auto at = metrics.find(gauge);
  CHECK_MESSAGE((at != std::string::npos && std::stol(metrics.substr(at + gauge.size())) > 0), metrics);
  CHECK_MESSAGE(metrics.find("ipcfloor_serving_thread_stalls_total{") != std::string::npos, metrics);
  stuck.join();
  bool cleared = false;
  for (int i = 0; i < 100 && !cleared; ++i) {
    cleared = header.serving_stuck_ns.load() == 0;
    if (!cleared) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(cleared);
  CHECK(header.serving_stalls.load() == 1u);
}

TEST_CASE("two clients sweeping two strategies at once each get the in-process sweep's answers bit for bit") {
  EngineChild engine(binary(), unique_segment_name("strategy"),
                     {"--wait", "backoff", "--bars", "20000", "--workers", "1", "--strategy", module("sma_cross"),
                      "--strategy", module("trade_probe")});
  REQUIRE(engine.up());
  StrategyCatalog catalog;
  for (const char* name : {"sma_cross", "trade_probe"}) REQUIRE(load(catalog, module(name)).has_value());

  struct Sweep {
    std::string strategy;
    std::vector<Combo> combos;
    std::vector<ResponseSlot> answers;
  };
  std::vector<Sweep> sweeps(2);
  sweeps[0].strategy = "sma_cross";
  for (std::int64_t fast : {2, 5, 10, 20, 50})
    for (std::int64_t slow : {8, 30, 60, 120, 250})
      if (slow > fast) sweeps[0].combos.push_back(params(fast, slow));
  sweeps[1].strategy = "trade_probe";
  for (std::int64_t hold : {1, 2, 3, 5, 8, 13, 21, 55, 144, 377, 987, 2584, 6765, 19999, 20000}) sweeps[1].combos.push_back(params(hold));

  std::vector<std::thread> threads;
  for (Sweep& sweep : sweeps)
    threads.emplace_back([&engine, &sweep] {
      auto client = ShmClient::connect(engine.name(), backoff_client());
      if (!client) return;
      const auto index = client->segment().find_strategy(sweep.strategy);
      if (!index) return;
      for (const Combo& combo : sweep.combos) {
        if (client->call(Opcode::backtest, request_flags(0, *index), payload_of(combo)) != CallStatus::ok) return;
        sweep.answers.push_back(client->answer());
      }
    });
  for (std::thread& t : threads) t.join();

  auto reader = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(reader.has_value());
  const std::span<const double> close = reader->segment().series();
  for (const Sweep& sweep : sweeps) {
    CAPTURE(sweep.strategy);
    REQUIRE(sweep.answers.size() == sweep.combos.size());
    const Strategy* strategy = catalog.set().find(sweep.strategy);
    REQUIRE(strategy != nullptr);
    auto expected = run_sweep(*strategy, close, sweep.combos, reader->segment().header().fee, 1);
    REQUIRE_MESSAGE(expected.has_value(), (expected ? "" : expected.error().message));
    for (std::size_t i = 0; i < sweep.combos.size(); ++i) {
      CAPTURE(i);
      CHECK(status_of(sweep.answers[i]) == Status::ok);
      CHECK(std::bit_cast<std::uint64_t>(sweep.answers[i].pnl) == std::bit_cast<std::uint64_t>((*expected)[i].pnl));
      CHECK(sweep.answers[i].trades == (*expected)[i].trades);
    }
  }
}

TEST_CASE("SUBSCRIBE to a strategy without a live step is refused; one with a step streams its batch run bar by bar") {
  EngineChild engine(binary(), unique_segment_name("strategy"),
                     {"--wait", "backoff", "--bars", "1000", "--live", "--capacity", "1200", "--workers", "0",
                      "--strategy", module("probe_nolive"), "--strategy", module("sma_cross")});
  REQUIRE(engine.up());
  auto writer = ShmClient::connect(engine.name(), backoff_client());
  auto reader = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(writer.has_value());
  REQUIRE(reader.has_value());
  const auto nolive = reader->segment().find_strategy("probe_nolive");
  const auto sma = reader->segment().find_strategy("sma_cross");
  REQUIRE(nolive.has_value());
  REQUIRE(sma.has_value());

  ResponseSlot answer{};
  REQUIRE(reader->subscribe(params(10), answer, *nolive) == CallStatus::ok);
  CHECK(status_of(answer) == Status::no_live_step);
  REQUIRE(reader->subscribe(params(5, 20), answer, *sma) == CallStatus::ok);
  REQUIRE(status_of(answer) == Status::ok);

  StrategyCatalog catalog;
  const auto loaded = load(catalog, module("sma_cross"));
  REQUIRE(loaded.has_value());
  std::vector<double> close(reader->segment().series().begin(), reader->segment().series().end());
  for (int bar = 0; bar < 150; ++bar) {
    CAPTURE(bar);
    const double next = close.back() * (bar % 7 < 3 ? 1.004 : 0.997);
    REQUIRE(writer->append(next, static_cast<std::uint64_t>(bar + 1), answer) == CallStatus::ok);
    REQUIRE(status_of(answer) == Status::ok);
    close.push_back(next);
    SignalSlot signal{};
    REQUIRE(reader->wait_signal(signal) == CallStatus::ok);
    CHECK(signal.bar == close.size() - 1);
    const std::vector<Combo> one{params(5, 20)};
    const auto batch = run_sweep(**loaded, close, one, reader->segment().header().fee, 1);
    REQUIRE(batch.has_value());
    CHECK(std::bit_cast<std::uint64_t>(signal.pnl) == std::bit_cast<std::uint64_t>((*batch)[0].pnl));
    CHECK(signal.trades == (*batch)[0].trades);
  }
}

}  // namespace ipcfloor

namespace ipcfloor {
namespace {

// One request through the exchange line, with an options line when `options` is set.
const ResponseSlot& ask(ShmClient& client, Opcode opcode, std::uint32_t strategy, const Combo& combo,
                        const RequestOptions* options = nullptr) {
  REQUIRE(client.call(opcode, request_flags(0, strategy), payload_of(combo), options) == CallStatus::ok);
  return client.answer();
}

std::uint64_t bits(double value) { return std::bit_cast<std::uint64_t>(value); }

// Every figure of `got` (from the wire) equals `want`, bit for bit.
void check_same_figures(const TradeStats& got, const TradeStats& want) {
  CHECK(bits(got.pnl) == bits(want.pnl));
  CHECK(got.trades == want.trades);
  for (std::size_t k = 0; k < kStatsFigureCount; ++k) {
    CAPTURE(kStatsFigureNames[k]);
    CHECK(bits(stats_figure(got, k)) == bits(stats_figure(want, k)));
  }
}

}  // namespace

TEST_CASE("a version-1 strategy still loads and answers BACKTEST; its STATS is answered no_trade_report") {
  EngineChild engine(IPCFLOOR_BINARY, unique_segment_name("strategy"),
                     {"--wait", "backoff", "--bars", "1000", "--workers", "0", "--strategy", module("probe")});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  const auto probe = client->segment().find_strategy("probe");
  REQUIRE(probe.has_value());
  CHECK(client->segment().strategy_at(*probe).abi_version == 1);
  const std::span<const double> close = client->segment().series();
  const ResponseSlot& backtest_answer = ask(*client, Opcode::backtest, *probe, params(10));
  REQUIRE(status_of(backtest_answer) == Status::ok);
  CHECK(backtest_answer.pnl == (close.back() - close.front()) / 10.0);  // probe.c's rule
  CHECK(status_of(ask(*client, Opcode::stats, *probe, params(10))) == Status::no_trade_report);
  CHECK(status_of(ask(*client, Opcode::trades, *probe, params(10))) == Status::no_trade_report);
}

TEST_CASE("a strategy that requires high is refused on a close-only series, naming the column, in every path") {
  EngineChild engine(IPCFLOOR_BINARY, unique_segment_name("strategy"),
                     {"--wait", "backoff", "--bars", "1000", "--workers", "0", "--strategy", module("trade_probe_high")});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  const auto index = client->segment().find_strategy("trade_probe_high");
  REQUIRE(index.has_value());
  CHECK(client->segment().strategy_at(*index).required_columns == IPCFLOOR_COLUMN_HIGH);
  for (const Opcode opcode : {Opcode::backtest, Opcode::stats}) {
    const ResponseSlot& answer = ask(*client, opcode, *index, params(10));
    CHECK(status_of(answer) == Status::missing_column);
    CHECK(answer.extra[0] == IPCFLOOR_COLUMN_HIGH);
  }
  // In process: the sweep says which column, and a backtest never runs on a NULL column.
  StrategyCatalog catalog;
  auto loaded = load(catalog, module("trade_probe_high"));
  REQUIRE(loaded.has_value());
  const std::vector<Combo> combos{params(10)};
  auto swept = run_sweep(**loaded, client->segment().series(), combos, 0.09, 1);
  REQUIRE_FALSE(swept.has_value());
  CHECK(swept.error().message.find("needs the high column") != std::string::npos);
  KernelWorkspace workspace((*loaded)->stats_workspace_bytes(1000));
  BacktestResult result;
  CHECK((*loaded)->run(client->segment().series(), params(10), 0.09, workspace, result) == StrategyRun::missing_column);
}

TEST_CASE("STATS through the engine is the in-process statistics bit for bit, on the whole series and on a range") {
  EngineChild engine(IPCFLOOR_BINARY, unique_segment_name("strategy"),
                     {"--wait", "backoff", "--bars", "5000", "--workers", "1", "--strategy", module("sma_cross"),
                      "--bars-per-year", "98280"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  CHECK(client->segment().header().bars_per_year == 98280.0);
  StrategyCatalog catalog;
  auto sma = load(catalog, module("sma_cross"));
  REQUIRE(sma.has_value());
  const auto index = client->segment().find_strategy("sma_cross");
  REQUIRE(index.has_value());
  const std::span<const double> close = client->segment().series();
  KernelWorkspace workspace((*sma)->stats_workspace_bytes(close.size()));
  for (const Combo& combo : {params(5, 20), params(10, 40), params(30, 200)}) {
    CAPTURE(combo.h);
    CAPTURE(combo.L);
    TradeStats want;
    REQUIRE((*sma)->run_stats(close, combo, 0.09, 98280.0, workspace, want) == StrategyRun::ok);
    const ResponseSlot answer = ask(*client, Opcode::stats, *index, combo);
    REQUIRE(status_of(answer) == Status::ok);
    check_same_figures(from_wire(answer.pnl, answer.trades, client->answer_record().stats), want);
    // The same bars loaded as a series of their own give the same figures as a range of them,
    // with the request's own fee and bars per year.
    RequestOptions options{};
    options.present = kOptionRange | kOptionFee | kOptionBarsPerYear;
    options.from_bar = 1234;
    options.to_bar = 4321;
    options.fee = 0.0;
    options.bars_per_year = 252.0;
    const std::vector<double> own(close.begin() + 1234, close.begin() + 4321);
    TradeStats on_own;
    REQUIRE((*sma)->run_stats(own, combo, 0.0, 252.0, workspace, on_own) == StrategyRun::ok);
    const ResponseSlot ranged = ask(*client, Opcode::stats, *index, combo, &options);
    REQUIRE(status_of(ranged) == Status::ok);
    check_same_figures(from_wire(ranged.pnl, ranged.trades, client->answer_record().stats), on_own);
    CHECK(client->answer_record().stats.bars == own.size());
  }
  // A range outside the series, and an option out of its range, are refused as such.
  RequestOptions outside{};
  outside.present = kOptionRange;
  outside.from_bar = 4000;
  outside.to_bar = 5001;
  CHECK(status_of(ask(*client, Opcode::stats, *index, params(5, 20), &outside)) == Status::bad_range);
  RequestOptions negative_fee{};
  negative_fee.present = kOptionFee;
  negative_fee.fee = -1.0;
  CHECK(status_of(ask(*client, Opcode::backtest, *index, params(5, 20), &negative_fee)) == Status::bad_option);
}

TEST_CASE("a refusal carries the strategy's own sentence to the client") {
  EngineChild engine(IPCFLOOR_BINARY, unique_segment_name("strategy"),
                     {"--wait", "backoff", "--bars", "1000", "--workers", "0", "--strategy", module("sma_cross")});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  const auto index = client->segment().find_strategy("sma_cross");
  REQUIRE(index.has_value());
  const ResponseSlot answer = ask(*client, Opcode::backtest, *index, params(40, 10));
  REQUIRE(status_of(answer) == Status::window_out_of_range);
  REQUIRE(answer.extra[2] == kRecordWhy);
  CHECK(std::string(client->answer_record().why) == "slow is 10; it must be above fast (40) and at most 1000 (the bars)");
}

}  // namespace ipcfloor
