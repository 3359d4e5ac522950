// The command line in a user's everyday workflows, each a trap a user fell into: results that
// name the series they ran on (and a sweep through an engine that refuses data the engine does
// not serve), feeding a live engine without appending its bars twice, vendor CSVs, interrupted
// commands, the ready line, usage errors, `status --watch` in live mode and the Prometheus
// exposition. Each case runs the real binary (tests/cli_harness.hpp).

#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/engine_child.hpp"
#include "common/affinity.hpp"
#include "shm/segment.hpp"
#include "tests/cli_harness.hpp"

using namespace ipcfloor;
using namespace ipcfloor::cli_test;

namespace {

// The engine's main series checksum, as `status --json` reads it from the segment.
std::string engine_checksum(const std::string& name) {
  const auto status = nlohmann::json::parse(run({"status", "--name", name, "--json"}).out, nullptr, false);
  return status.is_discarded() ? std::string() : status["series"]["checksum"].get<std::string>();
}

std::vector<nlohmann::json> json_rows(const std::string& out) {
  std::vector<nlohmann::json> rows;
  for (const std::string& line : lines_of(out)) rows.push_back(nlohmann::json::parse(line, nullptr, false));
  return rows;
}

// A made-up price path that every format writes exactly (17 significant digits).
std::vector<double> prices(std::size_t bars) {
  std::vector<double> close;
  for (std::size_t i = 0; i < bars; ++i) close.push_back(100.0 + 5.0 * std::sin(0.05 * static_cast<double>(i)) + 0.01 * static_cast<double>(i));
  return close;
}

}  // namespace

TEST_CASE("sweep through an engine refuses a --data or --bars/--seed that is not the engine's series, and every output "
          "format names the series the rows ran on: name, bars and checksum") {
  const TempDir dir;
  const std::string same = dir.file("same.f64"), other = dir.file("other.f64");
  REQUIRE(run({"gen", "--bars", "3000", "--seed", "7", "-o", same}).code == 0);
  REQUIRE(run({"gen", "--bars", "3000", "--seed", "8", "-o", other}).code == 0);
  const std::string name = unique_name("named");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--bars", "3000", "--seed", "7"});
  REQUIRE(engine.up());
  const std::string checksum = engine_checksum(name);
  REQUIRE(checksum.size() == 16);

  const Ran wrong = run({"sweep", "--name", name, "--data", other, "--lengths", "6", "--json"});
  CHECK(wrong.code == 2);
  CHECK(wrong.out.empty());
  CHECK_MESSAGE((contains(wrong.err, "--data " + other) && contains(wrong.err, "checksum " + checksum)), wrong.err);
  const Ran seed = run({"sweep", "--name", name, "--seed", "8", "--bars", "3000", "--lengths", "6"});
  CHECK(seed.code == 2);
  CHECK_MESSAGE(contains(seed.err, "--bars/--seed"), seed.err);

  const Ran json = run({"sweep", "--name", name, "--data", same, "--lengths", "6,8", "--json", "--quiet"});
  REQUIRE_MESSAGE(json.code == 0, json.err);
  for (const auto& row : json_rows(json.out)) {
    CHECK(row["series"] == "default");
    CHECK(row["series_bars"] == 3000);
    CHECK(row["series_checksum"] == checksum);
  }
  // The same file in-process names itself and has the engine's checksum: the same data.
  const Ran inproc = run({"sweep", "--inproc", "--data", same, "--lengths", "6", "--json", "--quiet"});
  const auto inproc_rows = json_rows(inproc.out);
  REQUIRE(inproc_rows.size() == 1);
  CHECK(inproc_rows[0]["series"] == "same");
  CHECK(inproc_rows[0]["series_checksum"] == checksum);
  CHECK(inproc_rows[0]["pnl"] == json_rows(json.out)[0]["pnl"]);

  const Ran csv = run({"sweep", "--name", name, "--lengths", "6", "--csv", "--quiet"});
  const auto lines = lines_of(csv.out);
  REQUIRE(lines.size() == 2);
  CHECK(lines[0] == "h,L,s,p3,p2,p,pnl,trades,error,raw,series,series_bars,series_checksum");
  CHECK_MESSAGE(lines[1].ends_with(",\"default\",3000," + checksum), lines[1]);
  const Ran table = run({"sweep", "--name", name, "--lengths", "6", "--quiet"});
  CHECK_MESSAGE(contains(table.out, fmt::format("series default (3000 bars, checksum {})", checksum)), table.out);
}

TEST_CASE("feed --data on a live engine appends after the bars the engine holds, refuses a file that does not "
          "continue them, and a bad line on standard input says what was appended and what the series holds") {
  const TempDir dir;
  const std::string preloaded = dir.file("pre.f64"), longer = dir.file("longer.f64"), other = dir.file("other.f64");
  REQUIRE(run({"gen", "--bars", "1000", "--seed", "3", "-o", preloaded}).code == 0);
  REQUIRE(run({"gen", "--bars", "1010", "--seed", "3", "-o", longer}).code == 0);  // the same first 1000 bars
  REQUIRE(run({"gen", "--bars", "1010", "--seed", "4", "-o", other}).code == 0);
  const std::string name = unique_name("feed");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--data", preloaded, "--live"});
  REQUIRE(engine.up());

  const Ran first = run({"feed", "--name", name, "--data", longer});
  CHECK_MESSAGE(first.code == 0, first.err);
  CHECK_MESSAGE(contains(first.out, "appended 10 bars"), first.out);
  CHECK(contains(first.out, "the series now holds 1010 bars"));
  CHECK_MESSAGE(contains(first.err, "appending from its bar 1000"), first.err);
  const Ran again = run({"feed", "--name", name, "--data", longer});
  CHECK(again.code == 0);
  CHECK(contains(again.out, "appended 0 bars"));
  CHECK_MESSAGE(contains(again.err, "nothing to append"), again.err);
  const Ran foreign = run({"feed", "--name", name, "--data", other});
  CHECK(foreign.code == 2);
  CHECK_MESSAGE((contains(foreign.err, "does not continue") && contains(foreign.err, "--from")), foreign.err);
  CHECK(contains(run({"status", "--name", name}).out, "1010 of"));
  const Ran forced = run({"feed", "--name", name, "--data", other, "--from", "1005", "--count", "2"});
  CHECK_MESSAGE(contains(forced.out, "appended 2 bars"), forced.out << forced.err);

  const Ran bad = run({"feed", "--name", name}, {}, "100\n101\nabc\n");
  CHECK(bad.code == 3);
  CHECK_MESSAGE(contains(bad.err, "standard input: line 3: the close cell 'abc' is not a number"), bad.err);
  CHECK_MESSAGE(contains(bad.err, "2 bars appended before it; the series now holds 1014 bars"), bad.err);
}

TEST_CASE("a paced feed stops at once on SIGINT or SIGTERM during its pause, and appends nothing after the signal") {
  const TempDir dir;
  const std::string preloaded = dir.file("pre.f64"), longer = dir.file("longer.f64");
  REQUIRE(run({"gen", "--bars", "1000", "--seed", "3", "-o", preloaded}).code == 0);
  REQUIRE(run({"gen", "--bars", "1100", "--seed", "3", "-o", longer}).code == 0);
  const std::string name = unique_name("paced");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--data", preloaded, "--live"});
  REQUIRE(engine.up());
  AttachOptions observer;
  observer.role = HandoffRole::observer;
  auto segment = Attachment::attach(name, observer);
  REQUIRE(segment.has_value());
  const auto published = [&] { return segment->header().bars_published.load(); };
  for (const int signal : {SIGINT, SIGTERM}) {
    CAPTURE(signal);
    const std::uint64_t before = published();
    const int null = ::open("/dev/null", O_RDONLY);
    Background feed({"feed", "--name", name, "--data", longer, "--rate", "1"}, null);  // a bar, then a second
    ::close(null);
    for (int i = 0; i < 500 && published() == before; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    REQUIRE(published() > before);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // well inside the pause
    const std::uint64_t at_signal = published();
    const auto sent = std::chrono::steady_clock::now();
    CHECK(feed.finish(signal) == 128 + signal);
    const double took_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - sent).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // past where the pause would have ended
    // Before: feed slept out its pause (some 900 ms) and appended one more bar.
    CHECK(published() == at_signal);
    CHECK(took_ms < 400.0);
    CHECK_MESSAGE(contains(feed.out(), "(interrupted)"), feed.out());
  }
}

TEST_CASE("CSV follows one rule: --column picks a vendor's column, and a headerless single column is a series for "
          "--data FILE, --data - and serve, while feed's standard input takes a header as a file does") {
  const TempDir dir;
  const std::vector<double> close = prices(400);
  std::string vendor = "Date,Close,Adj Close,Volume\n", bare;
  for (std::size_t i = 0; i < close.size(); ++i) {
    vendor += fmt::format("2024-01-{:03},{:.17g},{:.17g},{}\n", i, close[i] * 1.25, close[i], 1000 + i);
    bare += fmt::format("{:.17g}\n", close[i]);
  }
  write_file(dir.file("vendor.csv"), vendor);
  write_file(dir.file("bare.csv"), bare);
  const auto sweep = [](std::vector<std::string> args, const std::string& input = {}) {
    args.insert(args.begin(), {"sweep", "--inproc", "--lengths", "6,20", "--json", "--quiet"});
    const Ran ran = run(args, {}, input);
    CHECK_MESSAGE(ran.code == 0, ran.err);
    return json_rows(ran.out);
  };
  const auto adjusted = sweep({"--data", dir.file("vendor.csv"), "--column", "Adj Close"});
  const auto headerless = sweep({"--data", dir.file("bare.csv")});
  const auto piped = sweep({"--data", "-"}, bare);
  REQUIRE(adjusted.size() == 2);
  REQUIRE(headerless.size() == 2);
  REQUIRE(piped.size() == 2);
  for (std::size_t i = 0; i < 2; ++i) {
    CHECK(adjusted[i]["pnl"] == headerless[i]["pnl"]);
    CHECK(adjusted[i]["series_checksum"] == headerless[i]["series_checksum"]);
    CHECK(piped[i]["series_checksum"] == headerless[i]["series_checksum"]);
  }
  const Ran unknown = run({"sweep", "--inproc", "--data", dir.file("vendor.csv"), "--column", "PX_LAST"});
  CHECK(unknown.code == 3);
  CHECK_MESSAGE(contains(unknown.err, "no 'PX_LAST' column"), unknown.err);
  const Ran plain = run({"sweep", "--inproc", "--data", dir.file("vendor.csv"), "--lengths", "6", "--json"});
  CHECK(json_rows(plain.out).at(0)["series_checksum"] != adjusted[0]["series_checksum"]);  // `close` is the default

  const std::string name = unique_name("bare");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--data", dir.file("bare.csv"), "--live"});
  REQUIRE(engine.up());
  const Ran fed = run({"feed", "--name", name}, {}, "close\n101.5\n\n102\n");
  CHECK_MESSAGE(fed.code == 0, fed.err);
  CHECK_MESSAGE(contains(fed.out, "appended 2 bars"), fed.out);
  const Ran column = run({"feed", "--name", name, "--column", "last"}, {}, "time,last\n1,103\n");
  CHECK_MESSAGE(contains(column.out, "appended 1 bars"), column.out << column.err);
  CHECK(contains(run({"status", "--name", name}).out, "403 of"));
}

TEST_CASE("an interrupted feed or signals says what it did and exits 130, as a shell reports Ctrl-C") {
  const std::string name = unique_name("sigint");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--bars", "1000", "--live"});
  REQUIRE(engine.up());
  int feed_in[2];
  REQUIRE(::pipe(feed_in) == 0);
  Background feed({"feed", "--name", name}, feed_in[0]);
  ::close(feed_in[0]);
  REQUIRE(::write(feed_in[1], "100.5\n", 6) == 6);
  bool appended = false;
  for (int i = 0; i < 500 && !appended; ++i) {
    appended = contains(run({"status", "--name", name}).out, "1001 of");
    if (!appended) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE(appended);
  CHECK(feed.finish(SIGINT) == 130);
  ::close(feed_in[1]);
  CHECK_MESSAGE(contains(feed.out(), "appended 1 bars"), feed.out());
  CHECK(contains(feed.out(), "(interrupted)"));

  const int null = ::open("/dev/null", O_RDONLY);
  Background signals({"signals", "--name", name, "--lengths", "6"}, null);
  ::close(null);
  bool subscribed = false;
  for (int i = 0; i < 500 && !subscribed; ++i) {
    subscribed = contains(signals.err(), "subscribed combo 0");
    if (!subscribed) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  REQUIRE_MESSAGE(subscribed, signals.err());
  CHECK(signals.finish(SIGINT) == 130);
}

TEST_CASE("the ready line has the same keys with the segment and with --no-shm, null where a key does not apply, and "
          "names the --metrics URL") {
  const TempDir dir;
  Served shm({"--name", unique_name("shape"), "--bars", "1000", "--wait", "backoff", "--hugepages", "off", "--quiet",
              "--metrics", "127.0.0.1:0"});
  REQUIRE_MESSAGE(shm.ready(), shm.err());
  Served sockets({"--no-shm", "--socket", dir.file("s.sock"), "--bars", "1000", "--quiet"});
  REQUIRE_MESSAGE(sockets.ready(), sockets.err());
  const auto a = shm.ready_fields(), b = sockets.ready_fields();
  std::set<std::string> keys_a, keys_b;
  for (const auto& [key, value] : a.items()) keys_a.insert(key);
  for (const auto& [key, value] : b.items()) keys_b.insert(key);
  CHECK(keys_a == keys_b);
  CHECK(b["engine"].is_null());
  CHECK(b["bars"] == 1000);
  CHECK(b["checksum"] == a["checksum"]);
  CHECK_FALSE(b["sockets"].is_null());
  CHECK(a["sockets"].is_null());
  CHECK(a["metrics"].get<std::string>().starts_with("http://127.0.0.1:"));
  CHECK(b["metrics"].is_null());
}

TEST_CASE("serve --metrics with a port alone listens on loopback, and an address the host cannot bind exits 4 naming "
          "it before the engine serves") {
  for (const std::string endpoint : {"0", ":0"}) {
    CAPTURE(endpoint);
    Served served({"--name", unique_name("loopback"), "--bars", "1000", "--wait", "block", "--hugepages", "off",
                   "--quiet", "--metrics", endpoint});
    REQUIRE_MESSAGE(served.ready(), served.err());
    CHECK(served.ready_fields()["metrics"].get<std::string>().starts_with("http://127.0.0.1:"));
  }
  Served unbound({"--name", unique_name("unbound"), "--bars", "1000", "--wait", "block", "--hugepages", "off",
                  "--metrics", "192.0.2.1:9464"});  // TEST-NET-1: never an address of this host
  CHECK_FALSE(unbound.ready());
  CHECK(unbound.exited() == 4);
  CHECK_MESSAGE(contains(unbound.err(), "--metrics 192.0.2.1:9464: cannot listen on 192.0.2.1 port 9464"), unbound.err());
}

TEST_CASE("a floor matrix of valid JSON with wrong types: --topology FILE exits 3 naming the file and the field, and "
          "the same file as the default matrix is ignored with a warning") {
  const TempDir dir;
  const std::string matrix = dir.file("topology.json");
  {
    std::ofstream out(matrix);
    out << R"({"suite": "topology", "pairs": [{"client_cpu": "0", "server_cpu": 1, "samples": 5, "p50_interp": 90.5}]})";
  }
  const std::string cpu = std::to_string(allowed_cpus().back());
  // Before: SIGABRT (rc 134) from an uncaught nlohmann::json::type_error, at every start.
  const Ran given = run({"serve", "--name", unique_name("matrix"), "--cpu", cpu, "--topology", matrix, "--bars", "1000",
                         "--wait", "block", "--hugepages", "off", "--quiet"},
                        {}, {}, std::chrono::seconds(20));
  CHECK(given.code == 3);
  CHECK_MESSAGE(contains(given.err, matrix), given.err);
  CHECK_MESSAGE(contains(given.err, "pairs[0].client_cpu is a string, not an integer"), given.err);
  Served served({"--name", unique_name("matrix"), "--cpu", cpu, "--bars", "1000", "--wait", "block", "--hugepages",
                 "off"},
                {"IPCFLOOR_TOPOLOGY=" + matrix});
  REQUIRE_MESSAGE(served.ready(), served.err());
  CHECK_MESSAGE(contains(served.err(), "ignoring the saved floor matrix"), served.err());
  CHECK_MESSAGE(contains(served.err(), "pairs[0].client_cpu is a string"), served.err());
}

TEST_CASE("serve on a name in use refuses it (exit 4) without first warning about the cpu the other engine holds") {
  const std::string name = unique_name("taken");
  const std::string cpu = std::to_string(allowed_cpus().back());
  Served first({"--name", name, "--cpu", cpu, "--bars", "1000", "--wait", "block", "--hugepages", "off", "--quiet"});
  REQUIRE_MESSAGE(first.ready(), first.err());
  Served second({"--name", name, "--cpu", cpu, "--bars", "1000", "--wait", "block", "--hugepages", "off"});
  CHECK_FALSE(second.ready());
  CHECK(second.exited() == 4);
  CHECK_MESSAGE(contains(second.err(), "holds the name"), second.err());
  CHECK_MESSAGE(!contains(second.err(), "already pins"), second.err());
}

TEST_CASE("a usage error names its command and suggests the option or command meant; a relative "
          "IPCFLOOR_SOCKET_DIR is refused like a relative --socket-dir, naming the variable") {
  const Ran option = run({"serve", "--cpus", "3"});
  CHECK(option.code == 2);
  CHECK_MESSAGE((option.err.starts_with("ipcfloor serve: ") && contains(option.err, "did you mean --cpu?")), option.err);
  const Ran command = run({"sweeep", "--inproc"});
  CHECK(command.code == 2);
  CHECK_MESSAGE(contains(command.err, "did you mean sweep?"), command.err);
  const Ran range = run({"serve", "--lanes", "0"});
  CHECK_MESSAGE(range.err.starts_with("ipcfloor serve: --lanes: 0 is outside 1..64"), range.err);
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"status"}, {"sweep", "--name", "x", "--lengths", "6"}, {"feed"}, {"signals", "--lengths", "6"}}) {
    const Ran ran = run(args, {"IPCFLOOR_SOCKET_DIR=relative/dir"});
    CHECK(ran.code == 2);
    CHECK_MESSAGE((contains(ran.err, "'relative/dir' is not an absolute path") &&
                   contains(ran.err, "$IPCFLOOR_SOCKET_DIR")),
                  ran.err);
    CHECK(ran.err.starts_with("ipcfloor " + args.front() + ": "));
  }
}

TEST_CASE("status --watch on a live engine shows the bars appended per second, the signals per second and the drops") {
  const std::string name = unique_name("livewatch");
  EngineChild engine(IPCFLOOR_BINARY, name, {"--wait", "backoff", "--bars", "1000", "--live"});
  REQUIRE(engine.up());
  Ran fed;
  std::thread feeder([&] {
    std::string closes;
    for (int i = 0; i < 300; ++i) closes += fmt::format("{}\n", 100.0 + 0.01 * i);
    fed = run({"feed", "--name", name, "--rate", "200"}, {}, closes);
  });
  const Ran watch = run({"status", "--name", name, "--watch", "--interval", "0.4", "--count", "3"});
  feeder.join();
  CHECK_MESSAGE(fed.code == 0, fed.err);
  CHECK_MESSAGE(watch.code == 0, watch.err);
  bool moving = false;
  for (const std::string& line : lines_of(watch.out)) {
    if (!line.starts_with("live ")) continue;
    CHECK_MESSAGE((contains(line, "bars/s") && contains(line, "signals") && contains(line, "dropped")), line);
    moving = moving || !contains(line, "(0 bars/s)");
  }
  CHECK_MESSAGE(moving, watch.out);
}

TEST_CASE("status --prometheus gives every lane the same fixed buckets with _sum and _count at every scrape, and "
          "ipcfloor_up 0 once the engine is gone") {
  const std::string name = unique_name("prom");
  std::optional<EngineChild> engine;
  engine.emplace(IPCFLOOR_BINARY, name, std::vector<std::string>{"--wait", "backoff", "--bars", "3000"});
  REQUIRE(engine->up());
  // Per lane: its `le` labels in order, its +Inf bucket, _count and _sum.
  struct Lane {
    std::vector<std::string> bounds;
    std::string inf, count, sum;
  };
  const auto scrape = [&] {
    const Ran ran = run({"status", "--name", name, "--prometheus"});
    CHECK(ran.code == 0);
    std::map<std::string, Lane> lanes;
    for (const std::string& line : lines_of(ran.out)) {
      const auto lane_at = line.find("lane=\"");
      if (!line.starts_with("ipcfloor_service_seconds") || lane_at == std::string::npos) continue;
      const std::string lane = line.substr(lane_at + 6, line.find('"', lane_at + 6) - lane_at - 6);
      const std::string value = line.substr(line.rfind(' ') + 1);
      if (const auto le = line.find("le=\""); le != std::string::npos) {
        const std::string bound = line.substr(le + 4, line.find('"', le + 4) - le - 4);
        if (bound == "+Inf") lanes[lane].inf = value;
        else lanes[lane].bounds.push_back(bound);
      } else if (line.starts_with("ipcfloor_service_seconds_sum")) {
        lanes[lane].sum = value;
      } else if (line.starts_with("ipcfloor_service_seconds_count")) {
        lanes[lane].count = value;
      }
    }
    return lanes;
  };
  const auto idle = scrape();
  REQUIRE(run({"sweep", "--name", name, "--grid", "6:200:40", "--quiet"}).code == 0);
  const auto busy = scrape();
  REQUIRE(idle.size() == busy.size());
  REQUIRE(idle.size() >= 2);
  const std::vector<std::string> layout = idle.begin()->second.bounds;
  CHECK(layout.size() == 28);  // 64 ns to 8.6 s, a bucket per power of two
  CHECK(layout.front() == "0.000000064");
  bool swept = false;
  for (const auto* scraped : {&idle, &busy})
    for (const auto& [lane, figures] : *scraped) {
      CAPTURE(lane);
      CHECK(figures.bounds == layout);
      CHECK(figures.inf == figures.count);
      CHECK_FALSE(figures.sum.empty());
      swept = swept || (std::stod(figures.count) >= 40 && std::stod(figures.sum) > 0);
    }
  CHECK(swept);
  engine.reset();
  const Ran gone = run({"status", "--name", name, "--prometheus"});
  CHECK(gone.code == 5);
  CHECK_MESSAGE(contains(gone.out, fmt::format("ipcfloor_up{{engine=\"{}\"}} 0", name)), gone.out);
}
