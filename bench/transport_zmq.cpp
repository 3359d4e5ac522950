// zeromq-ipc: libzmq REQ/REP over an ipc:// endpoint (a Unix socket underneath) to a forked
// process pinned to the server core, which answers through dispatch_request. Each side's
// context is created after the fork (a zmq context must never cross one), so its I/O thread
// inherits that side's pinning: every message goes caller -> I/O thread -> socket -> I/O
// thread -> peer, which is what a zmq user pays on one host.
//
// libzmq is opened with dlopen on first use, not linked: linking it would load libzmq and its
// dozen dependencies (krb5, sodium, pgm, ...) at every start of ipcfloor, which doubled the
// `spawn` rung here. The header is still needed at build time (libzmq3-dev).

#include "bench/transports.hpp"

#if defined(IPCFLOOR_HAVE_ZMQ)

#include <dlfcn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <memory>
#include <string>

#include <zmq.h>

#include "bench/child_exit.hpp"
#include "bench/rung_timing.hpp"
#include "bench/echo_peer.hpp"
#include "common/affinity.hpp"

namespace ipcfloor {

namespace {

constexpr int kPayloadBytes = static_cast<int>(sizeof(Combo));
constexpr int kCallTimeoutMs = 5000;
// The echo side gives up when nothing arrives for this long (its parent hung or vanished).
constexpr int kIdleTimeoutMs = 30000;

// The part of libzmq's C API this rung uses, resolved from the shared library.
struct ZmqApi {
  decltype(&::zmq_ctx_new) ctx_new;
  decltype(&::zmq_ctx_term) ctx_term;
  decltype(&::zmq_socket) socket;
  decltype(&::zmq_close) close;
  decltype(&::zmq_setsockopt) setsockopt;
  decltype(&::zmq_bind) bind;
  decltype(&::zmq_connect) connect;
  decltype(&::zmq_send) send;
  decltype(&::zmq_recv) recv;
  decltype(&::zmq_errno) errno_value;
  decltype(&::zmq_strerror) strerror;

  [[nodiscard]] const char* last_error() const { return strerror(errno_value()); }
};

template <class Fn>
bool resolve(void* library, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));
  return fn != nullptr;
}

// Opens libzmq once per process; the handle stays open for the process's life.
Expected<const ZmqApi*> load_zmq() {
  static const Expected<ZmqApi> loaded = []() -> Expected<ZmqApi> {
    void* library = dlopen("libzmq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr)
      return fail(ErrorCode::resource, "libzmq not installed (apt-get install libzmq3-dev): {}", dlerror());
    ZmqApi api{};
    if (!resolve(library, "zmq_ctx_new", api.ctx_new) || !resolve(library, "zmq_ctx_term", api.ctx_term) ||
        !resolve(library, "zmq_socket", api.socket) || !resolve(library, "zmq_close", api.close) ||
        !resolve(library, "zmq_setsockopt", api.setsockopt) || !resolve(library, "zmq_bind", api.bind) ||
        !resolve(library, "zmq_connect", api.connect) || !resolve(library, "zmq_send", api.send) ||
        !resolve(library, "zmq_recv", api.recv) || !resolve(library, "zmq_errno", api.errno_value) ||
        !resolve(library, "zmq_strerror", api.strerror))
      return fail(ErrorCode::resource, "libzmq.so.5 lacks a function this rung needs: {}", dlerror());
    return api;
  }();
  if (!loaded) return std::unexpected(loaded.error());
  return &*loaded;
}

// One context and one socket, closed in the right order whichever way the scope ends.
class ZmqEndpoint {
 public:
  ZmqEndpoint(const ZmqEndpoint&) = delete;
  ZmqEndpoint& operator=(const ZmqEndpoint&) = delete;
  ~ZmqEndpoint() {
    if (socket_ != nullptr) api_->close(socket_);
    if (context_ != nullptr) api_->ctx_term(context_);
  }

  // A socket of `type` with both timeouts set and no linger (a dead peer must not stall close).
  static Expected<std::unique_ptr<ZmqEndpoint>> open(const ZmqApi& api, int type, int receive_timeout_ms) {
    auto endpoint = std::unique_ptr<ZmqEndpoint>(new ZmqEndpoint(api));
    endpoint->context_ = api.ctx_new();
    if (endpoint->context_ == nullptr) return fail(ErrorCode::io, "zeromq-ipc: zmq_ctx_new: {}", api.last_error());
    endpoint->socket_ = api.socket(endpoint->context_, type);
    if (endpoint->socket_ == nullptr) return fail(ErrorCode::io, "zeromq-ipc: zmq_socket: {}", api.last_error());
    const int linger = 0;
    const int send_timeout = kCallTimeoutMs;
    if (api.setsockopt(endpoint->socket_, ZMQ_LINGER, &linger, sizeof linger) != 0 ||
        api.setsockopt(endpoint->socket_, ZMQ_RCVTIMEO, &receive_timeout_ms, sizeof receive_timeout_ms) != 0 ||
        api.setsockopt(endpoint->socket_, ZMQ_SNDTIMEO, &send_timeout, sizeof send_timeout) != 0)
      return fail(ErrorCode::io, "zeromq-ipc: zmq_setsockopt: {}", api.last_error());
    return endpoint;
  }

  [[nodiscard]] void* socket() const noexcept { return socket_; }

 private:
  explicit ZmqEndpoint(const ZmqApi& api) : api_(&api) {}
  const ZmqApi* api_;
  void* context_ = nullptr;
  void* socket_ = nullptr;
};

// The forked echo side. Returns its exit status: 0 after the empty stop message.
int serve_echo(const ZmqApi& api, const std::string& endpoint_name, int cpu) {
  if (!pin_current_thread(cpu)) return kEchoPinFailed;
  auto endpoint = ZmqEndpoint::open(api, ZMQ_REP, kIdleTimeoutMs);
  if (!endpoint) return kEchoSetupFailed;
  void* socket = (*endpoint)->socket();
  if (api.bind(socket, endpoint_name.c_str()) != 0) return kEchoSetupFailed;
  EchoPeer peer;
  for (std::uint64_t seq = 0;; ++seq) {
    const int got = api.recv(socket, &peer.params(), sizeof(Combo), 0);
    if (got < 0) return kEchoIdle;
    if (got == 0) return api.send(socket, nullptr, 0, 0) == 0 ? kEchoStopped : kEchoIdle;
    if (got != kPayloadBytes) return kEchoBadFrame;
    if (!peer.answer(seq)) return kEchoDispatchFailed;
    const Combo echoed = peer.reply();
    if (api.send(socket, &echoed, sizeof echoed, 0) != kPayloadBytes) return kEchoIdle;
  }
}

// The ipc:// endpoint's socket file, removed whichever way the run ends.
class SocketPath {
 public:
  SocketPath() {
    static std::atomic<int> counter{0};
    // relaxed: only distinctness matters.
    path_ = "/tmp/ipcfloor-zmq-" + std::to_string(getpid()) + "-" +
            std::to_string(counter.fetch_add(1, std::memory_order_relaxed)) + ".sock";
  }
  SocketPath(const SocketPath&) = delete;
  SocketPath& operator=(const SocketPath&) = delete;
  ~SocketPath() { unlink(path_.c_str()); }
  [[nodiscard]] std::string endpoint() const { return "ipc://" + path_; }

 private:
  std::string path_;
};

// The timed round trips on a connected REQ socket, then the empty message that tells the echo
// process (`child`) to exit, unless a round trip failed and left REQ/REP out of step. The first
// requests wait until the echo side has bound: zmq reconnects until it has.
Expected<std::vector<double>> time_echoes(const TransportContext& context, const ZmqApi& api, void* socket,
                                          pid_t child) {
  Combo payload{};
  Combo reply{};
  bool exchanged = false;
  auto samples = time_round_trips(context, RoundTrip{
      .prepare = [&](std::size_t i) {
        payload = ladder_payload(i);
        reply = Combo{};
        exchanged = true;
      },
      .exchange = [&](std::size_t) {
        const int sent = api.send(socket, &payload, sizeof payload, 0);
        return sent == kPayloadBytes ? api.recv(socket, &reply, sizeof reply, 0) : -1;
      },
      .check = [&](std::size_t i, int got) -> Expected<Answer> {
        if (got < 0)
          return fail(ErrorCode::peer_gone, "zeromq-ipc: round trip {} ({}): the echo process (pid {}) {}", i,
                      api.last_error(), child, describe_echo_process(child));
        if (got != kPayloadBytes || reply != payload)
          return fail(ErrorCode::protocol, "zeromq-ipc: ECHO {} came back as {} bytes, payload {}", i, got, reply.h);
        return Answer::answered;
      },
  });
  if (!samples && exchanged) return samples;  // REQ/REP may be out of step: the echo side is reaped or killed
  // The empty message tells the echo side to exit; it answers so REQ/REP stays in step.
  if (api.send(socket, nullptr, 0, 0) != 0 || api.recv(socket, nullptr, 0, 0) != 0)
    return fail(ErrorCode::peer_gone, "zeromq-ipc: stopping the echo process: {}", api.last_error());
  return samples;
}

}  // namespace

Expected<std::vector<double>> run_zeromq_ipc(const TransportContext& context) {
  auto loaded = load_zmq();
  if (!loaded) return std::unexpected(loaded.error());
  const ZmqApi& api = **loaded;
  unpin_current_thread();  // the forked echo side inherits this mask, then pins itself
  const SocketPath path;
  const std::string endpoint_name = path.endpoint();
  const pid_t parent = getpid();
  const pid_t child = fork();
  if (child < 0) return fail(ErrorCode::io, "zeromq-ipc: fork: {}", std::strerror(errno));
  if (child == 0) {
    // The echo side must not outlive a benchmark that was killed.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    _exit(getppid() == parent ? serve_echo(api, endpoint_name, context.server_cpu) : kEchoOrphaned);
  }
  Expected<std::vector<double>> samples = std::unexpected(Error{ErrorCode::io, "not run"});
  {
    auto endpoint = ZmqEndpoint::open(api, ZMQ_REQ, kCallTimeoutMs);
    if (!endpoint) {
      samples = std::unexpected(endpoint.error());
    } else if (api.connect((*endpoint)->socket(), endpoint_name.c_str()) != 0) {
      samples = fail(ErrorCode::io, "zeromq-ipc: connect {}: {}", endpoint_name, api.last_error());
    } else {
      samples = time_echoes(context, api, (*endpoint)->socket(), child);
    }
  }
  const int status = reap_child(child, std::chrono::seconds(5));
  if (!samples) return samples;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail(ErrorCode::peer_gone, "zeromq-ipc: the echo process ended with wait status {}", status);
  return samples;
}

}  // namespace ipcfloor

#else  // !IPCFLOOR_HAVE_ZMQ

namespace ipcfloor {

Expected<std::vector<double>> run_zeromq_ipc(const TransportContext&) {
  return fail(ErrorCode::resource, "libzmq not installed (apt-get install libzmq3-dev), so zeromq-ipc was not built");
}

}  // namespace ipcfloor

#endif
