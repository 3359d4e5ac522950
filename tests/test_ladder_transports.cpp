// The ladder's transports other than the shm ring and the sockets (tested with their servers):
// each either measures every requested round trip or skips with a reason naming what is
// missing. Also `run_stdio_echo`, the engine side of the `spawn` rung, in a forked child, and
// time_round_trips, the timing skeleton every rung runs on.

#include <doctest/doctest.h>

#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bench/echo_bench.hpp"
#include "bench/rung_timing.hpp"
#include "bench/transports.hpp"
#include "common/affinity.hpp"
#include "bench/stdio_server.hpp"

using namespace ipcfloor;

namespace {

// A hung transport must fail the suite, not stall it: SIGALRM ends the process.
class Watchdog {
 public:
  explicit Watchdog(unsigned seconds) { alarm(seconds); }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;
  ~Watchdog() { alarm(0); }
};

bool tested_elsewhere(const std::string& name) {
  return (name.starts_with("shm-ring-") || name.starts_with("shm-call-")) || name == "uds" || name == "tcp";
}

// The transports allowed to skip, and the word their reason must contain.
const char* required_skip_word(const std::string& name) {
  if (name == "zeromq-ipc") return "not installed (apt-get install libzmq3-dev";
  if (name == "iceoryx") return "not installed (apt-get install libiceoryx-posh-dev";
  if (name == "spawn") return "hidden `stdio` subcommand";  // until main.cpp wires `ipcfloor stdio`
  return nullptr;
}

TransportContext small_context(const TscClock& clock) {
  const auto cpus = allowed_cpus();
  TransportContext context;
  context.samples = 200;
  context.warmup = 20;
  context.client_cpu = cpus.front();
  context.server_cpu = cpus.back();
  context.binary = IPCFLOOR_BINARY;
  context.clock = &clock;
  return context;
}

struct ChildOutput {
  std::string out;
  int status = -1;
};

// Runs run_stdio_echo in a forked child on a pipe pair, feeding it `input` and collecting what
// it writes until it exits.
ChildOutput run_stdio_child(const std::string& input) {
  int to_child[2], from_child[2];
  REQUIRE(pipe(to_child) == 0);
  REQUIRE(pipe(from_child) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(to_child[1]);
    close(from_child[0]);
    alarm(10);  // a child stuck on its input must not outlive the test
    _exit(run_stdio_echo(to_child[0], from_child[1]));
  }
  close(to_child[0]);
  close(from_child[1]);
  // Small inputs fit the pipe buffer, so writing everything before reading cannot deadlock.
  CHECK(write(to_child[1], input.data(), input.size()) == static_cast<ssize_t>(input.size()));
  close(to_child[1]);
  ChildOutput result;
  char buffer[256];
  for (ssize_t n; (n = read(from_child[0], buffer, sizeof buffer)) > 0;) result.out.append(buffer, static_cast<std::size_t>(n));
  close(from_child[0]);
  waitpid(pid, &result.status, 0);
  return result;
}

std::string frames(std::uint64_t count) {
  std::string bytes;
  for (std::uint64_t i = 0; i < count; ++i) {
    const Combo payload = ladder_payload(i);
    bytes.append(reinterpret_cast<const char*>(&payload), sizeof payload);
  }
  return bytes;
}

}  // namespace

TEST_CASE("ladder transports: the expected rungs are registered, in ladder order") {
  std::vector<std::string> names;
  for (const Transport& t : all_transports()) names.push_back(t.name);
  for (const char* name :
       {"physical-floor", "physical-floor-again", "physical-floor-2line", "physical-floor-ring", "inproc-call",
        "moodycamel-thread", "boost-message-queue", "spawn", "zeromq-ipc", "iceoryx"}) {
    CAPTURE(name);
    CHECK(std::count(names.begin(), names.end(), name) == 1);
  }
  const auto at = [&](const char* name) { return std::find(names.begin(), names.end(), name) - names.begin(); };
  CHECK(at("physical-floor") < at("physical-floor-again"));
  CHECK(at("physical-floor-again") < at("inproc-call"));
  CHECK(at("physical-floor-2line") < at("physical-floor-ring"));
  CHECK(at("physical-floor-ring") < at("inproc-call"));
  CHECK(at("inproc-call") < at("moodycamel-thread"));
  CHECK(at("moodycamel-thread") < at("boost-message-queue"));
  CHECK(at("boost-message-queue") < at("spawn"));
}

TEST_CASE("ladder transports: each measures 200 positive round trips or names what it lacks") {
  if (allowed_cpus().size() < 2) {
    MESSAGE("skipped: the ladder needs two cpus and this process may use one");
    return;
  }
  const Watchdog watchdog(240);
  const TscClock clock = TscClock::calibrate();
  const TransportContext context = small_context(clock);
  std::size_t measured = 0;
  for (const Transport& transport : all_transports()) {
    if (tested_elsewhere(transport.name)) continue;
    CAPTURE(transport.name);
    auto samples = transport.run(context);
    if (samples) {
      ++measured;
      CHECK(samples->size() == 200);
      CHECK(std::all_of(samples->begin(), samples->end(), [](double ns) { return std::isfinite(ns) && ns > 0; }));
    } else {
      const char* word = required_skip_word(transport.name);
      CAPTURE(samples.error().message);
      REQUIRE_MESSAGE(word != nullptr, "this transport may not skip");
      CHECK(samples.error().message.find(word) != std::string::npos);
    }
  }
  // The in-process, thread and message-queue rungs never skip.
  CHECK(measured >= 4);
}

TEST_CASE("the rotating-line floor wraps around its lines many times and times every round trip") {
  if (allowed_cpus().size() < 2) return;
  const Watchdog watchdog(60);
  const TscClock clock = TscClock::calibrate(5);
  TransportContext context = small_context(clock);
  context.warmup = 3;  // a non-zero start: the timed round trips begin mid-lap
  for (const std::size_t lines : {std::size_t{1}, std::size_t{2}, std::size_t{7}}) {
    CAPTURE(lines);
    auto samples = run_physical_floor_rotating(context, lines);
    REQUIRE(samples);
    CHECK(samples->size() == context.samples);  // 200 round trips: at least 28 laps of 7 lines
    CHECK(std::all_of(samples->begin(), samples->end(), [](double ns) { return std::isfinite(ns) && ns > 0; }));
  }
  const auto none = run_physical_floor_rotating(context, 0);
  REQUIRE_FALSE(none);
  CHECK(none.error().message.find("at least one line") != std::string::npos);
}

TEST_CASE("the physical floor tries every bounce style of the call and the rings, names them with their p50~, and "
          "returns the lowest one's samples") {
  if (allowed_cpus().size() < 2) return;
  const Watchdog watchdog(60);
  const TscClock clock = TscClock::calibrate(5);
  TransportContext context = small_context(clock);
  context.ring_capacity = 8;
  RoundNote note;
  context.note = &note;
  auto samples = run_physical_floor(context);
  REQUIRE(samples);
  CHECK(samples->size() == context.samples);
  REQUIRE(note.styles.size() == 9);  // one line, two lines, ring lines; the answer polling every 1, 4, 16 PAUSEs
  CHECK(note.styles.front().first == "one line, answer polls every 1 PAUSE");
  CHECK(note.styles.back().first == "ring lines, answer polls every 16 PAUSEs");
  const auto lowest = std::min_element(note.styles.begin(), note.styles.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
  CHECK(note.best == lowest->first);
  // The samples returned are the lowest style's: their median is its p50~, give or take a clock step.
  std::vector<double> sorted = *samples;
  CHECK(summarize("floor", "rtt", sorted, clock.step_ns()).p50_interp == doctest::Approx(lowest->second));
  // The two-line and ring rungs try their own shape only.
  RoundNote two;
  context.note = &two;
  REQUIRE(run_physical_floor_two_lines(context));
  CHECK(two.styles.size() == 3);
}

TEST_CASE("spawn: a program that is not the engine is an error, not a hang or a crash") {
  if (allowed_cpus().size() < 2) return;
  const TscClock clock = TscClock::calibrate(5);
  TransportContext context = small_context(clock);
  context.samples = 5;
  context.warmup = 0;

  context.binary = "/bin/false";  // exits at once without reading: the request write meets EPIPE
  auto refused = run_spawn(context);
  REQUIRE_FALSE(refused);
  CHECK(refused.error().message.find("hidden `stdio` subcommand") != std::string::npos);

  context.binary = "/nonexistent/ipcfloor";
  auto missing = run_spawn(context);
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message.find("/nonexistent/ipcfloor") != std::string::npos);
}

TEST_CASE("run_stdio_echo answers every 48-byte frame with its payload and exits 0 at end of input") {
  const std::string input = frames(3);
  const ChildOutput child = run_stdio_child(input);
  CHECK(WIFEXITED(child.status));
  CHECK(WEXITSTATUS(child.status) == 0);
  CHECK(child.out == input);
}

TEST_CASE("run_stdio_echo: no input is a clean exit with no output") {
  const ChildOutput child = run_stdio_child("");
  CHECK(WIFEXITED(child.status));
  CHECK(WEXITSTATUS(child.status) == 0);
  CHECK(child.out.empty());
}

TEST_CASE("run_stdio_echo: a short final frame is an error after the whole frames are answered") {
  const std::string whole = frames(2);
  const ChildOutput child = run_stdio_child(whole + frames(1).substr(0, 47));
  CHECK(WIFEXITED(child.status));
  CHECK(WEXITSTATUS(child.status) == 1);
  CHECK(child.out == whole);
}

TEST_CASE("the echo curve's fit recovers floor and bandwidth from points on the model, and is not led by the largest") {
  using namespace ipcfloor;
  // 25 us floor, 3 GB/s (3 bytes per ns), sizes over five decades as the echo suite uses.
  std::vector<double> bytes{8, 64, 512, 4096, 32768, 262144, 1200000}, ns;
  for (const double b : bytes) ns.push_back(25'000 + b / 3.0);
  FloorBandwidthFit fit = fit_floor_bandwidth(bytes, ns);
  CHECK(fit.floor_ns == doctest::Approx(25'000).epsilon(1e-9));
  CHECK(fit.bytes_per_ns == doctest::Approx(3.0).epsilon(1e-9));
  // A megabyte point 30% slow must not drag the floor below zero (plain least squares would).
  ns.back() *= 1.3;
  fit = fit_floor_bandwidth(bytes, ns);
  CHECK(fit.floor_ns > 20'000);
  CHECK(fit.floor_ns < 30'000);
  CHECK(fit.bytes_per_ns > 0);
}

TEST_CASE("the rung skeleton times only the exchange of each round trip after the warm-up, in order") {
  const TscClock clock = TscClock::calibrate();
  TransportContext context = small_context(clock);
  context.samples = 50;
  context.warmup = 7;
  std::vector<std::size_t> prepared, exchanged, checked;
  const auto samples = time_round_trips(context, RoundTrip{
      .prepare = [&](std::size_t i) { prepared.push_back(i); },
      .exchange = [&](std::size_t i) {
        exchanged.push_back(i);
        return i * 10;
      },
      .check = [&](std::size_t i, std::size_t got) -> Expected<Answer> {
        if (got != i * 10) return fail(ErrorCode::protocol, "round trip {} checked {}", i, got);
        checked.push_back(i);
        return Answer::answered;
      },
  });
  REQUIRE_MESSAGE(samples.has_value(), samples.error().message);
  CHECK(samples->size() == 50);  // the warm-up round trips are run, not kept
  CHECK(prepared.size() == 57);
  CHECK(exchanged == prepared);
  CHECK(checked == prepared);  // each check sees what its own exchange returned
  CHECK(std::is_sorted(prepared.begin(), prepared.end()));
  CHECK(std::all_of(samples->begin(), samples->end(), [](double ns) { return ns >= 0 && ns < 1e8; }));
  cpu_set_t mask;  // the measuring thread is left pinned to the client cpu
  CPU_ZERO(&mask);
  REQUIRE(sched_getaffinity(0, sizeof mask, &mask) == 0);
  CHECK(CPU_COUNT(&mask) == 1);
  CHECK(CPU_ISSET(context.client_cpu, &mask));
  unpin_current_thread();
}

TEST_CASE("the rung skeleton ends at a peer that stops answering with the samples so far, and at a wrong answer "
          "or a failed preparation with its error") {
  const TscClock clock = TscClock::calibrate();
  TransportContext context = small_context(clock);
  context.samples = 20;
  context.warmup = 5;
  const auto nothing = [](std::size_t) {};
  const auto echo = [](std::size_t i) { return i; };
  const auto gone_at_12 = [](std::size_t i, std::size_t) -> Expected<Answer> {
    return i < 12 ? Answer::answered : Answer::peer_gone;
  };
  const auto gone = time_round_trips(context, RoundTrip{.prepare = nothing, .exchange = echo, .check = gone_at_12});
  REQUIRE(gone.has_value());
  CHECK(gone->size() == 7);  // round trips 5..11: the warm-up took 0..4, 12 never came back
  const auto wrong = time_round_trips(context, RoundTrip{
      .prepare = nothing,
      .exchange = echo,
      .check = [](std::size_t i, std::size_t) -> Expected<Answer> {
        if (i == 9) return fail(ErrorCode::protocol, "answer {} is another's", i);
        return Answer::answered;
      },
  });
  REQUIRE_FALSE(wrong.has_value());
  CHECK(wrong.error().message == "answer 9 is another's");
  bool exchanged_after_failure = false;
  const auto unprepared = time_round_trips(context, RoundTrip{
      .prepare = [](std::size_t i) -> Expected<void> {
        if (i == 3) return fail(ErrorCode::io, "no pipe for {}", i);
        return {};
      },
      .exchange = [&](std::size_t i) {
        exchanged_after_failure = exchanged_after_failure || i >= 3;
        return i;
      },
      .check = gone_at_12,
  });
  REQUIRE_FALSE(unprepared.has_value());
  CHECK(unprepared.error().message == "no pipe for 3");
  CHECK_FALSE(exchanged_after_failure);
  TransportContext no_clock = context;
  no_clock.clock = nullptr;
  const auto unclocked = time_round_trips(no_clock, RoundTrip{.prepare = nothing, .exchange = echo, .check = gone_at_12});
  REQUIRE_FALSE(unclocked.has_value());
  CHECK(unclocked.error().message.find("TscClock") != std::string::npos);
  unpin_current_thread();
}
