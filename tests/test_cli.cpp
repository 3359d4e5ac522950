// The command line as a script or an operator meets it: --version, IPCFLOOR_ISA, doctor, the
// exit codes, sweep's combo files and streamed rows, serve's ready line and pidfile, status's
// exposition, and the bench conventions (no suite, --list, one JSON document, .hgrm export).
// Each case runs the real binary and reads what it printed.

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/engine_child.hpp"
#include "bench/latency.hpp"
#include "kernel/isa.hpp"

using namespace ipcfloor;

namespace {

struct Ran {
  int code = -1;  // exit code; -1 when killed or timed out
  std::string out, err;
};

std::string read_all(int fd) {
  std::string text;
  char buffer[8192];
  ::lseek(fd, 0, SEEK_SET);
  for (ssize_t got; (got = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<std::size_t>(got));
  return text;
}

int temp_fd() {
  char path[] = "/tmp/ipcfloor-cli-XXXXXX";
  const int fd = ::mkstemp(path);
  ::unlink(path);
  return fd;
}

// Runs the binary with `args`, `env` added to the environment ("NAME=value"; "NAME=" removes it)
// and `input` on stdin; bounded by `limit` (then SIGKILL and code -1).
Ran run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}, const std::string& input = {},
        std::chrono::seconds limit = std::chrono::seconds(60)) {
  const int out = temp_fd(), err = temp_fd(), in = temp_fd();
  REQUIRE(out >= 0);
  REQUIRE(::write(in, input.data(), input.size()) == static_cast<ssize_t>(input.size()));
  ::lseek(in, 0, SEEK_SET);
  std::vector<std::string> argv{IPCFLOOR_BINARY};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(in, STDIN_FILENO);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    for (const std::string& entry : env) {
      const auto eq = entry.find('=');
      if (eq + 1 == entry.size())
        ::unsetenv(entry.substr(0, eq).c_str());
      else
        ::setenv(entry.substr(0, eq).c_str(), entry.substr(eq + 1).c_str(), 1);
    }
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  Ran ran;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      status = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (status != -1 && WIFEXITED(status)) ran.code = WEXITSTATUS(status);
  ran.out = read_all(out);
  ran.err = read_all(err);
  ::close(out);
  ::close(err);
  ::close(in);
  return ran;
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);)
    if (!line.empty()) lines.push_back(line);
  return lines;
}

std::string unique_name(const char* what) {
  static int counter = 0;
  return "ipcfloor-cli-" + std::string(what) + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

}  // namespace

TEST_CASE("--version names the version, the commit, the build and the kernel path this CPU runs") {
  const Ran ran = run({"--version"}, {"IPCFLOOR_ISA="});
  CHECK(ran.code == 0);
  for (const std::string_view part : {"ipcfloor ", "commit", "build", "compiler", "kernel"})
    CHECK_MESSAGE(contains(ran.out, part), ran.out);
  CHECK(contains(ran.out, fmt::format("{} path (CPUID", to_string(supported_kernel_isas().front()))));
}

TEST_CASE("IPCFLOOR_ISA forces each path this CPU runs, and an unknown name exits 3 naming it") {
  for (const KernelIsa isa : supported_kernel_isas()) {
    const Ran ran = run({"--version"}, {"IPCFLOOR_ISA=" + std::string(to_string(isa))});
    CHECK(ran.code == 0);
    CHECK_MESSAGE(contains(ran.out, fmt::format("{} path (IPCFLOOR_ISA", to_string(isa))), ran.out);
  }
  const Ran bad = run({"sweep", "--inproc", "--lengths", "6"}, {"IPCFLOOR_ISA=avx1024"});
  CHECK(bad.code == 3);
  CHECK_MESSAGE(contains(bad.err, "IPCFLOOR_ISA='avx1024'"), bad.err);
  CHECK(bad.out.empty());
}

TEST_CASE("doctor --json reports every check with its level, the kernel path among them, and fails on a bad socket dir") {
  const Ran ran = run({"doctor", "--json"});
  REQUIRE_MESSAGE((ran.code == 0 || ran.code == 4), ran.err);
  const auto report = nlohmann::json::parse(ran.out, nullptr, false);
  REQUIRE_FALSE(report.is_discarded());
  bool saw_isa = false;
  std::size_t fails = 0;
  for (const auto& check : report["checks"]) {
    const std::string level = check["level"].get<std::string>();
    CHECK((level == "ok" || level == "warn" || level == "fail"));
    fails += level == "fail" ? 1 : 0;
    if (check["check"] == "kernel_isa") {
      saw_isa = true;
      CHECK(contains(check["finding"].get<std::string>(), to_string(active_kernel_isa())));
    }
  }
  CHECK(saw_isa);
  CHECK((fails == 0) == (ran.code == 0));

  const Ran failing = run({"doctor", "--socket-dir", "/nonexistent/ipcfloor"});
  CHECK(failing.code != 0);
  CHECK_MESSAGE(contains(failing.out + failing.err, "/nonexistent/ipcfloor"), failing.out);
}

TEST_CASE("sweep --combos streams one row per combo; a bad row carries its error, the others run, and the exit code is 3") {
  const std::string csv = "h,L,s,p3,p2,p\n3,6,2,1,2,3\n0,6,2,1,2,3\n5,10,3,2,2,5\n3,6,2,1,2,99999999\n10,20,4,3,5,10\n";
  const Ran ran = run({"sweep", "--inproc", "--combos", "-", "--json", "--bars", "2000", "--quiet"}, {}, csv);
  CHECK(ran.code == 3);
  const auto rows = lines_of(ran.out);
  REQUIRE(rows.size() == 5);
  std::size_t errors = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const auto row = nlohmann::json::parse(rows[i], nullptr, false);
    REQUIRE_FALSE(row.is_discarded());
    const bool bad = i == 1 || i == 3;
    CHECK_MESSAGE(row.contains("error") == bad, rows[i]);
    errors += row.contains("error") ? 1 : 0;
    if (!bad) CHECK(row.contains("pnl"));
  }
  CHECK(errors == 2);

  const Ran jsonl = run({"sweep", "--inproc", "--combos", "-", "--csv", "--bars", "2000", "--quiet"}, {},
                        "{\"h\":3,\"L\":6,\"s\":2,\"p3\":1,\"p2\":2,\"p\":3}\n{\"params\":[5,10,3,2,2,5]}\n");
  CHECK(jsonl.code == 0);
  CHECK(lines_of(jsonl.out).size() == 3);  // the CSV header and two rows
}

TEST_CASE("sweep --lengths '' is an error naming the flag, not the default grid") {
  const Ran ran = run({"sweep", "--inproc", "--lengths", ""});
  CHECK(ran.code != 0);
  CHECK(ran.out.empty());
  CHECK_MESSAGE(contains(ran.err, "--lengths"), ran.err);
}

TEST_CASE("serve prints one ready line and writes its pidfile; status --prometheus and --json describe it") {
  const std::string name = unique_name("ready");
  const std::string pidfile = "/tmp/" + name + ".pid";
  const int out = temp_fd();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out, STDOUT_FILENO);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, STDERR_FILENO);
    ::execl(IPCFLOOR_BINARY, IPCFLOOR_BINARY, "serve", "--name", name.c_str(), "--bars", "1000", "--wait", "backoff",
            "--hugepages", "off", "--pidfile", pidfile.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  std::string ready;
  for (int i = 0; i < 1000 && ready.empty(); ++i) {
    for (const std::string& line : lines_of(read_all(out)))
      if (line.rfind("ready ", 0) == 0) ready = line;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE_MESSAGE(!ready.empty(), read_all(out));
  const auto fields = nlohmann::json::parse(ready.substr(6), nullptr, false);
  REQUIRE_FALSE(fields.is_discarded());
  CHECK(fields["engine"] == name);
  CHECK(fields["pid"] == pid);
  CHECK(fields["bars"] == 1000);
  std::ifstream pid_in(pidfile);
  pid_t written = 0;
  pid_in >> written;
  CHECK(written == pid);

  const Ran prometheus = run({"status", "--name", name, "--prometheus"});
  CHECK(prometheus.code == 0);
  CHECK_MESSAGE(contains(prometheus.out, "# TYPE"), prometheus.out);
  CHECK(contains(prometheus.out, "ipcfloor_"));
  const Ran json = run({"status", "--name", name, "--json"});
  CHECK(json.code == 0);
  const auto status = nlohmann::json::parse(json.out, nullptr, false);
  REQUIRE_FALSE(status.is_discarded());
  CHECK(status.contains("schema"));

  ::kill(pid, SIGTERM);
  int wait_status = 0;
  ::waitpid(pid, &wait_status, 0);
  CHECK(WIFEXITED(wait_status));
  CHECK(WEXITSTATUS(wait_status) == 0);
  ::close(out);
  std::filesystem::remove(pidfile);

  const Ran gone = run({"status", "--name", name});
  CHECK(gone.code == 5);  // engine gone
}

TEST_CASE("bench: no suite prints help and exits 2, --list names every suite and transport, an unknown suite exits 2") {
  const Ran none = run({"bench"});
  CHECK(none.code == 2);
  CHECK(contains(none.err, "--list"));
  CHECK(none.out.empty());
  const Ran list = run({"bench", "--list"});
  CHECK(list.code == 0);
  for (const std::string_view part : {"ladder", "compute", "throughput", "physical-floor", "shm-call-spin", "uds"})
    CHECK_MESSAGE(contains(list.out, part), list.out);
  const Ran unknown = run({"bench", "nosuch"});
  CHECK(unknown.code == 2);
  CHECK(contains(unknown.err, "nosuch"));
}

TEST_CASE("bench --json prints one document with the context block, and --hgrm writes each figure's distribution") {
  const std::string dir = "/tmp/" + unique_name("hgrm");
  const Ran ran = run({"bench", "ladder", "--transports", "physical-floor,inproc-call", "--samples", "2000", "--warmup",
                       "200", "--rounds", "2", "--json", "--hgrm", dir});
  REQUIRE_MESSAGE(ran.code == 0, ran.err);
  const auto doc = nlohmann::json::parse(ran.out, nullptr, false);
  REQUIRE_FALSE(doc.is_discarded());
  for (const char* key : {"version", "git_commit", "build_type", "compiler", "kernel_isa", "date", "kernel", "load_avg"})
    CHECK_MESSAGE(doc["context"].contains(key), key);
  REQUIRE(doc["suites"].contains("ladder"));
  for (const char* rung : {"physical-floor", "inproc-call"}) {
    const std::string path = dir + "/ladder-" + rung + ".hgrm";
    std::ifstream in(path);
    REQUIRE_MESSAGE(in.good(), path);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(contains(text.str(), "Percentile"));
    CHECK(contains(text.str(), "Total count    ="));
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("the percentile distribution climbs HdrHistogram's ticks to the maximum and the .hgrm text counts every sample") {
  std::vector<double> ns;
  for (int i = 1; i <= 10'000; ++i) ns.push_back(static_cast<double>(i));
  const LatencySummary summary = summarize("ramp", "rtt", ns);
  REQUIRE(summary.distribution.size() > 20);
  CHECK(summary.distribution.front().first == 0.0);
  CHECK(summary.distribution.back().first == 1.0);
  CHECK(summary.distribution.back().second == 10'000.0);
  for (std::size_t i = 1; i < summary.distribution.size(); ++i) {
    CHECK(summary.distribution[i].first > summary.distribution[i - 1].first);
    CHECK(summary.distribution[i].second >= summary.distribution[i - 1].second);
  }
  // Five ticks per halving: 0, 10%, ..., 50%, 55%, ... as HdrHistogram prints them.
  CHECK(summary.distribution[5].first == doctest::Approx(0.5));
  CHECK(summary.distribution[5].second == 5'000.0);
  const std::string text = hgrm_text(to_json(summary));
  CHECK(contains(text, "Total count    =        10000"));
  CHECK(contains(text, "      10.000 1.000000000000      10000"));
}

TEST_CASE("feed appends stdin's closes to a live engine and names a bad line; signals prints one JSON line per combo "
          "per bar; both name a non-live engine") {
  const std::string name = unique_name("live");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--bars", "1000", "--live", "--capacity", "1100"});
  REQUIRE(engine.up());
  Ran signals;
  std::thread subscriber([&] {
    signals = run({"signals", "--name", name, "--lengths", "6,8", "--json", "--count", "20", "--idle-exit-s", "20"});
  });
  // The subscriber has subscribed once the engine reports its lane claimed with requests.
  for (int i = 0; i < 500; ++i) {
    const Ran status = run({"status", "--name", name, "--json"});
    const auto parsed = nlohmann::json::parse(status.out, nullptr, false);
    if (!parsed.is_discarded() && parsed.contains("counters") && parsed["counters"].value("requests", 0) >= 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::string closes;
  for (int i = 0; i < 10; ++i) closes += fmt::format("{}\n", 100.0 + i * 0.25);
  const Ran fed = run({"feed", "--name", name}, {}, closes);
  CHECK_MESSAGE(fed.code == 0, fed.err);
  CHECK_MESSAGE(contains(fed.out, "appended 10 bars"), fed.out);
  CHECK(contains(fed.out, "the series now holds 1010 bars"));
  subscriber.join();
  CHECK_MESSAGE(signals.code == 0, signals.err);
  const auto lines = lines_of(signals.out);
  REQUIRE(lines.size() == 20);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const auto line = nlohmann::json::parse(lines[i], nullptr, false);
    REQUIRE_FALSE(line.is_discarded());
    CHECK(line["bar"] == 1000 + i / 2);
    CHECK(line["subscription"] == i % 2);
    CHECK(line.contains("pnl"));
    CHECK(line.contains("trades"));
  }

  const Ran bad = run({"feed", "--name", name}, {}, "101\n102\nabc\n");
  CHECK(bad.code == 3);
  CHECK_MESSAGE(contains(bad.err, "stdin line 3: 'abc' is not a close price"), bad.err);
  const Ran negative = run({"feed", "--name", name}, {}, "-5\n");
  CHECK(negative.code == 3);
  CHECK_MESSAGE(contains(negative.err, "bad_price"), negative.err);

  const std::string frozen_name = unique_name("frozen");
  EngineChild frozen(IPCFLOOR_BINARY, frozen_name, {"--wait", "backoff", "--bars", "1000"});
  REQUIRE(frozen.up());
  const Ran not_live = run({"feed", "--name", frozen_name}, {}, "100\n");
  CHECK(not_live.code == 3);
  CHECK_MESSAGE(contains(not_live.err, "is not live"), not_live.err);
  const Ran no_combos = run({"signals", "--name", frozen_name});
  CHECK(no_combos.code == 3);
}

TEST_CASE("a two-series engine answers sweeps on each series: sweep --name --series all prints exactly what --inproc "
          "prints for the same files, and an unknown series name lists the known ones") {
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string es = dir + "/" + unique_name("ES") + ".f64";
  const std::string nq = dir + "/" + unique_name("NQ") + ".csv";
  REQUIRE(run({"gen", "--bars", "4000", "--seed", "3", "-o", es}).code == 0);
  REQUIRE(run({"gen", "--bars", "6000", "--seed", "4", "-o", nq}).code == 0);
  const std::string name = unique_name("two");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--data", es, "--data", nq});
  REQUIRE(engine.up());
  const Ran through = run({"sweep", "--name", name, "--series", "all", "--grid", "6:200:20", "--csv", "--quiet"});
  const Ran inproc = run({"sweep", "--inproc", "--data", es, "--data", nq, "--series", "all", "--grid", "6:200:20",
                          "--csv", "--quiet"});
  CHECK_MESSAGE(through.code == 0, through.err);
  CHECK(inproc.code == 0);
  CHECK(lines_of(through.out).size() == 41);  // the header and 20 rows per series
  CHECK(through.out == inproc.out);
  const std::string nq_name = std::filesystem::path(nq).stem().string();
  const Ran one = run({"sweep", "--name", name, "--series", nq_name, "--lengths", "6", "--csv", "--quiet"});
  CHECK(one.code == 0);
  CHECK(contains(one.out, "\"" + nq_name + "\",6,"));
  const Ran unknown = run({"sweep", "--name", name, "--series", "XX", "--lengths", "6"});
  CHECK(unknown.code == 3);
  CHECK_MESSAGE(contains(unknown.err, "holds no series named 'XX'"), unknown.err);
  std::filesystem::remove(es);
  std::filesystem::remove(nq);
}

TEST_CASE("status --watch shows the sweeping lane's request rate and service-time percentiles while a sweep runs") {
  const std::string name = unique_name("watch");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--bars", "20000"});
  REQUIRE(engine.up());
  std::atomic<bool> stop{false};
  std::atomic<int> sweeps{0};
  std::thread sweeper([&] {
    while (!stop.load()) {
      const Ran ran = run({"sweep", "--name", name, "--grid", "6:200:80", "--csv", "--quiet", "--wait", "backoff"});
      if (ran.code != 0) break;
      sweeps.fetch_add(1);
    }
  });
  while (sweeps.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const Ran watch = run({"status", "--name", name, "--watch", "--interval", "0.3", "--count", "3"});
  stop.store(true);
  sweeper.join();
  CHECK_MESSAGE(watch.code == 0, watch.err);
  CHECK(contains(watch.out, "req/s"));
  CHECK(contains(watch.out, "service time over the last"));
  // Some refresh saw a claimed lane answering requests, with its percentiles.
  bool busy_lane = false;
  for (const std::string& line : lines_of(watch.out)) {
    std::istringstream fields(line);
    std::string lane, state, owner, p50;
    double rate = 0;
    if (!(fields >> lane >> state >> owner >> rate)) continue;
    std::string err, fill, p99;
    fields >> err >> fill >> p50 >> p99;
    if (state == "claimed" && rate > 0 && p50.rfind("<=", 0) == 0) busy_lane = true;
  }
  CHECK_MESSAGE(busy_lane, watch.out);
  CHECK(sweeps.load() >= 1);
}
