// `serve --metrics`: no peer of the metrics port can kill, starve or blind the engine. The request
// head parser on its own, then real engines with hostile peers: a body that would not end, idle
// connections by the hundred under a small RLIMIT_NOFILE, heads that trickle in.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "clients/shm_client.hpp"
#include "common/unique_fd.hpp"
#include "socket/http_request_head.hpp"
#include "tests/cli_harness.hpp"

namespace ipcfloor {
namespace {

using cli_test::contains;
using cli_test::Served;
using cli_test::Spawn;
using cli_test::unique_name;

// The port of the ready line's metrics URL ("http://127.0.0.1:PORT/metrics").
int metrics_port(const Served& served) {
  const std::string url = served.ready_fields()["metrics"].get<std::string>();
  const auto colon = url.rfind(':');
  return std::stoi(url.substr(colon + 1));
}

// A TCP connection to 127.0.0.1:port, non-blocking; connecting may still be under way.
UniqueFd connect_to(int port) {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 && errno != EINPROGRESS)
    return UniqueFd();
  return fd;
}

// Sends all of `bytes` (waiting for room) before `deadline`; false when the peer shut or time ran out.
bool send_all(int fd, std::string_view bytes, std::chrono::steady_clock::time_point deadline) {
  while (!bytes.empty()) {
    const ssize_t n = ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n > 0) {
      bytes.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINPROGRESS && errno != ENOTCONN) return false;
    pollfd writable{fd, POLLOUT, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || ::poll(&writable, 1, static_cast<int>(left.count())) < 0) return false;
  }
  return true;
}

// What the peer sent until it closed, or until `deadline`.
std::string read_until_closed(int fd, std::chrono::steady_clock::time_point deadline) {
  std::string text;
  char buffer[16384];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd readable{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&readable, 1, static_cast<int>(left.count())) <= 0) return text;
    const ssize_t got = ::recv(fd, buffer, sizeof buffer, 0);
    if (got <= 0) return text;
    text.append(buffer, static_cast<std::size_t>(got));
  }
}

// One GET /metrics, answered within `limit`: the whole answer, or "" when none came.
std::string scrape(int port, std::chrono::milliseconds limit = std::chrono::milliseconds(2000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  UniqueFd fd = connect_to(port);
  if (!fd || !send_all(fd.get(), "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", deadline)) return {};
  return read_until_closed(fd.get(), deadline);
}

// The high-water mark of a process's resident memory, in KiB (VmHWM).
long peak_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

Spawn metrics_engine(const std::string& name) {
  return Spawn{.args = {"--name", name, "--bars", "1000", "--wait", "backoff", "--hugepages", "off", "--quiet",
                        "--lanes", "2", "--metrics", "127.0.0.1:0"}};
}

}  // namespace

TEST_CASE("the metrics request head: bounded, and only GET or HEAD without a body passes") {
  CHECK(find_head_end("GET /metrics HTTP/1.1\r\nHost: x\r\n").state == HeadEnd::State::incomplete);
  const HeadEnd end = find_head_end("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nleft over");
  REQUIRE(end.state == HeadEnd::State::complete);
  CHECK(end.length == 34);
  CHECK(find_head_end("GET / HTTP/1.0\n\n").length == 16);
  CHECK(find_head_end(std::string(kMaxRequestHead, 'a')).state == HeadEnd::State::too_large);
  CHECK(find_head_end(std::string(kMaxRequestHead - 1, 'a')).state == HeadEnd::State::incomplete);

  const HeadVerdict get = judge_request_head("GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n");
  CHECK(get.status == 0);
  CHECK(get.target == "/metrics");
  CHECK_FALSE(get.head_only);
  CHECK(judge_request_head("HEAD /metrics HTTP/1.0\r\n\r\n").head_only);
  CHECK(judge_request_head("GET /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").status == 0);
  for (const auto& [head, status] : std::vector<std::pair<std::string, int>>{
           {"POST /metrics HTTP/1.1\r\nContent-Length: 8589934592\r\n\r\n", 405},
           {"GET /metrics HTTP/1.1\r\nContent-Length: 8589934592\r\n\r\n", 413},
           {"GET /metrics HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413},
           {"GET /metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 413},
           {"GET /metrics HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400},
           {"GET /metrics HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
           {"GET /metrics HTTP/1.1\r\n folded\r\n\r\n", 400},
           {"GET /metrics HTTP/1.1\r\nNo colon\r\n\r\n", 400},
           {"GET /metrics HTTP/1.1\r\nHost : x\r\n\r\n", 400},
           {"GET /metrics HTTP/1.1\r\nX: a\x01b\r\n\r\n", 400},
           {"GET /metrics\r\n\r\n", 400},
           {"GET  /metrics HTTP/1.1\r\n\r\n", 400},
           {"\r\n\r\n", 400},
           {"GET /metrics HTTP/2.0\r\n\r\n", 505},
           {"GET /metrics HTTP/1.1\nHost: x\n\n", 400},
           {"GET /metrics HTTP/1.1x\r\n\r\n", 505},
       }) {
    CAPTURE(head);
    const HeadVerdict verdict = judge_request_head(head);
    CHECK(verdict.status == status);
    CHECK_FALSE(verdict.reason.empty());
  }
}

TEST_CASE("a POST with an 8 GiB body to the metrics port is refused from its head: the engine reads none of it and "
          "keeps serving") {
  Served engine(metrics_engine(unique_name("metrics-body")));
  REQUIRE_MESSAGE(engine.ready(), engine.err());
  const int port = metrics_port(engine);
  const long before = peak_kib(engine.pid());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  UniqueFd fd = connect_to(port);
  REQUIRE(fd);
  REQUIRE(send_all(fd.get(), "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 8589934592\r\n\r\n", deadline));
  // 64 MiB of the body, for as long as the engine takes it: before, every byte was kept.
  const std::string chunk(1 << 20, 'x');
  std::size_t sent = 0;
  while (sent < (std::size_t{64} << 20) && send_all(fd.get(), chunk, deadline)) sent += chunk.size();
  const std::string answer = read_until_closed(fd.get(), deadline);
  fd.reset();
  const long grown = peak_kib(engine.pid()) - before;
  MESSAGE("sent " << sent / 1048576 << " MiB of the body; the engine's peak RSS grew by " << grown << " KiB; answer: "
                  << answer.substr(0, answer.find('\r')));
  CHECK(grown < 16 * 1024);
  CHECK(sent < (std::size_t{64} << 20));  // the connection ended long before the body did
  if (!answer.empty()) CHECK(answer.rfind("HTTP/1.1 405", 0) == 0);
  CHECK(contains(scrape(port), "ipcfloor_up"));
}

TEST_CASE("hundreds of idle connections to the metrics port cannot take the descriptors that clients attach with") {
  const std::string name = unique_name("metrics-idle");
  Spawn spawn = metrics_engine(name);
  spawn.open_files = 256;
  Served engine(spawn);
  REQUIRE_MESSAGE(engine.ready(), engine.err());
  const int port = metrics_port(engine);
  std::vector<UniqueFd> idle;
  for (int i = 0; i < 400; ++i) {
    idle.push_back(connect_to(port));
    REQUIRE(idle.back());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the engine accepts what it will
  ShmClientOptions options;
  options.timeout = std::chrono::seconds(2);
  options.wait = WaitMode::backoff;
  auto client = ShmClient::connect(name, options);
  REQUIRE_MESSAGE(client.has_value(), (client ? std::string() : client.error().message));
  const std::int64_t payload[6] = {1, 2, 3, 4, 5, 6};
  CHECK(client->call(Opcode::echo, 0, payload_of(payload)) == CallStatus::ok);
  CHECK(contains(scrape(port), "ipcfloor_up 1"));
  CHECK_FALSE(contains(engine.err(), "out of file descriptors"));
}

TEST_CASE("connections that trickle a head byte by byte hold no scrape back, and are closed 2 s after they connect") {
  Served engine(metrics_engine(unique_name("metrics-slow")));
  REQUIRE_MESSAGE(engine.ready(), engine.err());
  const int port = metrics_port(engine);
  std::vector<UniqueFd> slow;
  for (int i = 0; i < 4; ++i) slow.push_back(connect_to(port));
  const std::string head = "GET /metrics HTTP/1.1\r\nHost: x\r\nUser-Agent: drip\r\n\r\n";
  const auto started = std::chrono::steady_clock::now();
  int answered = 0;
  for (std::size_t byte = 0; byte < 6; ++byte) {
    for (UniqueFd& fd : slow) (void)::send(fd.get(), head.data() + byte, 1, MSG_NOSIGNAL);
    const auto asked = std::chrono::steady_clock::now();
    if (contains(scrape(port, std::chrono::milliseconds(1000)), "ipcfloor_up 1")) ++answered;
    std::this_thread::sleep_until(asked + std::chrono::milliseconds(300));
  }
  CHECK(answered == 6);
  // Past the deadline for their head, the trickling connections are answered 408 and closed.
  const std::string late = read_until_closed(slow[0].get(), started + std::chrono::seconds(4));
  CHECK_MESSAGE(late.rfind("HTTP/1.1 408", 0) == 0, late);
}

TEST_CASE("the systemd unit raises the engine's descriptor limit above systemd's default of 1,024") {
  std::ifstream unit(std::string(IPCFLOOR_SOURCE_DIR) + "/app/systemd/ipcfloor@.service.in");
  const std::string text((std::istreambuf_iterator<char>(unit)), std::istreambuf_iterator<char>());
  const auto at = text.find("\nLimitNOFILE=");
  REQUIRE(at != std::string::npos);
  CHECK(std::stol(text.substr(at + 13)) >= 65536);
}

}  // namespace ipcfloor
