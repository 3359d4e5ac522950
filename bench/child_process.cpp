#include "bench/child_process.hpp"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "bench/child_exit.hpp"

extern char** environ;

namespace ipcfloor {
namespace {

// argv as posix_spawn takes it: pointers into `storage` (which must outlive their use), then null.
std::vector<char*> argv_pointers(std::vector<std::string>& storage) {
  std::vector<char*> pointers;
  for (auto& arg : storage) pointers.push_back(arg.data());
  pointers.push_back(nullptr);
  return pointers;
}

// Everything `fd` yields until end of file.
std::string read_to_end(int fd) {
  std::string out;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = read(fd, buffer, sizeof buffer);
    if (got > 0) {
      out.append(buffer, static_cast<std::size_t>(got));
    } else if (got == 0 || errno != EINTR) {
      return out;
    }
  }
}

}  // namespace

Expected<std::string> run_captured(const std::vector<std::string>& argv, Capture capture) {
  if (argv.empty()) return fail(ErrorCode::invalid_argument, "no program to run");
  std::vector<std::string> storage = argv;
  const std::vector<char*> pointers = argv_pointers(storage);
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) return fail(ErrorCode::io, "cannot run {}: pipe: {}", argv[0], std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, ends[1], STDOUT_FILENO);
  if (capture == Capture::stdout_and_stderr) posix_spawn_file_actions_adddup2(&actions, ends[1], STDERR_FILENO);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, storage[0].c_str(), &actions, nullptr, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(ends[1]);  // the child holds the write end now: end of file once it exits
  if (spawned != 0) {
    close(ends[0]);
    return fail(ErrorCode::io, "cannot start {}: {}", argv[0], std::strerror(spawned));
  }
  std::string output = read_to_end(ends[0]);
  close(ends[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return output;
  constexpr std::size_t kTail = 4000;
  if (output.size() > kTail) output = "..." + output.substr(output.size() - kTail);
  return fail(ErrorCode::io, "{} {}; it printed: {}", argv[0], describe_wait_status(status),
              output.empty() ? std::string("(nothing)") : output);
}

Expected<ChildProcess> ChildProcess::spawn(const std::vector<std::string>& argv) {
  if (argv.empty()) return fail(ErrorCode::invalid_argument, "no program to spawn");
  std::vector<std::string> storage = argv;
  const std::vector<char*> pointers = argv_pointers(storage);

  cpu_set_t pinned;
  CPU_ZERO(&pinned);
  const bool have_mask = sched_getaffinity(0, sizeof pinned, &pinned) == 0;
  cpu_set_t all;
  CPU_ZERO(&all);
  for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN) && c < CPU_SETSIZE; ++c) CPU_SET(static_cast<int>(c), &all);
  if (have_mask) sched_setaffinity(0, sizeof all, &all);
  // The child's stdout goes nowhere: a benchmark prints its report (or JSON) there, and an engine
  // prints its ready line on its own stdout. Its stderr stays, so a failing child explains itself.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, storage[0].c_str(), &actions, nullptr, pointers.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (have_mask) sched_setaffinity(0, sizeof pinned, &pinned);
  if (spawned != 0) return fail(ErrorCode::io, "cannot start {}: {}", storage[0], std::strerror(spawned));
  return ChildProcess(pid);
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), status_(other.status_) {}

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    stop(SIGINT);
    pid_ = std::exchange(other.pid_, -1);
    status_ = other.status_;
  }
  return *this;
}

ChildProcess::~ChildProcess() { stop(SIGINT); }

bool ChildProcess::running() {
  if (pid_ <= 0) return false;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) == pid_) {
    status_ = status;
    pid_ = -1;
    return false;
  }
  return true;
}

bool ChildProcess::wait_until(const std::function<bool()>& ready, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    if (!running()) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return ready();
}

int ChildProcess::stop(int signal, std::chrono::milliseconds grace) {
  if (pid_ <= 0) return status_;
  kill(pid_, signal);
  const int status = reap_child(pid_, grace);
  pid_ = -1;
  status_ = status;
  return status;
}

}  // namespace ipcfloor
