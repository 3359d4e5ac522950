// The engine as a separate process, driven through its lanes (the exchange line and the rings) by
// ShmClient.

#include <doctest/doctest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <filesystem>
#include <cstdio>
#include <cstring>
#include <string>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "clients/pipelined_sweep.hpp"
#include "clients/shm_client.hpp"
#include "kernel/cost.hpp"
#include "kernel/kernel.hpp"
#include "data/gbm.hpp"
#include "data/grid.hpp"
#include "data/series_source.hpp"
#include "bench/engine_child.hpp"
#include "common/unique_fd.hpp"
#include "shm/handoff.hpp"
#include "shm/liveness.hpp"

using namespace ipcfloor;

namespace {
// Every engine here is the real binary, as a child process.
struct EngineProcess : EngineChild {
  EngineProcess(std::string name, const std::vector<std::string>& args)
      : EngineChild(IPCFLOOR_BINARY, std::move(name), args) {}
};
std::string unique_name(const char* what) { return unique_segment_name(std::string("test-") + what); }
}  // namespace

namespace {

ShmClientOptions backoff_client() {
  ShmClientOptions options;
  options.wait = WaitMode::backoff;
  options.timeout = std::chrono::seconds(10);
  return options;
}

RequestSlot request(Opcode opcode, const Combo& params) {
  RequestSlot slot{};
  slot.opcode = static_cast<std::uint16_t>(opcode);
  slot.params = params;
  return slot;
}

// Waits (bounded) until `predicate` holds; true if it did.
template <class Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds limit = std::chrono::milliseconds(3000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return predicate();
}

// An observer's view of a running engine (no lane), or nothing when none answers.
std::optional<Attachment> observe(const std::string& name) {
  AttachOptions options;
  options.role = HandoffRole::observer;
  options.timeout = std::chrono::milliseconds(500);
  auto attached = Attachment::attach(name, options);
  if (!attached) return std::nullopt;
  return std::move(*attached);
}

std::uint64_t relaxed(const std::atomic<std::uint64_t>& counter) {
  return counter.load(std::memory_order_relaxed);  // relaxed: counters for people, polled
}

// State letter of `pid` from /proc/PID/stat ('T' when stopped), or '?'.
char process_state(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return '?';
  char buffer[512] = {};
  const std::size_t got = std::fread(buffer, 1, sizeof buffer - 1, f);
  std::fclose(f);
  const char* paren = std::strrchr(buffer, ')');
  return got > 0 && paren != nullptr && paren[1] == ' ' ? paren[2] : '?';
}

}  // namespace

TEST_CASE("a second process streams the default grid through the ring and gets the in-process results") {
  EngineProcess engine(unique_name("grid"), {"--wait", "backoff"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE_MESSAGE(client.has_value(), (client ? "" : client.error().message));

  std::vector<Combo> combos;
  for (const auto length : grid_lengths(6, 200, 80)) combos.push_back(combo_from_length(length));
  auto answers = run_all(*client, combos, Opcode::backtest);
  REQUIRE_MESSAGE(answers.has_value(), (answers ? "" : answers.error().message));

  auto series = load_series_source(SeriesSource{});
  REQUIRE(series.has_value());
  const auto expected = run_sweep(builtin(), series->close, combos, kDefaultFee, 0);
  REQUIRE(expected.has_value());
  REQUIRE(answers->size() == combos.size());
  for (std::size_t i = 0; i < combos.size(); ++i) {
    CAPTURE(i);
    CHECK((*answers)[i].status == static_cast<std::uint16_t>(Status::ok));
    CHECK((*answers)[i].pnl == (*expected)[i].pnl);
    CHECK((*answers)[i].trades == (*expected)[i].trades);
  }
  CHECK((*answers)[0].pnl == kFingerprintPnl);
}

TEST_CASE("ECHO returns the 48-byte payload verbatim") {
  EngineProcess engine(unique_name("echo"), {"--wait", "backoff", "--bars", "1000"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  const Combo payload{-1, 0x7fffffffffffffff, 3, 4, 5, -6};
  ResponseSlot answer{};
  REQUIRE(client->call(request(Opcode::echo, payload), answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  CHECK(answer.echo() == payload);
}

TEST_CASE("ECHO_BULK carries payloads from 8 bytes to 1.2 MB through the lane's bulk region, bit for bit") {
  EngineProcess engine(unique_name("bulk"), {"--wait", "backoff", "--bars", "1000"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  REQUIRE(client->bulk().size() >= kDefaultBulkBytes);
  for (const std::size_t floats : {std::size_t{1}, std::size_t{7}, std::size_t{4096}, std::size_t{150'000}}) {
    CAPTURE(floats);
    std::vector<double> in(floats), out(floats, -1.0);
    for (std::size_t i = 0; i < floats; ++i) in[i] = 100.0 + static_cast<double>(i) * 0.25 + static_cast<double>(floats);
    ResponseSlot answer{};
    REQUIRE(client->echo_bulk(std::as_bytes(std::span(in)), std::as_writable_bytes(std::span(out)), answer) ==
            CallStatus::ok);
    CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
    CHECK(answer.trades == static_cast<std::int64_t>(floats * sizeof(double)));
    CHECK(std::memcmp(in.data(), out.data(), floats * sizeof(double)) == 0);
  }
  // Bigger than half the region: refused before anything is sent.
  std::vector<std::byte> huge(client->bulk().size() / 2 + 1), back(huge.size());
  ResponseSlot answer{};
  CHECK(client->echo_bulk(huge, back, answer) == CallStatus::too_large);
  // Ranges the engine must refuse: past the end, overlapping, unused words set.
  const std::uint64_t size = client->bulk().size();
  for (const BulkEcho bad : {BulkEcho{.in_offset = size - 8, .out_offset = 0, .bytes = 16, .unused = {}},
                             BulkEcho{.in_offset = 0, .out_offset = ~std::uint64_t{0} - 4, .bytes = 8, .unused = {}},
                             BulkEcho{.in_offset = 0, .out_offset = 8, .bytes = 16, .unused = {}},
                             BulkEcho{.in_offset = 0, .out_offset = 64, .bytes = 8, .unused = {0, 1, 0}}}) {
    REQUIRE(client->call(request(Opcode::echo_bulk, bad.as_params()), answer) == CallStatus::ok);
    CHECK(answer.status == static_cast<std::uint16_t>(Status::bulk_out_of_range));
  }
  // The engine still serves the lane.
  REQUIRE(client->call(request(Opcode::echo, combo_from_length(9)), answer) == CallStatus::ok);
  CHECK(answer.echo() == combo_from_length(9));
}

TEST_CASE("an engine started with --bulk-bytes 0 refuses ECHO_BULK and serves everything else") {
  EngineProcess engine(unique_name("nobulk"), {"--wait", "backoff", "--bars", "500", "--bulk-bytes", "0"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  CHECK(client->bulk().empty());
  ResponseSlot answer{};
  const BulkEcho empty{.in_offset = 0, .out_offset = 0, .bytes = 0, .unused = {}};
  REQUIRE(client->call(request(Opcode::echo_bulk, empty.as_params()), answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));  // zero bytes fit anywhere
  const BulkEcho one{.in_offset = 0, .out_offset = 8, .bytes = 8, .unused = {}};
  REQUIRE(client->call(request(Opcode::echo_bulk, one.as_params()), answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::bulk_out_of_range));
  std::vector<std::byte> in(8), out(8);
  CHECK(client->echo_bulk(in, out, answer) == CallStatus::too_large);
  REQUIRE(client->call(request(Opcode::backtest, combo_from_length(6)), answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
}

TEST_CASE("bad frames get an error status and a counter, and the engine keeps serving") {
  EngineProcess engine(unique_name("bad"), {"--wait", "backoff", "--bars", "500"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  ResponseSlot answer{};

  RequestSlot unknown = request(Opcode::backtest, combo_from_length(6));
  unknown.opcode = 77;
  REQUIRE(client->call(unknown, answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::unknown_opcode));

  RequestSlot flagged = request(Opcode::backtest, combo_from_length(6));
  flagged.flags = 0x100;  // the high byte names strategy 1, which this engine does not serve
  REQUIRE(client->call(flagged, answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::no_such_strategy));
  RequestSlot flagged_echo = request(Opcode::echo, combo_from_length(6));
  flagged_echo.flags = 0x100;  // no flag is defined for an ECHO
  REQUIRE(client->call(flagged_echo, answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::reserved_bits_set));

  // A range past the lane's bulk region: refused, nothing copied.
  const BulkEcho beyond{.in_offset = 0, .out_offset = 8, .bytes = kDefaultBulkBytes, .unused = {}};
  REQUIRE(client->call(request(Opcode::echo_bulk, beyond.as_params()), answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::bulk_out_of_range));

  REQUIRE(client->call(request(Opcode::backtest, Combo{3, 501, 2, 1, 2, 3}), answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::window_out_of_range));
  REQUIRE(client->call(request(Opcode::backtest, Combo{0, 6, 2, 1, 2, 3}), answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::window_out_of_range));

  REQUIRE(client->call(request(Opcode::backtest, combo_from_length(6)), answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  // The engine counts a request just after it answers it: look (bounded) until the counts are in.
  const DataHeader& header = client->segment().header();
  const LaneStatus& lane = client->segment().lane_status(client->lane());
  CHECK(eventually([&] { return relaxed(header.requests) == 7 && relaxed(lane.requests) == 7; }));
  CHECK(relaxed(header.bad_frames) == 6);
  CHECK(relaxed(lane.bad_frames) == 6);
}

TEST_CASE("an engine preloading several series answers a BACKTEST on the one its frame names, each equal to the "
          "in-process kernel; an index it does not hold gets no_such_series") {
  GbmParams first;
  first.bars = 3000;
  first.seed = 5;
  GbmParams second = first;
  second.bars = 7000;
  second.seed = 6;
  const std::vector<double> a = *generate_gbm(first);
  const std::vector<double> b = *generate_gbm(second);
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string path_a = dir + "/" + unique_name("ES") + ".f64";
  const std::string path_b = dir + "/" + unique_name("NQ") + ".f64";
  for (const auto& [path, close] : {std::pair{path_a, &a}, std::pair{path_b, &b}}) {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(close->data()), static_cast<std::streamsize>(close->size() * sizeof(double)));
  }
  EngineProcess engine(unique_name("multi"), {"--wait", "backoff", "--data", path_a, "--data", path_b});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  REQUIRE(client->segment().series_count() == 2);
  ResponseSlot answer{};
  KernelWorkspace workspace(hma_workspace_bytes(b.size()));
  for (const std::int64_t length : {6, 31, 100}) {
    for (std::uint32_t series = 0; series < 2; ++series) {
      RequestSlot backtest = request(Opcode::backtest, combo_from_length(length));
      backtest.flags = series_flags(series);
      REQUIRE(client->call(backtest, answer) == CallStatus::ok);
      REQUIRE(answer.status == static_cast<std::uint16_t>(Status::ok));
      BacktestResult expected;
      REQUIRE(run_backtest(series == 0 ? a : b, combo_from_length(length), kDefaultFee, workspace, expected) ==
              KernelStatus::ok);
      CHECK(answer.trades == expected.trades);
      CHECK(std::memcmp(&answer.pnl, &expected.pnl, sizeof(double)) == 0);
    }
  }
  // Windows are checked against the series named: 5,000 fits the second series only.
  RequestSlot wide = request(Opcode::backtest, Combo{3, 5000, 2, 1, 2, 3});
  REQUIRE(client->call(wide, answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::window_out_of_range));
  wide.flags = series_flags(1);
  REQUIRE(client->call(wide, answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  RequestSlot missing = request(Opcode::backtest, combo_from_length(6));
  missing.flags = series_flags(2);
  REQUIRE(client->call(missing, answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::no_such_series));
  RequestSlot echo_on_series = request(Opcode::echo, Combo{1, 2, 3, 4, 5, 6});
  echo_on_series.flags = series_flags(1);
  REQUIRE(client->call(echo_on_series, answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::reserved_bits_set));
  std::filesystem::remove(path_a);
  std::filesystem::remove(path_b);
}

TEST_CASE("pipelined requests come back in order with their seq") {
  EngineProcess engine(unique_name("pipe"), {"--wait", "backoff", "--bars", "2000", "--ring-capacity", "16"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  std::uint64_t last_seq = 0;
  std::uint64_t next_answer = 1;
  for (int i = 0; i < 1000; ++i) {
    Combo payload{i, i + 1, i + 2, i + 3, i + 4, i + 5};
    REQUIRE(client->submit(request(Opcode::echo, payload), last_seq) == CallStatus::ok);
    if (client->outstanding() == client->capacity()) {
      ResponseSlot answer{};
      REQUIRE(client->wait_response(answer) == CallStatus::ok);
      CHECK(answer.seq == next_answer);
      CHECK(answer.echo().h == static_cast<std::int64_t>(next_answer - 1));
      ++next_answer;
    }
  }
  while (client->outstanding() > 0) {
    ResponseSlot answer{};
    REQUIRE(client->wait_response(answer) == CallStatus::ok);
    CHECK(answer.seq == next_answer++);
  }
  CHECK(next_answer == last_seq + 1);
}

TEST_CASE("reclaims the lane of a killed client and counts it reclaimed") {
  EngineProcess engine(unique_name("reclaim"), {"--wait", "backoff", "--bars", "500", "--lanes", "2"});
  REQUIRE(engine.up());
  auto watch = observe(engine.name());
  REQUIRE(watch.has_value());
  const DataHeader& header = watch->header();
  for (int round = 0; round < 5; ++round) {
    CAPTURE(round);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      auto doomed = ShmClient::connect(engine.name(), backoff_client());
      if (!doomed) _exit(2);
      std::uint64_t seq = 0;
      (void)doomed->submit(request(Opcode::echo, Combo{1, 2, 3, 4, 5, 6}), seq);
      raise(SIGKILL);  // dies holding the lane, with a request in flight
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));
    REQUIRE(WTERMSIG(status) == SIGKILL);
    REQUIRE(eventually([&] { return relaxed(header.lanes_reclaimed) == static_cast<std::uint64_t>(round + 1); }));
    // With two lanes, dead clients in a row must not exhaust them: a newcomer gets a lane and its
    // own answers, then leaves on purpose.
    auto next = ShmClient::connect(engine.name(), backoff_client());
    REQUIRE_MESSAGE(next.has_value(), (next ? "" : next.error().message));
    ResponseSlot answer{};
    REQUIRE(next->call(request(Opcode::echo, Combo{round, 7, 7, 7, 7, 7}), answer) == CallStatus::ok);
    CHECK(answer.echo() == Combo{round, 7, 7, 7, 7, 7});
  }
  CHECK(eventually([&] { return relaxed(header.lanes_released) == 5; }));
  CHECK(relaxed(header.lanes_reclaimed) == 5);  // the deaths, and only they
  auto one = ShmClient::connect(engine.name(), backoff_client());
  auto two = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(one.has_value());
  REQUIRE(two.has_value());
  ResponseSlot answer{};
  CHECK(one->call(request(Opcode::echo, Combo{7, 7, 7, 7, 7, 7}), answer) == CallStatus::ok);
  CHECK(answer.echo() == Combo{7, 7, 7, 7, 7, 7});  // not the dead client's stale answer
  CHECK(two->call(request(Opcode::echo, Combo{8, 8, 8, 8, 8, 8}), answer) == CallStatus::ok);
  CHECK(answer.echo() == Combo{8, 8, 8, 8, 8, 8});
}

TEST_CASE("a client beyond the last lane is refused with busy") {
  EngineProcess engine(unique_name("busy"), {"--wait", "backoff", "--bars", "500", "--lanes", "1"});
  REQUIRE(engine.up());
  auto first = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(first.has_value());
  auto second = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(!second.has_value());
  CHECK(second.error().code == ErrorCode::busy);
  CHECK(second.error().message.find("no free lane") != std::string::npos);
}

TEST_CASE("a client waiting on a killed engine gets engine_gone within three heartbeats") {
  EngineProcess engine(unique_name("gone"), {"--wait", "backoff", "--bars", "500", "--heartbeat-ms", "10"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  ResponseSlot answer{};
  REQUIRE(client->call(request(Opcode::echo, Combo{}), answer) == CallStatus::ok);
  kill(engine.pid(), SIGSTOP);  // freeze it so the request below stays unanswered
  REQUIRE(eventually([&] { return process_state(engine.pid()) == 'T'; }));
  std::uint64_t seq = 0;
  REQUIRE(client->submit(request(Opcode::echo, Combo{}), seq) == CallStatus::ok);
  kill(engine.pid(), SIGKILL);
  const auto start = std::chrono::steady_clock::now();
  const CallStatus status = client->wait_response(answer);
  const auto waited = std::chrono::steady_clock::now() - start;
  CHECK(status == CallStatus::engine_gone);
  // Three 10 ms heartbeats, plus slack for a client thread waiting for a cpu, plus the time a
  // sanitizer runtime takes to tear a SIGKILLed engine down (the allowances of test_faults.cpp).
#if defined(__SANITIZE_THREAD__)
  constexpr int kTeardownMs = 2000;
#elif defined(__SANITIZE_ADDRESS__)
  constexpr int kTeardownMs = 40;
#else
  constexpr int kTeardownMs = 0;
#endif
  CHECK(waited < std::chrono::milliseconds(30 + 20 + kTeardownMs));
  CHECK(client->describe(status).find("is gone") != std::string::npos);
}

TEST_CASE("each wait mode serves call() through the exchange line and pipelined frames through the rings") {
  for (const WaitMode mode : {WaitMode::spin, WaitMode::backoff, WaitMode::block}) {
    CAPTURE(to_string(mode));
    EngineProcess engine(unique_name(std::string(to_string(mode)).c_str()),
                         {"--wait", std::string(to_string(mode)), "--bars", "500", "--ring-capacity", "8"});
    REQUIRE(engine.up());
    ShmClientOptions options;
    options.wait = mode;  // the client waits as the engine does
    options.timeout = std::chrono::seconds(10);
    auto client = ShmClient::connect(engine.name(), options);
    REQUIRE_MESSAGE(client.has_value(), (client ? "" : client.error().message));
    CHECK(client->wait_mode() == mode);
    CHECK(client->segment().header().wait_mode == static_cast<std::uint32_t>(mode));
    for (int i = 0; i < 200; ++i) {
      ResponseSlot answer{};
      REQUIRE(client->call(request(Opcode::echo, Combo{i, 0, 0, 0, 0, 0}), answer) == CallStatus::ok);
      REQUIRE(answer.echo().h == i);
    }
    // The rings, several frames in flight, with pauses so that a backoff or block engine goes
    // idle (and, in block mode, to sleep) between bursts and must be woken by the next one.
    std::uint64_t next_answer = 1;
    for (int burst = 0; burst < 20; ++burst) {
      for (int k = 0; k < 5; ++k) {
        std::uint64_t seq = 0;
        REQUIRE(client->submit(request(Opcode::echo, Combo{burst, k, 0, 0, 0, 0}), seq) == CallStatus::ok);
      }
      for (int k = 0; k < 5; ++k) {
        ResponseSlot answer{};
        REQUIRE(client->wait_response(answer) == CallStatus::ok);
        CHECK(answer.seq == next_answer++);
        CHECK(answer.echo() == Combo{burst, k, 0, 0, 0, 0});
      }
      if (burst % 5 == 4) std::this_thread::sleep_for(std::chrono::milliseconds(60));  // > the idle sleep bound
    }
    auto answers = run_all(*client, std::vector<Combo>(40, combo_from_length(6)), Opcode::backtest);
    REQUIRE_MESSAGE(answers.has_value(), (answers ? "" : answers.error().message));
    for (const ResponseSlot& answer : *answers) CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
  }
}

TEST_CASE("a block-mode client is refused by a spin-mode engine") {
  EngineProcess engine(unique_name("mismatch"), {"--wait", "spin", "--bars", "500"});
  REQUIRE(engine.up());
  ShmClientOptions options;
  options.wait = WaitMode::block;
  auto client = ShmClient::connect(engine.name(), options);
  REQUIRE(!client.has_value());
  CHECK(client.error().code == ErrorCode::invalid_argument);
}

TEST_CASE("SIGTERM stops the engine cleanly and removes the segment") {
  EngineProcess engine(unique_name("term"), {"--wait", "backoff", "--bars", "500"});
  REQUIRE(engine.up());
  const int status = engine.stop(SIGTERM);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(!observe(engine.name()).has_value());
  CHECK(::access((handoff_socket_path(default_socket_dir(), engine.name()).c_str()), F_OK) != 0);  // the socket, its only file
}

TEST_CASE("a client that closes its lane is counted released, not reclaimed") {
  EngineProcess engine(unique_name("release"), {"--wait", "backoff", "--bars", "500"});
  REQUIRE(engine.up());
  {
    auto client = ShmClient::connect(engine.name(), backoff_client());
    REQUIRE(client.has_value());
    ResponseSlot answer{};
    REQUIRE(client->call(request(Opcode::echo, Combo{}), answer) == CallStatus::ok);
  }
  REQUIRE(eventually([&] {
    auto probe = observe(engine.name());
    return probe && relaxed(probe->header().lanes_released) == 1;
  }));
  auto probe = observe(engine.name());
  REQUIRE(probe.has_value());
  CHECK(relaxed(probe->header().lanes_reclaimed) == 0);
}

TEST_CASE("call() through the exchange line and the rings give the in-process results") {
  EngineProcess engine(unique_name("both"), {"--wait", "backoff"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  auto series = load_series_source(SeriesSource{});
  REQUIRE(series.has_value());
  std::vector<Combo> combos;
  for (const std::int64_t length : grid_lengths(6, 200, 12)) combos.push_back(combo_from_length(length));
  auto expected = run_sweep(builtin(), series->close, combos, kDefaultFee, 1);
  REQUIRE(expected.has_value());
  auto piped = run_all(*client, combos, Opcode::backtest);
  REQUIRE(piped.has_value());
  for (std::size_t i = 0; i < combos.size(); ++i) {
    ResponseSlot answer{};
    REQUIRE(client->call(request(Opcode::backtest, combos[i]), answer) == CallStatus::ok);
    CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
    CHECK(answer.pnl == (*expected)[i].pnl);  // bit for bit
    CHECK(answer.trades == (*expected)[i].trades);
    CHECK((*piped)[i].pnl == (*expected)[i].pnl);
    CHECK((*piped)[i].trades == (*expected)[i].trades);
  }
}

TEST_CASE("a BACKTEST over the engine's bound per frame is answered too_costly and the engine keeps serving") {
  EngineProcess engine(unique_name("costly"),
                       {"--wait", "backoff", "--bars", "200000", "--max-frame-cost", "50000000"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  const std::uint64_t bound = client->segment().header().max_frame_cost;
  REQUIRE(bound > 0);
  const Combo huge{50'000, 100'000, 300, 10'000, 20'000, 50'000};
  REQUIRE(backtest_cost(huge, 200'000) > bound);
  ResponseSlot answer{};
  const auto start = std::chrono::steady_clock::now();
  REQUIRE(client->call(request(Opcode::backtest, huge), answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::too_costly));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(1));  // refused, not computed
  CHECK(bound == 50'000'000);  // as given: a number of work units, the same on every host
  REQUIRE(backtest_cost(combo_from_length(6), 200'000) < bound);
  REQUIRE(client->call(request(Opcode::backtest, combo_from_length(6)), answer) == CallStatus::ok);
  CHECK(answer.status == static_cast<std::uint16_t>(Status::ok));
}

TEST_CASE("call() after a timeout never returns the previous request's answer") {
  // No bound per frame, so one slow BACKTEST keeps the engine busy past the client's timeout.
  EngineProcess engine(unique_name("late"), {"--wait", "backoff", "--bars", "200000", "--max-frame-cost", "0"});
  REQUIRE(engine.up());
  ShmClientOptions options = backoff_client();
  options.timeout = std::chrono::milliseconds(20);
  // The 20 ms bound the attach too, which a keeper waiting for a cpu on a loaded host can miss.
  auto client = ShmClient::connect(engine.name(), options);
  for (int attempt = 0; attempt < 100 && !client; ++attempt) client = ShmClient::connect(engine.name(), options);
  REQUIRE_MESSAGE(client.has_value(), (client ? "" : client.error().message));
  const LaneStatus& lane = client->segment().lane_status(client->lane());
  ResponseSlot answer{};
  answer.seq = 0xfeed;
  const Combo slow{2'000, 4'000, 20, 300, 1'000, 2'000};  // hundreds of ms
  REQUIRE(client->call(request(Opcode::backtest, slow), answer) == CallStatus::timeout);
  CHECK(answer.seq == 0xfeed);  // a timed-out call leaves the caller's answer alone
  // The next call waits for the late answer (within its own timeout, so it may report timeout a
  // few times first, or engine_hung when the keeper's heartbeat lags on a loaded host) and drops
  // it; only then is its own request published.
  const Combo echoed{11, 22, 33, 44, 55, 66};
  CallStatus status = CallStatus::timeout;
  int timeouts = 0;
  for (int attempt = 0; attempt < 500 && (status == CallStatus::timeout || status == CallStatus::engine_hung);
       ++attempt) {
    status = client->call(request(Opcode::echo, echoed), answer);
    timeouts += status != CallStatus::ok ? 1 : 0;
  }
  REQUIRE(status == CallStatus::ok);
  CHECK(answer.seq == 2);  // the second call's own seq: the BACKTEST was call 1
  CHECK(answer.opcode == static_cast<std::uint16_t>(Opcode::echo));
  CHECK(answer.echo() == echoed);  // this call's answer, not the BACKTEST's
  // The engine did answer the BACKTEST (late): two requests served on this lane, of which the
  // client returned one. The other was dropped.
  // (The engine counts a request just after it answers it: look until the count is in.)
  CHECK(eventually([&] { return relaxed(lane.requests) == 2; }));
  MESSAGE("the late BACKTEST answer was dropped after " << timeouts << " more 20 ms timeouts");
  REQUIRE(client->call(request(Opcode::echo, Combo{1, 1, 1, 1, 1, 1}), answer) == CallStatus::ok);
  CHECK(answer.seq == 3);
  CHECK(answer.echo() == Combo{1, 1, 1, 1, 1, 1});
}

TEST_CASE("a block-mode client waiting for ring space is woken when the busy engine frees a slot") {
  // Two slots, slow BACKTESTs, a heartbeat (and so a client wait slice) of 10 s: a client whose
  // wake-up were lost would look again only after 10 s. No workers, so that the engine holds a
  // request slot until the frame in it is answered. A sanitizer runs the kernel some ten times
  // slower: a shorter series keeps the slow frame well under the slice there too.
#if defined(__SANITIZE_THREAD__) || defined(__SANITIZE_ADDRESS__)
  const char* bars = "20000";
#else
  const char* bars = "100000";
#endif
  EngineProcess engine(unique_name("space"), {"--wait", "block", "--bars", bars, "--ring-capacity", "2",
                                              "--workers", "0", "--max-frame-cost", "0", "--heartbeat-ms", "10000"});
  REQUIRE(engine.up());
  ShmClientOptions options;
  options.wait = WaitMode::block;
  options.timeout = std::chrono::seconds(20);
  auto client = ShmClient::connect(engine.name(), options);
  REQUIRE(client.has_value());
  REQUIRE(client->capacity() == 2);
  const Combo slow{4'000, 8'000, 100, 1'000, 2'000, 4'000};
  // How long one slow BACKTEST holds the engine here.
  ResponseSlot answer{};
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(client->call(request(Opcode::backtest, slow), answer) == CallStatus::ok);
  REQUIRE(answer.status == static_cast<std::uint16_t>(Status::ok));
  const double slow_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  const double pnl = answer.pnl;
  MESSAGE("one slow BACKTEST: " << slow_ms << " ms");
  REQUIRE(slow_ms < 5000);  // the check below needs it well under the 10 s wait slice

  // Fill the ring while the engine works on the first frame: it releases a request slot only once
  // that frame is answered.
  std::uint64_t seq = 0;
  REQUIRE(client->submit(request(Opcode::backtest, slow), seq) == CallStatus::ok);
  REQUIRE(client->submit(request(Opcode::backtest, slow), seq) == CallStatus::ok);
  const RingControl& requests = *client->segment().lane().view().request_ring;
  // acquire: pairs with the engine's release of `consumed`.
  REQUIRE(requests.consumed.load(std::memory_order_acquire) == 0);  // full: the third submit must wait
  t0 = std::chrono::steady_clock::now();
  REQUIRE(client->submit(request(Opcode::echo, Combo{3, 3, 3, 3, 3, 3}), seq) == CallStatus::ok);
  const double waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("the third submit waited " << waited_ms << " ms for a slot");
  CHECK(waited_ms < slow_ms + 3000);  // woken when the slot freed, not at the end of its 10 s slice
  // It got the slot because the engine answered the first frame: that answer is already there.
  REQUIRE(client->poll(answer) == CallStatus::ok);
  CHECK(answer.seq == seq - 2);
  CHECK(answer.pnl == pnl);
  REQUIRE(client->wait_response(answer) == CallStatus::ok);
  CHECK(answer.seq == seq - 1);
  CHECK(answer.pnl == pnl);
  REQUIRE(client->wait_response(answer) == CallStatus::ok);
  CHECK(answer.seq == seq);
  CHECK(answer.echo() == Combo{3, 3, 3, 3, 3, 3});

  // And many more frames than the ring holds, each submit waiting for the engine's next answer.
  std::uint64_t answered = 0;
  for (int i = 0; i < 200; ++i) {
    REQUIRE(client->submit(request(Opcode::backtest, combo_from_length(20)), seq) == CallStatus::ok);
    if (client->outstanding() == client->capacity()) {
      REQUIRE(client->wait_response(answer) == CallStatus::ok);
      ++answered;
    }
  }
  while (client->outstanding() > 0) {
    REQUIRE(client->wait_response(answer) == CallStatus::ok);
    ++answered;
  }
  CHECK(answered == 200);
}

TEST_CASE("an observer gets the data object alone and holds no lane") {
  EngineProcess engine(unique_name("observer"), {"--wait", "backoff", "--bars", "500", "--lanes", "1"});
  REQUIRE(engine.up());
  std::vector<Attachment> observers;
  for (int i = 0; i < 3; ++i) {
    auto watch = observe(engine.name());
    REQUIRE(watch.has_value());
    CHECK_FALSE(watch->has_lane());
    observers.push_back(std::move(*watch));
  }
  // The engine's own reply: one descriptor, no lane.
  {
    UniqueFd raw(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
    REQUIRE(raw);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    const std::string path = handoff_socket_path(default_socket_dir(), engine.name());
    std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
    REQUIRE(::connect(raw.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
    const HandoffRequest ask{kHandoffMagic, kHandoffVersion, static_cast<std::uint16_t>(HandoffRole::observer),
                             kLayoutVersion, 0};
    REQUIRE(send_handoff(raw.get(), std::as_bytes(std::span(&ask, 1)), {}).has_value());
    HandoffReply reply{};
    auto received = receive_handoff(raw.get(), std::as_writable_bytes(std::span(&reply, 1)),
                                    std::chrono::steady_clock::now() + std::chrono::seconds(2));
    REQUIRE(received.has_value());
    CHECK(reply.status == static_cast<std::uint16_t>(HandoffStatus::ok));
    CHECK(received->fds.size() == 1);
    CHECK(reply.lane_bytes == 0);
  }
  // The one lane is still free for a client, and observers coming and going count as nothing.
  CHECK(observers.front().lane_status(0).state.load() == static_cast<std::uint32_t>(LaneState::free));
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE_MESSAGE(client.has_value(), (client ? "" : client.error().message));
  ResponseSlot answer{};
  REQUIRE(client->call(request(Opcode::echo, Combo{5, 5, 5, 5, 5, 5}), answer) == CallStatus::ok);
  observers.clear();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto watch = observe(engine.name());
  REQUIRE(watch.has_value());
  CHECK(relaxed(watch->header().lanes_released) == 0);
  CHECK(relaxed(watch->header().lanes_reclaimed) == 0);
  CHECK(watch->lane_status(0).owner_pid == ::getpid());
}

TEST_CASE("status --json of a live engine lists each lane's owner, counters and service histogram") {
  EngineProcess engine(unique_name("status"), {"--wait", "backoff", "--bars", "500"});
  REQUIRE(engine.up());
  auto client = ShmClient::connect(engine.name(), backoff_client());
  REQUIRE(client.has_value());
  ResponseSlot answer{};
  for (int i = 0; i < 10; ++i) REQUIRE(client->call(request(Opcode::backtest, combo_from_length(6)), answer) == CallStatus::ok);
  const std::string command = std::string(IPCFLOOR_BINARY) + " status --json --name " + engine.name();
  std::FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string text;
  char buffer[4096];
  for (std::size_t got = 0; (got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) text.append(buffer, got);
  REQUIRE(::pclose(pipe) == 0);
  CHECK(text.find("\"schema\": 3") != std::string::npos);
  CHECK(text.find(fmt::format("\"owner_pid\": {}", ::getpid())) != std::string::npos);
  CHECK(text.find("\"service_ns\"") != std::string::npos);
  CHECK(text.find("\"requests\": 10") != std::string::npos);
}
