#pragma once
// How a benchmark's child process ended: reaping it within a bound, and its wait status in
// words for an error message. Header-only, so that ipcfloor-iceoryx (a separate executable that
// does not link ipcfloor_bench) uses the same code.

#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <string>
#include <string_view>
#include <thread>

namespace ipcfloor {

// A program's name for one of its own exit codes ("timed out waiting for its peer").
using ExitReason = std::string_view (*)(int code);

// Waits for `pid` to exit and returns its wait status; SIGKILLs it once `grace` has passed.
// Teardown path: polls every 2 ms (sleeps), allocates nothing. Call it from the thread that
// may reap `pid` (any thread of its parent), once: afterwards the pid is gone.
inline int reap_child(pid_t pid, std::chrono::milliseconds grace) {
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + grace;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return status;
}

// "exited with status 3", with " (REASON)" when `reason` is given; "was killed by signal 9
// (Killed)"; or "stopped". Allocates the text; any thread.
[[nodiscard]] inline std::string describe_wait_status(int status, ExitReason reason = nullptr) {
  if (WIFEXITED(status)) {
    std::string text = "exited with status " + std::to_string(WEXITSTATUS(status));
    if (reason != nullptr) text += " (" + std::string(reason(WEXITSTATUS(status))) + ")";
    return text;
  }
  if (WIFSIGNALED(status))
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

}  // namespace ipcfloor
