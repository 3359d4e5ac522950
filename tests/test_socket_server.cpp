// The socket baseline served for real: parity of the default grid through Unix and TCP sockets
// (stateless and stateful, the real `ipcfloor serve` process), and every malformed input, stall
// and intruder, each followed by proof that a good client is still served.
//
// Most bad-input cases use an in-process SocketServer (the same code the serve command runs),
// so they can read its counters; the uid, memory and CLI cases run the real binary.

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <new>
#include <latch>
#include <limits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/child_process.hpp"
#include "common/checksum.hpp"
#include "clients/socket_client.hpp"
#include "kernel/cost.hpp"
#include "kernel/kernel.hpp"
#include "data/series_source.hpp"
#include "socket/socket_protocol.hpp"
#include "socket_server/socket_request_handler.hpp"
#include "socket_server/socket_server.hpp"
#include "shm/segment.hpp"

using namespace ipcfloor;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Heap allocations made by this thread while counting is on: the proof that echo_params is
// allocation-free. Other threads (the in-process server's) are not counted.
namespace {
thread_local bool t_counting = false;
thread_local std::size_t t_allocations = 0;
}  // namespace

// Every unaligned form is replaced, so each allocation and its release meet in malloc/free
// (a sanitizer runtime's own operator new must never be paired with this delete). Out of line,
// so the compiler never sees a malloc'ed pointer reach free() through an inlined delete and
// mistakes the consistent pair for a mismatch.
namespace {
void* counted_malloc(std::size_t size) noexcept {
  if (t_counting) ++t_allocations;
  return std::malloc(size == 0 ? 1 : size);
}
}  // namespace
[[gnu::noinline]] void* operator new(std::size_t size) {
  if (void* p = counted_malloc(size)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void* operator new[](std::size_t size) {
  if (void* p = counted_malloc(size)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void* operator new(std::size_t size, const std::nothrow_t&) noexcept { return counted_malloc(size); }
[[gnu::noinline]] void* operator new[](std::size_t size, const std::nothrow_t&) noexcept { return counted_malloc(size); }
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace {

// ---- Fixtures -----------------------------------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/ipcfloor-sock-XXXXXX";
    REQUIRE(mkdtemp(pattern) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  [[nodiscard]] std::string file(const char* name) const { return path_ + "/" + name; }
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

enum class Via { unix_socket, tcp };
const char* name_of(Via via) { return via == Via::unix_socket ? "unix" : "tcp"; }

std::vector<double> series_of(std::size_t bars, std::uint64_t seed) {
  SeriesSource source;
  source.gbm.bars = bars;
  source.gbm.seed = seed;
  auto loaded = load_series_source(source);
  REQUIRE(loaded.has_value());
  return std::move(loaded->close);
}

const std::vector<double>& small_series() {
  static const std::vector<double> close = series_of(3000, 7);
  return close;
}

std::vector<Combo> default_grid() {
  std::vector<Combo> combos;
  for (const auto length : grid_lengths(6, 200, 80)) combos.push_back(combo_from_length(length));
  return combos;
}

std::uint16_t free_loopback_port() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0);
  close(fd);
  return ntohs(address.sin_port);
}

// A raw connection, for frames no well-behaved client would send.
class Raw {
 public:
  static Raw to_unix(const std::string& path) {
    Raw raw(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    REQUIRE(connect(raw.fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    return raw;
  }
  static Raw to_tcp(std::uint16_t port) { return to_tcp_from(port, nullptr); }
  // From the loopback address `source` (127.0.0.2, ...; null: the kernel's choice): a peer of
  // another address.
  static Raw to_tcp_from(std::uint16_t port, const char* source) {
    Raw raw(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (source != nullptr) {
      sockaddr_in from{};
      from.sin_family = AF_INET;
      REQUIRE(inet_pton(AF_INET, source, &from.sin_addr) == 1);
      REQUIRE(bind(raw.fd_, reinterpret_cast<sockaddr*>(&from), sizeof from) == 0);
    }
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(port);
    REQUIRE(connect(raw.fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    return raw;
  }
  Raw(Raw&& other) noexcept : fd_(std::exchange(other.fd_, -1)), pending_(std::move(other.pending_)) {}
  ~Raw() {
    if (fd_ >= 0) close(fd_);
  }
  [[nodiscard]] int fd() const { return fd_; }
  // Closes the connection from this side.
  void hang_up() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

  // Blocking send of everything; false when the server has closed.
  bool send_all(std::span<const std::byte> bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t sent = send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (sent <= 0) return false;
      done += static_cast<std::size_t>(sent);
    }
    return true;
  }

  // One reply frame (success or error) within `limit`, or nullopt (timeout or closed).
  std::optional<std::vector<std::byte>> read_frame(std::chrono::milliseconds limit = 5000ms) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    std::vector<std::byte> buffer;
    for (;;) {
      const ReplyScan scan = scan_reply(buffer, kDefaultMaxFrameBytes);
      if (scan.state == ScanState::complete) {
        pending_.assign(buffer.begin() + static_cast<std::ptrdiff_t>(scan.frame_bytes), buffer.end());
        buffer.resize(scan.frame_bytes);
        return buffer;
      }
      if (scan.state == ScanState::too_large) return std::nullopt;
      if (!pending_.empty()) {
        buffer.insert(buffer.end(), pending_.begin(), pending_.end());
        pending_.clear();
        continue;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      std::byte chunk[65536];
      const ssize_t got = recv(fd_, chunk, sizeof chunk, 0);
      if (got <= 0) return std::nullopt;
      buffer.insert(buffer.end(), chunk, chunk + got);
    }
  }

  // True once the server has closed (EOF or reset) within `limit`; data on the way is discarded.
  bool closed_within(std::chrono::milliseconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      std::byte chunk[65536];
      const ssize_t got = recv(fd_, chunk, sizeof chunk, 0);
      if (got <= 0) return true;
    }
  }

 private:
  explicit Raw(int fd) : fd_(fd) {
    REQUIRE(fd_ >= 0);
    // Bounds every blocking call: a test must fail, never hang, if the server misbehaves.
    const timeval limit{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit);
  }
  int fd_;
  std::vector<std::byte> pending_;
};

struct ErrorReply {
  std::uint32_t code = 0;
  std::string message;
};

std::optional<ErrorReply> as_error(const std::optional<std::vector<std::byte>>& frame) {
  if (!frame) return std::nullopt;
  const auto message = error_reply_message(*frame);
  if (!message) return std::nullopt;
  return ErrorReply{load_le<std::uint32_t>(frame->data() + 4), std::string(*message)};
}

std::vector<std::byte> framed(const std::vector<std::byte>& body) {
  std::vector<std::byte> frame(kLengthPrefixBytes + body.size());
  store_le(frame.data(), static_cast<std::uint32_t>(body.size()));
  if (!body.empty()) std::memcpy(frame.data() + kLengthPrefixBytes, body.data(), body.size());
  return frame;
}

std::vector<std::byte> request(SocketOpcode opcode, std::span<const double> close, std::span<const Combo> combos) {
  std::vector<std::byte> frame;
  REQUIRE(append_request(opcode, close, combos, frame).has_value());
  return frame;
}

std::vector<std::byte> echo_params_frame(const Combo& combo) {
  std::vector<std::byte> frame(kEchoParamsRequestBytes);
  encode_echo_params_request(combo, std::span<std::byte, kEchoParamsRequestBytes>(frame.data(), frame.size()));
  return frame;
}

// The in-process server: Unix socket in a temp dir and TCP on a kernel-chosen loopback port.
class LocalServer;
Raw mid_request(LocalServer& local, Via via);

class LocalServer {
 public:
  explicit LocalServer(const SocketServerOptions& base = {}) {
    SocketServerOptions options = base;
    options.unix_path = dir_.file("engine.sock");
    options.tcp.emplace(TcpEndpoint{"127.0.0.1", 0});
    options.log = false;
    auto started = SocketServer::start(options);
    REQUIRE_MESSAGE(started.has_value(), (started ? "" : started.error().message));
    server_ = std::move(*started);
  }
  [[nodiscard]] SocketServer& server() { return *server_; }
  [[nodiscard]] const std::string& path() const { return server_->unix_path(); }

  Raw raw(Via via) { return via == Via::unix_socket ? Raw::to_unix(path()) : Raw::to_tcp(server_->tcp_port()); }
  SocketClient client(Via via, std::chrono::milliseconds timeout = 10'000ms) {
    SocketClientOptions options;
    options.timeout = timeout;
    auto client = via == Via::unix_socket ? SocketClient::connect_unix(path(), options)
                                          : SocketClient::connect_tcp("127.0.0.1", server_->tcp_port(), options);
    REQUIRE_MESSAGE(client.has_value(), (client ? "" : client.error().message));
    return std::move(*client);
  }

  // A fresh, well-behaved client gets exact answers: echo_params, and a sweep compared with
  // the kernel run here.
  void check_good_client(Via via) {
    auto client = this->client(via);
    const Combo payload{11, 22, 33, 44, 55, 66};
    auto echoed = client.echo_params(payload);
    REQUIRE_MESSAGE(echoed.has_value(), (echoed ? "" : echoed.error().message));
    CHECK(*echoed == payload);
    const std::vector<Combo> combos = {combo_from_length(6), combo_from_length(31)};
    auto answers = client.sweep(small_series(), combos);
    REQUIRE_MESSAGE(answers.has_value(), (answers ? "" : answers.error().message));
    const auto expected = run_sweep(builtin(), small_series(), combos, kDefaultFee, 1);
    REQUIRE(expected.has_value());
    CHECK(*answers == *expected);
  }

  [[nodiscard]] std::uint64_t rejected(SocketError error) const {
    return server_->stats().rejected[static_cast<std::size_t>(error)];
  }

 private:
  TempDir dir_;
  std::unique_ptr<SocketServer> server_;
};

// A connection that has been served once and is now inside its next frame (10 bytes of 61):
// it has a request in flight, so no newcomer may close it.
Raw mid_request(LocalServer& local, Via via) {
  const auto frame = echo_params_frame(Combo{1, 1, 1, 1, 1, 1});
  Raw raw = local.raw(via);
  REQUIRE(raw.send_all(frame));
  REQUIRE(raw.read_frame().has_value());
  REQUIRE(raw.send_all(std::span(frame).first(10)));
  return raw;
}

// The real binary: `ipcfloor serve --no-shm --quiet --socket DIR/engine.sock --tcp 127.0.0.1:PORT`.
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& extra = {}) : path_(dir_.file("engine.sock")) {
    for (int attempt = 0; attempt < 3 && !child_; ++attempt) {
      port_ = free_loopback_port();
      std::vector<std::string> argv = {IPCFLOOR_BINARY, "serve", "--no-shm", "--quiet", "--socket", path_,
                                       "--tcp", "127.0.0.1:" + std::to_string(port_)};
      argv.insert(argv.end(), extra.begin(), extra.end());
      auto spawned = ChildProcess::spawn(argv);
      REQUIRE_MESSAGE(spawned.has_value(), (spawned ? "" : spawned.error().message));
      ChildProcess child = std::move(*spawned);
      // Both listeners: the server opens the Unix socket before the TCP one.
      if (child.wait_until([&] { return SocketClient::connect_unix(path_).has_value() &&
                                        SocketClient::connect_tcp("127.0.0.1", port_).has_value(); },
                           10'000ms)) {
        child_.emplace(std::move(child));
      }
    }
    REQUIRE_MESSAGE(child_.has_value(), "ipcfloor serve --no-shm did not come up");
  }
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::uint16_t port() const { return port_; }
  [[nodiscard]] const TempDir& dir() const { return dir_; }
  [[nodiscard]] ChildProcess& child() { return *child_; }

  SocketClient client(Via via) {
    SocketClientOptions options;
    options.timeout = 60'000ms;  // a whole default-grid sweep is one call
    auto client = via == Via::unix_socket ? SocketClient::connect_unix(path_, options)
                                          : SocketClient::connect_tcp("127.0.0.1", port_, options);
    REQUIRE_MESSAGE(client.has_value(), (client ? "" : client.error().message));
    return std::move(*client);
  }

 private:
  TempDir dir_;
  std::string path_;
  std::uint16_t port_ = 0;
  std::optional<ChildProcess> child_;
};

// Runs a command and returns its stdout (stderr is left alone).
std::string run_command(const std::string& command, int& exit_code) {
  std::FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buffer[4096];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, got);
  const int status = pclose(pipe);
  exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::uint64_t vm_peak_kib(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmPeak:", 0) == 0) return std::stoull(line.substr(7));
  return 0;
}

template <class Predicate>
bool eventually(Predicate predicate, std::chrono::milliseconds limit = 3000ms) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(2ms);
  }
  return predicate();
}

}  // namespace

// ---- Parity ---------------------------------------------------------------------------------------

TEST_CASE("the default grid through the real engine's sockets equals the in-process sweep, bit for bit") {
  ServerProcess engine;
  auto series = load_series_source(SeriesSource{});
  REQUIRE(series.has_value());
  REQUIRE(series->is_default);
  const auto combos = default_grid();
  const auto expected = run_sweep(builtin(), series->close, combos, kDefaultFee, 0);
  REQUIRE(expected.has_value());
  REQUIRE((*expected)[0].pnl == kFingerprintPnl);
  REQUIRE((*expected)[0].trades == kFingerprintTrades);

  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    {  // stateless: series and combos in one opcode-0 frame
      auto client = engine.client(via);
      auto answers = client.sweep(series->close, combos);
      REQUIRE_MESSAGE(answers.has_value(), (answers ? "" : answers.error().message));
      REQUIRE(answers->size() == combos.size());
      for (std::size_t i = 0; i < combos.size(); ++i) {
        CAPTURE(i);
        CHECK((*answers)[i].pnl == (*expected)[i].pnl);
        CHECK((*answers)[i].trades == (*expected)[i].trades);
      }
    }
    {  // stateful: load once, then combos only, in one batch and one by one
      auto client = engine.client(via);
      auto loaded = client.load(series->close);
      REQUIRE_MESSAGE(loaded.has_value(), (loaded ? "" : loaded.error().message));
      CHECK(loaded->checksum == fnv1a64(std::as_bytes(std::span<const double>(series->close))));
      CHECK(loaded->fee == kDefaultFee);
      auto answers = client.sweep_loaded(combos);
      REQUIRE_MESSAGE(answers.has_value(), (answers ? "" : answers.error().message));
      CHECK(*answers == *expected);
      for (const std::size_t i : {std::size_t{0}, std::size_t{41}, std::size_t{79}}) {
        auto one = client.sweep_loaded(std::span(&combos[i], 1));
        REQUIRE(one.has_value());
        CHECK((*one)[0] == (*expected)[i]);
      }
    }
  }
}

TEST_CASE("`ipcfloor sweep --socket/--tcp --ship [--stateful] --json` prints exactly what `--inproc --json` prints") {
  ServerProcess engine;
  int code = 0;
  const std::string binary = IPCFLOOR_BINARY;
  const std::string inproc = run_command(binary + " sweep --inproc --json --lengths 6,8,11,50,200", code);
  REQUIRE(code == 0);
  REQUIRE(inproc.find("\"pnl\":-5165.577039790348,\"trades\":57029") != std::string::npos);
  for (const std::string& target : {"--socket " + engine.path(), "--tcp 127.0.0.1:" + std::to_string(engine.port())}) {
    for (const char* mode : {" --ship", " --ship --stateful"}) {
      CAPTURE(target + mode);
      CHECK(run_command(binary + " sweep " + target + mode + " --json --lengths 6,8,11,50,200", code) == inproc);
      CHECK(code == 0);
    }
  }
  // The table and its fingerprint line, too.
  const std::string table =
      run_command(binary + " sweep --socket " + engine.path() + " --ship --stateful --lengths 6,8", code);
  CHECK(code == 0);
  CHECK(table.find("fingerprint L=6: pnl -5165.577039790348, trades 57029: matches") != std::string::npos);
  CHECK(table.find("stateful: series loaded once") != std::string::npos);

  // This server (--no-shm, no --data or --bars) holds no series: without --ship, a clear error.
  const std::string refused = run_command(binary + " sweep --socket " + engine.path() + " --lengths 6 2>&1", code);
  CHECK(code == 3);  // bad input: the options contradict each other
  CHECK(refused.find("holds no series of its own") != std::string::npos);
  CHECK(refused.find("--ship") != std::string::npos);
}

TEST_CASE("`ipcfloor sweep --socket/--tcp` runs on the server's preloaded series by default and says which") {
  // --no-shm with a GBM option: the sockets hold that series (here the default data set).
  ServerProcess engine({"--seed", "42"});
  int code = 0;
  const std::string binary = IPCFLOOR_BINARY;
  const std::string inproc = run_command(binary + " sweep --inproc --json --lengths 6,8,11,50,200", code);
  REQUIRE(code == 0);
  // Each side names the series as its source does (the server: its description, in-process: the
  // set's name "default"); the rows, their bars and the checksum are the same.
  const auto unnamed = [](const std::string& rows) {
    std::string out;
    std::size_t from = 0;
    for (std::size_t at; (at = rows.find("\"series\":\"", from)) != std::string::npos;) {
      at += 10;
      out += rows.substr(from, at - from) + "-";
      from = rows.find('"', at);
    }
    return out + rows.substr(from);
  };
  for (const std::string& target : {"--socket " + engine.path(), "--tcp 127.0.0.1:" + std::to_string(engine.port())}) {
    CAPTURE(target);
    const std::string rows = run_command(binary + " sweep " + target + " --json --lengths 6,8,11,50,200 2>/dev/null", code);
    CHECK(unnamed(rows) == unnamed(inproc));
    CHECK(rows.find("\"series\":\"gbm(bars=150000, seed=42") != std::string::npos);
    CHECK(code == 0);
  }
  auto series = load_series_source(SeriesSource{});
  REQUIRE(series.has_value());
  const std::string checksum = fmt::format("{:016x}", fnv1a64(std::as_bytes(std::span<const double>(series->close))));
  const std::string table = run_command(binary + " sweep --socket " + engine.path() + " --lengths 6,8", code);
  CHECK(code == 0);
  CHECK(table.find("the server's series gbm(bars=150000, seed=42") != std::string::npos);
  CHECK(table.find("(150000 bars, checksum " + checksum + ")") != std::string::npos);
  CHECK(table.find("fingerprint L=6: pnl -5165.577039790348, trades 57029: matches") != std::string::npos);
  // --json keeps stdout to JSON lines; the series goes to stderr.
  const std::string json_stderr =
      run_command(binary + " sweep --socket " + engine.path() + " --json --lengths 6 2>&1 >/dev/null", code);
  CHECK(json_stderr.find("computed on the server's series gbm(bars=150000, seed=42") != std::string::npos);
  CHECK(json_stderr.find("(150000 bars, checksum " + checksum + ")") != std::string::npos);

  // Shipping is explicit: a series option without --ship, --stateful without --ship, --ship without a socket.
  const std::string no_ship =
      run_command(binary + " sweep --socket " + engine.path() + " --bars 500 --lengths 6 2>&1", code);
  CHECK(code == 2);  // usage: the options contradict each other
  CHECK(no_ship.find("add --ship") != std::string::npos);
  const std::string stateful = run_command(binary + " sweep --socket " + engine.path() + " --stateful 2>&1", code);
  CHECK(code == 2);  // usage: the options contradict each other
  CHECK(stateful.find("--stateful") != std::string::npos);
  CHECK(stateful.find("--ship") != std::string::npos);
  const std::string inproc_ship = run_command(binary + " sweep --inproc --ship 2>&1", code);
  CHECK(code == 2);  // usage: the options contradict each other
  CHECK(inproc_ship.find("--ship needs --socket") != std::string::npos);
  // --ship with another series still works on the same server.
  const std::string shipped = run_command(binary + " sweep --socket " + engine.path() + " --ship --bars 3000 --seed 7 "
                                          "--json --lengths 6,31", code);
  CHECK(code == 0);
  CHECK(shipped == run_command(binary + " sweep --inproc --bars 3000 --seed 7 --json --lengths 6,31", code));
}

TEST_CASE("use_preloaded makes the server's series the connection's; without one it is refused and the connection goes on") {
  const std::vector<Combo> combos = {combo_from_length(6), combo_from_length(31), combo_from_length(200)};
  const auto expected = run_sweep(builtin(), small_series(), combos, kDefaultFee, 1);
  REQUIRE(expected.has_value());
  SocketServerOptions with_series;
  auto preloaded = std::make_shared<PreloadedSeries>();
  preloaded->close = small_series();
  preloaded->name = "gbm(bars=3000, seed=7)";
  preloaded->checksum = fnv1a64(std::as_bytes(std::span<const double>(small_series())));
  with_series.preloaded = preloaded;
  LocalServer local(with_series);
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    auto client = local.client(via);
    auto series = client.use_preloaded();
    REQUIRE_MESSAGE(series.has_value(), (series ? "" : series.error().message));
    CHECK(series->n_bars == 3000);
    CHECK(series->checksum == preloaded->checksum);
    CHECK(series->fee == kDefaultFee);
    CHECK(series->name == "gbm(bars=3000, seed=7)");
    auto answers = client.sweep_loaded(combos);
    REQUIRE(answers.has_value());
    CHECK(*answers == *expected);
    // Windows are checked against the preloaded series' bars.
    const Combo too_wide{1, 3001, 1, 1, 1, 1};
    auto refused = client.sweep_loaded(std::span(&too_wide, 1));
    REQUIRE_FALSE(refused.has_value());
    CHECK(client.last_server_error() == static_cast<std::uint32_t>(SocketError::window_out_of_range));
    // load replaces it, use_preloaded brings it back.
    const auto other = series_of(500, 3);
    REQUIRE(client.load(other).has_value());
    auto on_other = client.sweep_loaded(std::span(combos).first(2));
    REQUIRE(on_other.has_value());
    CHECK(*on_other == *run_sweep(builtin(), other, std::span(combos).first(2), kDefaultFee, 1));
    REQUIRE(client.use_preloaded().has_value());
    CHECK(*client.sweep_loaded(combos) == *expected);
  }
  // A frame with bars or combos is a bad shape.
  Raw raw = local.raw(Via::unix_socket);
  REQUIRE(raw.send_all(request(SocketOpcode::use_preloaded, {}, std::span(combos).first(1))));
  const auto error = as_error(raw.read_frame());
  REQUIRE(error.has_value());
  CHECK(error->code == static_cast<std::uint32_t>(SocketError::bad_shape));

  LocalServer bare;
  auto client = bare.client(Via::unix_socket);
  auto none = client.use_preloaded();
  REQUIRE_FALSE(none.has_value());
  CHECK(client.last_server_error() == static_cast<std::uint32_t>(SocketError::no_preloaded_series));
  CHECK(none.error().message.find("holds no series of its own") != std::string::npos);
  CHECK(client.echo_params(Combo{1, 2, 3, 4, 5, 6}).has_value());
  CHECK(bare.rejected(SocketError::no_preloaded_series) == 1);
}

TEST_CASE("echo returns the close array verbatim and echo_params the 48 bytes, over both sockets") {
  LocalServer local;
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    auto client = local.client(via);
    const std::vector<double> odd = {1.0, -0.0, std::nan("1"), 1e308, 5e-324};
    auto echoed = client.echo(odd);
    REQUIRE(echoed.has_value());
    REQUIRE(echoed->size() == odd.size());
    CHECK(std::memcmp(echoed->data(), odd.data(), sizeof(double) * odd.size()) == 0);
    auto empty = client.echo({});
    REQUIRE(empty.has_value());
    CHECK(empty->empty());
    auto big = client.echo(series_of(150'000, 42));  // the study's 1.2 MB
    REQUIRE(big.has_value());
    CHECK(*big == series_of(150'000, 42));
    const Combo extremes{std::numeric_limits<std::int64_t>::min(), -1, 0, 1, 2, std::numeric_limits<std::int64_t>::max()};
    auto params = client.echo_params(extremes);
    REQUIRE(params.has_value());
    CHECK(*params == extremes);
  }
  CHECK(local.server().stats().served[static_cast<std::size_t>(SocketOpcode::echo)] == 6);
  CHECK(local.server().stats().served[static_cast<std::size_t>(SocketOpcode::echo_params)] == 2);
}

TEST_CASE("frames split into single bytes, and frames pipelined in one write, are all answered in order") {
  LocalServer local;
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    Raw raw = local.raw(via);
    const auto frame = request(SocketOpcode::sweep, small_series(), std::vector<Combo>{combo_from_length(6)});
    for (std::size_t i = 0; i < frame.size(); i += 997) REQUIRE(raw.send_all(std::span(frame).subspan(i, std::min<std::size_t>(997, frame.size() - i))));
    auto reply = raw.read_frame();
    REQUIRE(reply.has_value());
    CHECK(reply->size() == 4 + 16);
    const auto single = echo_params_frame(Combo{1, 2, 3, 4, 5, 6});
    for (const std::byte b : single) REQUIRE(raw.send_all(std::span(&b, 1)));
    REQUIRE(raw.read_frame().has_value());

    std::vector<std::byte> batch;
    for (std::int64_t k = 0; k < 50; ++k) {
      const auto one = echo_params_frame(Combo{k, k, k, k, k, k});
      batch.insert(batch.end(), one.begin(), one.end());
    }
    REQUIRE(raw.send_all(batch));
    for (std::int64_t k = 0; k < 50; ++k) {
      auto answer = raw.read_frame();
      REQUIRE(answer.has_value());
      REQUIRE(answer->size() == kEchoParamsReplyBytes);
      CHECK(load_le<std::int64_t>(answer->data() + 4) == k);
    }
  }
}

TEST_CASE("echo_params allocates nothing once the client exists, over both sockets") {
  LocalServer local;
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    auto client = local.client(via);
    t_allocations = 0;
    t_counting = true;
    bool all_ok = true;
    for (std::int64_t i = 0; i < 2000; ++i) {
      auto echoed = client.echo_params(Combo{i, 1, 2, 3, 4, 5});
      all_ok = all_ok && echoed.has_value() && echoed->h == i;
    }
    t_counting = false;
    CHECK(all_ok);
    CHECK(t_allocations == 0);
  }
}

TEST_CASE("several server threads share the listeners, and a sweep may run on several workers") {
  SocketServerOptions options;
  options.threads = 3;
  options.sweep_threads = 2;
  LocalServer local(options);
  std::vector<std::thread> clients;
  std::atomic<int> good{0};
  const std::vector<Combo> combos = {combo_from_length(6), combo_from_length(20), combo_from_length(44)};
  const auto expected = run_sweep(builtin(), small_series(), combos, kDefaultFee, 1);
  REQUIRE(expected.has_value());
  for (int i = 0; i < 6; ++i) {
    clients.emplace_back([&, i] {
      SocketClientOptions client_options;
      client_options.timeout = 30'000ms;
      auto client = i % 2 == 0 ? SocketClient::connect_unix(local.path(), client_options)
                               : SocketClient::connect_tcp("127.0.0.1", local.server().tcp_port(), client_options);
      if (!client) return;
      auto answers = client->sweep(small_series(), combos);
      // relaxed: the joins below publish the count.
      if (answers && *answers == *expected) good.fetch_add(1, std::memory_order_relaxed);
    });
  }
  for (auto& thread : clients) thread.join();
  CHECK(good.load(std::memory_order_relaxed) == 6);  // relaxed: every writer has joined
  CHECK(local.server().stats().connections_accepted == 6);
  CHECK(local.server().stats().served[static_cast<std::size_t>(SocketOpcode::sweep)] == 6);
}

// ---- Malformed input: each case, then a good client ----------------------------------------------

TEST_CASE("a length over the maximum is refused from its 4 bytes, before anything is allocated, then closed") {
  ServerProcess engine({"--max-frame", "1048576"});
  const std::uint64_t peak_before = vm_peak_kib(engine.child().pid());
  REQUIRE(peak_before > 0);
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    Raw raw = via == Via::unix_socket ? Raw::to_unix(engine.path()) : Raw::to_tcp(engine.port());
    // Claims a 4 GiB body and sends nothing of it: an answer proves nobody waited for the body.
    REQUIRE(raw.send_all(std::vector<std::byte>{std::byte{0xF0}, std::byte{0xFF}, std::byte{0xFF}, std::byte{0xFF}}));
    const auto error = as_error(raw.read_frame());
    REQUIRE(error.has_value());
    CHECK(error->code == static_cast<std::uint32_t>(SocketError::frame_too_large));
    CHECK(error->message.find("4294967280 bytes exceeds the server's maximum of 1048576") != std::string::npos);
    CHECK(raw.closed_within(3000ms));

    // Just over the configured limit is refused too; at the limit is framed (and then judged).
    Raw over = via == Via::unix_socket ? Raw::to_unix(engine.path()) : Raw::to_tcp(engine.port());
    std::vector<std::byte> prefix(4);
    store_le(prefix.data(), std::uint32_t{1048577});
    REQUIRE(over.send_all(prefix));
    const auto over_error = as_error(over.read_frame());
    REQUIRE(over_error.has_value());
    CHECK(over_error->code == static_cast<std::uint32_t>(SocketError::frame_too_large));
  }
  // VmPeak counts address space ever reserved: a 4 GiB buffer would show.
  CHECK(vm_peak_kib(engine.child().pid()) < peak_before + 512 * 1024);
  auto client = engine.client(Via::unix_socket);
  auto echoed = client.echo_params(Combo{1, 2, 3, 4, 5, 6});
  REQUIRE(echoed.has_value());

  // The client library reports the server's reason even though the server closed mid-send.
  std::vector<double> too_many(200'000, 100.0);
  auto refused = client.echo(too_many);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message.find("frame_too_large") != std::string::npos);
  CHECK(client.broken());
}

TEST_CASE("a frame truncated by the peer's EOF gets a truncated error, and others are still served") {
  LocalServer local;
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    Raw raw = local.raw(via);
    auto frame = request(SocketOpcode::echo, small_series(), {});
    frame.resize(100);  // the prefix promises 24009 body bytes; 96 arrive
    REQUIRE(raw.send_all(frame));
    REQUIRE(shutdown(raw.fd(), SHUT_WR) == 0);
    const auto error = as_error(raw.read_frame());
    REQUIRE(error.has_value());
    CHECK(error->code == static_cast<std::uint32_t>(SocketError::truncated));
    CHECK(error->message.find("100 of its 24013 bytes arrived") != std::string::npos);
    CHECK(raw.closed_within(3000ms));
    local.check_good_client(via);
  }
  CHECK(local.rejected(SocketError::truncated) == 2);
}

TEST_CASE("n_bars or n_combos that disagree with body_len get length_mismatch, and the connection goes on") {
  LocalServer local;
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    Raw raw = local.raw(via);
    auto body = request(SocketOpcode::sweep, small_series(), std::vector<Combo>{combo_from_length(6)});
    body.erase(body.begin(), body.begin() + 4);
    store_le(body.data() + 5, std::uint32_t{2});  // claims two combos, carries one
    REQUIRE(raw.send_all(framed(body)));
    auto error = as_error(raw.read_frame());
    REQUIRE(error.has_value());
    CHECK(error->code == static_cast<std::uint32_t>(SocketError::length_mismatch));
    CHECK(error->message.find("n_bars 3000 and n_combos 2") != std::string::npos);

    REQUIRE(raw.send_all(framed({std::byte{0}, std::byte{1}})));  // shorter than the header
    error = as_error(raw.read_frame());
    REQUIRE(error.has_value());
    CHECK(error->code == static_cast<std::uint32_t>(SocketError::length_mismatch));

    // The same connection still frames and answers correctly.
    REQUIRE(raw.send_all(echo_params_frame(Combo{7, 7, 7, 7, 7, 7})));
    const auto reply = raw.read_frame();
    REQUIRE(reply.has_value());
    CHECK(reply->size() == kEchoParamsReplyBytes);
    local.check_good_client(via);
  }
  CHECK(local.rejected(SocketError::length_mismatch) == 4);
}

TEST_CASE("an unknown opcode gets unknown_opcode, and the connection goes on") {
  LocalServer local;
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    Raw raw = local.raw(via);
    std::vector<std::byte> body(9, std::byte{0});
    body[0] = std::byte{0x2A};
    REQUIRE(raw.send_all(framed(body)));
    const auto error = as_error(raw.read_frame());
    REQUIRE(error.has_value());
    CHECK(error->code == static_cast<std::uint32_t>(SocketError::unknown_opcode));
    CHECK(error->message.find("opcode 42 is unknown") != std::string::npos);
    REQUIRE(raw.send_all(echo_params_frame(Combo{1, 1, 1, 1, 1, 1})));
    CHECK(raw.read_frame().has_value());
    local.check_good_client(via);
  }
  CHECK(local.rejected(SocketError::unknown_opcode) == 2);
}

TEST_CASE("a window out of range is named by combo and value, for sweep and sweep_loaded") {
  LocalServer local;
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    auto client = local.client(via);
    const std::vector<Combo> combos = {combo_from_length(6), combo_from_length(8), Combo{3, 3001, 2, 1, 2, 3}};
    auto refused = client.sweep(small_series(), combos);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code == ErrorCode::invalid_argument);
    CHECK(refused.error().message.find("window_out_of_range") != std::string::npos);
    CHECK(refused.error().message.find("combo 2: window L (position 1) is 3001, outside [1, 3000]") != std::string::npos);
    CHECK(client.last_server_error() == static_cast<std::uint32_t>(SocketError::window_out_of_range));
    CHECK_FALSE(client.broken());

    REQUIRE(client.load(small_series()).has_value());
    auto loaded_refused = client.sweep_loaded(std::vector<Combo>{Combo{0, 6, 2, 1, 2, 3}});
    REQUIRE_FALSE(loaded_refused.has_value());
    CHECK(loaded_refused.error().message.find("combo 0: window h (position 0) is 0") != std::string::npos);
    auto fine = client.sweep_loaded(std::vector<Combo>{combo_from_length(6)});
    REQUIRE(fine.has_value());
    local.check_good_client(via);
  }
  CHECK(local.rejected(SocketError::window_out_of_range) == 4);
}

TEST_CASE("a NaN price is named by bar, for sweep and load") {
  LocalServer local;
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    auto client = local.client(via);
    std::vector<double> close = small_series();
    close[1234] = std::nan("");
    auto refused = client.sweep(close, std::vector<Combo>{combo_from_length(6)});
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code == ErrorCode::bad_data);
    CHECK(refused.error().message.find("bad_price") != std::string::npos);
    CHECK(refused.error().message.find("bar 1234: close nan") != std::string::npos);
    auto load_refused = client.load(close);
    REQUIRE_FALSE(load_refused.has_value());
    CHECK(load_refused.error().message.find("bar 1234") != std::string::npos);
    local.check_good_client(via);
  }
  CHECK(local.rejected(SocketError::bad_price) == 4);
}

TEST_CASE("a zero or negative price is named by bar") {
  LocalServer local;
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    auto client = local.client(via);
    for (const double bad : {0.0, -12.5, -std::numeric_limits<double>::infinity()}) {
      std::vector<double> close = small_series();
      close.back() = bad;
      auto refused = client.sweep(close, std::vector<Combo>{combo_from_length(6)});
      REQUIRE_FALSE(refused.has_value());
      CHECK(refused.error().message.find("bar 2999: close") != std::string::npos);
    }
    local.check_good_client(via);
  }
  CHECK(local.rejected(SocketError::bad_price) == 6);
}

TEST_CASE("sweep_loaded before load gets no_series_loaded, and works once the series is loaded") {
  LocalServer local;
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    auto client = local.client(via);
    auto refused = client.sweep_loaded(std::vector<Combo>{combo_from_length(6)});
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().message.find("no_series_loaded") != std::string::npos);
    CHECK(refused.error().message.find("send load (opcode 2) or use_preloaded (opcode 5) on this connection first") != std::string::npos);
    // The series belongs to the connection: another connection's load does not count.
    auto other = local.client(via);
    REQUIRE(other.load(small_series()).has_value());
    REQUIRE_FALSE(client.sweep_loaded(std::vector<Combo>{combo_from_length(6)}).has_value());
    REQUIRE(client.load(small_series()).has_value());
    auto answers = client.sweep_loaded(std::vector<Combo>{combo_from_length(6)});
    REQUIRE(answers.has_value());
    CHECK((*answers)[0] == (*run_sweep(builtin(), small_series(), std::vector<Combo>{combo_from_length(6)}, kDefaultFee, 1))[0]);
    local.check_good_client(via);
  }
  CHECK(local.rejected(SocketError::no_series_loaded) == 4);
}

TEST_CASE("counts an opcode fixes are checked (bad_shape)") {
  LocalServer local;
  Raw raw = local.raw(Via::unix_socket);
  REQUIRE(raw.send_all(request(SocketOpcode::sweep_loaded, small_series(), std::vector<Combo>{combo_from_length(6)})));
  auto error = as_error(raw.read_frame());
  REQUIRE(error.has_value());
  CHECK(error->code == static_cast<std::uint32_t>(SocketError::bad_shape));
  REQUIRE(raw.send_all(request(SocketOpcode::echo_params, {}, {})));
  error = as_error(raw.read_frame());
  REQUIRE(error.has_value());
  CHECK(error->message.find("echo_params (opcode 4) needs n_bars 0 and n_combos 1") != std::string::npos);
  local.check_good_client(Via::unix_socket);
}

// ---- The server's buffering, fuzzed ---------------------------------------------------------------

namespace {

// One frame of the fuzzed stream and what the server must answer to it.
struct FuzzFrame {
  std::vector<std::byte> bytes;
  std::optional<SocketError> error;    // the error reply it deserves, or none (a success)
  std::vector<std::byte> reply_body;   // a success: the exact reply body, when known here
  std::vector<BacktestResult> results; // a sweep: the results the kernel gives here
};

FuzzFrame fuzz_frame(std::mt19937_64& rng, const std::vector<double>& series) {
  FuzzFrame f;
  const std::uint64_t kind = rng() % 9;
  const auto with_error = [&](std::vector<std::byte> bytes, SocketError error) {
    f.bytes = std::move(bytes);
    f.error = error;
    return f;
  };
  switch (kind) {
    case 0: {  // echo_params: the 48 bytes back
      const Combo combo{static_cast<std::int64_t>(rng()), 2, 3, 4, 5, -6};
      f.bytes = echo_params_frame(combo);
      f.reply_body.resize(kComboWireBytes);
      std::memcpy(f.reply_body.data(), &combo, kComboWireBytes);
      return f;
    }
    case 1: {  // echo: the close bytes back
      const std::size_t n = 1 + rng() % series.size();
      const std::span<const double> close(series.data(), n);
      f.bytes = request(SocketOpcode::echo, close, {});
      const auto raw = std::as_bytes(close);
      f.reply_body.assign(raw.begin(), raw.end());
      return f;
    }
    case 2: {  // a sweep the kernel answers
      const std::vector<Combo> combos = {combo_from_length(static_cast<std::int64_t>(6 + rng() % 8))};
      f.bytes = request(SocketOpcode::sweep, series, combos);
      f.results = *run_sweep(builtin(), series, combos, kDefaultFee, 1);
      return f;
    }
    case 3: {  // an opcode nobody knows
      std::vector<std::byte> body(9, std::byte{0});
      body[0] = static_cast<std::byte>(6 + rng() % 250);
      return with_error(framed(body), SocketError::unknown_opcode);
    }
    case 4: {  // counts that disagree with the length
      auto bytes = request(SocketOpcode::sweep, series, std::vector<Combo>{combo_from_length(6)});
      store_le(bytes.data() + 4 + 5, std::uint32_t{3});
      return with_error(std::move(bytes), SocketError::length_mismatch);
    }
    case 5:  // a body shorter than its header
      return with_error(framed({std::byte{0}, std::byte{1}, std::byte{2}}), SocketError::length_mismatch);
    case 6: {  // a window past the series
      const auto n = static_cast<std::int64_t>(series.size());
      return with_error(request(SocketOpcode::sweep, series, std::vector<Combo>{Combo{3, n + 1, 2, 1, 2, 3}}),
                        SocketError::window_out_of_range);
    }
    case 7: {  // a price that is not one
      std::vector<double> close = series;
      close[rng() % close.size()] = (rng() % 2 == 0) ? std::nan("") : -1.0;
      return with_error(request(SocketOpcode::sweep, close, std::vector<Combo>{combo_from_length(6)}),
                        SocketError::bad_price);
    }
    default:  // counts the opcode fixes, wrong
      return with_error(request(SocketOpcode::echo_params, {}, {}), SocketError::bad_shape);
  }
}

}  // namespace

TEST_CASE("frames cut at random points, sent with pauses, each get their own reply in order, the right error code "
          "for every bad one; EOF mid-frame gets truncated") {
  SocketServerOptions options;
  options.stall_timeout = 2000ms;  // the pauses below stay far under it
  LocalServer local(options);
  const std::vector<double> series = series_of(64, 5);
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      CAPTURE(name_of(via));
      CAPTURE(seed);
      std::mt19937_64 rng(seed * 7919 + (via == Via::tcp ? 1 : 0));
      std::vector<FuzzFrame> frames;
      std::vector<std::byte> stream;
      for (int i = 0; i < 80; ++i) {
        frames.push_back(fuzz_frame(rng, series));
        stream.insert(stream.end(), frames.back().bytes.begin(), frames.back().bytes.end());
      }
      // The last frame is cut short and followed by EOF.
      const auto last = request(SocketOpcode::echo, series, {});
      const std::size_t cut = 1 + rng() % (last.size() - 1);
      stream.insert(stream.end(), last.begin(), last.begin() + static_cast<std::ptrdiff_t>(cut));

      Raw raw = local.raw(via);
      std::vector<std::optional<std::vector<std::byte>>> replies;
      std::thread reader([&] {
        for (std::size_t i = 0; i <= frames.size(); ++i) {
          replies.push_back(raw.read_frame(10'000ms));
          if (!replies.back()) break;
        }
      });
      std::size_t sent = 0;
      while (sent < stream.size()) {
        const std::size_t chunk = std::min<std::size_t>(stream.size() - sent, 1 + rng() % 700);
        if (!raw.send_all(std::span(stream).subspan(sent, chunk))) break;
        sent += chunk;
        if (rng() % 4 == 0) std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
      }
      CHECK(sent == stream.size());
      REQUIRE(shutdown(raw.fd(), SHUT_WR) == 0);
      reader.join();

      REQUIRE(replies.size() == frames.size() + 1);
      for (std::size_t i = 0; i < frames.size(); ++i) {
        CAPTURE(i);
        REQUIRE(replies[i].has_value());
        const std::vector<std::byte>& reply = *replies[i];
        const auto error = as_error(replies[i]);
        if (frames[i].error) {
          REQUIRE(error.has_value());
          CHECK(error->code == static_cast<std::uint32_t>(*frames[i].error));
          continue;
        }
        REQUIRE_FALSE(error.has_value());
        const std::span<const std::byte> body = std::span(reply).subspan(kLengthPrefixBytes);
        if (!frames[i].results.empty()) {
          std::vector<BacktestResult> got(frames[i].results.size());
          REQUIRE(decode_sweep_reply(body, got));
          CHECK(got == frames[i].results);
        } else {
          CHECK(std::equal(body.begin(), body.end(), frames[i].reply_body.begin(), frames[i].reply_body.end()));
        }
      }
      const auto truncated = as_error(replies.back());
      REQUIRE(truncated.has_value());
      CHECK(truncated->code == static_cast<std::uint32_t>(SocketError::truncated));
      CHECK(raw.closed_within(3000ms));
    }
  }
  local.check_good_client(Via::unix_socket);
  local.check_good_client(Via::tcp);
  CHECK(local.rejected(SocketError::truncated) == 6);
}

// ---- Stalls, floods and intruders ----------------------------------------------------------------

TEST_CASE("a client stalling mid-frame is dropped after the timeout while another keeps being served") {
  SocketServerOptions options;
  options.stall_timeout = 300ms;
  LocalServer local(options);
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    Raw stalled = local.raw(via);
    Raw stalled_in_prefix = local.raw(via);
    const auto frame = echo_params_frame(Combo{1, 2, 3, 4, 5, 6});
    REQUIRE(stalled.send_all(std::span(frame).first(20)));
    REQUIRE(stalled_in_prefix.send_all(std::span(frame).first(2)));
    const auto stall_start = std::chrono::steady_clock::now();
    CHECK_FALSE(stalled.read_frame(150ms).has_value());  // not before the timeout

    auto good = local.client(via);
    double slowest_ms = 0;
    int calls = 0;
    while (std::chrono::steady_clock::now() - stall_start < 500ms) {
      const auto t0 = std::chrono::steady_clock::now();
      auto echoed = good.echo_params(Combo{calls, 0, 0, 0, 0, 0});
      REQUIRE(echoed.has_value());
      slowest_ms = std::max(slowest_ms, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      ++calls;
    }
    CHECK(calls > 100);
    CHECK(slowest_ms < 100.0);  // never held up by the stalled peers

    const auto error = as_error(stalled.read_frame(3000ms));
    REQUIRE(error.has_value());
    const double waited_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - stall_start).count();
    CHECK(error->code == static_cast<std::uint32_t>(SocketError::stalled));
    CHECK(error->message.find("20 of 61 bytes") != std::string::npos);
    CHECK(waited_ms < 2000.0);
    CHECK(stalled.closed_within(3000ms));
    const auto prefix_error = as_error(stalled_in_prefix.read_frame(3000ms));
    REQUIRE(prefix_error.has_value());
    CHECK(prefix_error->code == static_cast<std::uint32_t>(SocketError::stalled));
    CHECK(stalled_in_prefix.closed_within(3000ms));
    local.check_good_client(via);
  }
  CHECK(local.rejected(SocketError::stalled) == 4);
  CHECK(local.server().stats().connections_dropped == 4);
}

TEST_CASE("a client that never reads its replies is dropped, and never blocks another") {
  SocketServerOptions options;
  options.stall_timeout = 300ms;
  LocalServer local(options);
  Raw greedy = local.raw(Via::unix_socket);
  REQUIRE(fcntl(greedy.fd(), F_SETFL, O_NONBLOCK) == 0);
  const std::vector<double> quarter_megabyte(32'768, 1.0);
  const auto frame = request(SocketOpcode::echo, quarter_megabyte, {});
  // Whole echo requests, never read back, until the server stops taking them: it then holds a
  // reply the peer will not read, and reads nothing more from it.
  int whole_frames = 0;
  bool stuck = false;
  while (!stuck && whole_frames < 64) {
    std::size_t done = 0;
    while (done < frame.size()) {
      const ssize_t sent = send(greedy.fd(), frame.data() + done, frame.size() - done, MSG_NOSIGNAL);
      if (sent > 0) {
        done += static_cast<std::size_t>(sent);
        continue;
      }
      pollfd p{greedy.fd(), POLLOUT, 0};
      if (sent < 0 && errno == EAGAIN && poll(&p, 1, 100) == 1) continue;
      stuck = true;
      break;
    }
    if (done == frame.size()) ++whole_frames;
  }
  CHECK(stuck);
  CHECK(whole_frames >= 1);  // its reply alone outgrows the socket buffers
  local.check_good_client(Via::unix_socket);
  CHECK(eventually([&] { return local.server().stats().connections_dropped >= 1; }, 3000ms));
  CHECK(local.rejected(SocketError::stalled) >= 1);
  local.check_good_client(Via::tcp);
}

TEST_CASE("garbage from many connections at once never takes the server down") {
  LocalServer local;
  std::mt19937_64 rng(99);
  std::vector<Raw> peers;
  for (int i = 0; i < 12; ++i) {
    peers.push_back(local.raw(i % 2 == 0 ? Via::unix_socket : Via::tcp));
    std::vector<std::byte> noise(4096 + rng() % 60000);
    for (auto& b : noise) b = static_cast<std::byte>(rng());
    // Half of them start with a plausible small length, so the body reaches the decoder.
    if (i % 4 < 2) store_le(noise.data(), static_cast<std::uint32_t>(9 + rng() % 200));
    (void)peers.back().send_all(noise);
    if (i % 3 == 0) peers.pop_back();  // hang up abruptly with everything unread
  }
  local.check_good_client(Via::unix_socket);
  local.check_good_client(Via::tcp);
  const SocketServerStats stats = local.server().stats();
  CHECK(stats.total_rejected() > 0);
}

TEST_CASE("at the connection limit with every connection mid-request a new peer is refused with "
          "too_many_connections, and a slot frees on close") {
  SocketServerOptions options;
  options.max_connections = 2;
  options.owner_reserve = 0;  // TCP and Unix peers alike
  options.min_frame_rate = 0;  // the frames below wait for the test, not for a floor rate
  LocalServer local(options);
  // Both hold a frame in progress after one served: neither may be closed for a newcomer.
  const auto frame = echo_params_frame(Combo{1, 1, 1, 1, 1, 1});
  Raw first = mid_request(local, Via::unix_socket);
  Raw second = mid_request(local, Via::tcp);
  REQUIRE(eventually([&] { return local.server().stats().bytes_in >= 2 * frame.size() + 20; }));
  auto third = local.client(Via::unix_socket);
  auto refused = third.echo_params(Combo{3, 3, 3, 3, 3, 3});
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::busy);
  CHECK(refused.error().message.find("maximum of 2 connections") != std::string::npos);
  // The two in progress are untouched: each finishes its frame and is answered.
  REQUIRE(second.send_all(std::span(frame).subspan(10)));
  const auto answered = second.read_frame();
  REQUIRE(answered.has_value());
  CHECK_FALSE(as_error(answered).has_value());
  first.hang_up();
  CHECK(eventually([&] {
    auto fourth = local.client(Via::unix_socket);
    return fourth.echo_params(Combo{4, 4, 4, 4, 4, 4}).has_value();
  }));
  CHECK(local.server().stats().connections_refused >= 1);
}

TEST_CASE("an idle connection is closed with idle_timeout and frees its slot; a connection in use is kept") {
  SocketServerOptions options;
  options.max_connections = 3;
  options.owner_reserve = 0;
  options.idle_timeout = 400ms;
  LocalServer local(options);
  Raw idle_unix = local.raw(Via::unix_socket);
  Raw idle_tcp = local.raw(Via::tcp);
  auto busy = local.client(Via::unix_socket);
  REQUIRE(busy.echo_params(Combo{1, 1, 1, 1, 1, 1}).has_value());
  // A request every 100 ms keeps `busy` from ever being idle for 400 ms.
  const auto start = std::chrono::steady_clock::now();
  int calls = 0;
  while (std::chrono::steady_clock::now() - start < 1200ms) {
    REQUIRE(busy.echo_params(Combo{calls++, 0, 0, 0, 0, 0}).has_value());
    std::this_thread::sleep_for(100ms);
  }
  for (Raw* idle : {&idle_unix, &idle_tcp}) {
    const auto error = as_error(idle->read_frame(3000ms));
    REQUIRE(error.has_value());
    CHECK(error->code == static_cast<std::uint32_t>(SocketError::idle_timeout));
    CHECK(error->message.find("no request for 400 ms") != std::string::npos);
    CHECK(idle->closed_within(3000ms));
  }
  CHECK(busy.echo_params(Combo{3, 3, 3, 3, 3, 3}).has_value());
  CHECK(eventually([&] {
    auto newcomer = local.client(Via::tcp);
    return newcomer.echo_params(Combo{4, 4, 4, 4, 4, 4}).has_value();
  }));
  CHECK(local.rejected(SocketError::idle_timeout) == 2);
}

TEST_CASE("TCP peers cannot take the owner's reserve: a Unix peer of our uid is served when TCP holds every other slot") {
  SocketServerOptions options;
  options.max_connections = 3;
  options.owner_reserve = 1;
  options.min_frame_rate = 0;
  LocalServer local(options);
  // Two TCP peers mid-frame hold the two slots TCP may take.
  const auto frame = echo_params_frame(Combo{1, 1, 1, 1, 1, 1});
  Raw first = mid_request(local, Via::tcp);
  Raw second = mid_request(local, Via::tcp);
  REQUIRE(eventually([&] { return local.server().stats().bytes_in >= 2 * frame.size() + 20; }));
  auto third = local.client(Via::tcp);
  auto refused = third.echo_params(Combo{3, 3, 3, 3, 3, 3});
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::busy);
  CHECK(refused.error().message.find("maximum of 2 connections") != std::string::npos);
  auto owner = local.client(Via::unix_socket);
  CHECK(owner.echo_params(Combo{4, 4, 4, 4, 4, 4}).has_value());
  CHECK(local.rejected(SocketError::too_many_connections) == 1);
}

TEST_CASE("a TCP peer at the connection limit never closes an idle connection of the server's own uid") {
  SocketServerOptions options;
  options.max_connections = 2;
  options.owner_reserve = 1;
  LocalServer local(options);
  auto owner = local.client(Via::unix_socket);
  REQUIRE(owner.echo_params(Combo{1, 1, 1, 1, 1, 1}).has_value());
  std::this_thread::sleep_for(150ms);  // idle, and published as idle
  auto outsider = local.client(Via::tcp);
  auto refused = outsider.echo_params(Combo{2, 2, 2, 2, 2, 2});
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::busy);
  CHECK(owner.echo_params(Combo{3, 3, 3, 3, 3, 3}).has_value());
  CHECK(local.rejected(SocketError::too_many_connections) == 1);
}

// A non-blocking connection to the local server, or -1; for attacker threads (no doctest
// assertion may run off the main thread).
int connect_quietly(LocalServer& local, Via via) {
  const int fd = socket(via == Via::unix_socket ? AF_UNIX : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int connected = -1;
  if (via == Via::unix_socket) {
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, local.path().c_str(), local.path().size() + 1);
    connected = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  } else {
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    address.sin_port = htons(local.server().tcp_port());
    connected = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  }
  if (connected != 0 || fcntl(fd, F_SETFL, O_NONBLOCK) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The two floods of the report, run until `stop`: idle connects as fast as the host allows
// (each newcomer at the limit may close a connection), or `count` connections that each
// trickle one byte of a frame every 70 ms and connect again when closed.
enum class Flood { idle_connects, trickle };

void run_flood(LocalServer& local, Via via, Flood flood, const std::atomic<bool>& stop) {
  std::deque<int> held;
  const auto frame = echo_params_frame(Combo{9, 9, 9, 9, 9, 9});
  std::vector<std::size_t> sent;
  while (!stop.load()) {
    if (flood == Flood::idle_connects) {
      if (const int fd = connect_quietly(local, via); fd >= 0) held.push_back(fd);
      while (held.size() > 64) {
        close(held.front());
        held.pop_front();
      }
      std::this_thread::sleep_for(1ms);
      continue;
    }
    while (held.size() < 24) {
      held.push_back(connect_quietly(local, via));
      sent.push_back(0);
    }
    for (std::size_t i = 0; i < held.size(); ++i) {
      char sink[512];
      const bool closed = held[i] < 0 || recv(held[i], sink, sizeof sink, MSG_DONTWAIT) == 0 ||
                          send(held[i], frame.data() + sent[i] % frame.size(), 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1;
      if (!closed) {
        ++sent[i];
        continue;
      }
      if (held[i] >= 0) close(held[i]);
      held[i] = connect_quietly(local, via);
      sent[i] = 0;
    }
    std::this_thread::sleep_for(70ms);
  }
  for (const int fd : held)
    if (fd >= 0) close(fd);
}

TEST_CASE("a client completing a request every 50 ms keeps its connection under an idle-connect flood and a trickle "
          "flood: at most 1% of its requests fail") {
  SocketServerOptions options;
  options.max_connections = 16;  // the default 64 behaves the same; 16 fills sooner on 2 cores
  LocalServer local(options);
  for (const Via via : {Via::tcp, Via::unix_socket}) {
    for (const Flood flood : {Flood::idle_connects, Flood::trickle}) {
      const std::string attack = fmt::format("{} {}", name_of(via), flood == Flood::trickle ? "trickle" : "idle connects");
      CAPTURE(attack);
      std::atomic<bool> stop{false};
      std::thread attacker([&] { run_flood(local, via, flood, stop); });
      std::this_thread::sleep_for(150ms);  // the flood holds every slot it can
      auto client = local.client(via, 3000ms);
      int failed = 0;
      constexpr int kRequests = 30;
      for (int i = 0; i < kRequests; ++i) {
        if (!client.echo_params(Combo{i, 1, 1, 1, 1, 1}).has_value()) {
          ++failed;
          client = local.client(via, 3000ms);
        }
        std::this_thread::sleep_for(50ms);
      }
      stop.store(true);
      attacker.join();
      MESSAGE(fmt::format("{}: {} of {} requests failed", attack, failed, kRequests));
      CHECK(failed * 100 <= kRequests);  // at most 1%
    }
  }
  CHECK(local.rejected(SocketError::too_many_connections) > 0);  // the floods did reach the limit
}

TEST_CASE("one TCP address holds at most max_per_peer connections: a newcomer past it closes that address's "
          "connection that never completed a frame, or is refused, and other peers still get in") {
  SocketServerOptions options;
  options.max_connections = 16;
  options.owner_reserve = 0;
  options.max_per_peer = 3;
  LocalServer local(options);
  // Three that never sent a byte: the next from the same address closes the earliest of them.
  Raw silent = local.raw(Via::tcp);
  Raw silent2 = local.raw(Via::tcp);
  Raw silent3 = local.raw(Via::tcp);
  REQUIRE(eventually([&] { return local.server().stats().connections_accepted == 3; }));
  auto first = local.client(Via::tcp);
  REQUIRE(first.echo_params(Combo{1, 1, 1, 1, 1, 1}).has_value());
  const auto closed = as_error(silent.read_frame(3000ms));
  REQUIRE_MESSAGE(closed.has_value(), format_stats(local.server().stats()));
  CHECK(closed->code == static_cast<std::uint32_t>(SocketError::too_many_connections));
  CHECK_MESSAGE(closed->message.find("without a whole request") != std::string::npos, closed->message);
  // Three served, active within keep_active: a fourth from the address is refused.
  silent2.hang_up();
  silent3.hang_up();
  // A slot of the address comes back once the server has seen the hang-up: until then a
  // newcomer is refused, so each tries until it is served.
  const auto served_client = [&](std::int64_t k) {
    for (int attempt = 0; attempt < 100; ++attempt) {
      auto client = local.client(Via::tcp);
      if (client.echo_params(Combo{k, k, k, k, k, k}).has_value()) return client;
      std::this_thread::sleep_for(20ms);
    }
    FAIL("a newcomer was never served after the address's silent connections hung up");
    return local.client(Via::tcp);
  };
  auto second = served_client(2);
  auto third = served_client(3);
  auto fourth = local.client(Via::tcp);
  auto refused = fourth.echo_params(Combo{4, 4, 4, 4, 4, 4});
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::busy);
  CHECK_MESSAGE(refused.error().message.find("maximum of 3 connections one peer may") != std::string::npos,
                refused.error().message);
  // The server is far from its limit: a Unix peer of our uid gets in, and the three go on.
  auto owner = local.client(Via::unix_socket);
  CHECK(owner.echo_params(Combo{5, 5, 5, 5, 5, 5}).has_value());
  CHECK(first.echo_params(Combo{6, 6, 6, 6, 6, 6}).has_value());
  CHECK(second.echo_params(Combo{7, 7, 7, 7, 7, 7}).has_value());
}

TEST_CASE("connections that are never idle from two TCP addresses cannot lock a third address out: the last slots "
          "are kept for peers that hold none") {
  SocketServerOptions options;
  options.max_connections = 20;  // 16 for peers that are not the owner (4 kept for it), 4 of those for new peers
  LocalServer local(options);
  // Two addresses connect eight times each and keep every connection busy with requests. Before:
  // they held all 16 slots, none idle, and a newcomer from a third address was refused.
  std::vector<Raw> busy;
  for (const char* source : {"127.0.0.2", "127.0.0.3"})
    for (int i = 0; i < 8; ++i) busy.push_back(Raw::to_tcp_from(local.server().tcp_port(), source));
  std::atomic<bool> stop{false};
  std::atomic<int> kept{0};
  std::thread hammer([&] {
    const auto frame = echo_params_frame(Combo{1, 2, 3, 4, 5, 6});
    std::vector<bool> open(busy.size(), true);
    while (!stop.load()) {
      int alive = 0;
      for (std::size_t i = 0; i < busy.size(); ++i) {
        if (!open[i]) continue;
        const auto reply = busy[i].send_all(frame) ? busy[i].read_frame(2000ms) : std::nullopt;
        open[i] = reply.has_value() && !as_error(reply).has_value();
        alive += open[i] ? 1 : 0;
      }
      kept.store(alive);
    }
  });
  REQUIRE(eventually([&] { return kept.load() > 0 && local.server().stats().connections_accepted >= 12; }));
  std::this_thread::sleep_for(200ms);
  int served = 0;
  for (int attempt = 0; attempt < 10; ++attempt) {
    auto client = local.client(Via::tcp, 2000ms);  // from 127.0.0.1
    if (client.echo_params(Combo{attempt, 1, 1, 1, 1, 1}).has_value()) ++served;
  }
  stop.store(true);
  hammer.join();
  MESSAGE("the two busy addresses kept " << kept.load() << " connections; a third address was served " << served
                                         << " times of 10");
  CHECK(served == 10);
  CHECK(kept.load() <= 12);  // the two addresses share 12 of the 16 slots
  CHECK(local.rejected(SocketError::too_many_connections) > 0);
}

TEST_CASE("a frame trickling one byte every 70 ms is dropped as stalled by the floor rate, long before the frame "
          "timeout") {
  LocalServer local;  // the defaults: a 5 s frame timeout, a 64 KiB/s floor
  for (const Via via : {Via::tcp, Via::unix_socket}) {
    CAPTURE(name_of(via));
    Raw trickler = local.raw(via);
    const auto frame = echo_params_frame(Combo{1, 2, 3, 4, 5, 6});
    const auto start = std::chrono::steady_clock::now();
    std::optional<ErrorReply> error;
    for (std::size_t i = 0; i < frame.size() && !error; ++i) {
      if (!trickler.send_all(std::span(frame).subspan(i, 1))) break;
      error = as_error(trickler.read_frame(70ms));
    }
    if (!error) error = as_error(trickler.read_frame(3000ms));
    const double waited_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    REQUIRE_MESSAGE(error.has_value(), "the trickling frame was never refused");
    CHECK(error->code == static_cast<std::uint32_t>(SocketError::stalled));
    CHECK_MESSAGE(error->message.find("slower than the server's floor of 65536 bytes a second") != std::string::npos,
                  error->message);
    MESSAGE(fmt::format("{}: dropped after {:.0f} ms", name_of(via), waited_ms));
    CHECK(waited_ms < 2000.0);  // the frame timeout is 5000 ms
    CHECK(trickler.closed_within(3000ms));
    local.check_good_client(via);
  }
}

TEST_CASE("loads past the memory cap get over_memory_cap; a smaller reload or a close gives the bytes back") {
  SocketServerOptions options;
  // small_series() is 3,000 bars. A load counts its frame (24,013 bytes) and reply while it is
  // served, then its series (24,000 bytes).
  options.max_loaded_bytes = 60'000;
  LocalServer local(options);
  const std::vector<double>& series = small_series();
  const std::span<const double> third(series.data(), 1000);
  const std::span<const double> two_thirds(series.data(), 2000);
  std::optional<SocketClient> a = local.client(Via::unix_socket);
  REQUIRE(a->load(series).has_value());
  auto b = local.client(Via::tcp);
  auto refused = b.load(series);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::resource);
  CHECK(refused.error().message.find("over_memory_cap") != std::string::npos);
  CHECK(refused.error().message.find("to 72033 bytes, past its cap of 60000 bytes") != std::string::npos);
  CHECK(b.last_server_error() == static_cast<std::uint32_t>(SocketError::over_memory_cap));
  CHECK_FALSE(b.broken());
  // `a` now holds 8,000 bytes in place of 24,000: b's 24,000 fit.
  REQUIRE(a->load(third).has_value());
  REQUIRE(b.load(series).has_value());
  auto answers = b.sweep_loaded(std::vector<Combo>{combo_from_length(6)});
  REQUIRE(answers.has_value());
  CHECK((*answers)[0] == (*run_sweep(builtin(), series, std::vector<Combo>{combo_from_length(6)}, kDefaultFee, 1))[0]);
  auto c = local.client(Via::unix_socket);
  REQUIRE_FALSE(c.load(two_thirds).has_value());  // 8,000 + 24,000 + 16,033 + 16,000 > 60,000
  a.reset();                                      // its 8,000 bytes go back
  CHECK(eventually([&] { return c.load(two_thirds).has_value(); }));
  CHECK(local.rejected(SocketError::over_memory_cap) >= 2);
}

TEST_CASE("a sweep holding a combo past the bound per combo gets too_costly naming it, and the connection goes on") {
  const std::vector<double>& series = small_series();
  SocketServerOptions options;
  options.max_combo_cost = backtest_cost(combo_from_length(40), series.size());
  LocalServer local(options);
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    CAPTURE(name_of(via));
    auto client = local.client(via);
    const std::vector<Combo> combos = {combo_from_length(6), combo_from_length(40), combo_from_length(41)};
    auto refused = client.sweep(series, combos);
    REQUIRE_FALSE(refused.has_value());
    CHECK(refused.error().code == ErrorCode::invalid_argument);
    CHECK(refused.error().message.find(fmt::format("combo 2: its work ({} multiply-adds) exceeds the server's bound of {}",
                                                   backtest_cost(combos[2], series.size()), options.max_combo_cost)) !=
          std::string::npos);
    CHECK(client.last_server_error() == static_cast<std::uint32_t>(SocketError::too_costly));
    REQUIRE(client.load(series).has_value());
    REQUIRE_FALSE(client.sweep_loaded(std::vector<Combo>{combo_from_length(100)}).has_value());
    auto fine = client.sweep_loaded(std::span(combos).first(2));
    REQUIRE(fine.has_value());
    CHECK(*fine == *run_sweep(builtin(), series, std::span(combos).first(2), kDefaultFee, 1));
  }
  CHECK(local.rejected(SocketError::too_costly) == 4);
}

TEST_CASE("stopping the server waits for at most one combo of a long sweep per sweep thread, never the whole sweep") {
  const std::vector<double> series = series_of(150'000, 11);
  std::vector<Combo> combos(2000, combo_from_length(200));
  const auto t_one = std::chrono::steady_clock::now();
  REQUIRE(run_sweep(builtin(), series, std::span(combos).first(1), kDefaultFee, 1).has_value());
  const double one_combo_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_one).count();
  for (const unsigned sweep_threads : {1u, 2u}) {
    CAPTURE(sweep_threads);
    SocketServerOptions options;
    options.sweep_threads = sweep_threads;
    LocalServer local(options);
    std::atomic<bool> answered{false};
    std::thread caller([&] {
      SocketClientOptions client_options;
      client_options.timeout = 120'000ms;
      auto client = SocketClient::connect_unix(local.path(), client_options);
      if (!client) return;
      (void)client->sweep(series, combos);  // an error or a hang-up: the server stopped under it
      answered.store(true);                 // seq_cst: read after join
    });
    // Wait until the sweep is running: the server's bytes_in covers the whole request.
    const std::uint64_t request_bytes = 13 + series.size() * sizeof(double) + combos.size() * kComboWireBytes;
    REQUIRE(eventually([&] { return local.server().stats().bytes_in >= request_bytes; }, 10'000ms));
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(std::max(20.0, 5 * one_combo_ms))));
    const auto t_stop = std::chrono::steady_clock::now();
    local.server().stop();
    const double stop_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_stop).count();
    caller.join();
    CHECK(answered.load());
    MESSAGE("one combo ", one_combo_ms, " ms; the sweep would take about ", one_combo_ms * 2000 / sweep_threads,
            " ms on ", sweep_threads, " sweep thread(s); stop took ", stop_ms, " ms");
    CHECK(stop_ms < 200.0 + 10 * one_combo_ms);
    CHECK(stop_ms * 20 < one_combo_ms * 2000 / sweep_threads);
  }
}

// ---- One peer never holds up another: fairness, the connection limit and the memory cap -----------

TEST_CASE("a long sweep on one connection holds up another connection's requests for at most one chunk of its work") {
  const std::vector<double> series = series_of(150'000, 11);
  LocalServer local;  // one server thread: every connection below is served by the same thread
  const std::vector<Combo> long_sweep(600, combo_from_length(160));
  std::thread hog([&] {
    SocketClientOptions client_options;
    client_options.timeout = 300'000ms;
    auto client = SocketClient::connect_tcp("127.0.0.1", local.server().tcp_port(), client_options);
    if (client) (void)client->sweep(series, long_sweep);  // answered, or cut off by stop() below
  });
  const auto sweeps_served = [&] { return local.server().stats().served[static_cast<std::size_t>(SocketOpcode::sweep)]; };
  // The long sweep is running once the server has read all of it.
  const std::uint64_t request_bytes = 13 + series.size() * sizeof(double) + long_sweep.size() * kComboWireBytes;
  REQUIRE(eventually([&] { return local.server().stats().bytes_in >= request_bytes; }, 10'000ms));

  // The owner's ECHO over the Unix socket is answered while the long sweep is still running.
  auto owner = local.client(Via::unix_socket, 300'000ms);
  const auto t_echo = std::chrono::steady_clock::now();
  auto echoed = owner.echo(small_series());
  const double echo_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_echo).count();
  REQUIRE_MESSAGE(echoed.has_value(), (echoed ? "" : echoed.error().message));
  MESSAGE("the owner's ECHO took ", echo_ms, " ms during a sweep of ", long_sweep.size(), " combos of window 160");
  CHECK(*echoed == small_series());
  CHECK(sweeps_served() == 0);
  // So is another peer's short sweep, with the right answer.
  auto other = local.client(Via::tcp, 300'000ms);
  const std::vector<Combo> short_sweep = {combo_from_length(31), combo_from_length(6)};
  auto answers = other.sweep(small_series(), short_sweep);
  REQUIRE_MESSAGE(answers.has_value(), (answers ? "" : answers.error().message));
  CHECK(*answers == *run_sweep(builtin(), small_series(), short_sweep, kDefaultFee, 1));
  CHECK(sweeps_served() == 1);
  local.server().stop();  // waits for one combo of the long sweep, not for the rest of it
  hog.join();
}

TEST_CASE("sweeps run a combo per chunk and interleaved, on one or two sweep threads, answer what the kernel "
          "computes, bit for bit, pipelined frames in order") {
  const std::vector<Combo> grid = default_grid();
  const auto expected = run_sweep(builtin(), small_series(), grid, kDefaultFee, 1);
  REQUIRE(expected.has_value());
  for (const unsigned sweep_threads : {1u, 2u}) {
    CAPTURE(sweep_threads);
    SocketServerOptions options;
    options.sweep_chunk_cost = 1;  // every chunk is one combo per sweep thread
    options.sweep_threads = sweep_threads;
    LocalServer local(options);
    std::atomic<int> good{0};
    std::vector<std::thread> clients;
    for (int i = 0; i < 4; ++i) {
      clients.emplace_back([&, i] {
        SocketClientOptions client_options;
        client_options.timeout = 60'000ms;
        auto client = i % 2 == 0 ? SocketClient::connect_unix(local.path(), client_options)
                                 : SocketClient::connect_tcp("127.0.0.1", local.server().tcp_port(), client_options);
        if (!client) return;
        const bool loaded = i < 2 || client->load(small_series()).has_value();
        auto answers = i < 2 ? client->sweep(small_series(), grid) : client->sweep_loaded(grid);
        // relaxed: the joins below publish the count.
        if (loaded && answers && *answers == *expected) good.fetch_add(1, std::memory_order_relaxed);
      });
    }
    for (auto& thread : clients) thread.join();
    CHECK(good.load(std::memory_order_relaxed) == 4);  // relaxed: every writer has joined
    const SocketServerStats stats = local.server().stats();
    CHECK(stats.served[static_cast<std::size_t>(SocketOpcode::sweep)] == 2);
    CHECK(stats.served[static_cast<std::size_t>(SocketOpcode::sweep_loaded)] == 2);

    // Two sweeps with an echo_params between them, in one write: three replies, in order.
    const auto head = std::span(grid).first(5);
    const auto tail = std::span(grid).last(3);
    std::vector<std::byte> bytes = request(SocketOpcode::sweep, small_series(), head);
    const auto echo = echo_params_frame(Combo{9, 8, 7, 6, 5, 4});
    bytes.insert(bytes.end(), echo.begin(), echo.end());
    const auto second = request(SocketOpcode::sweep, small_series(), tail);
    bytes.insert(bytes.end(), second.begin(), second.end());
    Raw raw = local.raw(Via::unix_socket);
    REQUIRE(raw.send_all(bytes));
    for (const auto combos : {head, std::span<const Combo>(), tail}) {
      const auto reply = raw.read_frame();
      REQUIRE(reply.has_value());
      REQUIRE_FALSE(as_error(reply).has_value());
      if (combos.empty()) {
        CHECK(reply->size() == kEchoParamsReplyBytes);
        continue;
      }
      std::vector<BacktestResult> answers(combos.size());
      REQUIRE(decode_sweep_reply(std::span(*reply).subspan(kLengthPrefixBytes), answers));
      CHECK(answers == *run_sweep(builtin(), small_series(), combos, kDefaultFee, 1));
    }
  }
}

TEST_CASE("a peer that hangs up while its sweep runs has the sweep abandoned, and the thread goes on") {
  const std::vector<double> series = series_of(150'000, 11);
  LocalServer local;
  const std::vector<Combo> combos(2000, combo_from_length(200));
  {
    Raw raw = local.raw(Via::unix_socket);
    REQUIRE(raw.send_all(request(SocketOpcode::sweep, series, combos)));
    const std::uint64_t request_bytes = 13 + series.size() * sizeof(double) + combos.size() * kComboWireBytes;
    REQUIRE(eventually([&] { return local.server().stats().bytes_in >= request_bytes; }, 10'000ms));
  }  // closed: the sweep's reply has nobody to go to
  CHECK(eventually([&] { return local.server().stats().connections_dropped == 1; }, 10'000ms));
  CHECK(local.server().stats().served[static_cast<std::size_t>(SocketOpcode::sweep)] == 0);
  local.check_good_client(Via::tcp);
}

TEST_CASE("the memory cap refuses growth past it without changing anything, and shrinking always succeeds") {
  socket_detail::MemoryCap cap(1000);
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  CHECK_FALSE(cap.resize(a, 600, kMemoryForSeries).has_value());
  CHECK(a == 600);
  const auto refused = cap.resize(b, 401, kMemoryForFrame);
  REQUIRE(refused.has_value());
  CHECK(refused->error == SocketError::over_memory_cap);
  CHECK(refused->field == kMemoryForFrame);
  CHECK(refused->actual == 401);
  CHECK(refused->expected == 1000);
  CHECK(refused->limit == 600);
  CHECK(b == 0);
  CHECK_FALSE(cap.resize(b, 400, kMemoryForFrame).has_value());  // exactly the cap
  CHECK_FALSE(cap.resize(a, 100, kMemoryForSeries).has_value());  // shrinking
  CHECK_FALSE(cap.resize(b, 900, kMemoryForRequest).has_value());
  const auto again = cap.resize(a, 101, kMemoryForSeries);
  REQUIRE(again.has_value());
  CHECK(again->limit == 900);
  CHECK(a == 100);
  CHECK_FALSE(cap.resize(a, 0, kMemoryForSeries).has_value());
  CHECK_FALSE(cap.resize(b, 0, kMemoryForRequest).has_value());
  CHECK_FALSE(cap.resize(a, 1000, kMemoryForSeries).has_value());  // everything went back
}

TEST_CASE("the memory cap under eight threads growing and shrinking at once never admits more than the cap, and ends "
          "at zero") {
  constexpr std::uint64_t kCap = 10'000;
  socket_detail::MemoryCap cap(kCap);
  std::atomic<std::uint64_t> admitted{0};  // the bytes granted and not yet given back, as the holders see them
  std::atomic<std::uint64_t> peak{0};
  std::atomic<std::uint64_t> refusals{0};
  std::atomic<std::uint64_t> failed_shrinks{0};
  // A holder gives its last bytes back only once every holder is done: on a loaded host the
  // threads may well run one after another, and the cap must still see them together.
  std::latch finished(8);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 1);
      std::uint64_t held = 0;  // kept between steps: eight holders of up to 3,000 often pass 10,000
      for (int i = 0; i < 200'000; ++i) {
        const std::uint64_t bytes = rng() % 3000;
        // seq_cst on the shadow count: a holder adds bytes only after the cap granted them and
        // removes them before giving them back, so the shadow never exceeds what the cap holds.
        if (bytes <= held) {
          admitted.fetch_sub(held - bytes);
          if (cap.resize(held, bytes, kMemoryForRequest)) failed_shrinks.fetch_add(1);
          continue;
        }
        const std::uint64_t more = bytes - held;
        if (cap.resize(held, bytes, kMemoryForRequest)) {
          refusals.fetch_add(1);
          continue;
        }
        const std::uint64_t now = admitted.fetch_add(more) + more;
        std::uint64_t seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
      }
      finished.arrive_and_wait();
      admitted.fetch_sub(held);
      if (cap.resize(held, 0, kMemoryForRequest)) failed_shrinks.fetch_add(1);
    });
  }
  for (auto& thread : threads) thread.join();
  CHECK(peak.load() <= kCap);
  CHECK(refusals.load() > 0);
  CHECK(failed_shrinks.load() == 0);
  std::uint64_t whole = 0;
  CHECK_FALSE(cap.resize(whole, kCap, kMemoryForRequest).has_value());  // all of it came back
}

TEST_CASE("at the connection limit the longest-idle connection with no request in flight is closed with a busy error, "
          "and the new peer is served") {
  for (const Via via : {Via::unix_socket, Via::tcp}) {
    for (const unsigned threads : {1u, 3u}) {
      CAPTURE(name_of(via));
      CAPTURE(threads);
      SocketServerOptions options;
      options.max_connections = 2;
      options.owner_reserve = 0;
      options.threads = threads;
      options.keep_active = 100ms;  // both below count as idle after the sleep
      LocalServer local(options);
      auto first = local.client(via);
      auto second = local.client(via);
      REQUIRE(first.echo_params(Combo{1, 1, 1, 1, 1, 1}).has_value());
      REQUIRE(second.echo_params(Combo{2, 2, 2, 2, 2, 2}).has_value());
      // Idle times are published once a tick (a quarter of the frame timeout, at most 100 ms).
      std::this_thread::sleep_for(150ms);
      auto third = local.client(via);
      auto served = third.echo_params(Combo{3, 3, 3, 3, 3, 3});
      REQUIRE_MESSAGE(served.has_value(), (served ? "" : served.error().message));
      // `first` was idle longest: it was told why it was closed, and a client library calls it busy.
      auto closed = first.echo_params(Combo{4, 4, 4, 4, 4, 4});
      REQUIRE_FALSE(closed.has_value());
      CHECK(closed.error().code == ErrorCode::busy);
      CHECK(closed.error().message.find("too_many_connections") != std::string::npos);
      CHECK(closed.error().message.find("longest-idle") != std::string::npos);
      CHECK(second.echo_params(Combo{5, 5, 5, 5, 5, 5}).has_value());
      CHECK(third.echo_params(Combo{6, 6, 6, 6, 6, 6}).has_value());
      CHECK(local.rejected(SocketError::too_many_connections) == 1);
      CHECK(local.server().stats().connections_refused == 0);
    }
  }
}

TEST_CASE("frames being buffered count against the memory cap: one that would pass it is refused from its length "
          "prefix, and the connection goes on") {
  SocketServerOptions options;
  options.max_loaded_bytes = 1u << 20;  // 1 MiB
  options.min_frame_rate = 0;           // `holder` holds its frame half-sent for the test
  LocalServer local(options);
  // An ECHO of 100,000 bars: an 800,013-byte frame. Served, it needs as much again for its reply.
  const std::vector<double> bars(100'000, 101.5);
  const std::vector<std::byte> frame = request(SocketOpcode::echo, bars, {});
  REQUIRE(frame.size() == 800'013);
  Raw holder = local.raw(Via::tcp);
  REQUIRE(holder.send_all(std::span(frame).first(1000)));
  REQUIRE(eventually([&] { return local.server().stats().bytes_in >= 1000; }));

  // A second such frame would take the bytes held past 1 MiB: refused from its 4-byte prefix.
  Raw late = local.raw(Via::unix_socket);
  REQUIRE(late.send_all(std::span(frame).first(kLengthPrefixBytes)));
  const auto error = as_error(late.read_frame(3000ms));
  REQUIRE(error.has_value());
  CHECK(error->code == static_cast<std::uint32_t>(SocketError::over_memory_cap));
  CHECK(error->message.find("a frame of 800013 bytes would take") != std::string::npos);
  CHECK(error->message.find("to 1600026 bytes, past its cap of 1048576 bytes") != std::string::npos);
  // The body it sends anyway is skipped, and its next frame is served.
  REQUIRE(late.send_all(std::span(frame).subspan(kLengthPrefixBytes)));
  REQUIRE(late.send_all(echo_params_frame(Combo{7, 7, 7, 7, 7, 7})));
  const auto echoed = late.read_frame();
  REQUIRE(echoed.has_value());
  CHECK_FALSE(as_error(echoed).has_value());
  CHECK(echoed->size() == kEchoParamsReplyBytes);

  // Alone, the whole frame is admitted, but its reply would pass the cap: refused when decoded.
  holder.hang_up();  // its unfinished frame stops counting
  REQUIRE(eventually([&] { return local.rejected(SocketError::truncated) == 1; }));
  REQUIRE(late.send_all(frame));
  const auto too_big = as_error(late.read_frame());
  REQUIRE(too_big.has_value());
  CHECK(too_big->code == static_cast<std::uint32_t>(SocketError::over_memory_cap));
  CHECK(too_big->message.find("this request needs 1600017 bytes (its frame, reply and scratch)") != std::string::npos);
  // Half as many bars fit, frame and reply together.
  const std::vector<std::byte> half = request(SocketOpcode::echo, std::span(bars).first(50'000), {});
  REQUIRE(late.send_all(half));
  const auto answered = late.read_frame();
  REQUIRE(answered.has_value());
  CHECK(answered->size() == kLengthPrefixBytes + 50'000 * sizeof(double));
  CHECK(local.rejected(SocketError::over_memory_cap) == 2);
}

TEST_CASE("30 peers announcing near-maximum frames cannot make the server reserve more than --max-loaded-mb") {
  ServerProcess engine({"--max-loaded-mb", "256", "--min-frame-rate", "0"});
  const std::uint64_t peak_before = vm_peak_kib(engine.child().pid());
  REQUIRE(peak_before > 0);
  // Each announces a 64 MiB - 1 byte body and sends 64 KiB of it: three fit under 256 MiB.
  std::vector<std::byte> start(kLengthPrefixBytes + 65'536, std::byte{0});
  store_le(start.data(), std::uint32_t{kDefaultMaxFrameBytes - 1});
  std::vector<Raw> peers;
  int refused = 0;
  for (int i = 0; i < 30; ++i) {
    peers.push_back(i % 2 == 0 ? Raw::to_unix(engine.path()) : Raw::to_tcp(engine.port()));
    REQUIRE(peers.back().send_all(start));
  }
  for (Raw& peer : peers) {
    const auto error = as_error(peer.read_frame(500ms));
    if (error && error->code == static_cast<std::uint32_t>(SocketError::over_memory_cap)) ++refused;
  }
  CHECK(refused == 27);
  const std::uint64_t grown_kib = vm_peak_kib(engine.child().pid()) - peak_before;
  MESSAGE("VmPeak grew by ", grown_kib / 1024, " MiB");
  CHECK(grown_kib < (256 + 64) * 1024);
  auto client = engine.client(Via::unix_socket);
  CHECK(client.echo_params(Combo{1, 2, 3, 4, 5, 6}).has_value());
}

TEST_CASE("the Unix socket file is 0600 and only our uid gets in; another uid is refused") {
  ServerProcess engine;
  struct stat info {};
  REQUIRE(lstat(engine.path().c_str(), &info) == 0);
  CHECK(S_ISSOCK(info.st_mode));
  CHECK((info.st_mode & 07777) == 0600);
  CHECK(info.st_uid == geteuid());
  if (geteuid() != 0) {
    MESSAGE("not root: cannot act as another uid here; the mode check above still ran");
    return;
  }
  // Let uid 65534 reach the socket file, so that what stops it is the file mode, then SO_PEERCRED.
  REQUIRE(chmod(engine.dir().path().c_str(), 0711) == 0);
  const auto connect_as_nobody = [&]() -> int {
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      if (setgid(65534) != 0 || setuid(65534) != 0) _exit(10);
      const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_un address{};
      address.sun_family = AF_UNIX;
      std::memcpy(address.sun_path, engine.path().c_str(), engine.path().size() + 1);
      if (connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) _exit(errno == EACCES ? 20 : 21);
      const auto frame = echo_params_frame(Combo{1, 2, 3, 4, 5, 6});
      (void)send(fd, frame.data(), frame.size(), MSG_NOSIGNAL);
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 5000) <= 0) _exit(30);
      std::byte reply[256];
      const ssize_t got = recv(fd, reply, sizeof reply, 0);
      if (got < 12) _exit(31);
      std::uint32_t marker = 0, code = 0;
      std::memcpy(&marker, reply, 4);
      std::memcpy(&code, reply + 4, 4);
      if (marker == kErrorReplyMarker && code == static_cast<std::uint32_t>(SocketError::permission_denied)) _exit(0);
      _exit(32);
    }
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFEXITED(status));
    return WEXITSTATUS(status);
  };
  CHECK(connect_as_nobody() == 20);  // mode 0600: the kernel refuses the connect itself
  REQUIRE(chmod(engine.path().c_str(), 0666) == 0);
  CHECK(connect_as_nobody() == 0);   // through the file mode: SO_PEERCRED refuses, with a reason
  auto ours = engine.client(Via::unix_socket);
  CHECK(ours.echo_params(Combo{5, 5, 5, 5, 5, 5}).has_value());
}

// ---- Lifecycle -------------------------------------------------------------------------------------

TEST_CASE("a stale socket file is replaced, a live server's is refused, and a non-socket file is never touched") {
  TempDir dir;
  const std::string path = dir.file("s.sock");
  SocketServerOptions options;
  options.unix_path = path;
  options.log = false;
  {
    // A socket file nobody listens on, as a crashed server leaves it.
    const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
    close(fd);
  }
  auto first = SocketServer::start(options);
  REQUIRE_MESSAGE(first.has_value(), (first ? "" : first.error().message));
  auto second = SocketServer::start(options);
  REQUIRE_FALSE(second.has_value());
  CHECK(second.error().code == ErrorCode::busy);
  CHECK(second.error().message.find("a server is already listening on " + path) != std::string::npos);
  auto client = SocketClient::connect_unix(path);
  REQUIRE(client.has_value());
  CHECK(client->echo_params(Combo{1, 2, 3, 4, 5, 6}).has_value());  // the refusal did not disturb it
  (*first)->stop();
  CHECK_FALSE(fs::exists(path));

  const std::string regular = dir.file("not-a-socket");
  std::ofstream(regular) << "keep me";
  options.unix_path = regular;
  auto refused = SocketServer::start(options);
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message.find("exists and is not a socket") != std::string::npos);
  CHECK(fs::file_size(regular) == 7);

  options.unix_path = std::string(200, 'x');
  CHECK_FALSE(SocketServer::start(options).has_value());
}

TEST_CASE("the tcp endpoint parser defaults to loopback and names what is wrong") {
  CHECK(parse_tcp_endpoint("7878")->host == "127.0.0.1");
  CHECK(parse_tcp_endpoint(":7878")->port == 7878);
  CHECK(parse_tcp_endpoint("0.0.0.0:1")->host == "0.0.0.0");
  CHECK(parse_tcp_endpoint("[::1]:9")->host == "::1");
  CHECK(parse_tcp_endpoint("localhost:0")->port == 0);
  for (const char* bad : {"", "host:", "host:65536", "host:-1", "::1:80", "[::1]80", "1.2.3.4:x"}) {
    CAPTURE(bad);
    const auto parsed = parse_tcp_endpoint(bad);
    REQUIRE_FALSE(parsed.has_value());
    CHECK(parsed.error().code == ErrorCode::invalid_argument);
  }
}

TEST_CASE("clients get clear errors when nothing is there, and when the server goes away mid-session") {
  TempDir dir;
  auto none = SocketClient::connect_unix(dir.file("none.sock"));
  REQUIRE_FALSE(none.has_value());
  CHECK(none.error().message.find("no socket at") != std::string::npos);
  auto refused = SocketClient::connect_tcp("127.0.0.1", free_loopback_port());
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().message.find("nothing listens on tcp 127.0.0.1:") != std::string::npos);

  std::optional<ServerProcess> engine;
  engine.emplace();
  auto client = engine->client(Via::tcp);
  REQUIRE(client.echo_params(Combo{1, 1, 1, 1, 1, 1}).has_value());
  const std::string path = engine->path();
  const int status = engine->child().stop(SIGTERM);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK_FALSE(fs::exists(path));  // a clean stop removes the socket file
  auto gone = client.echo_params(Combo{2, 2, 2, 2, 2, 2});
  REQUIRE_FALSE(gone.has_value());
  CHECK(gone.error().code == ErrorCode::peer_gone);
  CHECK(gone.error().message.find("tcp 127.0.0.1:") != std::string::npos);
  CHECK(client.broken());
  auto after = client.echo_params(Combo{3, 3, 3, 3, 3, 3});
  REQUIRE_FALSE(after.has_value());
  CHECK(after.error().message.find("unusable after an earlier failure") != std::string::npos);
}

TEST_CASE("a client waiting on a server that never answers times out within its bound") {
  TempDir dir;
  const std::string path = dir.file("mute.sock");
  const int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  REQUIRE(listen(listener, 4) == 0);  // accepts (in the backlog) and never reads or writes
  SocketClientOptions options;
  options.timeout = 250ms;
  auto client = SocketClient::connect_unix(path, options);
  REQUIRE(client.has_value());
  const auto t0 = std::chrono::steady_clock::now();
  auto answer = client->echo_params(Combo{1, 2, 3, 4, 5, 6});
  const double waited_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE_FALSE(answer.has_value());
  CHECK(answer.error().code == ErrorCode::timeout);
  CHECK(answer.error().message.find("did not answer echo_params (opcode 4) within 250 ms") != std::string::npos);
  CHECK(waited_ms >= 240.0);
  CHECK(waited_ms < 1000.0);
  close(listener);
}

TEST_CASE("`ipcfloor serve` refuses a socket path a live server holds, and --no-shm needs a socket") {
  ServerProcess engine;
  int code = 0;
  const std::string binary = IPCFLOOR_BINARY;
  (void)run_command(binary + " serve --no-shm --quiet --socket " + engine.path() + " 2>/dev/null", code);
  CHECK(code != 0);
  CHECK(engine.client(Via::unix_socket).echo_params(Combo{1, 1, 1, 1, 1, 1}).has_value());
  (void)run_command(binary + " serve --no-shm --quiet 2>/dev/null", code);
  CHECK(code != 0);
}
