// Fault injection (docs/RELIABILITY.md): the real engine binary and real client processes, really
// SIGKILLed, SIGSTOPped or lied to, at random points, and the figures that show how fast each
// fault is noticed. The trust boundary of layout v3 is tested here from the outside: a client
// can write only its own lane object, cannot resize or write what it received, cannot reach the
// engine's descriptors, and whatever it scribbles quarantines only its own lane. The shm-layer
// half of those guarantees (socket owner and mode, foreign files, versions, stale sockets, the
// seals as seen from one process) is in test_segment.cpp, single-ring corruption in
// test_spsc_ring.cpp, the exchange stamp protocol in test_exchange.cpp, one killed client and a
// stopped-then-killed engine in test_shm_engine.cpp.
//
// IPCFLOOR_FAULT_TRIALS sets the number of random kills (default 10, the CI form; tools/soak runs
// 200) and IPCFLOOR_FAULT_SEED replays the random points of a run (each test prints its seed).
// Every figure is also printed as a "fault-figure:" line on stdout, for tools/soak.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include <linux/capability.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <sstream>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "clients/pipelined_sweep.hpp"
#include "clients/shm_client.hpp"
#include "clients/socket_client.hpp"
#include "engine/dispatch.hpp"
#include "engine/shm_server.hpp"
#include "engine/telemetry.hpp"
#include "common/checksum.hpp"
#include "common/unique_fd.hpp"
#include "kernel/kernel.hpp"
#include "shm/exchange.hpp"
#include "shm/huge_pages.hpp"
#include "shm/liveness.hpp"
#include "shm/segment.hpp"
#include "tests/fault_harness.hpp"

namespace ipcfloor {
namespace {

using fault::eventually;
using fault::Figures;
using fault::ForkedChild;
using fault::SharedBlock;
using fault::Spawned;

#if defined(__SANITIZE_THREAD__)
// Timing under ThreadSanitizer says little: its runtime stalls a process for hundreds of ms at
// times (measured: a client's death noticed after 515 ms, one answer after 557 ms). The TSan
// build checks behaviour; its bounds only catch hangs.
constexpr double kTeardownAllowanceMs = 2000.0;
#elif defined(__SANITIZE_ADDRESS__)
// A SIGKILLed ASan process tears down its shadow memory before it turns zombie, and nobody can
// tell it is dead before that: ~20 ms for an ASan engine (measured; 0.4 ms in the release
// build). The ASan build allows that much more on every bound that starts at a kill.
constexpr double kTeardownAllowanceMs = 40.0;
#else
constexpr double kTeardownAllowanceMs = 0.0;
#endif
constexpr int kHeartbeatMs = 10;  // every engine here beats every 10 ms
// The promised bounds (docs/RELIABILITY.md): a dead client's lane within 100 ms; a dead engine
// within 3 heartbeats.
constexpr double kReclaimBoundMs = 100.0 + kTeardownAllowanceMs;
// The client notices at the end of its current wait slice (one heartbeat); on a shared 2-vCPU
// host with no isolated cores the woken client thread itself can wait several ms for a cpu
// (seen: 33.8 ms once while a build ran), so the check allows that on top of the guarantee.
// The measured figures are printed as fault-figure lines either way.
constexpr double kSchedulingAllowanceMs = 15.0;
constexpr double kGoneBoundMs = 3.0 * kHeartbeatMs + kTeardownAllowanceMs + kSchedulingAllowanceMs;
constexpr double kStallBoundMs = 1000.0 + kTeardownAllowanceMs;  // no surviving client waits this long
// A heartbeat this young is one no client would call hung (3 intervals), with the same allowance
// for a keeper thread that waits for a cpu on this shared host.
constexpr double kFreshBeatMs = 3.0 * kHeartbeatMs + kTeardownAllowanceMs + kSchedulingAllowanceMs;
constexpr std::uint32_t kSurvivors = 2;

// Every engine is the real binary, as a child process, with a 10 ms heartbeat.
struct Engine : EngineChild {
  Engine(std::string name, std::vector<std::string> args)
      : EngineChild(IPCFLOOR_BINARY, std::move(name), with_heartbeat(std::move(args))) {}
  static std::vector<std::string> with_heartbeat(std::vector<std::string> args) {
    args.insert(args.end(), {"--heartbeat-ms", std::to_string(kHeartbeatMs)});
    return args;
  }
};

std::string unique_name(const char* what) { return unique_segment_name(std::string("fault-") + what); }

// relaxed: engine statistics, polled; a late value only makes a bounded wait look again.
std::uint64_t counter(const std::atomic<std::uint64_t>& value) { return value.load(std::memory_order_relaxed); }

using fault::observe;

// True while the engine reports some lane as held by `pid` (its verified owner).
bool holds_a_lane(const Attachment& watch, pid_t pid) {
  for (std::uint32_t i = 0; i < watch.lane_count(); ++i) {
    const LaneStatus& lane = watch.lane_status(i);
    // relaxed: a report, polled; a late value only makes a bounded wait look again.
    if (lane.owner_pid == pid && lane.state.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(LaneState::claimed))
      return true;
  }
  return false;
}

std::uint32_t lane_state(const Attachment& watch, std::uint32_t lane) {
  return watch.lane_status(lane).state.load(std::memory_order_relaxed);  // relaxed: polled
}

RequestSlot echo_request(const Combo& payload) {
  RequestSlot slot{};
  slot.opcode = static_cast<std::uint16_t>(Opcode::echo);
  slot.params = payload;
  return slot;
}

// A payload that names its request, so a lost, duplicated or misdelivered answer shows.
Combo stream_payload(std::uint64_t seq, pid_t pid) {
  const auto s = static_cast<std::int64_t>(seq);
  return Combo{s, ~s, 3 * s + 1, static_cast<std::int64_t>(pid), 0x5eed, -s};
}

ShmClientOptions client_options(WaitMode mode, std::chrono::nanoseconds timeout) {
  ShmClientOptions options;
  options.wait = mode;
  options.timeout = timeout;
  return options;
}

template <class T>
std::string why(const Expected<T>& result) {
  return result ? std::string() : result.error().message;
}

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

void print_figure(const std::string& what, const Figures& figures) {
  std::printf("fault-figure: %s: %s\n", what.c_str(), figures.summary().c_str());
  std::fflush(stdout);
}

void sleep_us(std::uint64_t us) { std::this_thread::sleep_for(std::chrono::microseconds(us)); }

// ---------------------------------------------------------------------------------------------
// Surviving clients: stream ECHO requests on their own lanes and check every answer.

enum SurvivorFailure : std::uint32_t {
  kSurvivorOk = 0,
  kSurvivorConnect,
  kSurvivorSubmit,
  kSurvivorAnswer,        // wait_response did not return ok (timeout, gone, out of order, ...)
  kSurvivorWrongAnswer,   // seq, status or payload of an answer is not its request's
  kSurvivorExtraAnswer,   // an answer arrived after the last request was answered
};

struct SurvivorReport {
  std::atomic<std::uint32_t> finished;  // 1 once the child checked its last answer
  std::atomic<std::uint32_t> failure;   // SurvivorFailure
  std::atomic<std::uint32_t> lane;
  std::atomic<std::uint64_t> published;
  std::atomic<std::uint64_t> answered;
  std::atomic<std::uint64_t> max_wait_ns;
  char detail[256];
};

struct StreamBoard {
  std::atomic<std::uint32_t> stop;  // the parent sets it; survivors drain and leave
  SurvivorReport survivors[kSurvivors];
};

int survivor_fails(SurvivorReport& report, SurvivorFailure failure, const std::string& detail) {
  std::snprintf(report.detail, sizeof report.detail, "%s", detail.c_str());
  // relaxed (all survivor fields): the parent reads them after reaping this process.
  report.failure.store(failure, std::memory_order_relaxed);
  return 1;
}

// Streams a window of pipelined ECHO requests until `board.stop`, then drains. Every answer must
// be its request's (seq, status, payload), exactly once, and none may take kStallBoundMs.
int stream_until_stopped(const std::string& name, StreamBoard& board, SurvivorReport& report, WaitMode mode) {
  auto client = ShmClient::connect(name, client_options(mode, std::chrono::seconds(2)));
  if (!client) return survivor_fails(report, kSurvivorConnect, client.error().message);
  report.lane.store(client->lane(), std::memory_order_relaxed);
  const pid_t pid = ::getpid();
  const std::uint64_t window = std::min<std::uint64_t>(8, client->capacity());
  std::uint64_t next_seq = 1;     // what the next submit is numbered (ShmClient counts from 1)
  std::uint64_t next_answer = 1;  // the seq the next answer must carry
  std::uint64_t max_wait = 0;
  const auto receive = [&]() -> int {
    ResponseSlot answer{};
    const std::uint64_t start = monotonic_ns();
    const CallStatus status = client->wait_response(answer);
    max_wait = std::max(max_wait, monotonic_ns() - start);
    if (status != CallStatus::ok) {
      return survivor_fails(report, kSurvivorAnswer,
                            fmt::format("answer {}: {}", next_answer, client->describe(status)));
    }
    if (answer.seq != next_answer || answer.status != static_cast<std::uint16_t>(Status::ok) ||
        answer.echo() != stream_payload(next_answer, pid)) {
      return survivor_fails(report, kSurvivorWrongAnswer,
                            fmt::format("answer {} carries seq {} status {} h {}", next_answer, answer.seq,
                                        answer.status, answer.echo().h));
    }
    ++next_answer;
    report.answered.store(next_answer - 1, std::memory_order_relaxed);
    return 0;
  };
  // acquire: pairs with the parent's release store of stop (nothing else is published by it).
  while (board.stop.load(std::memory_order_acquire) == 0) {
    while (client->outstanding() < window) {
      std::uint64_t seq = 0;
      const CallStatus sent = client->submit(echo_request(stream_payload(next_seq, pid)), seq);
      if (sent != CallStatus::ok || seq != next_seq) {
        return survivor_fails(report, kSurvivorSubmit, fmt::format("submit {}: {}", next_seq, client->describe(sent)));
      }
      ++next_seq;
      report.published.store(next_seq - 1, std::memory_order_relaxed);
    }
    if (const int failed = receive(); failed != 0) return failed;
    // A little air every few answers: the engine, the victims and the reporter share 2 cores.
    if (next_answer % 32 == 0) sleep_us(100);
  }
  while (client->outstanding() > 0)
    if (const int failed = receive(); failed != 0) return failed;
  // Exactly one answer per request: nothing else may arrive, even a little later.
  sleep_us(20'000);
  ResponseSlot extra{};
  if (const CallStatus status = client->poll(extra); status != CallStatus::empty) {
    return survivor_fails(report, kSurvivorExtraAnswer, fmt::format("after the last answer: {} seq {}", to_string(status), extra.seq));
  }
  report.max_wait_ns.store(max_wait, std::memory_order_relaxed);
  report.finished.store(1, std::memory_order_relaxed);
  return 0;
}

// Starts `count` survivors and waits (bounded) until each has had an answer. Against a
// block-mode engine, every other survivor sleeps in block mode: the test's own processes then
// leave the 2 cores to the engine instead of spinning beside it.
std::vector<std::unique_ptr<ForkedChild>> start_survivors(const std::string& name, StreamBoard& board,
                                                          std::uint32_t count, WaitMode engine_mode) {
  std::vector<std::unique_ptr<ForkedChild>> survivors;
  for (std::uint32_t i = 0; i < count; ++i) {
    const WaitMode mode = engine_mode == WaitMode::block && i % 2 == 1 ? WaitMode::block : WaitMode::backoff;
    survivors.push_back(std::make_unique<ForkedChild>(
        [&name, &board, i, mode](int) { return stream_until_stopped(name, board, board.survivors[i], mode); }));
  }
  const bool streaming = eventually([&] {
    for (std::uint32_t i = 0; i < count; ++i)
      if (board.survivors[i].answered.load(std::memory_order_relaxed) == 0) return false;  // relaxed: a progress poll
    return true;
  });
  REQUIRE_MESSAGE(streaming, "the surviving clients never got an answer: " << board.survivors[0].detail);
  return survivors;
}

// Stops the survivors and checks what each saw; returns the longest wait for one answer.
double finish_survivors(std::vector<std::unique_ptr<ForkedChild>>& survivors, StreamBoard& board) {
  // release: pairs with the survivors' acquire load of stop.
  board.stop.store(1, std::memory_order_release);
  double max_wait_ms = 0;
  std::uint64_t answered = 0;
  for (std::uint32_t i = 0; i < survivors.size(); ++i) {
    CAPTURE(i);
    const int status = survivors[i]->wait(std::chrono::seconds(20));
    SurvivorReport& report = board.survivors[i];
    // relaxed (all): the child has been reaped; its writes are complete.
    CHECK_MESSAGE(report.failure.load(std::memory_order_relaxed) == kSurvivorOk, report.detail);
    CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), fault::describe_status(status));
    CHECK(report.finished.load(std::memory_order_relaxed) == 1);
    CHECK(report.published.load(std::memory_order_relaxed) > 0);
    CHECK(report.published.load(std::memory_order_relaxed) == report.answered.load(std::memory_order_relaxed));
    answered += report.answered.load(std::memory_order_relaxed);
    max_wait_ms = std::max(max_wait_ms, static_cast<double>(report.max_wait_ns.load(std::memory_order_relaxed)) / 1e6);
  }
  CHECK(max_wait_ms < kStallBoundMs);
  std::printf("fault-figure: survivors: %zu clients, %llu requests, each answered exactly once; longest wait for one answer %.2f ms\n",
              survivors.size(), static_cast<unsigned long long>(answered), max_wait_ms);
  std::fflush(stdout);
  return max_wait_ms;
}

// ---------------------------------------------------------------------------------------------
// Victims: clients that are SIGKILLed.

enum class VictimMode : std::uint8_t {
  streaming,  // connected, in a tight submit/poll loop (a kill may land inside try_push)
  mid_frame,  // a claimed slot, half written, never committed
  anywhere,   // killed at a random moment after fork: before, during or after connect
};

const char* to_string(VictimMode mode) {
  switch (mode) {
    case VictimMode::streaming: return "streaming";
    case VictimMode::mid_frame: return "mid-frame";
    case VictimMode::anywhere: return "anywhere";
  }
  return "?";
}

// Child: connects and streams as fast as it can until killed. Tells "L <lane> <connect us>".
int victim_streaming(const std::string& name, int fd) {
  const std::uint64_t start = monotonic_ns();
  auto client = ShmClient::connect(name, client_options(WaitMode::backoff, std::chrono::seconds(2)));
  if (!client) {
    fault::tell(fd, "E " + client.error().message);
    return 3;
  }
  fault::tell(fd, fmt::format("L {} {}", client->lane(), (monotonic_ns() - start) / 1000));
  const RequestSlot request = echo_request(stream_payload(1, ::getpid()));
  const std::uint64_t give_up = monotonic_ns() + 10'000'000'000ULL;  // killed long before
  ResponseSlot answer{};
  while (monotonic_ns() < give_up) {
    std::uint64_t seq = 0;
    if (client->outstanding() < client->capacity()) (void)client->submit(request, seq);
    (void)client->poll(answer);
  }
  return 4;
}

// Child: gets a lane as any client does, then dies half-way through writing a frame into its
// request ring, before the commit that would publish it.
int victim_mid_frame(const std::string& name, int fd) {
  AttachOptions options;
  options.timeout = std::chrono::seconds(2);
  auto attached = Attachment::attach(name, options);
  if (!attached) {
    fault::tell(fd, "E " + attached.error().message);
    return 3;
  }
  const LaneView& view = attached->lane().view();
  auto producer = RingProducer<RequestSlot>::make(view.request_ring, view.request_slots, attached->ring_capacity());
  RequestSlot* slot = producer ? producer->try_claim() : nullptr;
  if (slot == nullptr) {
    fault::tell(fd, "E no slot to claim");
    return 3;
  }
  // Half a frame: a header and a third of the payload, never committed.
  slot->seq = 0xdead;
  slot->opcode = static_cast<std::uint16_t>(Opcode::echo);
  slot->params.h = 1;
  slot->params.L = 2;
  fault::tell(fd, fmt::format("L {} 0", attached->lane().lane()));
  std::this_thread::sleep_for(std::chrono::seconds(10));  // killed long before
  return 4;
}

// "L <lane> <us>" -> lane and microseconds.
std::pair<std::uint32_t, std::uint64_t> parse_claim(const std::string& line) {
  std::uint32_t lane = 0;
  std::uint64_t us = 0;
  const char* cursor = line.data() + 2;
  const char* end = line.data() + line.size();
  cursor = std::from_chars(cursor, end, lane).ptr;
  if (cursor < end) std::from_chars(cursor + 1, end, us);
  return {lane, us};
}

}  // namespace

// =============================================================================================
// Clients killed

TEST_CASE("reclaims within 100 ms the lane of a client SIGKILLed at a random moment, mid-frame included, "
          "while clients on other lanes stream without loss, duplicate or stall") {
  const std::uint64_t seed = fault::seed();
  const int trials = fault::trials();
  MESSAGE("seed " << seed << " (IPCFLOOR_FAULT_SEED), " << trials << " kills (IPCFLOOR_FAULT_TRIALS)");
  std::mt19937_64 random(seed);
  Engine engine(unique_name("kill-clients"),
                {"--wait", "block", "--bars", "500", "--lanes", "4", "--ring-capacity", "64"});
  REQUIRE(engine.up());
  auto watch = observe(engine.name());
  REQUIRE(watch.has_value());
  const DataHeader& header = watch->header();

  SharedBlock<StreamBoard> board;
  auto survivors = start_survivors(engine.name(), *board, kSurvivors, WaitMode::block);
  const std::uint64_t reclaimed_at_start = counter(header.lanes_reclaimed);

  Figures detect;
  Figures reclaim;
  int died_unclaimed = 0;
  int by_mode[3] = {};
  for (int trial = 0; trial < trials; ++trial) {
    const auto mode = static_cast<VictimMode>(random() % 3);
    CAPTURE(trial);
    CAPTURE(to_string(mode));
    ++by_mode[static_cast<int>(mode)];
    const std::uint64_t reclaimed_before = counter(header.lanes_reclaimed);
    ForkedChild victim([&](int fd) {
      return mode == VictimMode::mid_frame ? victim_mid_frame(engine.name(), fd) : victim_streaming(engine.name(), fd);
    });
    REQUIRE(victim.pid() > 0);

    std::uint32_t lane = 0;
    std::uint64_t lane_requests = 0;
    if (mode == VictimMode::anywhere) {
      sleep_us(random() % 10'000);  // spread over attach, claim and streaming
    } else {
      const auto line = victim.read_line();
      REQUIRE_MESSAGE(line.has_value(), "the victim never reported its lane");
      REQUIRE_MESSAGE(line->starts_with("L "), *line);
      lane = parse_claim(*line).first;
      REQUIRE(lane < watch->lane_count());
      lane_requests = counter(watch->lane_status(lane).requests);
      sleep_us(random() % (mode == VictimMode::streaming ? 2000 : 300));
    }

    const std::uint64_t kill_ns = monotonic_ns();
    REQUIRE(::kill(victim.pid(), SIGKILL) == 0);
    // Noticed: the keeper saw the connection end (the lane is no longer reported as the
    // victim's). Reclaimed: it counted the lane reclaimed (lanes_reclaimed).
    double noticed_ms = -1;
    const bool reclaimed = eventually(
        [&] {
          if (noticed_ms < 0 && !holds_a_lane(*watch, victim.pid())) noticed_ms = fault::ms_since(kill_ns);
          return counter(header.lanes_reclaimed) > reclaimed_before;
        },
        std::chrono::milliseconds(1000 + static_cast<int>(kReclaimBoundMs)), std::chrono::microseconds(100));
    const double reclaimed_ms = fault::ms_since(kill_ns);
    if (reclaimed) {
      detect.add(noticed_ms < 0 ? reclaimed_ms : noticed_ms);
      reclaim.add(reclaimed_ms);
      CHECK(reclaimed_ms < kReclaimBoundMs);
    } else {
      // Only a client killed before it claimed a lane leaves nothing to reclaim; then no lane
      // may still name it.
      CHECK(mode == VictimMode::anywhere);
      CHECK_FALSE(holds_a_lane(*watch, victim.pid()));
      ++died_unclaimed;
    }
    CHECK(counter(header.lanes_reclaimed) == reclaimed_before + (reclaimed ? 1 : 0));
    const int status = victim.wait();
    CHECK_MESSAGE((WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL), fault::describe_status(status));
    if (mode == VictimMode::mid_frame) {
      // The half-written frame was never served (its lane object went with its client).
      CHECK(counter(watch->lane_status(lane).requests) == lane_requests);
    }
  }

  const double max_wait_ms = finish_survivors(survivors, *board);
  CHECK(counter(header.lanes_reclaimed) - reclaimed_at_start == static_cast<std::uint64_t>(trials - died_unclaimed));
  CHECK(counter(header.bad_frames) == 0);  // no torn frame was ever served
  CHECK(counter(header.lanes_corrupt) == 0);
  CHECK(process_alive(engine.pid(), 0));
  MESSAGE("SIGKILLed clients (" << by_mode[0] << " streaming, " << by_mode[1] << " mid-frame, " << by_mode[2]
                                 << " anywhere; " << died_unclaimed << " died before claiming): noticed "
                                 << detect.summary() << ", reclaimed " << reclaim.summary()
                                 << "; survivors' longest wait " << max_wait_ms << " ms");
  print_figure(fmt::format("client SIGKILL -> engine notices (lane marked reclaiming) ({} kills, {} before claiming a lane)",
                           trials, died_unclaimed),
               detect);
  print_figure(fmt::format("client SIGKILL -> lane reclaimed (lanes_reclaimed +1) ({} kills)", trials), reclaim);
}

TEST_CASE("twenty clients SIGKILLed in a row on a 2-lane engine never exhaust its lanes") {
  const std::uint64_t seed = fault::seed();
  const int kills = std::max(20, fault::trials());
  MESSAGE("seed " << seed << ", " << kills << " kills in a row");
  std::mt19937_64 random(seed);
  Engine engine(unique_name("two-lanes"), {"--wait", "backoff", "--bars", "500", "--lanes", "2", "--ring-capacity", "16"});
  REQUIRE(engine.up());
  auto watch = observe(engine.name());
  REQUIRE(watch.has_value());
  const DataHeader& header = watch->header();
  SharedBlock<StreamBoard> board;
  auto survivors = start_survivors(engine.name(), *board, 1, WaitMode::backoff);  // holds one lane throughout
  const std::uint64_t reclaimed_before = counter(header.lanes_reclaimed);

  // No waiting for the reclaim between kills: each new client arrives while the last one's lane
  // may still be draining, and must get it all the same.
  Figures connect_ms;
  for (int kill = 0; kill < kills; ++kill) {
    CAPTURE(kill);
    ForkedChild victim([&](int fd) { return victim_streaming(engine.name(), fd); });
    const auto line = victim.read_line();
    REQUIRE_MESSAGE(line.has_value(), "the victim never reported");
    REQUIRE_MESSAGE(line->starts_with("L "), *line);  // "E ...": refused, the lanes ran out
    connect_ms.add(static_cast<double>(parse_claim(*line).second) / 1000.0);
    sleep_us(random() % 1000);
    REQUIRE(::kill(victim.pid(), SIGKILL) == 0);
    (void)victim.wait();
  }
  CHECK(eventually([&] { return counter(header.lanes_reclaimed) == reclaimed_before + static_cast<std::uint64_t>(kills); }));
  (void)finish_survivors(survivors, *board);

  // Both lanes serve fresh clients, with their own answers rather than a dead client's.
  auto one = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
  auto two = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
  REQUIRE_MESSAGE(one.has_value(), why(one));
  REQUIRE_MESSAGE(two.has_value(), why(two));
  CHECK(one->lane() != two->lane());
  ResponseSlot answer{};
  REQUIRE(one->call(echo_request(Combo{7, 7, 7, 7, 7, 7}), answer) == CallStatus::ok);
  CHECK(answer.echo() == Combo{7, 7, 7, 7, 7, 7});
  REQUIRE(two->call(echo_request(Combo{8, 8, 8, 8, 8, 8}), answer) == CallStatus::ok);
  CHECK(answer.echo() == Combo{8, 8, 8, 8, 8, 8});
  MESSAGE("connect time of a client arriving right after a kill: " << connect_ms.summary());
  print_figure(fmt::format("2 lanes, {} clients SIGKILLed in a row: connect time of the next client", kills), connect_ms);
}

// =============================================================================================
// Engine killed, stopped, restarted

namespace {

struct KillBoard {
  std::atomic<std::uint64_t> kill_ns;         // when the killer sent SIGKILL
  std::atomic<std::uint64_t> attach_gone_ns;  // when a fresh connect was first refused
  std::atomic<std::uint32_t> attach_code;     // its ErrorCode
  char attach_message[256];
};

// State letter of `pid` from /proc/PID/stat ('T' when stopped), or '?'.
char process_state(pid_t pid) {
  std::FILE* file = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
  if (file == nullptr) return '?';
  char buffer[512] = {};
  const std::size_t got = std::fread(buffer, 1, sizeof buffer - 1, file);
  std::fclose(file);
  const char* paren = std::strrchr(buffer, ')');
  return got > 0 && paren != nullptr && paren[1] == ' ' ? paren[2] : '?';
}

}  // namespace

TEST_CASE("an engine SIGKILLed at a random moment is reported gone within 3 heartbeats, to a waiting client "
          "and to one attaching afresh") {
  const std::uint64_t seed = fault::seed();
  const int trials = std::max(2, fault::trials() / 5);
  MESSAGE("seed " << seed << ", " << trials << " engine kills");
  std::mt19937_64 random(seed);
  Figures waiting;
  Figures attaching;
  for (int trial = 0; trial < trials; ++trial) {
    const WaitMode mode = trial % 2 == 0 ? WaitMode::backoff : WaitMode::block;
    CAPTURE(trial);
    CAPTURE(to_string(mode));
    Engine engine(unique_name("kill-engine"), {"--wait", std::string(to_string(mode)), "--bars", "500"});
    REQUIRE(engine.up());
    auto client = ShmClient::connect(engine.name(), client_options(mode, std::chrono::seconds(5)));
    REQUIRE_MESSAGE(client.has_value(), why(client));
    const std::string gone = fmt::format("engine {} (pid {}) is gone", engine.name(), engine.pid());

    SharedBlock<KillBoard> board;
    const std::uint64_t delay_us = random() % 20'000;
    ForkedChild killer([&](int) {
      sleep_us(delay_us);
      // relaxed (all board fields): the parent reads them after reaping this process.
      board->kill_ns.store(monotonic_ns(), std::memory_order_relaxed);
      ::kill(engine.pid(), SIGKILL);
      // A fresh client attaching from now on: refused as soon as the engine is dead.
      const std::uint64_t give_up = monotonic_ns() + 1'000'000'000ULL;
      while (monotonic_ns() < give_up) {
        auto fresh = ShmClient::connect(engine.name(), client_options(mode, std::chrono::milliseconds(200)));
        if (!fresh) {
          board->attach_gone_ns.store(monotonic_ns(), std::memory_order_relaxed);
          board->attach_code.store(static_cast<std::uint32_t>(fresh.error().code), std::memory_order_relaxed);
          std::snprintf(board->attach_message, sizeof board->attach_message, "%s", fresh.error().message.c_str());
          return 0;
        }
        sleep_us(100);
      }
      return 5;
    });

    // Stream until the engine's death shows: every answer before it is right, and the first
    // non-ok status is engine_gone (never timeout or hung).
    CallStatus status = CallStatus::ok;
    std::uint64_t calls = 0;
    const std::uint64_t give_up = monotonic_ns() + 5'000'000'000ULL;
    while (status == CallStatus::ok && monotonic_ns() < give_up) {
      ResponseSlot answer{};
      status = client->call(echo_request(stream_payload(calls + 1, ::getpid())), answer);
      if (status == CallStatus::ok) REQUIRE(answer.echo() == stream_payload(calls + 1, ::getpid()));
      ++calls;
    }
    const std::uint64_t seen_ns = monotonic_ns();
    const int killer_status = killer.wait();
    REQUIRE_MESSAGE((WIFEXITED(killer_status) && WEXITSTATUS(killer_status) == 0), fault::describe_status(killer_status));
    REQUIRE(status == CallStatus::engine_gone);
    CHECK(client->describe(status) == gone);
    // relaxed (all): the killer has been reaped.
    const std::uint64_t kill_ns = board->kill_ns.load(std::memory_order_relaxed);
    waiting.add(static_cast<double>(seen_ns - kill_ns) / 1e6);
    attaching.add(static_cast<double>(board->attach_gone_ns.load(std::memory_order_relaxed) - kill_ns) / 1e6);
    CHECK(board->attach_code.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(ErrorCode::peer_gone));
    CHECK_MESSAGE(contains(board->attach_message, fmt::format("engine {}", engine.name())), board->attach_message);
    CHECK_MESSAGE(contains(board->attach_message, "is gone"), board->attach_message);
    CHECK(calls > 0);
  }
  CHECK(waiting.max() < kGoneBoundMs);
  CHECK(attaching.max() < kGoneBoundMs);
  MESSAGE("engine SIGKILL -> waiting client told: " << waiting.summary() << "; fresh attach refused: " << attaching.summary());
  print_figure(fmt::format("engine SIGKILL -> waiting client gets engine_gone ({} kills, 10 ms heartbeat)", trials), waiting);
  print_figure(fmt::format("engine SIGKILL -> fresh attach refused 'is gone' ({} kills)", trials), attaching);
}

TEST_CASE("a SIGSTOPped engine is reported hung, never gone, once its heartbeat is 3 intervals old, and a "
          "pending call completes after SIGCONT") {
  const int trials = std::max(1, fault::trials() / 10);
  Engine engine(unique_name("stop"), {"--wait", "backoff", "--bars", "500"});
  REQUIRE(engine.up());
  // A short timeout: each wait_response returns after 2 ms and says what it saw meanwhile. The
  // same 2 ms bound the attach, which a keeper waiting for a cpu on a loaded host can miss: try
  // again (an answer that came too late leaves a lane the keeper reclaims at once).
  auto client = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::milliseconds(2)));
  for (int attempt = 0; attempt < 100 && !client; ++attempt) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    client = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::milliseconds(2)));
  }
  REQUIRE_MESSAGE(client.has_value(), why(client));
  Figures hung_after;
  Figures recovered_after;
  const DataHeader& header = client->segment().header();
  for (int trial = 0; trial < trials; ++trial) {
    CAPTURE(trial);
    // Stop it right after a heartbeat (after a SIGCONT the reporter may not have beaten yet), so
    // that "3 intervals" counts from the stop.
    // relaxed (both): a timestamp, compared only.
    const std::uint64_t beat = header.heartbeat_ns.load(std::memory_order_relaxed);
    REQUIRE(eventually([&] { return header.heartbeat_ns.load(std::memory_order_relaxed) != beat; },
                       std::chrono::milliseconds(1000), std::chrono::microseconds(100)));
    REQUIRE(::kill(engine.pid(), SIGSTOP) == 0);
    const std::uint64_t stop_ns = monotonic_ns();
    REQUIRE(eventually([&] { return process_state(engine.pid()) == 'T'; }));
    const Combo payload = stream_payload(1000 + static_cast<std::uint64_t>(trial), ::getpid());
    std::uint64_t seq = 0;
    REQUIRE(client->submit(echo_request(payload), seq) == CallStatus::ok);

    double first_hung_ms = -1;
    ResponseSlot answer{};
    while (fault::ms_since(stop_ns) < 150) {
      const CallStatus status = client->wait_response(answer);
      REQUIRE_MESSAGE((status == CallStatus::timeout || status == CallStatus::engine_hung), to_string(status));
      if (status == CallStatus::engine_hung && first_hung_ms < 0) {
        first_hung_ms = fault::ms_since(stop_ns);
        CHECK(contains(client->describe(status), "is alive but not serving"));
      }
      if (status == CallStatus::timeout) CHECK(first_hung_ms < 0);  // once hung, hung until it resumes
    }
    REQUIRE(first_hung_ms >= 0);
    hung_after.add(first_hung_ms);
    // Its last heartbeat came just before the stop: "hung" needs three intervals to pass (minus
    // the moment between that beat and the stop), and comes after one more 2 ms wait at most
    // (plus scheduling slack).
    CHECK(first_hung_ms >= 2.0 * kHeartbeatMs);
    CHECK(first_hung_ms <= 5.0 * kHeartbeatMs);

    REQUIRE(::kill(engine.pid(), SIGCONT) == 0);
    const std::uint64_t cont_ns = monotonic_ns();
    CallStatus status = CallStatus::timeout;
    while (status != CallStatus::ok && fault::ms_since(cont_ns) < 2000) {
      status = client->wait_response(answer);
      REQUIRE_MESSAGE(status != CallStatus::engine_gone, "a resumed engine reported gone");
    }
    REQUIRE(status == CallStatus::ok);
    recovered_after.add(fault::ms_since(cont_ns));
    CHECK(answer.seq == seq);
    CHECK(answer.echo() == payload);
  }
  // And it serves as before.
  for (int i = 0; i < 100; ++i) {
    ResponseSlot answer{};
    CallStatus status = CallStatus::timeout;
    for (int attempt = 0; attempt < 100 && status == CallStatus::timeout; ++attempt) {
      std::uint64_t seq = 0;
      if (client->outstanding() == 0) REQUIRE(client->submit(echo_request(Combo{i, 0, 0, 0, 0, 0}), seq) == CallStatus::ok);
      status = client->wait_response(answer);
    }
    REQUIRE(status == CallStatus::ok);
    CHECK(answer.echo().h == i);
  }
  MESSAGE("SIGSTOP -> engine_hung after " << hung_after.summary() << "; SIGCONT -> pending answer after "
                                          << recovered_after.summary());
  print_figure("engine SIGSTOP -> client reports engine_hung (10 ms heartbeat, 2 ms client timeout)", hung_after);
  print_figure("engine SIGCONT -> pending call answered", recovered_after);
}

TEST_CASE("a restarted engine refuses a name its live predecessor holds, and replaces the socket of a "
          "SIGKILLed one") {
  Engine old_engine(unique_name("restart"), {"--wait", "backoff", "--bars", "500"});
  REQUIRE(old_engine.up());
  const std::string& name = old_engine.name();
  auto old_client = ShmClient::connect(name, client_options(WaitMode::backoff, std::chrono::seconds(2)));
  REQUIRE_MESSAGE(old_client.has_value(), why(old_client));
  ResponseSlot answer{};
  REQUIRE(old_client->call(echo_request(Combo{1, 1, 1, 1, 1, 1}), answer) == CallStatus::ok);

  const std::vector<std::string> serve{IPCFLOOR_BINARY, "serve", "--name", name, "--quiet", "--wait", "backoff",
                                       "--bars", "500", "--heartbeat-ms", std::to_string(kHeartbeatMs)};
  {
    Spawned refused(serve);
    const auto status = refused.wait_exit(std::chrono::seconds(20));
    REQUIRE_MESSAGE(status.has_value(), "a second engine under a live engine's name kept running");
    CHECK_MESSAGE((WIFEXITED(*status) && WEXITSTATUS(*status) != 0), fault::describe_status(*status));
    const std::string error = refused.stderr_text();
    CHECK_MESSAGE(contains(error, fmt::format("engine {} is running (pid {})", name, old_engine.pid())), error);
    CHECK_MESSAGE((WIFEXITED(*status) && WEXITSTATUS(*status) == 4), fault::describe_status(*status));  // environment
    // The live engine was not disturbed.
    REQUIRE(old_client->call(echo_request(Combo{2, 2, 2, 2, 2, 2}), answer) == CallStatus::ok);
    CHECK(answer.echo() == Combo{2, 2, 2, 2, 2, 2});
  }

  REQUIRE(::kill(old_engine.pid(), SIGKILL) == 0);
  REQUIRE(eventually([&] { return !process_alive(old_engine.pid(), 0); }));
  AttachOptions observer;
  observer.role = HandoffRole::observer;
  auto stale = Attachment::attach(name, observer);
  REQUIRE_FALSE(stale.has_value());
  CHECK(stale.error().code == ErrorCode::peer_gone);
  CHECK_MESSAGE(contains(stale.error().message, fmt::format("engine {} is gone", name)), stale.error().message);

  const std::uint64_t start_ns = monotonic_ns();
  Spawned successor(serve);
  REQUIRE_MESSAGE(fault::segment_served_by(name, successor.pid()), successor.stderr_text());
  const double recovery_ms = fault::ms_since(start_ns);
  // The warning is printed just after the engine turns ready: on a busy host, a moment later.
  const std::string removed = fmt::format("replacing the stale socket of a dead engine {}", name);
  CHECK_MESSAGE(eventually([&] { return contains(successor.stderr_text(), removed); }), successor.stderr_text());

  // The old client's connection ended with the old engine: it hears the old engine is gone.
  CHECK(old_client->call(echo_request(Combo{3, 3, 3, 3, 3, 3}), answer) == CallStatus::engine_gone);
  // A new client reaches the new engine.
  auto new_client = ShmClient::connect(name, client_options(WaitMode::backoff, std::chrono::seconds(2)));
  REQUIRE_MESSAGE(new_client.has_value(), why(new_client));
  CHECK(new_client->segment().engine_pid() == successor.pid());
  REQUIRE(new_client->call(echo_request(Combo{4, 4, 4, 4, 4, 4}), answer) == CallStatus::ok);
  CHECK(answer.echo() == Combo{4, 4, 4, 4, 4, 4});
  new_client = std::unexpected(Error{ErrorCode::io, "closed"});  // hand the lane back before SIGTERM
  const int status = successor.stop(SIGTERM);
  CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), fault::describe_status(status));
  std::printf("fault-figure: restart over a SIGKILLed engine's segment: new engine serving after %.2f ms (spawn included)\n",
              recovery_ms);
  std::fflush(stdout);
}

// =============================================================================================
// Corrupt and hostile peers

namespace {

// A lane of engine `name` for this process, as any client gets one, with its object mapped here:
// the hostile tests write into it directly. Bounded.
std::optional<Attachment> lane_for_scribbling(const std::string& name) {
  AttachOptions options;
  options.timeout = std::chrono::seconds(2);
  auto attached = Attachment::attach(name, options);
  if (!attached) return std::nullopt;
  return std::move(*attached);
}

// What an engine that is not live and holds one series of `bars` bars must answer to `request`.
Status deserved_status(const RequestSlot& request, std::int64_t bars, std::size_t bulk_bytes) {
  // Above the operation's byte only the options bit is defined. This test writes no options line,
  // so a request that has the bit asks for nothing more than one without it.
  if ((request.opcode & ~(kOpcodeMask | kOpcodeWithOptions)) != 0) return Status::unknown_opcode;
  const bool with_options = (request.opcode & kOpcodeWithOptions) != 0;
  const auto op = static_cast<Opcode>(request.opcode & kOpcodeMask);
  if (op == Opcode::append || op == Opcode::subscribe || op == Opcode::snapshot)
    return with_options ? Status::reserved_bits_set : Status::not_live;
  if (op == Opcode::backtest || op == Opcode::stats || op == Opcode::trades) {
    // The high byte names a strategy (only the built-in one, 0, here), the low byte a series (one).
    if ((request.flags >> kStrategyIndexShift) != 0) return Status::no_such_strategy;
    if ((request.flags & kSeriesIndexMask) != 0) return Status::no_such_series;
    for (const std::int64_t window : request.params.as_array())
      if (window < 1 || window > bars) return Status::window_out_of_range;
    return Status::ok;
  }
  if (request.flags != 0 || with_options) return Status::reserved_bits_set;
  if (request.opcode == static_cast<std::uint16_t>(Opcode::echo)) return Status::ok;
  if (request.opcode == static_cast<std::uint16_t>(Opcode::echo_bulk))
    return valid_bulk_echo(BulkEcho::from_params(request.params), bulk_bytes) ? Status::ok : Status::bulk_out_of_range;
  return Status::unknown_opcode;
}

void check_serves(ShmClient& client, std::int64_t tag) {
  ResponseSlot answer{};
  const Combo payload{tag, -tag, tag, tag, tag, tag};
  REQUIRE(client.call(echo_request(payload), answer) == CallStatus::ok);
  CHECK(answer.echo() == payload);
}

// How old the engine's heartbeat is, as `client` reads it, in milliseconds.
double heartbeat_age_ms(const Attachment& segment) {
  // relaxed: a timestamp whose age is compared; nothing is published through it.
  const std::uint64_t beat = segment.header().heartbeat_ns.load(std::memory_order_relaxed);
  const std::uint64_t now = monotonic_ns();
  return now > beat ? static_cast<double>(now - beat) / 1e6 : 0.0;
}

// A client on another lane is answered, correctly, by an engine whose keeper still beats.
void check_serves_fresh(ShmClient& client, std::int64_t tag) {
  check_serves(client, tag);
  const double age = heartbeat_age_ms(client.segment());
  CHECK_MESSAGE(age < kFreshBeatMs, "heartbeat " << age << " ms old");
}

}  // namespace

TEST_CASE("a lane whose request ring holds impossible positions is counted and quarantined; its client is "
          "told corrupt, other lanes keep serving, and the lane serves again once released") {
  Engine engine(unique_name("corrupt"), {"--wait", "backoff", "--bars", "500", "--lanes", "3", "--ring-capacity", "16"});
  REQUIRE(engine.up());
  auto watch = observe(engine.name());
  REQUIRE(watch.has_value());
  const DataHeader& header = watch->header();
  const auto options = client_options(WaitMode::backoff, std::chrono::seconds(2));
  auto good = ShmClient::connect(engine.name(), options);
  auto buggy = ShmClient::connect(engine.name(), options);
  REQUIRE(good.has_value());
  REQUIRE(buggy.has_value());
  check_serves(*good, 1);
  check_serves(*buggy, 2);
  const std::uint64_t bad_frames = counter(header.bad_frames);
  const std::uint64_t released = counter(header.lanes_released);

  // The buggy client's request ring now claims more frames than it can hold. It can only write
  // its own lane: the object the engine handed it.
  const std::uint32_t lane = buggy->lane();
  RingControl& requests = *buggy->segment().lane().view().request_ring;
  // relaxed: the engine's acquire load of produced checks the bounds; no payload is published.
  requests.produced.store(requests.consumed.load(std::memory_order_relaxed) + 16 + 5, std::memory_order_relaxed);
  REQUIRE(eventually([&] { return counter(header.lanes_corrupt) == 1; }));

  // Its client learns it at once instead of timing out.
  ResponseSlot answer{};
  std::uint64_t seq = 0;
  const std::uint64_t start_ns = monotonic_ns();
  const CallStatus told = buggy->outstanding() == 0 ? buggy->wait_response(answer) : CallStatus::ok;
  CHECK(told == CallStatus::corrupt);
  CHECK(fault::ms_since(start_ns) < 100);
  CHECK(contains(buggy->describe(told), "impossible ring positions"));
  CHECK(buggy->submit(echo_request(Combo{}), seq) == CallStatus::ok);  // its request ring is fine
  CHECK(buggy->wait_response(answer) == CallStatus::corrupt);

  // Nothing was read from the impossible positions, other lanes serve, the engine lives, and
  // the quarantined lane is not handed to anyone else while its owner lives.
  for (std::int64_t i = 0; i < 50; ++i) check_serves_fresh(*good, 100 + i);
  CHECK(counter(header.bad_frames) == bad_frames);
  auto third = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
  REQUIRE_MESSAGE(third.has_value(), why(third));
  CHECK(third->lane() != lane);
  auto fourth = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
  REQUIRE_FALSE(fourth.has_value());
  CHECK(fourth.error().code == ErrorCode::busy);

  CHECK(eventually([&] { return lane_state(*watch, lane) == static_cast<std::uint32_t>(LaneState::quarantined); }));
  // Released, the lane gets a fresh object and serves its next client.
  buggy = std::unexpected(Error{ErrorCode::io, "closed"});
  REQUIRE(eventually([&] { return counter(header.lanes_released) == released + 1; }));
  auto next = ShmClient::connect(engine.name(), options);
  REQUIRE_MESSAGE(next.has_value(), why(next));
  CHECK(next->lane() == lane);
  for (std::int64_t i = 0; i < 50; ++i) check_serves(*next, 200 + i);
  CHECK(counter(header.lanes_corrupt) == 1);
  CHECK(process_alive(engine.pid(), 0));
}

TEST_CASE("the engine quarantines a lane whose client wrote an impossible consumed position on its response ring") {
  Engine engine(unique_name("corrupt-consumed"), {"--wait", "backoff", "--bars", "500", "--lanes", "2", "--ring-capacity", "16"});
  REQUIRE(engine.up());
  auto watch = observe(engine.name());
  REQUIRE(watch.has_value());
  const auto options = client_options(WaitMode::backoff, std::chrono::seconds(2));
  auto good = ShmClient::connect(engine.name(), options);
  auto buggy = ShmClient::connect(engine.name(), options);
  REQUIRE(good.has_value());
  REQUIRE(buggy.has_value());
  check_serves(*buggy, 1);
  RingControl& responses = *buggy->segment().lane().view().response_ring;
  // relaxed: as the client's own release store would be; the engine bounds-checks it.
  responses.consumed.store(responses.produced.load(std::memory_order_relaxed) + 1000, std::memory_order_relaxed);
  // The engine reloads `consumed` only when the ring looks full to it, so the client sends
  // without reading (a read would store a sane `consumed` again) until the engine notices:
  // within two rings' worth of requests.
  const DataHeader& header = watch->header();
  CallStatus status = CallStatus::ok;
  for (int i = 0; i < 40 && status == CallStatus::ok && counter(header.lanes_corrupt) == 0; ++i) {
    std::uint64_t seq = 0;
    status = buggy->submit(echo_request(Combo{i, 0, 0, 0, 0, 0}), seq);
  }
  REQUIRE(eventually([&] { return counter(header.lanes_corrupt) == 1; }));
  // The quarantined lane takes no more requests: a client blocked on its full request ring
  // hears corrupt after one heartbeat-long wait, not at its 2 s timeout.
  const std::uint64_t start_ns = monotonic_ns();
  while (status == CallStatus::ok) {
    std::uint64_t seq = 0;
    status = buggy->submit(echo_request(Combo{}), seq);
  }
  CHECK(status == CallStatus::corrupt);
  CHECK(fault::ms_since(start_ns) < 500);
  ResponseSlot answer{};
  CHECK(buggy->wait_response(answer) == CallStatus::corrupt);
  for (std::int64_t i = 0; i < 20; ++i) check_serves_fresh(*good, i);
  CHECK(process_alive(engine.pid(), 0));
}

TEST_CASE("a client reports CallStatus::corrupt when its response ring holds impossible positions") {
  Engine engine(unique_name("corrupt-client"), {"--wait", "backoff", "--bars", "500", "--lanes", "2", "--ring-capacity", "16"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
  REQUIRE(client.has_value());
  check_serves(*client, 1);
  for (const std::int64_t offset : {17, -2}) {  // beyond the capacity, and behind the consumer (-1 is legal)
    CAPTURE(offset);
    auto fresh = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
    REQUIRE(fresh.has_value());
    check_serves(*fresh, 2);
    RingControl& responses = *fresh->segment().lane().view().response_ring;
    // relaxed: the client's acquire load of produced bounds-checks it; nothing is published.
    responses.produced.store(responses.consumed.load(std::memory_order_relaxed) + static_cast<std::uint64_t>(offset),
                             std::memory_order_relaxed);
    ResponseSlot answer{};
    const std::uint64_t start_ns = monotonic_ns();
    CHECK(fresh->wait_response(answer) == CallStatus::corrupt);
    CHECK(fault::ms_since(start_ns) < 100);  // at once, not at the timeout
    CHECK(fresh->poll(answer) == CallStatus::corrupt);  // and it stays so
    auto error = run_all(*fresh, std::vector<Combo>{Combo{1, 1, 1, 1, 1, 1}}, Opcode::echo);
    REQUIRE_FALSE(error.has_value());
    CHECK(error.error().code == ErrorCode::protocol);
  }
  check_serves(*client, 3);
}

TEST_CASE("a lane whose exchange line holds an impossible stamp is counted and quarantined, its line poisoned, "
          "and other lanes keep serving with a fresh heartbeat") {
  Engine engine(unique_name("stamp"), {"--wait", "backoff", "--bars", "500", "--lanes", "2"});
  REQUIRE(engine.up());
  auto watch = observe(engine.name());
  REQUIRE(watch.has_value());
  const DataHeader& header = watch->header();
  auto good = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
  REQUIRE(good.has_value());
  check_serves(*good, 1);
  // The engine accepts exactly request(last + 1) as new and answer(last) as idle. Each of these is
  // neither: a request that skips ahead, one from the past, an answer nobody gave, and bytes.
  const std::uint32_t impossible[] = {request_stamp(7), request_stamp(0), answer_stamp(5), 0xdeadbeefU};
  std::uint64_t corrupt = counter(header.lanes_corrupt);
  for (const std::uint32_t stamp : impossible) {
    CAPTURE(stamp);
    auto buggy = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
    REQUIRE_MESSAGE(buggy.has_value(), why(buggy));
    const std::uint32_t lane = buggy->lane();
    // The lane's count goes on across its clients; the last one's requests are all counted.
    const std::uint64_t served = counter(watch->lane_status(lane).requests) + 1;
    check_serves(*buggy, 2);  // one call answered: the line is idle at answer(1)
    // The engine counts a request just after it answers it.
    REQUIRE(eventually([&] { return counter(watch->lane_status(lane).requests) == served; }));
    CallArea& line = *buggy->segment().lane().view().call;
    // release: as a client's own publication would be; the engine's acquire load checks it.
    std::atomic_ref<std::uint32_t>(line.slot.request.stamp).store(stamp, std::memory_order_release);
    REQUIRE(eventually([&] { return counter(header.lanes_corrupt) == corrupt + 1; }));
    ++corrupt;
    CHECK(eventually([&] { return lane_state(*watch, lane) == static_cast<std::uint32_t>(LaneState::quarantined); }));
    // The engine poisoned the line rather than leave its client to time out, and served nothing.
    CHECK(eventually([&] { return std::atomic_ref<std::uint32_t>(line.slot.request.stamp).load() == kPoisonStamp; }));
    CHECK(counter(watch->lane_status(lane).requests) == served);
    // Its client hears it on its rings at once (they carry the same poison), not at its timeout.
    ResponseSlot answer{};
    std::uint64_t seq = 0;
    REQUIRE(buggy->submit(echo_request(Combo{}), seq) == CallStatus::ok);
    const std::uint64_t start_ns = monotonic_ns();
    CHECK(buggy->wait_response(answer) == CallStatus::corrupt);
    CHECK(fault::ms_since(start_ns) < 100);
    for (std::int64_t i = 0; i < 20; ++i) check_serves_fresh(*good, 100 + i);
    // Released, the lane gets a fresh object and serves again; the quarantine was its alone.
    buggy = std::unexpected(Error{ErrorCode::io, "closed"});
    REQUIRE(eventually([&] { return lane_state(*watch, lane) == static_cast<std::uint32_t>(LaneState::free); }));
    auto next = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
    REQUIRE_MESSAGE(next.has_value(), why(next));
    CHECK(next->lane() == lane);
    check_serves(*next, 3);
  }
  CHECK(counter(header.bad_frames) == 0);
  CHECK(process_alive(engine.pid(), 0));
}

// A client's call() published after its lane was quarantined overwrites the poison on its line;
// the engine no longer serves the lane. The response ring carries the same poison and the client
// never writes it, so the call's wait looks there when a slice ends.
TEST_CASE("a client whose lane was quarantined for its exchange stamp hears corrupt from its next call, not a "
          "timeout") {
  Engine engine(unique_name("stamp-told"), {"--wait", "backoff", "--bars", "500", "--lanes", "2"});
  REQUIRE(engine.up());
  auto watch = observe(engine.name());
  REQUIRE(watch.has_value());
  // A 2 s timeout: a client that only timed out would take that long, a told one returns at once.
  auto buggy = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
  REQUIRE(buggy.has_value());
  check_serves(*buggy, 1);
  CallArea& line = *buggy->segment().lane().view().call;
  std::atomic_ref<std::uint32_t>(line.slot.request.stamp).store(request_stamp(9), std::memory_order_release);  // release: as a publication
  REQUIRE(eventually([&] { return counter(watch->header().lanes_corrupt) == 1; }));
  ResponseSlot answer{};
  const std::uint64_t start_ns = monotonic_ns();
  const CallStatus called = buggy->call(echo_request(Combo{4, 4, 4, 4, 4, 4}), answer);
  const double call_ms = fault::ms_since(start_ns);
  CHECK_MESSAGE(called == CallStatus::corrupt, "call() after the quarantine returned " << to_string(called) << " after "
                                                                                      << call_ms << " ms");
  CHECK(call_ms < 500);
}

TEST_CASE("random hostile ring positions, slot bytes and whole lane objects never crash the engine: possible "
          "frames are answered one by one, impossible ones quarantine the lane, other lanes are untouched") {
  const std::uint64_t seed = fault::seed();
  const int trials = fault::trials();
  MESSAGE("seed " << seed << ", " << trials << " hostile rounds");
  std::mt19937_64 random(seed);
  constexpr std::uint32_t kCapacity = 16;
  constexpr std::int64_t kBars = 500;
  Engine engine(unique_name("hostile"), {"--wait", "backoff", "--bars", std::to_string(kBars), "--lanes", "2",
                                         "--ring-capacity", std::to_string(kCapacity)});
  REQUIRE(engine.up());
  auto watch = observe(engine.name());
  REQUIRE(watch.has_value());
  const DataHeader& header = watch->header();
  auto good = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
  REQUIRE(good.has_value());

  int impossible_rounds = 0;
  std::uint64_t frames_checked = 0;
  for (int trial = 0; trial < trials; ++trial) {
    CAPTURE(trial);
    // A fresh lane object for each round: the hostile peer is an ordinary client that writes
    // whatever it likes into the only memory it can reach.
    auto mine = lane_for_scribbling(engine.name());
    REQUIRE(mine.has_value());
    const std::uint32_t lane = mine->lane().lane();
    const LaneView view = mine->lane().view();
    const std::uint64_t base = 0;  // a fresh object's rings start empty at 0
    const std::uint64_t response_base = 0;
    REQUIRE(view.request_ring->produced.load(std::memory_order_relaxed) == base);  // relaxed: we are its producer

    // Anything from nothing to well past the capacity, or behind the consumer. The position may
    // trail the consumer by one (a commit stores the stamp first), so base - 1 is legal.
    const std::uint64_t pick = random() % 4;
    // "Too far ahead" stays impossible even after the engine consumed the ring's worth of stamped
    // frames before it (its consumer then sits up to kCapacity further on): more than 2 rings.
    const std::uint64_t count = pick == 0 ? 2 * kCapacity + 1 + random() % 1000 : random() % (kCapacity + 1);
    const std::uint64_t target = pick == 1 && count > 0 ? base - count : base + count;
    const bool impossible = target - (base - 1) > kCapacity + 1;
    const std::uint64_t published = impossible || target == base - 1 ? 0 : target - base;
    // A hostile peer stamps what it likes: here every frame it claims to publish ahead of the
    // consumer, up to a ring's worth; the engine serves stamped frames and then finds the position.
    const std::uint64_t stamped = pick == 1 ? 0 : std::min<std::uint64_t>(count, kCapacity);
    // Before the first stamp: the engine answers each frame as soon as its stamp lands.
    const std::uint64_t corrupt_before = counter(header.lanes_corrupt);
    const std::uint64_t bad_before = counter(header.bad_frames);
    for (std::uint32_t k = 0; k < kCapacity; ++k) {
      RequestSlot slot{};
      auto* bytes = reinterpret_cast<unsigned char*>(&slot);
      for (std::size_t b = 0; b < sizeof slot; ++b) bytes[b] = static_cast<unsigned char>(random());
      if (random() % 2 == 0) {  // a plausible frame, so validation gets past the first check
        slot.opcode = static_cast<std::uint16_t>(1 + random() % 3);
        slot.flags = 0;
        for (std::int64_t* w : {&slot.params.h, &slot.params.L, &slot.params.s, &slot.params.p3, &slot.params.p2, &slot.params.p})
          *w = static_cast<std::int64_t>(random() % (kBars + 8)) - 2;
      }
      RequestSlot& shared = view.request_slots[(base + k) % kCapacity];
      copy_slot_payload(shared, slot);
      // release: publishes the payload; pairs with the engine's acquire load of the stamp.
      std::atomic_ref<std::uint32_t>(shared.stamp).store(k < stamped ? ring_stamp(base + k) : 0, std::memory_order_release);
      // release: as a commit does, the position follows its stamp (the engine may be reading
      // these frames already, and a position more than one behind it would be impossible).
      if (k < stamped) view.request_ring->produced.store(base + k + 1, std::memory_order_release);
    }
    // release: publishes the slots; pairs with the engine's acquire load of produced.
    view.request_ring->produced.store(target, std::memory_order_release);

    if (impossible) {
      ++impossible_rounds;
      REQUIRE(eventually([&] { return counter(header.lanes_corrupt) == corrupt_before + 1; }));
      // relaxed: the engine's poison is a bound violation, not a payload.
      CHECK(eventually([&] { return view.response_ring->produced.load(std::memory_order_relaxed) - response_base > kCapacity; }));
    } else {
      // acquire: pairs with the engine's release of consumed, after it wrote the answers.
      REQUIRE(eventually([&] { return view.request_ring->consumed.load(std::memory_order_acquire) == base + published; }));
      REQUIRE(eventually([&] {
        // acquire: pairs with the engine's release store of produced (the answers' payload).
        return view.response_ring->produced.load(std::memory_order_acquire) == response_base + published;
      }));
      std::uint64_t rejected = 0;
      for (std::uint64_t i = 0; i < published; ++i) {
        const RequestSlot& request = view.request_slots[(base + i) % kCapacity];
        const ResponseSlot& response = view.response_slots[(response_base + i) % kCapacity];
        const Status deserved = deserved_status(request, kBars, mine->lane().bulk().size());
        CHECK(response.seq == request.seq);
        CHECK(response.opcode == request.opcode);
        CHECK(response.status == static_cast<std::uint16_t>(deserved));
        if (deserved == Status::ok && request.opcode == static_cast<std::uint16_t>(Opcode::echo))
          CHECK(response.echo() == request.params);
        rejected += deserved != Status::ok ? 1 : 0;
      }
      frames_checked += published;
      // Counted just after each answer is published: look (bounded) until the last one is in.
      CHECK(eventually([&] { return counter(header.bad_frames) == bad_before + rejected; }));
      CHECK(counter(header.lanes_corrupt) == corrupt_before);
    }
    mine->release();
    REQUIRE(eventually([&] { return lane_state(*watch, lane) == static_cast<std::uint32_t>(LaneState::free); }));
    check_serves_fresh(*good, trial);
  }
  CHECK(counter(header.lanes_corrupt) == static_cast<std::uint64_t>(impossible_rounds));

  // Random bytes over a whole lane object (its header, doorbell, exchange line, both rings, every
  // slot and the bulk region), again and again: the engine serves what is possible, quarantines
  // the rest, and answers the good client throughout.
  // Random bytes make the exchange stamp and the ring positions impossible (but for odds of about
  // 2^-31 per pass), so each object is quarantined, once, and counted once.
  int whole_rounds = 0;
  const std::uint64_t corrupt_before_whole = counter(header.lanes_corrupt);
  for (int trial = 0; trial < trials; ++trial) {
    CAPTURE(trial);
    auto mine = lane_for_scribbling(engine.name());
    REQUIRE(mine.has_value());
    const std::uint32_t lane = mine->lane().lane();
    const LaneObject& object = mine->lane();
    auto* bytes = reinterpret_cast<unsigned char*>(object.view().header);
    const std::size_t size = object.size();
    for (int pass = 0; pass < 20; ++pass) {
      // The control lines, every slot and the start of the bulk region, which is all the engine
      // ever reads of a lane outside an ECHO_BULK.
      for (std::size_t b = 0; b < std::min<std::size_t>(size, 64 * 1024); ++b) bytes[b] = static_cast<unsigned char>(random());
      check_serves_fresh(*good, 10'000 + trial * 20 + pass);
    }
    CHECK(eventually([&] { return lane_state(*watch, lane) == static_cast<std::uint32_t>(LaneState::quarantined); }));
    ++whole_rounds;
    mine->release();
    REQUIRE(eventually([&] { return lane_state(*watch, lane) == static_cast<std::uint32_t>(LaneState::free); }));
  }
  CHECK(counter(header.lanes_corrupt) - corrupt_before_whole == static_cast<std::uint64_t>(whole_rounds));
  CHECK(process_alive(engine.pid(), 0));
  MESSAGE(whole_rounds << " lane objects overwritten with random bytes, 20 passes each; lanes quarantined so far: "
                       << counter(header.lanes_corrupt));
  std::printf("fault-figure: hostile lanes: %d rounds of random positions and slot bytes (%d impossible, quarantined; "
              "%llu garbage frames answered one by one), %d whole lane objects overwritten 20 times each (all "
              "quarantined); the other lane answered throughout with a fresh heartbeat\n",
              trials, impossible_rounds, static_cast<unsigned long long>(frames_checked), whole_rounds);
  std::fflush(stdout);

  check_serves(*good, -1);
  good = std::unexpected(Error{ErrorCode::io, "closed"});
  const int status = engine.stop(SIGTERM);  // after all that, it still shuts down cleanly
  CHECK_MESSAGE((WIFEXITED(status) && WEXITSTATUS(status) == 0), fault::describe_status(status));
  MESSAGE(trials << " hostile rounds: " << impossible_rounds << " impossible (quarantined), " << frames_checked
                 << " garbage frames answered one by one");
}

// =============================================================================================
// The trust boundary: what a client cannot do, and what no client can hold

TEST_CASE("a client killed after publishing a ring frame's stamp but not its position, with an exchange call "
          "in flight, leaves its lane to the next client clean: nothing of it is ever answered there") {
  Engine engine(unique_name("stamp-kill"), {"--wait", "backoff", "--bars", "500", "--lanes", "1", "--ring-capacity", "8"});
  REQUIRE(engine.up());
  auto watch = observe(engine.name());
  REQUIRE(watch.has_value());
  const std::uint64_t reclaimed_before = counter(watch->header().lanes_reclaimed);
  ForkedChild victim([&](int fd) {
    AttachOptions options;
    options.timeout = std::chrono::seconds(2);
    auto attached = Attachment::attach(engine.name(), options);
    if (!attached) {
      fault::tell(fd, "E " + attached.error().message);
      return 3;
    }
    const LaneView& view = attached->lane().view();
    // A whole ring frame, published by its stamp; the position store that follows never comes.
    RequestSlot& slot = view.request_slots[0];
    slot.seq = 0xbad;
    slot.opcode = static_cast<std::uint16_t>(Opcode::echo);
    slot.flags = 0;
    slot.params = Combo{66, 66, 66, 66, 66, 66};
    // release: what RingProducer::commit's stamp store does; pairs with the engine's acquire.
    std::atomic_ref<std::uint32_t>(slot.stamp).store(ring_stamp(0), std::memory_order_release);
    // And a call on the exchange line, whose answer it will never read.
    ExchangeClient exchange(view.call);
    exchange.request().opcode = static_cast<std::uint16_t>(Opcode::echo);
    exchange.request().seq = 0xbad;
    exchange.request().params = Combo{77, 77, 77, 77, 77, 77};
    exchange.publish();
    fault::tell(fd, fmt::format("P {}", attached->lane().generation()));
    ::raise(SIGSTOP);  // stopped here until the parent kills it
    return 4;
  });
  const auto line = victim.read_line();
  REQUIRE_MESSAGE((line.has_value() && line->starts_with("P ")), line.value_or("no line"));
  const std::uint64_t victim_generation = std::stoull(line->substr(2));
  // The engine serves both published frames while the victim is stopped: their answers now sit in
  // the victim's lane object.
  REQUIRE(eventually([&] { return counter(watch->lane_status(0).requests) == 2; }));
  REQUIRE(::kill(victim.pid(), SIGKILL) == 0);
  (void)victim.wait();
  REQUIRE(eventually([&] { return counter(watch->header().lanes_reclaimed) == reclaimed_before + 1; }));

  auto next = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
  REQUIRE_MESSAGE(next.has_value(), why(next));
  CHECK(next->lane() == 0);
  // A fresh object: a later generation, an idle exchange line at call 0, empty rings at 0, no
  // stamp in any slot. The old object held the victim's frames, their answers and positions.
  const LaneObject& lane = next->segment().lane();
  CHECK(lane.generation() > victim_generation);
  const LaneView& view = lane.view();
  CHECK(std::atomic_ref<std::uint32_t>(view.call->slot.request.stamp).load() == 0);
  CHECK(view.call->slot.request.seq == 0);
  CHECK(view.request_ring->produced.load() == 0);
  CHECK(view.request_ring->consumed.load() == 0);
  CHECK(view.response_ring->produced.load() == 0);
  CHECK(view.response_ring->consumed.load() == 0);
  for (std::uint32_t i = 0; i < next->capacity(); ++i) {
    CHECK(view.request_slots[i].stamp == 0);
    CHECK(view.response_slots[i].stamp == 0);
    CHECK(view.request_slots[i].seq == 0);
  }
  ResponseSlot stale{};
  CHECK(next->poll(stale) == CallStatus::empty);  // no answer to a request it never made
  for (std::int64_t i = 0; i < 20; ++i) check_serves(*next, 500 + i);
  std::uint64_t seq = 0;
  REQUIRE(next->submit(echo_request(Combo{9, 9, 9, 9, 9, 9}), seq) == CallStatus::ok);
  ResponseSlot answer{};
  REQUIRE(next->wait_response(answer) == CallStatus::ok);
  CHECK(answer.seq == seq);
  CHECK(answer.echo() == Combo{9, 9, 9, 9, 9, 9});
  CHECK(counter(watch->lane_status(0).generation) >= 2);
}

TEST_CASE("a client cannot truncate, grow, write or remap writable what it received, and the engine keeps "
          "serving everyone with a fresh heartbeat") {
  // The attack that killed a layout-v2 engine with SIGBUS: truncate the shared object under it.
  // Both backings of the data object (the seals are shmem's on 4 KiB pages, hugetlbfs's on huge
  // pages); lane objects are always 4 KiB pages.
  std::vector<std::string> backings{"off"};
  if (huge_page_budget().available >= 4) backings.push_back("require");
  for (const std::string& backing : backings) {
    CAPTURE(backing);
    Engine engine(unique_name("truncate"), {"--wait", "backoff", "--bars", "2000", "--lanes", "2", "--hugepages", backing});
    REQUIRE(engine.up());
    auto good = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
    REQUIRE(good.has_value());
    const bool huge = good->segment().backing() == Backing::memfd_huge_2m;
    CHECK(huge == (backing == "require"));
    ForkedChild attacker([&](int fd) {
      // A hostile client keeps the descriptors it receives (ipcfloor's own clients close them
      // once mapped): it asks for its lane by hand.
      const UniqueFd connection = fault::connect_raw(handoff_socket_path(default_socket_dir(), engine.name()));
      auto handed = fault::ask_raw(connection.get(), HandoffRole::lane);
      if (!handed || handed->fds.size() != 2) {
        fault::tell(fd, "E no lane handed over");
        return 3;
      }
      const auto data_bytes = static_cast<off_t>(handed->reply.data_bytes);
      const auto lane_bytes = static_cast<off_t>(handed->reply.lane_bytes);
      const int data = handed->fds[0].get();
      const int lane = handed->fds[1].get();
      void* mapped = ::mmap(nullptr, static_cast<std::size_t>(data_bytes), PROT_READ, MAP_SHARED, data, 0);
      if (mapped == MAP_FAILED) {
        fault::tell(fd, "E cannot map the data object read-only");
        return 3;
      }
      const auto& header = *static_cast<const DataHeader*>(mapped);
      std::string failures;
      // Each attempt must fail, and with the errno that names the reason.
      const auto expect = [&](const char* what, bool succeeded, int want) {
        const int got = errno;
        if (succeeded) failures += fmt::format(" {}:succeeded", what);
        else if (got != want) failures += fmt::format(" {}:errno={}({})", what, got, std::strerror(got));
        errno = 0;
      };
      // A size hugetlbfs cannot take at all is refused for that (EINVAL); whole pages only by the seals.
      expect("ftruncate(data, 4096)", ::ftruncate(data, 4096) == 0, huge ? EINVAL : EPERM);
      expect("ftruncate(data, 0)", ::ftruncate(data, 0) == 0, EPERM);
      expect("ftruncate(data, x4)", ::ftruncate(data, data_bytes * 4) == 0, EPERM);
      expect("ftruncate(lane, 4096)", ::ftruncate(lane, 4096) == 0, EPERM);
      expect("ftruncate(lane, 0)", ::ftruncate(lane, 0) == 0, EPERM);
      expect("ftruncate(lane, x4)", ::ftruncate(lane, lane_bytes * 4) == 0, EPERM);
      const double nonsense = -1.0;
      expect("pwrite(series)",
             ::pwrite(data, &nonsense, sizeof nonsense, static_cast<off_t>(header.series_offset)) > 0,
             huge ? EINVAL : EPERM);
      expect("mmap(data, PROT_WRITE)",
             ::mmap(nullptr, static_cast<std::size_t>(data_bytes), PROT_READ | PROT_WRITE, MAP_SHARED, data, 0) != MAP_FAILED,
             EPERM);
      auto* series = static_cast<std::byte*>(mapped) + header.series_offset;
      expect("mprotect(series)",
             ::mprotect(reinterpret_cast<void*>(reinterpret_cast<std::uintptr_t>(series) & ~std::uintptr_t{4095}), 4096,
                        PROT_READ | PROT_WRITE) == 0,
             EACCES);
      expect("fallocate(punch data)",
             ::fallocate(data, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, huge ? static_cast<off_t>(kHugePageBytes) : 4096) == 0,
             EPERM);
      // The lane object is the client's own to write, but not to resize through a reopened descriptor either.
      const int reopened = ::open(fmt::format("/proc/self/fd/{}", lane).c_str(), O_RDWR | O_CLOEXEC);
      if (reopened < 0) failures += " reopen(lane):failed";
      else expect("ftruncate(reopened lane, 4096)", ::ftruncate(reopened, 4096) == 0, EPERM);
      fault::tell(fd, failures.empty() ? "OK" : "F" + failures);
      return 0;
    });
    const auto line = attacker.read_line();
    REQUIRE(line.has_value());
    CHECK_MESSAGE(*line == "OK", *line);
    (void)attacker.wait();
    for (std::int64_t i = 0; i < 50; ++i) check_serves_fresh(*good, i);
    RequestSlot backtest{};
    backtest.opcode = static_cast<std::uint16_t>(Opcode::backtest);
    backtest.params = combo_from_length(20);
    ResponseSlot answer{};
    REQUIRE(good->call(backtest, answer) == CallStatus::ok);
    CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
    const auto series = good->segment().series();
    CHECK(fnv1a64(std::as_bytes(series)) == good->segment().header().series_checksum);
    CHECK(process_alive(engine.pid(), 0));
    // The attacker's lane came back like any other: counted, replaced, served again.
    auto next = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
    REQUIRE_MESSAGE(next.has_value(), why(next));
    check_serves(*next, 99);
  }
}

TEST_CASE("a client that spoofs pid 1 pins nothing: no owner word is writable to it, and killing it frees its "
          "lane") {
  Engine engine(unique_name("spoof"), {"--wait", "backoff", "--bars", "500", "--lanes", "1"});
  REQUIRE(engine.up());
  auto watch = observe(engine.name());
  REQUIRE(watch.has_value());
  const DataHeader& header = watch->header();
  const std::uint64_t reclaimed_before = counter(header.lanes_reclaimed);
  ForkedChild spoofer([&](int fd) {
    AttachOptions options;
    options.timeout = std::chrono::seconds(2);
    auto attached = Attachment::attach(engine.name(), options);
    if (!attached) {
      fault::tell(fd, "E " + attached.error().message);
      return 3;
    }
    const std::uint32_t lane = attached->lane().lane();
    std::string wrote;
    // Its own lane object: every 32-bit word of the header line says pid 1. The engine never
    // reads that line back, so nothing follows from it.
    auto* words = reinterpret_cast<std::int32_t*>(attached->lane().view().header);
    for (std::size_t i = 0; i < kLaneDoorbellOffset / sizeof(std::int32_t); ++i) words[i] = 1;
    // The owner word `status` shows lives in the data object, which it cannot write by any means.
    const std::int32_t one = 1;
    const LaneStatus& status = attached->lane_status(lane);
    const auto owner_at = reinterpret_cast<std::uintptr_t>(&status.owner_pid);
    const UniqueFd memory(::open("/proc/self/mem", O_RDWR | O_CLOEXEC));
    if (memory && ::pwrite(memory.get(), &one, sizeof one, static_cast<off_t>(owner_at)) == sizeof one)
      wrote += " /proc/self/mem";
    const auto owner_offset = static_cast<off_t>(attached->geometry().lane_status_offset + lane * kLaneStatusBytes +
                                                 offsetof(LaneStatus, owner_pid));
    // Its own engine-sent data descriptor is closed once mapped; a descriptor for the object
    // asked for by hand is sealed the same way.
    const UniqueFd connection = fault::connect_raw(handoff_socket_path(default_socket_dir(), engine.name()));
    const auto handed = fault::ask_raw(connection.get(), HandoffRole::observer);
    if (handed && !handed->fds.empty() && ::pwrite(handed->fds[0].get(), &one, sizeof one, owner_offset) == sizeof one)
      wrote += " pwrite";
    if (::mprotect(reinterpret_cast<void*>(owner_at & ~std::uintptr_t{4095}), 4096, PROT_READ | PROT_WRITE) == 0)
      wrote += " mprotect";
    // The keeper records the owner just after the hand-off reply, so look (bounded) until it has.
    (void)eventually([&] { return status.owner_pid != 0; });
    fault::tell(fd, fmt::format("S {} {}{}", lane, status.owner_pid, wrote));
    ::raise(SIGSTOP);  // alive, holding its lane, until the parent kills it
    return 4;
  });
  const auto line = spoofer.read_line();
  REQUIRE(line.has_value());
  CHECK_MESSAGE(*line == fmt::format("S 0 {}", spoofer.pid()), *line);  // it sees its real pid, and wrote nothing
  const LaneStatus& lane = watch->lane_status(0);
  CHECK(lane.owner_pid == spoofer.pid());
  CHECK(eventually([&] { return lane_state(*watch, 0) == static_cast<std::uint32_t>(LaneState::claimed); }));
  // While it lives, the one lane is its: a second client is refused.
  auto refused = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::busy);
  // Killed (stopped as it is), its connection ends and the lane is free, whatever it wrote.
  const std::uint64_t kill_ns = monotonic_ns();
  REQUIRE(::kill(spoofer.pid(), SIGKILL) == 0);
  (void)spoofer.wait();
  REQUIRE(eventually([&] { return counter(header.lanes_reclaimed) == reclaimed_before + 1; }));
  const double reclaimed_ms = fault::ms_since(kill_ns);
  CHECK(reclaimed_ms < kReclaimBoundMs);
  REQUIRE(eventually([&] { return lane_state(*watch, 0) == static_cast<std::uint32_t>(LaneState::free); }));
  CHECK(lane.owner_pid == 0);
  auto next = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
  REQUIRE_MESSAGE(next.has_value(), why(next));
  CHECK(next->segment().lane().view().header->layout_version == kLayoutVersion);  // a fresh header, not the 1s
  check_serves(*next, 1);
  CHECK(lane.owner_pid == ::getpid());
  std::printf("fault-figure: a client that wrote pid 1 everywhere it could, then SIGKILLed: lane reclaimed after %.2f ms\n",
              reclaimed_ms);
  std::fflush(stdout);
}

TEST_CASE("with no lane free but one draining, an attach waits for it and succeeds") {
  // Without workers the serving thread lets go of a lane only between frames: while it computes a
  // slow BACKTEST (no bound per frame), a lane whose client just left stays draining.
  Engine engine(unique_name("draining"), {"--wait", "backoff", "--bars", "200000", "--lanes", "2", "--workers", "0",
                                          "--max-frame-cost", "0"});
  REQUIRE(engine.up());
  auto watch = observe(engine.name());
  REQUIRE(watch.has_value());
  // Patient: a slow frame takes a few hundred ms in release and several seconds under TSan.
  const auto options = client_options(WaitMode::backoff, std::chrono::seconds(60));
  auto busy = ShmClient::connect(engine.name(), options);
  auto leaving = ShmClient::connect(engine.name(), options);
  REQUIRE(busy.has_value());
  REQUIRE(leaving.has_value());
  check_serves(*busy, 1);
  const std::uint32_t freed = leaving->lane();
  // Two slow frames back to back: the serving thread goes from the first straight into the second
  // (one burst, no look at the lane table in between), so once the first answer is in, it is
  // busy with the second for a few hundred ms.
  RequestSlot slow{};
  slow.opcode = static_cast<std::uint16_t>(Opcode::backtest);
  slow.params = Combo{8'000, 16'000, 100, 1'500, 4'000, 8'000};
  std::uint64_t first = 0;
  std::uint64_t second = 0;
  REQUIRE(busy->submit(slow, first) == CallStatus::ok);
  REQUIRE(busy->submit(slow, second) == CallStatus::ok);
  ResponseSlot answer{};
  REQUIRE(busy->wait_response(answer) == CallStatus::ok);
  REQUIRE(answer.seq == first);
  leaving = std::unexpected(Error{ErrorCode::io, "closed"});
  REQUIRE(eventually([&] { return lane_state(*watch, freed) == static_cast<std::uint32_t>(LaneState::draining); }));

  // The engine's answer to a hand-off now: no lane free, one on its way.
  {
    const UniqueFd raw = fault::connect_raw(handoff_socket_path(default_socket_dir(), engine.name()));
    REQUIRE(raw);
    const auto answered = fault::ask_raw(raw.get(), HandoffRole::lane);
    REQUIRE(answered.has_value());
    REQUIRE_MESSAGE(answered->reply.status == static_cast<std::uint16_t>(HandoffStatus::lane_draining),
                    "the slow frame ended before the hand-off: "
                        << to_string(static_cast<HandoffStatus>(answered->reply.status)));
    CHECK(answered->fds.empty());
  }

  // A client attaching now waits (retrying) until the lane is free, and gets it.
  const std::uint64_t start_ns = monotonic_ns();
  auto waiting = ShmClient::connect(engine.name(), options);
  const double waited_ms = fault::ms_since(start_ns);
  REQUIRE_MESSAGE(waiting.has_value(), why(waiting));
  CHECK(waiting->lane() == freed);
  check_serves(*waiting, 2);
  REQUIRE(busy->wait_response(answer) == CallStatus::ok);
  CHECK(answer.seq == second);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  std::printf("fault-figure: attach while the only other lane drains behind a slow frame: waited %.1f ms, then got it\n",
              waited_ms);
  std::fflush(stdout);
}

TEST_CASE("a connection that never asks for a lane is dropped after about a second and holds none meanwhile") {
  Engine engine(unique_name("idle"), {"--wait", "backoff", "--bars", "500", "--lanes", "1"});
  REQUIRE(engine.up());
  const UniqueFd idle = fault::connect_raw(handoff_socket_path(default_socket_dir(), engine.name()));
  REQUIRE(idle);
  const std::uint64_t start = monotonic_ns();
  {
    auto client = ShmClient::connect(engine.name(), client_options(WaitMode::backoff, std::chrono::seconds(2)));
    REQUIRE_MESSAGE(client.has_value(), why(client));  // the idle connection holds no lane
    check_serves(*client, 1);
  }
  pollfd watch{idle.get(), POLLIN | POLLRDHUP, 0};
  REQUIRE(::poll(&watch, 1, 5000) == 1);
  char byte = 0;
  CHECK(::recv(idle.get(), &byte, 1, 0) <= 0);  // closed by the engine
  const double dropped_ms = fault::ms_since(start);
  CHECK(dropped_ms > 500);
  CHECK(dropped_ms < 3000);
  std::printf("fault-figure: idle hand-off connection dropped after %.0f ms\n", dropped_ms);
  std::fflush(stdout);
}

TEST_CASE("an engine refuses another uid's hand-off, and another process of its own uid cannot open its "
          "descriptors through /proc") {
  if (::geteuid() != 0) {
    MESSAGE("skipped: running an engine and an attacker as uid 65534 needs root");
    return;
  }
  constexpr uid_t kNobody = 65534;
  char dir_template[] = "/tmp/ipcfloor-uid-XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string dir = dir_template;
  REQUIRE(::chown(dir.c_str(), kNobody, kNobody) == 0);
  const std::string name = unique_name("uid");
  const auto as_nobody = [] {
    if (::setgid(kNobody) != 0 || ::setuid(kNobody) != 0) ::_exit(Spawned::kHookFailed);
  };
  Spawned engine({IPCFLOOR_BINARY, "serve", "--name", name, "--socket-dir", dir, "--wait", "backoff", "--bars", "500",
                  "--lanes", "2", "--mlock", "off", "--hugepages", "off", "--quiet"},
                 as_nobody);
  const std::string socket_path = dir + "/" + name;
  REQUIRE_MESSAGE(eventually([&] { return ::access(socket_path.c_str(), F_OK) == 0; }, std::chrono::seconds(10)),
                  engine.stderr_text());

  // Root's own client refuses a socket another uid owns, before talking to it.
  AttachOptions options;
  options.socket_dir = dir;
  options.timeout = std::chrono::seconds(2);
  auto refused = Attachment::attach(name, options);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::permission);
  // And the engine refuses root's raw connection itself (SO_PEERCRED), without a descriptor: it
  // answers before any request is read.
  {
    const UniqueFd raw = fault::connect_raw(socket_path);
    REQUIRE(raw);
    const auto answered = fault::read_raw(raw.get());
    REQUIRE(answered.has_value());
    CHECK(answered->reply.status == static_cast<std::uint16_t>(HandoffStatus::refused));
    CHECK(answered->fds.empty());
    CHECK(contains(answered->reply.message, fmt::format("serves uid {}", kNobody)));
    CHECK(contains(answered->reply.message, "only; uid 0"));
    CHECK(contains(answered->reply.message, "is not allowed (serve --allow-uid, --allow-group)"));
  }
  // ... and says so in its log, with the refused uid and pid.
  CHECK_MESSAGE(eventually([&] { return contains(engine.stderr_text(), "refused a connection from uid 0 (pid "); }),
                engine.stderr_text());
  // A client of the engine's own uid attaches; another process of that uid cannot reach the
  // engine's descriptors (the engine is not dumpable), so it cannot take other lanes' objects.
  ForkedChild same_uid([&](int fd) {
    as_nobody();
    auto attached = Attachment::attach(name, options);
    if (!attached) {
      fault::tell(fd, "E " + attached.error().message);
      return 3;
    }
    int opened = 0, denied = 0;
    for (int n = 0; n < 64; ++n) {
      const int got = ::open(fmt::format("/proc/{}/fd/{}", engine.pid(), n).c_str(), O_RDONLY | O_CLOEXEC);
      if (got >= 0) {
        ++opened;
        ::close(got);
      } else if (errno == EACCES || errno == EPERM) {
        ++denied;
      }
    }
    fault::tell(fd, fmt::format("A {} {}", opened, denied));
    return 0;
  });
  const auto line = same_uid.read_line();
  REQUIRE(line.has_value());
  CHECK_MESSAGE(line->starts_with("A 0 "), *line);  // attached; no descriptor of the engine opened
  (void)same_uid.wait();
  CHECK(WIFEXITED(engine.stop(SIGTERM)));
  std::filesystem::remove_all(dir);
}

// =============================================================================================
// Resources

namespace {

std::vector<std::string> serve_args(const std::string& name, std::vector<std::string> extra) {
  std::vector<std::string> args{IPCFLOOR_BINARY, "serve", "--name", name, "--quiet", "--wait", "backoff"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Removes whatever an engine left at `name` once the test ends: on a failed check the Spawned
// engines are SIGKILLed, which leaves their socket and lock file behind.
struct SegmentCleanup {
  explicit SegmentCleanup(std::string segment_name) : name(std::move(segment_name)) {}
  SegmentCleanup(const SegmentCleanup&) = delete;
  SegmentCleanup& operator=(const SegmentCleanup&) = delete;
  ~SegmentCleanup() { (void)Segment::remove_stale(name, default_socket_dir()); }
  std::string name;
};

bool host_has_huge_pages() {
  std::FILE* file = std::fopen("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages", "r");
  if (file == nullptr) return false;
  unsigned long pages = 0;
  const bool read = std::fscanf(file, "%lu", &pages) == 1;
  std::fclose(file);
  return read && pages > 0;
}



// Child side, before exec: no CAP_IPC_LOCK (root ignores RLIMIT_MEMLOCK with it) and a 64 KiB
// memlock limit. Dropped from the bounding set, the capability is gone after exec even for root.
void drop_memlock() {
  if (::prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0) != 0) ::_exit(Spawned::kHookFailed);
  const rlimit tiny{64 * 1024, 64 * 1024};
  if (::setrlimit(RLIMIT_MEMLOCK, &tiny) != 0) ::_exit(Spawned::kHookFailed);
}

}  // namespace

TEST_CASE("without huge pages the engine falls back to 4 KiB pages and records it; --hugepages require fails "
          "naming the fix") {
  if (host_has_huge_pages()) {
    MESSAGE("skipped: this host has free 2 MiB huge pages (test_segment.cpp covers that path)");
    return;
  }
  const std::string name = unique_name("nohuge");
  const SegmentCleanup cleanup{name};
  {
    Spawned required(serve_args(name, {"--bars", "500", "--hugepages", "require"}));
    const auto status = required.wait_exit(std::chrono::seconds(20));
    REQUIRE(status.has_value());
    CHECK_MESSAGE((WIFEXITED(*status) && WEXITSTATUS(*status) == 4), fault::describe_status(*status));  // environment
    const std::string error = required.stderr_text();
    CHECK_MESSAGE(contains(error, "--hugepages require"), error);
    CHECK_MESSAGE(contains(error, "nr_hugepages"), error);  // the fix
    CHECK_FALSE(observe(name).has_value());
  }
  Spawned fallback(serve_args(name, {"--bars", "500", "--hugepages", "auto"}));
  REQUIRE_MESSAGE(fault::segment_served_by(name, fallback.pid()), fallback.stderr_text());
  CHECK(contains(fallback.stderr_text(), "fell back to 4 KiB pages"));
  {
    auto segment = observe(name);
    REQUIRE(segment.has_value());
    CHECK(segment->backing() == Backing::memfd_4k);
    CHECK(segment->header().backing == static_cast<std::uint32_t>(Backing::memfd_4k));
  }
  CHECK(WIFEXITED(fallback.stop(SIGTERM)));
}

TEST_CASE("under a 64 KiB RLIMIT_MEMLOCK the engine warns and runs unlocked, or fails under --mlock require") {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  MESSAGE("skipped: the sanitizer runtimes make mlock() a no-op that always succeeds");
  return;
#endif
  if (::geteuid() != 0) {
    MESSAGE("skipped: dropping CAP_IPC_LOCK from the bounding set needs root");
    return;
  }
  const std::string name = unique_name("memlock");
  const SegmentCleanup cleanup{name};
  {
    Spawned required(serve_args(name, {"--bars", "500", "--hugepages", "off", "--mlock", "require"}), drop_memlock);
    const auto status = required.wait_exit(std::chrono::seconds(20));
    REQUIRE(status.has_value());
    if (WIFEXITED(*status) && WEXITSTATUS(*status) == Spawned::kHookFailed) {
      MESSAGE("skipped: cannot drop CAP_IPC_LOCK or lower RLIMIT_MEMLOCK here");
      return;
    }
    CHECK_MESSAGE((WIFEXITED(*status) && WEXITSTATUS(*status) == 4), fault::describe_status(*status));  // environment
    const std::string error = required.stderr_text();
    for (const std::string_view part : {"--mlock require", "RLIMIT_MEMLOCK is 64 KiB", "prlimit --memlock"})
      CHECK_MESSAGE(contains(error, part), error);
    CHECK_FALSE(observe(name).has_value());
  }
  Spawned unlocked(serve_args(name, {"--bars", "500", "--hugepages", "off", "--mlock", "auto"}), drop_memlock);
  REQUIRE_MESSAGE(fault::segment_served_by(name, unlocked.pid()), unlocked.stderr_text());
  // The warning is printed just after the segment turns ready: on a busy host, a moment later.
  (void)eventually([&] { return contains(unlocked.stderr_text(), "running unlocked"); });
  const std::string warning = unlocked.stderr_text();
  CHECK_MESSAGE(contains(warning, "mlock failed"), warning);
  CHECK_MESSAGE(contains(warning, "running unlocked"), warning);
  CHECK_MESSAGE(contains(warning, "every lane object"), warning);
  {
    auto client = ShmClient::connect(name, client_options(WaitMode::backoff, std::chrono::seconds(2)));
    REQUIRE(client.has_value());
    // The data object is small enough for 64 KiB; every lane object is not, and says so.
    check_serves(*client, 1);
  }
  CHECK(WIFEXITED(unlocked.stop(SIGTERM)));
}


TEST_CASE("an engine whose stderr is a full pipe nobody reads keeps its heartbeat, serves every client, and "
          "still ends on SIGTERM, through a flood of rejected frames on both its segment and its socket") {
  const std::string name = unique_name("stderr");
  const SegmentCleanup cleanup{name};
  char dir_template[] = "/tmp/ipcfloor-stderr-XXXXXX";
  REQUIRE(::mkdtemp(dir_template) != nullptr);
  const std::string socket_path = std::string(dir_template) + "/engine.sock";
  // The smallest pipe the kernel allows, filled before the engine starts: its first line to
  // stderr would block a thread that wrote it directly.
  int pipe_fds[2];
  REQUIRE(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  const UniqueFd stderr_read(pipe_fds[0]);
  UniqueFd stderr_write(pipe_fds[1]);
  (void)::fcntl(stderr_write.get(), F_SETPIPE_SZ, 4096);
  REQUIRE(::fcntl(stderr_write.get(), F_SETFL, O_NONBLOCK) == 0);
  const std::string filler(4096, '#');
  std::size_t filled = 0;
  for (ssize_t put; (put = ::write(stderr_write.get(), filler.data(), filler.size())) > 0;)
    filled += static_cast<std::size_t>(put);
  REQUIRE(filled > 0);
  REQUIRE(::fcntl(stderr_write.get(), F_SETFL, 0) == 0);  // the engine's writes block, as on a real pipe
  const int write_end = stderr_write.get();
  Spawned engine(serve_args(name, {"--bars", "500", "--lanes", "2", "--heartbeat-ms", std::to_string(kHeartbeatMs),
                                   "--log-level", "debug", "--socket", socket_path}),
                 [write_end] {
                   if (::dup2(write_end, STDERR_FILENO) < 0) ::_exit(Spawned::kHookFailed);
                 });
  stderr_write = UniqueFd();
  REQUIRE(fault::segment_served_by(name, engine.pid()));
  auto watch = observe(name);
  REQUIRE(watch.has_value());
  const auto options = client_options(WaitMode::backoff, std::chrono::seconds(2));
  auto hostile = ShmClient::connect(name, options);
  auto good = ShmClient::connect(name, options);
  REQUIRE_MESSAGE(hostile.has_value(), why(hostile));
  REQUIRE_MESSAGE(good.has_value(), why(good));

  // 3,000 frames the engine rejects (each one a log line before rate limiting), interleaved with
  // socket garbage that the socket thread rejects and logs, while the heartbeat is sampled.
  RequestSlot bad{};
  bad.opcode = 0x7777;
  double oldest_beat_ms = 0.0;
  SocketClientOptions socket_options;
  socket_options.timeout = std::chrono::seconds(2);
  for (int i = 0; i < 3000; ++i) {
    ResponseSlot answer{};
    REQUIRE(hostile->call(bad, answer) == CallStatus::ok);
    CHECK(answer.status == static_cast<std::uint16_t>(Status::unknown_opcode));
    if (i % 100 == 0) {
      const UniqueFd garbage = fault::connect_raw(socket_path);
      const std::array<unsigned char, 13> frame = {9, 0, 0, 0, 0x42, 0, 0, 0, 0, 0, 0, 0, 0};
      (void)::send(garbage.get(), frame.data(), frame.size(), MSG_NOSIGNAL);
      check_serves(*good, i);
    }
    oldest_beat_ms = std::max(oldest_beat_ms, heartbeat_age_ms(*watch));
  }
  MESSAGE("fault-figure blocked-stderr oldest heartbeat during the flood: " << oldest_beat_ms << " ms");
  CHECK(oldest_beat_ms < kFreshBeatMs);
  check_serves_fresh(*good, 9999);
  auto socket_client = SocketClient::connect_unix(socket_path, socket_options);
  REQUIRE_MESSAGE(socket_client.has_value(), why(socket_client));
  CHECK(socket_client->echo_params(Combo{1, 2, 3, 4, 5, 6}).has_value());

  const std::uint64_t start_ns = monotonic_ns();
  ::kill(engine.pid(), SIGTERM);
  const auto status = engine.wait_exit(std::chrono::seconds(5));
  const double exit_ms = fault::ms_since(start_ns);
  MESSAGE("fault-figure blocked-stderr SIGTERM to exit: " << exit_ms << " ms");
  REQUIRE_MESSAGE(status.has_value(), "SIGTERM did not end an engine whose stderr is blocked");
  CHECK_MESSAGE((WIFEXITED(*status) && WEXITSTATUS(*status) == 0), fault::describe_status(*status));
  // The promise: one frame for the serving thread (none is costly here) and one heartbeat
  // for the log writer (the signalfd wakes the keeper at once); plus the process's own exit and
  // the scheduling allowance of a shared 2-vCPU host.
  CHECK(exit_ms < kHeartbeatMs + 10.0 + 20.0 + kTeardownAllowanceMs + kSchedulingAllowanceMs);
  std::filesystem::remove_all(dir_template);
}


// CPU time the thread `tid` of process `pid` has used, in clock ticks (utime + stime).
std::uint64_t thread_cpu_ticks(pid_t pid, pid_t tid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const auto close_paren = text.rfind(')');
  if (close_paren == std::string::npos) return 0;
  std::istringstream fields(text.substr(close_paren + 2));
  std::string field;
  std::uint64_t utime = 0;
  std::uint64_t stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return utime + stime;
}

TEST_CASE("an engine out of file descriptors tells new peers why, keeps serving its clients without spinning, "
          "and attaches again once descriptors free") {
  const std::string name = unique_name("emfile");
  const SegmentCleanup cleanup{name};
  Spawned engine(serve_args(name, {"--bars", "500", "--lanes", "2", "--heartbeat-ms", std::to_string(kHeartbeatMs)}),
                 [] {
                   const rlimit limit{64, 64};
                   if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) ::_exit(Spawned::kHookFailed);
                 });
  REQUIRE_MESSAGE(fault::segment_served_by(name, engine.pid()), engine.stderr_text());
  const auto options = client_options(WaitMode::backoff, std::chrono::seconds(2));
  auto good = ShmClient::connect(name, options);
  REQUIRE_MESSAGE(good.has_value(), why(good));
  auto watch = observe(name);
  REQUIRE(watch.has_value());

  // Peers that connect and never ask: each holds one of the engine's descriptors for a second.
  std::vector<UniqueFd> hoarders;
  for (int i = 0; i < 100; ++i) {
    hoarders.push_back(fault::connect_raw(watch->socket_path()));
    REQUIRE(hoarders.back());
  }
  REQUIRE(eventually([&] { return contains(engine.stderr_text(), "out of file descriptors"); }));
  AttachOptions attach_options;
  attach_options.role = HandoffRole::observer;
  attach_options.timeout = std::chrono::milliseconds(500);
  auto refused = Attachment::attach(name, attach_options);
  if (!refused) {
    CHECK_MESSAGE((contains(refused.error().message, "out of file descriptors") ||
                   contains(refused.error().message, "did not answer")),
                  refused.error().message);
    CHECK_FALSE(contains(refused.error().message, "is gone"));
  }
  // The keeper neither spins on its readable listener nor stops serving.
  const std::uint64_t ticks_before = thread_cpu_ticks(engine.pid(), engine.pid());
  const auto sampled_from = std::chrono::steady_clock::now();
  for (std::int64_t i = 0; i < 200; ++i) {
    check_serves_fresh(*good, 10 + i);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - sampled_from).count();
  const double keeper_share =
      static_cast<double>(thread_cpu_ticks(engine.pid(), engine.pid()) - ticks_before) /
      static_cast<double>(::sysconf(_SC_CLK_TCK)) / seconds;
  MESSAGE("fault-figure emfile keeper cpu share while out of descriptors: " << keeper_share);
  CHECK(keeper_share < 0.3);
  hoarders.clear();
  CHECK(eventually([&] { return ShmClient::connect(name, options).has_value(); }, std::chrono::seconds(5)));
  check_serves_fresh(*good, 999);
  CHECK(WIFEXITED(engine.stop(SIGTERM)));
}

}  // namespace ipcfloor
