#pragma once
// Child processes for benchmarks and integration tests: ChildProcess keeps any `ipcfloor` command
// (or another program) running beside them, e.g. `ipcfloor serve --no-shm --socket PATH`, where
// EngineChild's wait for a segment does not apply; run_captured runs a program to its end and
// returns what it printed: the one way a benchmark reads a program's output (compute's numba
// reference, granularity's process per sweep, python's venv and pip steps, `bench all`'s plots).

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace ipcfloor {

// What run_captured collects from the child.
enum class Capture { stdout_only, stdout_and_stderr };

// Runs `argv` (argv[0] a path; PATH is not searched) to its end and returns what it printed on
// stdout (with stdout_and_stderr, its stderr too, interleaved as written; else its stderr stays
// this process's, so a failing child explains itself on the terminal). The child inherits this
// thread's cpu mask, environment and stdin, as a shell's child would. When it does not exit 0 the
// error names the program, how it ended and the last 4,000 characters it printed. Blocks until
// the child exits; allocates; any thread.
[[nodiscard]] Expected<std::string> run_captured(const std::vector<std::string>& argv,
                                                 Capture capture = Capture::stdout_only);

class ChildProcess {
 public:
  // Spawns argv[0] (a path; PATH is not searched) with `argv`, its stdout on /dev/null. A child inherits the spawning
  // thread's cpu mask and a benchmark thread is usually pinned, so the mask is opened to every
  // online cpu for the spawn and restored. Errors name the program and the reason.
  [[nodiscard]] static Expected<ChildProcess> spawn(const std::vector<std::string>& argv);

  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();  // stop(SIGINT)

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }
  // True while the child has not exited; reaps it (and keeps its status) when it has.
  [[nodiscard]] bool running();
  // The wait status once the child was reaped, else -1.
  [[nodiscard]] int status() const noexcept { return status_; }

  // Polls `ready` every 5 ms until it holds (true), the child exits or `limit` passes (false).
  [[nodiscard]] bool wait_until(const std::function<bool()>& ready, std::chrono::milliseconds limit);

  // Sends `signal` and reaps the child, with SIGKILL after `grace`. Returns the wait status, or
  // the status it already exited with; -1 when there never was a child.
  int stop(int signal, std::chrono::milliseconds grace = std::chrono::seconds(5));

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  pid_t pid_ = -1;
  int status_ = -1;
};

}  // namespace ipcfloor
