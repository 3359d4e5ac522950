#include "bench/echo_peer.hpp"

#include <sys/wait.h>

#include "bench/child_exit.hpp"

namespace ipcfloor {

std::string_view echo_exit_reason(int code) {
  switch (code) {
    case kEchoStopped: return "stopped";
    case kEchoPinFailed: return "could not pin itself to the server cpu";
    case kEchoIdle: return "timed out waiting for its peer";
    case kEchoSetupFailed: return "could not open its end";
    case kEchoBadFrame: return "received a frame that is not 48 bytes";
    case kEchoDispatchFailed: return "dispatch_request refused an ECHO";
    case kEchoOrphaned: return "found its parent gone";
  }
  return "failed";
}

std::string describe_echo_process(pid_t pid) {
  int status = 0;
  if (waitpid(pid, &status, WNOHANG) != pid) return "is alive but did not answer within 5 s";
  return describe_wait_status(status, echo_exit_reason);
}

}  // namespace ipcfloor
