#pragma once
// Runs `ipcfloor serve` as a real child process and waits (bounded) for its segment, so that
// benchmarks and integration tests talk to the engine exactly as users do: across processes.

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "bench/child_process.hpp"

namespace ipcfloor {

// The running ipcfloor executable's path (/proc/self/exe), or `fallback` when it cannot be read.
[[nodiscard]] std::string self_executable(const std::string& fallback = "ipcfloor");

class EngineChild {
 public:
  // Starts `binary serve --name NAME --quiet ARGS...` and waits up to `startup` for the segment
  // to attach. up() says whether it did; a child that exited early is reaped.
  EngineChild(std::string binary, std::string name, const std::vector<std::string>& args,
              std::chrono::milliseconds startup = std::chrono::seconds(10));
  EngineChild(const EngineChild&) = delete;
  EngineChild& operator=(const EngineChild&) = delete;
  ~EngineChild();  // stop(SIGINT)

  [[nodiscard]] bool up() const noexcept { return up_; }
  // The child's pid; -1 when it could not start, exited early or was stopped.
  [[nodiscard]] pid_t pid() const noexcept { return process_ ? process_->pid() : -1; }
  [[nodiscard]] const std::string& name() const noexcept { return name_; }

  // Sends `signal`, reaps the child (SIGKILL after 5 s) and removes a segment it left behind.
  // Returns the wait status, or -1 when there was no child.
  int stop(int signal);

 private:
  std::string name_;
  std::optional<ChildProcess> process_;  // empty when the spawn failed
  bool up_ = false;
};

// A segment name unique to this process: "ipcfloor-<what>-<pid>-<n>".
[[nodiscard]] std::string unique_segment_name(const std::string& what);

}  // namespace ipcfloor
