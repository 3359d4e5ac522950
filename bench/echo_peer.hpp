#pragma once
// The echo side of a ladder rung that runs in a peer process (boost-message-queue, zeromq-ipc,
// iceoryx): it answers each 48-byte payload through dispatch_request, as the engine's serving
// thread would, and a forked one reports why it ended through its exit code. EchoPeer is
// header-only, so that ipcfloor-iceoryx (a separate executable that does not link
// ipcfloor_bench) uses it too; the exit-code functions live in bench/echo_peer.cpp.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "bench/transports.hpp"
#include "engine/dispatch.hpp"
#include "kernel/kernel.hpp"

namespace ipcfloor {

// One ECHO request slot and its response. Construction allocates (the kernel workspace);
// answer() and reply() allocate nothing and make no syscall. One thread uses an EchoPeer.
class EchoPeer {
 public:
  // Where the next request's payload goes: a transport receives the 48 bytes straight into it.
  [[nodiscard]] Combo& params() noexcept { return request_.params; }

  // Answers the payload in params() as request `seq`. False when dispatch_request refused it.
  // Inline, with `seq` passed in rather than counted in a member: the peer's per-request work
  // sits inside the client's timed round trip, so it stays one store and one call.
  [[nodiscard]] bool answer(std::uint64_t seq) noexcept {
    request_.seq = seq;
    return dispatch_request(request_, {}, 0.0, workspace_, response_) == Status::ok;
  }

  // The echoed payload of the last answer().
  [[nodiscard]] Combo reply() const noexcept { return response_.echo(); }

 private:
  KernelWorkspace workspace_{1};  // ECHO never touches it; dispatch_request's signature wants one
  RequestSlot request_ = ladder_echo_request();
  ResponseSlot response_{};
};

// Exit codes of a forked echo side (boost-message-queue, zeromq-ipc), named so the parent's
// error says why it ended.
enum EchoExit : int {
  kEchoStopped = 0,  // got the stop message
  kEchoPinFailed = 2,
  kEchoIdle = 3,  // nothing arrived, or a reply could not be sent, for the idle timeout
  kEchoSetupFailed = 4,
  kEchoBadFrame = 5,
  kEchoDispatchFailed = 6,
  kEchoOrphaned = 7,  // the parent was gone before the child started
};

// The words for an EchoExit code; "failed" for any other. Any thread.
[[nodiscard]] std::string_view echo_exit_reason(int code);

// What became of a forked echo side that did not answer: "exited with status 3 (timed out
// waiting for its peer)" or "was killed by signal ..." (and it is reaped), or "is alive but did
// not answer within 5 s" (both rungs' call timeout). Error path: allocates the text. Call it
// from the thread that may reap `pid`. Out of line on purpose: inlined into a rung's client
// loop it changed the register allocation and put two loads inside the timed span.
[[nodiscard]] std::string describe_echo_process(pid_t pid);

}  // namespace ipcfloor
