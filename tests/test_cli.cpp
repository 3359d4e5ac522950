// The command line as a script or an operator meets it: --version, IPCFLOOR_ISA, doctor, the
// exit codes, sweep's combo files and streamed rows, serve's ready line and pidfile, status's
// exposition, and the bench conventions (no suite, --list, one JSON document, .hgrm export).
// Each case runs the real binary and reads what it printed.

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
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

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "bench/engine_child.hpp"
#include "common/affinity.hpp"
#include "kernel/isa.hpp"
#include "tests/cli_harness.hpp"

using namespace ipcfloor;
using namespace ipcfloor::cli_test;

namespace {

// The doctor check named `name` in `doctor --json` output (null when absent).
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
  // The workers the ready line names are the ones status reads from the segment.
  CHECK(status["workers"]["count"] == fields["workers"]);
  CHECK(status["workers"]["cpus"] == fields["worker_cpus"]);
  CHECK(contains(prometheus.out, fmt::format("ipcfloor_workers{{engine=\"{}\"}} {}", name, fields["workers"].dump())));
  const Ran text = run({"status", "--name", name});
  CHECK_MESSAGE(contains(text.out, fields["workers"] == 0 ? std::string("workers   none")
                                                           : fmt::format("workers   {} on", fields["workers"].dump())),
                text.out);

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
  CHECK_MESSAGE(contains(bad.err, "standard input: line 3: the close cell 'abc' is not a number"), bad.err);
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
  CHECK(contains(one.out, "\"" + nq_name + "\",3,6,2,1,2,3,"));
  const Ran unknown = run({"sweep", "--name", name, "--series", "XX", "--lengths", "6"});
  CHECK(unknown.code == 3);
  CHECK_MESSAGE(contains(unknown.err, "holds no series named 'XX'"), unknown.err);
  std::filesystem::remove(es);
  std::filesystem::remove(nq);
}

TEST_CASE("status --watch shows the sweeping lane's request rate and service-time percentiles while a sweep runs") {
  const std::string name = unique_name("watch");
  // 200,000 bars: each sweep holds its lane for about a second, so most refreshes find it claimed
  // (between two sweeps the lane is free while the next process attaches).
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--bars", "200000"});
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
  // Some refresh saw a lane answering requests, with its percentiles.
  bool busy_lane = false;
  for (const std::string& line : lines_of(watch.out)) {
    std::istringstream fields(line);
    std::string lane, state, owner, p50;
    double rate = 0;
    if (!(fields >> lane >> state >> owner >> rate)) continue;
    std::string err, fill, p99;
    fields >> err >> fill >> p50 >> p99;
    // The rate and percentiles are over the refresh's interval: a lane the sweep held for part of
    // it shows them even when the sample caught it free between two sweeps.
    if ((state == "claimed" || state == "free") && rate > 0 && p50.rfind("<=", 0) == 0) busy_lane = true;
  }
  CHECK_MESSAGE(busy_lane, watch.out);
  CHECK(sweeps.load() >= 1);
}

// ---- Inputs that are not files (docs/RELIABILITY.md) -------------------------------------------

TEST_CASE("a FIFO as --data or --combos is refused at once, naming it, instead of waiting for a writer") {
  const TempDir dir;
  const std::string fifo_data = dir.file("prices.csv");
  const std::string fifo_combos = dir.file("combos.csv");
  REQUIRE(::mkfifo(fifo_data.c_str(), 0600) == 0);
  REQUIRE(::mkfifo(fifo_combos.c_str(), 0600) == 0);
  const std::vector<std::vector<std::string>> commands = {
      {"sweep", "--inproc", "--data", fifo_data, "--lengths", "6"},
      {"sweep", "--inproc", "--combos", fifo_combos, "--bars", "1000"},
      {"serve", "--name", unique_name("fifo"), "--data", fifo_data},
      {"signals", "--name", unique_name("fifo"), "--combos", fifo_combos},
  };
  for (const auto& args : commands) {
    CAPTURE(args[0]);
    const auto start = std::chrono::steady_clock::now();
    const Ran ran = run(Spawn{.args = args, .limit = std::chrono::seconds(10)});
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
    CHECK_MESSAGE(ran.code == 3, ran.err);
    CHECK_MESSAGE(contains(ran.err, "FIFO"), ran.err);
  }
}

TEST_CASE("/dev/zero and /dev/urandom as --data are refused as devices, and stdin from /dev/zero stops at the bound") {
  // The limit on the child's address space turns a read without a bound into a failed run here
  // instead of the host's OOM killer. ASan and TSan cannot start under one (they reserve terabytes
  // of shadow) and abort on a refused allocation, so there the devices and the combos (32 MiB
  // bound) run without it, and a series from an endless stdin (4 GiB bound) is left to the release
  // suite.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  const std::optional<rlim_t> one_gib;
  constexpr bool kEndlessStdin = false;
#else
  const std::optional<rlim_t> one_gib = rlim_t{1} << 30;
  constexpr bool kEndlessStdin = true;
#endif
  for (const char* device : {"/dev/zero", "/dev/urandom"}) {
    CAPTURE(device);
    const Ran ran = run(Spawn{.args = {"sweep", "--inproc", "--data", device, "--lengths", "6"},
                              .address_space = one_gib, .limit = std::chrono::seconds(20)});
    CHECK_MESSAGE(ran.code == 3, ran.err);
    CHECK_MESSAGE(contains(ran.err, "character device"), ran.err);
    CHECK(contains(ran.err, device));
  }
  const Ran feed = run(Spawn{.args = {"feed", "--name", unique_name("zero")}, .stdin_path = "/dev/zero",
                             .address_space = one_gib, .limit = std::chrono::seconds(20)});
  CHECK(feed.code != 0);
  CHECK(feed.code != -1);
  const Ran combos = run(Spawn{.args = {"sweep", "--inproc", "--combos", "-", "--bars", "1000"},
                               .stdin_path = "/dev/zero", .address_space = one_gib, .limit = std::chrono::seconds(60)});
  CHECK_MESSAGE(combos.code == 3, combos.err);
  CHECK_MESSAGE(contains(combos.err, "standard input"), combos.err);
  CHECK_MESSAGE(contains(combos.err, "more than"), combos.err);
  if (!kEndlessStdin) {
    MESSAGE("skipped under ASan: a series from standard input /dev/zero, read up to its 4 GiB bound");
    return;
  }
  const Ran data = run(Spawn{.args = {"sweep", "--inproc", "--data", "-", "--lengths", "6"}, .stdin_path = "/dev/zero",
                             .address_space = one_gib, .limit = std::chrono::seconds(60)});
  CHECK_MESSAGE((data.code == 3 || data.code == 4), data.err);  // over the bound, or over what the limit lets it hold
  CHECK_MESSAGE(contains(data.err, "standard input"), data.err);
}

TEST_CASE("--data - reads a series from standard input, CSV or .npy, with the same rows as the file") {
  const TempDir dir;
  const std::string csv = dir.file("s.csv");
  const std::string npy = dir.file("s.npy");
  REQUIRE(run({"gen", "--bars", "3000", "--seed", "5", "-o", csv}).code == 0);
  REQUIRE(run({"gen", "--bars", "3000", "--seed", "5", "-o", npy}).code == 0);
  const Ran from_file = run({"sweep", "--inproc", "--data", csv, "--lengths", "6,20", "--json", "--quiet"});
  REQUIRE(from_file.code == 0);
  for (const std::string& path : {csv, npy}) {
    const Ran piped = run(Spawn{.args = {"sweep", "--inproc", "--data", "-", "--lengths", "6,20", "--json", "--quiet"},
                                .stdin_path = path});
    CHECK_MESSAGE(piped.code == 0, piped.err);
    // The same rows on the same bars (the checksum says so); only the series' name differs.
    std::string renamed = piped.out;
    for (std::size_t at; (at = renamed.find("\"series\":\"stdin\"")) != std::string::npos;)
      renamed.replace(at, 16, "\"series\":\"s\"");
    CHECK(renamed == from_file.out);
  }
}

// ---- Every option has a range ------------------------------------------------------------------

namespace {

// One value outside each value-taking option's range, per subcommand; `before` comes first
// (e.g. the target a sweep needs). Every option `--help` lists must be here (checked below).
struct BadValue {
  std::string command, option, value;
};

const std::vector<BadValue>& bad_values() {
  static const std::vector<BadValue> table = {
      {"gen", "--bars", "1"}, {"gen", "--seed", "-1"}, {"gen", "--mu", "nan"}, {"gen", "--sigma", "-1"},
      {"gen", "--s0", "0"}, {"gen", "--dt", "0"}, {"gen", "--out", ""},
      {"sweep", "--name", "a/b"}, {"sweep", "--socket", ""}, {"sweep", "--tcp", "localhost:99999"},
      {"sweep", "--socket-dir", "relative/dir"}, {"sweep", "--wait", "fast"}, {"sweep", "--timeout", "0"},
      {"sweep", "--data", ""}, {"sweep", "--series", ""}, {"sweep", "--bars", "0"}, {"sweep", "--seed", "x"},
      {"sweep", "--mu", "inf"}, {"sweep", "--sigma", "-0.1"}, {"sweep", "--s0", "-1"}, {"sweep", "--dt", "2"},
      {"sweep", "--lengths", "6,x"}, {"sweep", "--grid", "6:200"}, {"sweep", "--combos", ""},
      {"sweep", "--fee", "-5"}, {"sweep", "--threads", "5000"}, {"sweep", "--strategy", "Not A Name"},
      {"sweep", "--client-cpu", "far"}, {"sweep", "--column", "a,b"}, {"sweep", "--bars-per-year", "0"},
      {"sweep", "--sort-by", "luck"}, {"sweep", "--top", "0"}, {"sweep", "--out", "rows.txt"},
      {"sweep", "--replay", ""}, {"sweep", "--search", "grid"}, {"sweep", "--trials", "0"},
      {"sweep", "--param", "fast"}, {"sweep", "--where", ""}, {"sweep", "--from", "-1"}, {"sweep", "--to", "-1"},
      {"walkforward", "--name", "a/b"}, {"walkforward", "--socket-dir", "relative"}, {"walkforward", "--data", ""},
      {"walkforward", "--column", "a,b"}, {"walkforward", "--series", ""}, {"walkforward", "--bars", "0"},
      {"walkforward", "--seed", "x"}, {"walkforward", "--mu", "inf"}, {"walkforward", "--sigma", "-1"},
      {"walkforward", "--s0", "0"}, {"walkforward", "--dt", "2"}, {"walkforward", "--strategy", "Not A Name"},
      {"walkforward", "--lengths", "6,x"}, {"walkforward", "--grid", "6:200"}, {"walkforward", "--combos", ""},
      {"walkforward", "--train", "1"}, {"walkforward", "--test", "0"}, {"walkforward", "--step", "0"},
      {"walkforward", "--by", "luck"}, {"walkforward", "--fee", "-5"}, {"walkforward", "--bars-per-year", "0"},
      {"walkforward", "--threads", "5000"},
      {"trades", "--name", "a/b"}, {"trades", "--socket-dir", "relative"}, {"trades", "--data", ""},
      {"trades", "--column", "a,b"}, {"trades", "--bars", "0"}, {"trades", "--seed", "x"}, {"trades", "--mu", "inf"},
      {"trades", "--sigma", "-1"}, {"trades", "--s0", "0"}, {"trades", "--dt", "2"}, {"trades", "--series", ""},
      {"trades", "--strategy", "Not A Name"}, {"trades", "--params", "10,x"}, {"trades", "--from", "-1"},
      {"trades", "--to", "-1"}, {"trades", "--fee", "-5"}, {"trades", "--bars-per-year", "0"},
      {"trades", "--trades-out", "x.txt"}, {"trades", "--equity-out", "x.parquet"},
      {"serve", "--column", ""}, {"serve", "--metrics", "localhost:99999"}, {"feed", "--column", "x\"y"},
      {"serve", "--name", ".."}, {"serve", "--socket-dir", "x"}, {"serve", "--data", ""}, {"serve", "--bars", "1"},
      {"serve", "--seed", "-1"}, {"serve", "--mu", "1e9"}, {"serve", "--sigma", "nan"}, {"serve", "--s0", "0"},
      {"serve", "--dt", "-1"}, {"serve", "--cpu", "-5"}, {"serve", "--lanes", "0"}, {"serve", "--ring-capacity", "3"},
      {"serve", "--bulk-bytes", "2147483648"}, {"serve", "--fee", "-5"}, {"serve", "--wait", "x"},
      {"serve", "--hugepages", "x"}, {"serve", "--mlock", "x"}, {"serve", "--heartbeat-ms", "0"},
      {"serve", "--max-frame-ms", "70000"}, {"serve", "--pidfile", ""}, {"serve", "--log-level", "loud"},
      {"serve", "--capacity", "1"}, {"serve", "--signal-capacity", "3"}, {"serve", "--subscriptions", "4294967295"},
      {"serve", "--socket", ""}, {"serve", "--tcp", "x:70000"}, {"serve", "--socket-cpu", "-5"},
      {"serve", "--socket-threads", "0"}, {"serve", "--sweep-threads", "100"}, {"serve", "--max-frame", "10"},
      {"serve", "--frame-timeout-ms", "0"}, {"serve", "--max-connections", "0"}, {"serve", "--owner-reserve", "70000"},
      {"serve", "--max-per-peer", "0"}, {"serve", "--min-frame-rate", "2000000000"},
      {"serve", "--idle-timeout-s", "10000000"}, {"serve", "--max-loaded-mb", "2000000"},
      {"serve", "--max-frame-cost", "9223372036854775807"}, {"serve", "--workers", "300"},
      {"serve", "--worker-cpus", "x"}, {"serve", "--inline-cost", "9223372036854775807"},
      {"serve", "--max-bar-cost", "9223372036854775807"}, {"serve", "--strategy", ""},
      {"serve", "--cpu", "automatic"}, {"serve", "--topology", ""}, {"serve", "--bars-per-year", "0"},
      {"serve", "--cpu", "automatic"}, {"serve", "--topology", ""}, {"serve", "--journal", ""},
      {"serve", "--fsync", "interval:0"}, {"feed", "--reconnect-limit-s", "0"},
      {"signals", "--reconnect-limit-s", "100000"}, {"bench", "--journal-dir", ""}, {"bench", "--kills", "0"},
      {"bench", "--restarts", "0"}, {"serve", "--allow-uid", "no-such-user-ipcf"},
      {"serve", "--allow-group", "no-such-group-ipcf"},
      {"feed", "--name", ""}, {"feed", "--data", ""}, {"feed", "--replay", ""}, {"feed", "--from", "-1"},
      {"feed", "--count", "-1"}, {"feed", "--rate", "-1"}, {"feed", "--socket-dir", "."},
      {"signals", "--name", "a b"}, {"signals", "--lengths", "0"}, {"signals", "--combos", ""},
      {"signals", "--count", "0"}, {"signals", "--idle-exit-s", "-1"}, {"signals", "--socket-dir", ""}, {"signals", "--strategy", "HMA"},
      {"status", "--name", "a/b"}, {"status", "--socket-dir", "x"}, {"status", "--interval", "0"},
      {"status", "--count", "-1"},
      {"doctor", "--cpu", "-5"}, {"doctor", "--bars", "1"}, {"doctor", "--lanes", "65"}, {"doctor", "--socket-dir", "x"},
      {"doctor", "--name", "a/b"}, {"doctor", "--unit", "/no/such/unit.service"},
      {"bench", "suite", "nosuch"}, {"bench", "--out", ""}, {"bench", "--hgrm", ""}, {"bench", "--gbench-json", ""},
      {"bench", "--transports", "nosuch"},
      {"bench", "--samples", "0"}, {"bench", "--warmup", "-1"}, {"bench", "--rounds", "0"},
      {"bench", "--ring-capacity", "3"}, {"bench", "--client-cpu", "-1"}, {"bench", "--server-cpu", "99999"},
      {"bench", "--requests", "0"}, {"bench", "--wait", "x"}, {"bench", "--repeats", "0"},
      {"bench", "--reference-repeats", "0"}, {"bench", "--threads", "5000"}, {"bench", "--python", ""},
      {"bench", "--workers", "300"}, {"bench", "--workers-grid", "x"}, {"bench", "--topology", ""},
      {"bench", "--client-cpu", "nearest"}, {"bench", "--strategy", ""},
      {"topology", "--mode", "slow"}, {"topology", "--out", ""}, {"topology", "--python", ""},
  };
  return table;
}

// The value-taking options of `ipcfloor COMMAND --help`: each line's name and its type field
// ("UINT:in 1..64=4"); flags have none and are left out.
std::vector<std::pair<std::string, std::string>> options_in_help(const std::string& command) {
  const Ran help = run({command, "--help"});
  std::vector<std::pair<std::string, std::string>> found;
  for (const std::string& line : lines_of(help.out)) {
    std::istringstream fields(line);
    std::string names, type;
    if (line.rfind("  ", 0) != 0 || !(fields >> names >> type)) continue;
    const bool positional = names == "suite";
    if (names.front() != '-' && !positional) continue;
    // A type is an upper-case word (TEXT, UINT, INT, FLOAT), maybe with ":range" or "=default"
    // after it; a flag has its description there instead.
    const std::string word = type.substr(0, type.find_first_of(":= "));
    if (word.size() < 3 || !std::all_of(word.begin(), word.end(), [](char c) { return c >= 'A' && c <= 'Z'; })) continue;
    const std::string name = names.substr(names.rfind(',') == std::string::npos ? 0 : names.rfind(',') + 1);
    found.emplace_back(name, type);
  }
  return found;
}

}  // namespace

TEST_CASE("every value-taking option of every subcommand shows its range in --help and has a row of bad values") {
  for (const std::string command :
       {"gen", "sweep", "trades", "walkforward", "serve", "feed", "signals", "status", "doctor", "bench", "topology"}) {
    const auto options = options_in_help(command);
    CHECK_MESSAGE(!options.empty(), command);
    for (const auto& [name, type] : options) {
      const std::string where = command + " " + name;
      CAPTURE(where);
      // CLI11 prints a validator's description after the type: "UINT:in 1..64".
      CHECK_MESSAGE(type.find(':') != std::string::npos, type);
      const auto& table = bad_values();
      CHECK(std::any_of(table.begin(), table.end(),
                        [&](const BadValue& bad) { return bad.command == command && bad.option == name; }));
    }
  }
}

TEST_CASE("an option value outside its range exits 2 naming the option, before anything runs") {
  for (const BadValue& bad : bad_values()) {
    CAPTURE(bad.command);
    CAPTURE(bad.option);
    CAPTURE(bad.value);
    std::vector<std::string> args{bad.command};
    if (bad.option == "suite") {
      args.push_back(bad.value);
    } else {
      args.push_back(bad.option);
      args.push_back(bad.value);
    }
    const Ran ran = run(Spawn{.args = args, .limit = std::chrono::seconds(20)});
    CHECK_MESSAGE(ran.code == 2, ran.err);
    CHECK_MESSAGE(contains(ran.err, bad.option == "suite" ? bad.value : bad.option), ran.err);
    CHECK(ran.out.empty());
  }
  // Rules between options: exit 2 as well, naming both.
  const Ran reserve = run({"serve", "--owner-reserve", "1000", "--no-shm", "--socket", "/tmp/x.sock"});
  CHECK(reserve.code == 2);
  CHECK_MESSAGE((contains(reserve.err, "--owner-reserve 1000") && contains(reserve.err, "--max-connections")),
                reserve.err);
  const Ran capacity = run({"serve", "--capacity", "2000"});
  CHECK(capacity.code == 2);
  CHECK_MESSAGE(contains(capacity.err, "--live"), capacity.err);
  const Ran live = run({"serve", "--live", "--bars", "1000", "--capacity", "500", "--name", unique_name("cap")});
  CHECK(live.code == 2);
  CHECK_MESSAGE(contains(live.err, "--capacity 500 is below the 1000 bars"), live.err);
}

TEST_CASE("sweep --timeout 0 or -1 is a usage error, never 'the engine did not answer'") {
  for (const char* timeout : {"0", "-1"}) {
    const Ran ran = run({"sweep", "--name", unique_name("nobody"), "--timeout", timeout, "--lengths", "6"});
    CHECK(ran.code == 2);
    CHECK_MESSAGE(contains(ran.err, "--timeout"), ran.err);
    CHECK_FALSE(contains(ran.err, "answer"));
  }
}

// ---- Exit codes and numbering ------------------------------------------------------------------

TEST_CASE("a missing --data or --combos file exits 3 (bad input) naming the path, in every command that reads one") {
  const std::string missing_data = "/tmp/" + unique_name("missing") + ".csv";
  const std::string missing_combos = "/tmp/" + unique_name("missing") + ".jsonl";
  const std::vector<std::vector<std::string>> commands = {
      {"sweep", "--inproc", "--data", missing_data, "--lengths", "6"},
      {"sweep", "--inproc", "--combos", missing_combos},
      {"serve", "--name", unique_name("missing"), "--data", missing_data},
      {"feed", "--name", unique_name("missing"), "--data", missing_data},
      {"feed", "--name", unique_name("missing"), "--replay", missing_data},
      {"signals", "--name", unique_name("missing"), "--combos", missing_combos},
  };
  for (const auto& args : commands) {
    CAPTURE(args[0]);
    CAPTURE(args[args.size() - 1]);
    const Ran ran = run(args);
    CHECK_MESSAGE(ran.code == 3, ran.err);
    CHECK_MESSAGE((contains(ran.err, missing_data) || contains(ran.err, missing_combos)), ran.err);
  }
}

TEST_CASE("signals names the state it subscribes at by the 0-based index of the last bar, as its signals do") {
  const std::string name = unique_name("bar");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--bars", "1000", "--live", "--capacity", "1100"});
  REQUIRE(engine.up());
  const Ran subscribed = run({"signals", "--name", name, "--lengths", "6", "--idle-exit-s", "0.3"});
  CHECK_MESSAGE(subscribed.code == 0, subscribed.err);
  // 1,000 bars: the last is bar 999, the bar a signal for it carries.
  CHECK_MESSAGE(contains(subscribed.err, "after bar 999:"), subscribed.err);
  CHECK_FALSE(contains(subscribed.err, "bar 1000"));
}

// ---- Combo files -------------------------------------------------------------------------------

TEST_CASE("a combo-file row that does not parse is written with its own text, never with invented params") {
  const std::string combos = "h,L,s,p3,p2,p\n3,6,2,1,2,3\n3,x,2,1,2,3\n";
  const Ran json = run({"sweep", "--inproc", "--combos", "-", "--bars", "2000", "--json", "--quiet"}, {}, combos);
  CHECK(json.code == 3);
  const auto rows = lines_of(json.out);
  REQUIRE(rows.size() == 2);
  const auto bad = nlohmann::json::parse(rows[1], nullptr, false);
  REQUIRE_FALSE(bad.is_discarded());
  CHECK(bad["raw"] == "3,x,2,1,2,3");
  CHECK_FALSE(bad.contains("params"));
  CHECK_MESSAGE(contains(bad["error"].get<std::string>(), "line 3"), rows[1]);
  const Ran table = run({"sweep", "--inproc", "--combos", "-", "--bars", "2000", "--quiet"}, {}, combos);
  CHECK(contains(table.out, "3,x,2,1,2,3"));
  CHECK_FALSE(contains(table.out, "[0,0,0,0,0,0]"));
  const Ran csv = run({"sweep", "--inproc", "--combos", "-", "--bars", "2000", "--csv", "--quiet"}, {}, combos);
  CHECK_MESSAGE(contains(csv.out, ",,,,,,,,\"bad_row: line 3: L 'x' is not a whole number\",\"3,x,2,1,2,3\""), csv.out);
  const Ran json_lines = run({"sweep", "--inproc", "--combos", "-", "--bars", "2000", "--json", "--quiet"}, {},
                             "{\"params\":[3,6,2,1,2,3]}\n{\"params\":[3,6]}\n");
  CHECK(contains(json_lines.out, "\"raw\":\"{\\\"params\\\":[3,6]}\""));
}

TEST_CASE("a window error of a combo-file row names its line, in-process and through an engine") {
  const std::string combos = "h,L,s,p3,p2,p\n3,6,2,1,2,3\n3,6,2,1,2,99999\n";
  const Ran inproc = run({"sweep", "--inproc", "--combos", "-", "--bars", "2000", "--json", "--quiet"}, {}, combos);
  CHECK(inproc.code == 3);
  CHECK_MESSAGE(contains(inproc.out, "window_out_of_range: line 3: params [3, 6, 2, 1, 2, 99999]"), inproc.out);
  const std::string name = unique_name("window");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--bars", "2000"});
  REQUIRE(engine.up());
  const Ran through = run({"sweep", "--name", name, "--combos", "-", "--json", "--quiet"}, {}, combos);
  CHECK(through.code == 3);
  CHECK(through.out == inproc.out);
}

TEST_CASE("the CSV header names the L column as the table and JSON do, and each row's L is the JSON row's L") {
  const Ran csv = run({"sweep", "--inproc", "--lengths", "6,25", "--bars", "2000", "--csv", "--quiet"});
  const Ran json = run({"sweep", "--inproc", "--lengths", "6,25", "--bars", "2000", "--json", "--quiet"});
  const auto csv_lines = lines_of(csv.out);
  const auto json_lines = lines_of(json.out);
  REQUIRE(csv_lines.size() == 3);
  REQUIRE(json_lines.size() == 2);
  CHECK(csv_lines[0] == "h,L,s,p3,p2,p,pnl,trades,error,raw,series,series_bars,series_checksum");
  CHECK_FALSE(contains(csv_lines[0], "length"));
  for (std::size_t i = 0; i < 2; ++i) {
    const auto row = nlohmann::json::parse(json_lines[i]);
    std::vector<std::string> cells;
    std::istringstream fields(csv_lines[i + 1]);
    for (std::string cell; std::getline(fields, cell, ',');) cells.push_back(cell);
    REQUIRE(cells.size() >= 8);
    CHECK(std::stoll(cells[1]) == row["L"].get<long long>());
    CHECK(std::stoll(cells[7]) == row["trades"].get<long long>());
  }
}

TEST_CASE("sweep --series takes an index as the C ABI does, and --series all gives each series its own header") {
  const TempDir dir;
  const std::string es = dir.file("ES.f64");
  const std::string nq = dir.file("NQ.csv");
  REQUIRE(run({"gen", "--bars", "3000", "--seed", "3", "-o", es}).code == 0);
  REQUIRE(run({"gen", "--bars", "4000", "--seed", "4", "-o", nq}).code == 0);
  const Ran by_name = run({"sweep", "--inproc", "--data", es, "--data", nq, "--series", "NQ", "--lengths", "6", "--csv"});
  const Ran by_index = run({"sweep", "--inproc", "--data", es, "--data", nq, "--series", "1", "--lengths", "6", "--csv"});
  CHECK_MESSAGE(by_index.code == 0, by_index.err);
  CHECK(by_index.out == by_name.out);
  const Ran past = run({"sweep", "--inproc", "--data", es, "--data", nq, "--series", "2", "--lengths", "6"});
  CHECK(past.code == 3);
  CHECK_MESSAGE(contains(past.err, "index 0..1"), past.err);

  const std::string name = unique_name("index");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--data", es, "--data", nq});
  REQUIRE(engine.up());
  const Ran through = run({"sweep", "--name", name, "--series", "1", "--lengths", "6", "--csv"});
  CHECK_MESSAGE(through.code == 0, through.err);
  CHECK(through.out == by_name.out);
  for (const std::vector<std::string>& target : {std::vector<std::string>{"--inproc", "--data", es, "--data", nq},
                                               std::vector<std::string>{"--name", name}}) {
    std::vector<std::string> args{"sweep"};
    args.insert(args.end(), target.begin(), target.end());
    args.insert(args.end(), {"--series", "all", "--lengths", "6,8", "--quiet"});
    const Ran all = run(args);
    CHECK_MESSAGE(all.code == 0, all.err);
    std::vector<std::string> headers;
    for (const std::string& line : lines_of(all.out))
      if (line.rfind("sweep: ", 0) == 0) headers.push_back(line);
    REQUIRE_MESSAGE(headers.size() == 2, all.out);
    CHECK_MESSAGE((contains(headers[0], "ES") && !contains(headers[0], "NQ")), headers[0]);
    CHECK_MESSAGE(contains(headers[1], "NQ"), headers[1]);
  }
}

// ---- Where clients find the engine -------------------------------------------------------------

TEST_CASE("sweep, status, feed and signals take --socket-dir, and IPCFLOOR_SOCKET_DIR moves them all") {
  const TempDir dir;
  const std::string name = unique_name("dir");
  Served engine({"--name", name, "--socket-dir", dir.path, "--bars", "1000", "--wait", "backoff", "--live",
                 "--hugepages", "off", "--quiet"});
  REQUIRE_MESSAGE(engine.ready(), engine.err());
  const std::vector<std::vector<std::string>> commands = {
      {"sweep", "--name", name, "--lengths", "6", "--csv"},
      {"status", "--name", name, "--json"},
      {"signals", "--name", name, "--lengths", "6", "--idle-exit-s", "0.2"},
  };
  for (const auto& args : commands) {
    CAPTURE(args[0]);
    std::vector<std::string> with_option = args;
    with_option.insert(with_option.end(), {"--socket-dir", dir.path});
    const Ran told = run(with_option);
    CHECK_MESSAGE(told.code == 0, told.err);
    const Ran from_env = run(args, {"IPCFLOOR_SOCKET_DIR=" + dir.path});
    CHECK_MESSAGE(from_env.code == 0, from_env.err);
    const Ran elsewhere = run(args, {"IPCFLOOR_SOCKET_DIR="});
    CHECK(elsewhere.code == 5);  // the default directory has no such engine
  }
  const Ran fed = run({"feed", "--name", name, "--socket-dir", dir.path}, {}, "100.5\n");
  CHECK_MESSAGE(fed.code == 0, fed.err);
  const Ran fed_env = run({"feed", "--name", name}, {"IPCFLOOR_SOCKET_DIR=" + dir.path}, "100.5\n");
  CHECK_MESSAGE(fed_env.code == 0, fed_env.err);
}

// ---- doctor and serve agree --------------------------------------------------------------------

TEST_CASE("doctor and serve agree on memlock: under a 64 KiB RLIMIT_MEMLOCK both say what mlock will do") {
  const rlim_t tiny = 64 << 10;
  const Ran doctor = run(Spawn{.args = {"doctor", "--json", "--bars", "1000"}, .memlock = tiny});
  const nlohmann::json check = doctor_check(doctor.out, "memlock");
  REQUIRE_MESSAGE(!check.is_null(), doctor.out);
  Served engine({"--name", unique_name("memlock"), "--bars", "1000", "--wait", "backoff", "--hugepages", "off"}, {},
                tiny);
  REQUIRE_MESSAGE(engine.ready(), engine.err());
  const std::string log = engine.err();
  const bool serve_locked = contains(log, "locked in RAM");
  CHECK_MESSAGE((serve_locked || contains(log, "NOT locked")), log);
  // Root (CAP_IPC_LOCK) locks whatever the limit says; anyone else runs unlocked. Doctor must say so.
  const std::string both = check.dump() + "\n" + log;
  CHECK_MESSAGE((check["level"] == "ok") == serve_locked, both);
}

TEST_CASE("doctor's huge-page fix is the one serve prints for the same shortfall") {
  const Ran doctor = run({"doctor", "--json", "--bars", "1000"});
  const nlohmann::json check = doctor_check(doctor.out, "huge_pages");
  REQUIRE(!check.is_null());
  if (check["level"] == "ok") {
    // serve would start and serve until the run's deadline killed it, leaving its socket behind.
    MESSAGE("skipped: this host's huge page pool has room for the data object");
    return;
  }
  const Ran serve = run({"serve", "--name", unique_name("huge"), "--bars", "1000", "--hugepages", "require",
                         "--wait", "backoff", "--quiet"},
                        {}, {}, std::chrono::seconds(5));
  CHECK(serve.code == 4);
  const std::string fix = check["fix"].get<std::string>();
  const std::string both = fix + "\n" + serve.err;
  CHECK_MESSAGE(contains(serve.err, "(fix: " + fix + ")"), both);
}

TEST_CASE("doctor and serve warn when another engine already pins its serving thread to the cpu") {
  const std::string first = unique_name("pinned");
  Served engine({"--name", first, "--cpu", "0", "--bars", "1000", "--wait", "block", "--hugepages", "off", "--quiet"});
  REQUIRE_MESSAGE(engine.ready(), engine.err());
  const Ran doctor = run({"doctor", "--json", "--cpu", "0"});
  const nlohmann::json check = doctor_check(doctor.out, "cpu_shared");
  REQUIRE_MESSAGE(!check.is_null(), doctor.out);
  CHECK(check["level"] == "warn");
  CHECK_MESSAGE(contains(check["finding"].get<std::string>(), fmt::format("pid {}", engine.pid())), check.dump());
  // On another cpu this engine is not named (another engine of this host may be, so no verdict).
  const Ran elsewhere = run({"doctor", "--json", "--cpu", "1"});
  CHECK_FALSE(contains(doctor_check(elsewhere.out, "cpu_shared").dump(), fmt::format("pid {}", engine.pid())));

  Served second({"--name", unique_name("pinned"), "--cpu", "0", "--bars", "1000", "--wait", "block", "--hugepages",
                 "off", "--quiet"});
  REQUIRE_MESSAGE(second.ready(), second.err());
  const std::string log = second.err();
  CHECK_MESSAGE(contains(log, "already pins its serving thread to cpu 0"), log);
  CHECK_MESSAGE(contains(log, fmt::format("pid {}", engine.pid())), log);
}

TEST_CASE("doctor names the workers serve starts on the same serving cpu") {
  const int serving = allowed_cpus().back();
  Served engine({"--name", unique_name("workers"), "--cpu", std::to_string(serving), "--bars", "1000", "--wait",
                 "block", "--hugepages", "off", "--quiet"});
  REQUIRE_MESSAGE(engine.ready(), engine.err());
  const nlohmann::json ready = engine.ready_fields();
  REQUIRE(ready.is_object());
  const Ran doctor = run({"doctor", "--json", "--cpu", std::to_string(serving)});
  const nlohmann::json check = doctor_check(doctor.out, "workers");
  REQUIRE_MESSAGE(!check.is_null(), doctor.out);
  const auto cpus = ready["worker_cpus"].get<std::vector<int>>();
  if (cpus.empty()) {
    CHECK(check["level"] == "warn");
    CHECK(contains(check["finding"].get<std::string>(), "would start no worker"));
  } else {
    CHECK(check["level"] == "ok");
    const std::string listed = fmt::format("{} {}", cpus.size() == 1 ? "cpu" : "cpus", fmt::join(cpus, ","));
    CHECK_MESSAGE(contains(check["finding"].get<std::string>(), listed), check.dump());
    CHECK(contains(check["finding"].get<std::string>(), fmt::format("{} worker", cpus.size())));
  }
}

TEST_CASE("doctor warns when kernel.yama.ptrace_scope is 0 or Yama is absent, and says what that lets a process do") {
  std::ifstream in("/proc/sys/kernel/yama/ptrace_scope");
  std::string scope;
  in >> scope;
  const Ran doctor = run({"doctor", "--json"});
  const nlohmann::json check = doctor_check(doctor.out, "ptrace_scope");
  REQUIRE_MESSAGE(!check.is_null(), doctor.out);
  const bool exposed = scope.empty() || scope == "0";
  CHECK(check["level"] == (exposed ? "warn" : "ok"));
  if (exposed) {
    CHECK(contains(check["finding"].get<std::string>(), "/proc/PID/mem"));
    CHECK(contains(check["fix"].get<std::string>(), "kernel.yama.ptrace_scope=1"));
  }
}

TEST_CASE("topology saves a matrix of every allowed pair; serve --cpu auto, sweep and the ladder place by it") {
  const std::vector<int> allowed = allowed_cpus();
  if (allowed.size() < 2) {
    MESSAGE("one allowed cpu: no pair to measure (test_topology checks that --cpu auto is refused)");
    return;
  }
  TempDir dir;
  const std::string saved = dir.file("saved.json");
  const Ran topology = run({"topology", "--json", "--save", "--out", dir.path}, {"IPCFLOOR_TOPOLOGY=" + saved});
  REQUIRE_MESSAGE(topology.code == 0, topology.err);
  const auto report = nlohmann::json::parse(topology.out, nullptr, false);
  REQUIRE_FALSE(report.is_discarded());
  CHECK(report["suite"] == "topology");
  CHECK(report["context"].contains("command"));
  CHECK(report["host"].contains("cpu"));
  CHECK(report["pairs"].size() == allowed.size() * (allowed.size() - 1) / 2);  // quick: one direction per pair
  CHECK(report["best"]["p50_interp"].get<double>() > 0);
  CHECK(report["worst_over_best"].get<double>() >= 1.0);
  CHECK(std::filesystem::exists(saved));
  CHECK(std::filesystem::exists(dir.file("topology.json")));

  const std::string name = unique_name("auto");
  Served served({"--name", name, "--cpu", "auto", "--topology", saved, "--bars", "3000", "--wait", "backoff"});
  REQUIRE_MESSAGE(served.ready(), served.err());
  CHECK(contains(served.err(), "--cpu auto: cpu"));
  const int serving = served.ready_fields()["cpu"].get<int>();
  CHECK(serving != 0);  // cpu 0 stays free
  const Ran status = run({"status", "--name", name, "--json"});
  const auto placement = nlohmann::json::parse(status.out, nullptr, false)["placement"];
  CHECK(placement["serving_cpu"] == serving);
  CHECK(placement["near_cpus"].size() == allowed.size() - 1);
  CHECK(placement["near_cpus"][0] == report["placement"]["near_cpus"][0]);
  const Ran sweep = run({"sweep", "--name", name, "--client-cpu", "near", "--lengths", "6,8", "--json"});
  CHECK_MESSAGE(sweep.code == 0, sweep.err);
  CHECK(lines_of(sweep.out).size() == 2);

  const Ran ladder = run({"bench", "ladder", "--transports", "physical-floor", "--samples", "2000", "--warmup", "200",
                          "--rounds", "1", "--server-cpu", std::to_string(serving), "--client-cpu", "near",
                          "--topology", saved, "--json"});
  REQUIRE_MESSAGE(ladder.code == 0, ladder.err);
  const auto pair = nlohmann::json::parse(ladder.out, nullptr, false)["suites"]["ladder"]["pair"];
  CHECK(pair["server_cpu"] == serving);
  CHECK(pair["client_cpu"] == placement["near_cpus"][0]);
  CHECK(pair["matrix_p50"].get<double>() > 0);
  CHECK(pair.contains("relation"));
}
