// ipcfloor-iceoryx: the `iceoryx` rung of the floor ladder as its own small executable, run by
// bench/transport_iceoryx.cpp once that has started a RouDi (the broker every iceoryx process
// registers with). Eclipse iceoryx 2.0 request/response (iox::popo::Client and Server): this
// process forks the echo server pinned to the server core, which answers through
// dispatch_request, and is itself the client, pinned to the client core. Both sides busy-poll
// take(), as the shm ring's spin mode does. A round trip is loan, write, send, take, read and
// release: the full cost of an iceoryx call.
//
// Why a separate executable: linking iceoryx into ipcfloor put four more shared libraries in
// every ipcfloor start, which made the `spawn` rung (a process per call) about a third slower.
//
// Usage: ipcfloor-iceoryx SAMPLES WARMUP CLIENT_CPU SERVER_CPU
// stdout: SAMPLES round trips as native-endian uint64 TSC tick counts (the caller converts them
// with its calibrated clock); stderr: one line saying why, when the exit status is not 0.

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <iceoryx_hoofs/log/logmanager.hpp>
#include <iceoryx_posh/popo/client.hpp>
#include <iceoryx_posh/popo/server.hpp>
#include <iceoryx_posh/runtime/posh_runtime.hpp>

#include "bench/child_exit.hpp"
#include "bench/echo_peer.hpp"
#include "bench/latency.hpp"
#include "bench/transports.hpp"
#include "common/affinity.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {
namespace {

constexpr auto kConnectTimeout = std::chrono::seconds(10);
constexpr auto kCallTimeout = std::chrono::seconds(5);
// The echo server gives up when no request arrives for this long (its client vanished).
constexpr auto kIdleTimeout = std::chrono::seconds(30);
// A payload no round trip sends (ladder_payload's h is the sequence number, never negative).
constexpr Combo kStopRequest{.h = -1, .L = 0, .s = 0, .p3 = 0, .p2 = 0, .p = 0};

// Exit statuses of this program and of its echo server child.
enum ExitCode : int {
  kExitOk = 0,
  kExitUsage = 1,
  kExitPinFailed = 2,
  kExitRuntimeFailed = 3,
  kExitNotConnected = 4,
  kExitLoanFailed = 5,
  kExitSendFailed = 6,
  kExitReceiveFailed = 7,
  kExitTimedOut = 8,
  kExitBadReply = 9,
  kExitDispatchFailed = 10,
  kExitWriteFailed = 11,
  kExitOrphaned = 12,
  kExitForkFailed = 13,
};

std::string_view exit_reason(int code) {
  switch (code) {
    case kExitOk: return "finished";
    case kExitUsage: return "bad arguments";
    case kExitPinFailed: return "could not pin itself";
    case kExitRuntimeFailed: return "could not run the round trips";
    case kExitNotConnected: return "did not connect to the echo server within 10 s";
    case kExitLoanFailed: return "could not loan a chunk";
    case kExitSendFailed: return "could not send";
    case kExitReceiveFailed: return "take() failed";
    case kExitTimedOut: return "waited too long for its peer";
    case kExitBadReply: return "got a reply that is not the request's payload";
    case kExitDispatchFailed: return "dispatch_request refused an ECHO";
    case kExitWriteFailed: return "could not write its samples";
    case kExitOrphaned: return "found its parent gone";
    case kExitForkFailed: return "could not fork";
  }
  return "failed";
}

// From std::string, not literals: with a literal, GCC 12 inlines iceoryx's truncating copy and
// warns about a branch that cannot run (-Warray-bounds).
iox::capro::IdString_t id_string(const std::string& text) {
  return iox::capro::IdString_t(iox::cxx::TruncateToCapacity, text);
}

iox::capro::ServiceDescription service_for(const std::string& tag) {
  return {id_string("ipcfloor"), id_string("ladder-echo"), id_string(tag)};
}

void init_runtime(const std::string& name) {
  // Warnings only, without the "log level set" banner: stdout carries the samples.
  iox::log::LogManager::GetLogManager().SetDefaultLogLevel(iox::log::LogLevel::kWarn,
                                                           iox::log::LogLevelOutput::kHideLogLevel);
  iox::runtime::PoshRuntime::initRuntime(iox::RuntimeName_t(iox::cxx::TruncateToCapacity, name));
}

// The echo server process: answers every request until the stop request or the idle timeout.
int serve_echo(const std::string& tag, int cpu) {
  if (!pin_current_thread(cpu)) return kExitPinFailed;
  init_runtime("ipcfloor-echo-" + tag);
  iox::popo::Server<Combo, Combo> server(service_for(tag));
  EchoPeer peer;
  // The idle clock is read once per 4096 empty polls and never on the request path: a request
  // only marks the server busy, and the next clock read restarts the idle span.
  auto idle_since = std::chrono::steady_clock::now();
  bool served_since_check = false;
  for (std::uint64_t seq = 0, polls = 0;;) {
    auto taken = server.take();
    if (taken.has_error()) {
      if (taken.get_error() != iox::popo::ServerRequestResult::NO_PENDING_REQUESTS) return kExitReceiveFailed;
      if ((++polls & 4095) == 0) {
        const auto now = std::chrono::steady_clock::now();
        if (served_since_check) idle_since = now;
        served_since_check = false;
        if (now - idle_since > kIdleTimeout) return kExitTimedOut;
      }
      cpu_relax();
      continue;
    }
    served_since_check = true;
    const auto& request = taken.value();
    if (*request == kStopRequest) return kExitOk;
    peer.params() = *request;
    if (!peer.answer(seq++)) return kExitDispatchFailed;
    auto loaned = server.loan(request);
    if (loaned.has_error()) return kExitLoanFailed;
    *loaned.value() = peer.reply();
    if (loaned.value().send().has_error()) return kExitSendFailed;
  }
}

struct Options {
  std::size_t samples = 0;
  std::size_t warmup = 0;
  int client_cpu = 0;
  int server_cpu = 0;
};

// The measuring client: this process. Returns the tick count of every timed round trip.
Expected<std::vector<std::uint64_t>> run_client(const std::string& tag, const Options& options) {
  if (auto pinned = pin_current_thread(options.client_cpu); !pinned) return std::unexpected(pinned.error());
  init_runtime("ipcfloor-ladder-" + tag);
  iox::popo::Client<Combo, Combo> client(service_for(tag));
  const auto connect_deadline = std::chrono::steady_clock::now() + kConnectTimeout;
  while (client.getConnectionState() != iox::ConnectionState::CONNECTED) {
    if (std::chrono::steady_clock::now() > connect_deadline)
      return fail(ErrorCode::timeout, "the client did not connect to the echo server within {} s", kConnectTimeout.count());
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<std::uint64_t> ticks;
  ticks.reserve(options.samples);
  const std::size_t total = options.warmup + options.samples;
  for (std::size_t i = 0; i < total; ++i) {
    const Combo payload = ladder_payload(i);
    Combo reply{};
    const auto started = std::chrono::steady_clock::now();
    const std::uint64_t t0 = TscClock::now();
    {
      auto loaned = client.loan();
      if (loaned.has_error()) return fail(ErrorCode::resource, "round trip {}: could not loan a request chunk", i);
      *loaned.value() = payload;
      if (loaned.value().send().has_error()) return fail(ErrorCode::io, "round trip {}: send failed", i);
    }
    for (std::uint64_t polls = 1;; ++polls) {
      auto taken = client.take();
      if (!taken.has_error()) {
        reply = *taken.value();
        break;  // the response chunk is released here, inside the timed span
      }
      if (taken.get_error() != iox::popo::ChunkReceiveResult::NO_CHUNK_AVAILABLE)
        return fail(ErrorCode::io, "round trip {}: take() failed", i);
      // The bound is checked once per 4096 empty polls, so it stays out of a normal round trip.
      if ((polls & 4095) == 0 && std::chrono::steady_clock::now() - started > kCallTimeout)
        return fail(ErrorCode::peer_gone, "round trip {}: no reply within {} s", i, kCallTimeout.count());
      cpu_relax();
    }
    const std::uint64_t t1 = TscClock::now();
    if (reply != payload) return fail(ErrorCode::protocol, "ECHO {} came back as {}", i, reply.h);
    if (i >= options.warmup) ticks.push_back(t1 - t0);
  }
  auto stop = client.loan();
  if (!stop.has_error()) {
    *stop.value() = kStopRequest;
    (void)stop.value().send();  // best effort: the server also stops on its idle timeout
  }
  return ticks;
}

bool write_all(int fd, const void* data, std::size_t size) {
  const auto* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = write(fd, bytes, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

template <class T>
bool parse(const char* text, T& out) {
  const std::string_view view(text);
  const auto [end, ec] = std::from_chars(view.data(), view.data() + view.size(), out);
  return ec == std::errc{} && end == view.data() + view.size();
}

int run(int argc, char** argv) {
  Options options;
  if (argc != 5 || !parse(argv[1], options.samples) || !parse(argv[2], options.warmup) ||
      !parse(argv[3], options.client_cpu) || !parse(argv[4], options.server_cpu)) {
    fmt::print(stderr, "usage: ipcfloor-iceoryx SAMPLES WARMUP CLIENT_CPU SERVER_CPU\n");
    return kExitUsage;
  }
  const std::string tag = std::to_string(getpid());
  const pid_t parent = getpid();
  std::fflush(nullptr);  // nothing buffered here may be written twice by the child's exit
  const pid_t server = fork();
  if (server < 0) {
    fmt::print(stderr, "fork: {}\n", std::strerror(errno));
    return kExitForkFailed;
  }
  if (server == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the client
    // std::exit, not _exit: the iceoryx runtime unregisters from RouDi in a static destructor.
    std::exit(getppid() == parent ? serve_echo(tag, options.server_cpu) : kExitOrphaned);
  }
  auto ticks = run_client(tag, options);
  const int server_status = reap_child(server, std::chrono::seconds(5));
  if (!ticks) {
    fmt::print(stderr, "{}; the echo server {}\n", ticks.error().message, describe_wait_status(server_status, exit_reason));
    return kExitRuntimeFailed;
  }
  if (!write_all(STDOUT_FILENO, ticks->data(), ticks->size() * sizeof(std::uint64_t))) {
    fmt::print(stderr, "writing the samples: {}\n", std::strerror(errno));
    return kExitWriteFailed;
  }
  return kExitOk;
}

}  // namespace
}  // namespace ipcfloor

int main(int argc, char** argv) { return ipcfloor::run(argc, argv); }
