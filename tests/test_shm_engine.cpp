// The engine as a separate process, driven through the shared-memory ring by ShmClient.

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "clients/shm_client.hpp"
#include "kernel/kernel.hpp"
#include "kernel/series_source.hpp"
#include "bench/engine_child.hpp"
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
  auto answers = client->run_all(combos, Opcode::backtest);
  REQUIRE_MESSAGE(answers.has_value(), (answers ? "" : answers.error().message));

  auto series = load_series_source(SeriesSource{});
  REQUIRE(series.has_value());
  const auto expected = run_sweep(series->close, combos, kDefaultFee, 0);
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
  flagged.flags = 1;
  REQUIRE(client->call(flagged, answer) == CallStatus::ok);
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
  const SegmentHeader& header = client->segment().header();
  CHECK(header.bad_frames.load(std::memory_order_relaxed) == 5);  // relaxed: engine answered all of them
  CHECK(header.requests.load(std::memory_order_relaxed) == 6);    // relaxed: as above
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

TEST_CASE("reclaims the lane of a killed client") {
  EngineProcess engine(unique_name("reclaim"), {"--wait", "backoff", "--bars", "500", "--lanes", "2"});
  REQUIRE(engine.up());
  for (int round = 0; round < 5; ++round) {
    const pid_t child = fork();
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
    // With two lanes, five dead clients in a row must not exhaust them.
    auto a = ShmClient::connect(engine.name(), backoff_client());
    REQUIRE(eventually([&] {
      auto probe = Segment::attach(engine.name());
      return probe && probe->header().lanes_reclaimed.load(std::memory_order_relaxed) ==  // relaxed: polled
                          static_cast<std::uint64_t>(round + 1);
    }));
  }
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
  CHECK(waited < std::chrono::milliseconds(30 + 20));  // three 10 ms heartbeats, plus slack
  CHECK(client->describe(status).find("is gone") != std::string::npos);
}

TEST_CASE("each wait mode serves a round trip") {
  for (const char* mode : {"spin", "backoff", "block"}) {
    CAPTURE(mode);
    EngineProcess engine(unique_name(mode), {"--wait", mode, "--bars", "500"});
    REQUIRE(engine.up());
    ShmClientOptions options;
    options.wait = std::string_view(mode) == "block" ? WaitMode::block : WaitMode::backoff;
    auto client = ShmClient::connect(engine.name(), options);
    REQUIRE_MESSAGE(client.has_value(), (client ? "" : client.error().message));
    for (int i = 0; i < 200; ++i) {
      ResponseSlot answer{};
      REQUIRE(client->call(request(Opcode::echo, Combo{i, 0, 0, 0, 0, 0}), answer) == CallStatus::ok);
      REQUIRE(answer.echo().h == i);
    }
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
  auto gone = Segment::attach(engine.name());
  CHECK(!gone.has_value());
}
