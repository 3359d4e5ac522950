#pragma once
// Process plumbing for the fault-injection tests (tests/test_faults.cpp): forked children that
// report through a pipe and a shared page, real `ipcfloor serve` processes spawned with a hook
// that runs between fork and exec (to lower a limit, drop a capability or change uid), bounded
// waits for everything, observers of a running engine, and the figures the tests measure.
//
// Contracts
//   - Every wait is bounded; a child that outlives its bound is SIGKILLed and reaped, so a
//     broken engine fails a test instead of hanging it.
//   - Fork only from a single-threaded test process (the fault tests start no threads): the
//     children then may allocate freely.
//   - Children never return into doctest: they leave with _exit().
//   - Knobs: IPCFLOOR_FAULT_TRIALS (random kills per test, default kDefaultTrials; tools/soak
//     runs 200) and IPCFLOOR_FAULT_SEED (the random points; each test prints the seed it used).

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <new>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "common/unique_fd.hpp"
#include "shm/handoff.hpp"
#include "shm/liveness.hpp"
#include "shm/segment.hpp"

namespace ipcfloor::fault {

inline constexpr int kDefaultTrials = 10;

// Random kills per test: IPCFLOOR_FAULT_TRIALS, else kDefaultTrials (the CI form).
[[nodiscard]] inline int trials() {
  const char* text = std::getenv("IPCFLOOR_FAULT_TRIALS");
  const int value = text != nullptr ? std::atoi(text) : 0;
  return value > 0 ? value : kDefaultTrials;
}

// IPCFLOOR_FAULT_SEED, else a fresh random seed (printed by the tests so a failure replays).
[[nodiscard]] inline std::uint64_t seed() {
  if (const char* text = std::getenv("IPCFLOOR_FAULT_SEED")) return std::strtoull(text, nullptr, 0);
  std::random_device device;
  return (std::uint64_t{device()} << 32) | device();
}

[[nodiscard]] inline double ms_since(std::uint64_t start_ns) {
  return static_cast<double>(monotonic_ns() - start_ns) / 1e6;
}

// Waits (bounded) until `predicate` holds, looking every `step`; true if it did. Measurements
// use a fine step so the figure is not the polling period.
template <class Predicate>
[[nodiscard]] bool eventually(Predicate predicate, std::chrono::milliseconds limit = std::chrono::milliseconds(3000),
                              std::chrono::microseconds step = std::chrono::microseconds(1000)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (predicate()) return true;
    std::this_thread::sleep_for(step);
  }
  return predicate();
}

// Measured durations, in milliseconds, and their summary for the report.
class Figures {
 public:
  void add(double ms) { values_.push_back(ms); }
  [[nodiscard]] std::size_t count() const noexcept { return values_.size(); }
  [[nodiscard]] double max() const { return values_.empty() ? 0.0 : *std::max_element(values_.begin(), values_.end()); }
  [[nodiscard]] double quantile(double q) const {
    if (values_.empty()) return 0.0;
    std::vector<double> sorted = values_;
    std::sort(sorted.begin(), sorted.end());
    const auto index = static_cast<std::size_t>(q * static_cast<double>(sorted.size() - 1) + 0.5);
    return sorted[std::min(index, sorted.size() - 1)];
  }
  // "n=20 min=3.1 p50=8.2 p99=11.0 max=11.4 ms"
  [[nodiscard]] std::string summary() const {
    return fmt::format("n={} min={:.2f} p50={:.2f} p99={:.2f} max={:.2f} ms", count(), quantile(0.0), quantile(0.5),
                       quantile(0.99), max());
  }

 private:
  std::vector<double> values_;
};

// One T in a MAP_SHARED anonymous mapping: a forked child and its parent see the same object.
// T holds only lock-free atomics and plain data (no pointers: nothing else is shared).
template <class T>
class SharedBlock {
  static_assert(std::is_trivially_destructible_v<T>, "a shared block is never destroyed, only unmapped");

 public:
  SharedBlock() {
    void* memory = ::mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) throw std::bad_alloc();
    value_ = ::new (memory) T{};
  }
  SharedBlock(const SharedBlock&) = delete;
  SharedBlock& operator=(const SharedBlock&) = delete;
  ~SharedBlock() { ::munmap(value_, sizeof(T)); }
  T& operator*() const noexcept { return *value_; }
  T* operator->() const noexcept { return value_; }

 private:
  T* value_;
};

// Reaps `pid`, waiting at most `limit`, then SIGKILLs it. Returns the wait status.
inline int reap(pid_t pid, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  int status = 0;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid || (got < 0 && errno != EINTR)) return status;
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return status;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// A forked child running `body(write_fd)`; its exit code is what body returns. The child talks
// back through the pipe (lines) and any SharedBlock created before the fork.
class ForkedChild {
 public:
  template <class Body>
  explicit ForkedChild(Body body) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(fds[0]);
      const int code = body(fds[1]);
      ::_exit(code);
    }
    ::close(fds[1]);
    read_fd_ = fds[0];
    if (pid_ < 0) {
      ::close(read_fd_);
      read_fd_ = -1;
    }
  }
  ForkedChild(const ForkedChild&) = delete;
  ForkedChild& operator=(const ForkedChild&) = delete;
  ~ForkedChild() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      (void)reap(pid_);
    }
    if (read_fd_ >= 0) ::close(read_fd_);
  }

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

  // The next line the child wrote (without '\n'); nullopt on EOF or after `limit`.
  [[nodiscard]] std::optional<std::string> read_line(std::chrono::milliseconds limit = std::chrono::seconds(5)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (const auto end = pending_.find('\n'); end != std::string::npos) {
        std::string line = pending_.substr(0, end);
        pending_.erase(0, end + 1);
        return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || read_fd_ < 0) return std::nullopt;
      pollfd watch{read_fd_, POLLIN, 0};
      if (::poll(&watch, 1, static_cast<int>(left.count())) <= 0) continue;
      char buffer[256];
      const ssize_t got = ::read(read_fd_, buffer, sizeof buffer);
      if (got <= 0) return std::nullopt;
      pending_.append(buffer, static_cast<std::size_t>(got));
    }
  }

  // Reaps the child (bounded; SIGKILL after `limit`) and returns its wait status.
  int wait(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    reaped_ = true;
    return reap(pid_, limit);
  }

 private:
  pid_t pid_ = -1;
  int read_fd_ = -1;
  std::string pending_;
  bool reaped_ = false;
};

// Child side of ForkedChild: writes one line (best effort: the parent may be gone).
inline void tell(int fd, const std::string& line) {
  const std::string text = line + "\n";
  (void)!::write(fd, text.data(), text.size());
}

// A program spawned with fork + exec, its stderr kept in an unlinked temporary file (never a
// pipe: a chatty engine must not block on a full pipe and stop its heartbeat) and its stdout (an
// engine's ready line) sent to /dev/null, so the test's own stdout carries only its figures.
// `before_exec` runs in the child just before exec (limits, capabilities, uid); it must not
// return on failure but _exit(kHookFailed).
class Spawned {
 public:
  static constexpr int kHookFailed = 77;

  Spawned(std::vector<std::string> argv, const std::function<void()>& before_exec = {}) {
    char path[] = "/tmp/ipcfloor-fault-stderr-XXXXXX";
    stderr_fd_ = ::mkstemp(path);
    if (stderr_fd_ < 0) return;
    ::unlink(path);
    std::vector<char*> args;
    for (std::string& arg : argv) args.push_back(arg.data());
    args.push_back(nullptr);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(stderr_fd_, STDERR_FILENO);
      const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
      if (null >= 0) ::dup2(null, STDOUT_FILENO);
      if (before_exec) before_exec();
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;
  ~Spawned() {
    if (pid_ > 0 && !status_) {
      ::kill(pid_, SIGKILL);
      (void)reap(pid_);
    }
    if (stderr_fd_ >= 0) ::close(stderr_fd_);
  }

  [[nodiscard]] pid_t pid() const noexcept { return pid_; }

  // Everything the program wrote to stderr so far.
  [[nodiscard]] std::string stderr_text() const {
    std::string text;
    char buffer[4096];
    off_t offset = 0;
    for (ssize_t got; (got = ::pread(stderr_fd_, buffer, sizeof buffer, offset)) > 0; offset += got) {
      text.append(buffer, static_cast<std::size_t>(got));
    }
    return text;
  }

  // The wait status once the program exits within `limit`, else nullopt (still running).
  [[nodiscard]] std::optional<int> wait_exit(std::chrono::milliseconds limit) {
    if (status_) return status_;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        status_ = status;
        return status_;
      }
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // Sends `signal` and reaps (bounded; SIGKILL after 10 s). Returns the wait status.
  int stop(int signal) {
    if (status_) return *status_;
    ::kill(pid_, signal);
    status_ = reap(pid_);
    return *status_;
  }

 private:
  pid_t pid_ = -1;
  int stderr_fd_ = -1;
  std::optional<int> status_;
};

// A cgroup of its own, just below this process's in the hierarchy that holds `controller`
// (cgroup v1's "memory" or "cpuset" hierarchy, or the unified v2 one), with `settings` written
// into its control files: a child enters it between fork and exec. Empty when none can be made
// here (not root, no such controller, a read-only hierarchy). Removed on destruction, once the
// processes in it are gone.
class TestCgroup {
 public:
  struct Setting {
    std::string v1_file, v2_file;  // the control file in either hierarchy
    std::string value;             // "{parent}" is replaced by the parent's value of the same file
  };
  static std::optional<TestCgroup> make(const std::string& controller, const std::vector<Setting>& settings) {
    std::ifstream cgroups("/proc/self/cgroup");
    for (std::string line; std::getline(cgroups, line);) {
      const std::size_t first = line.find(':');
      const std::size_t second = line.find(':', first + 1);
      if (first == std::string::npos || second == std::string::npos) continue;
      std::string controllers = ",";
      controllers.append(line, first + 1, second - first - 1).push_back(',');
      const std::string path = line.substr(second + 1);
      const bool v1 = controllers.find("," + controller + ",") != std::string::npos;
      if (!v1 && !line.starts_with("0::")) continue;
      const std::string parent = (v1 ? "/sys/fs/cgroup/" + controller : "/sys/fs/cgroup") + (path == "/" ? "" : path);
      if (::access((parent + "/cgroup.procs").c_str(), F_OK) != 0) continue;  // not a cgroup directory
      const std::string dir = fmt::format("{}/ipcfloor-test-{}-{}", parent, controller, ::getpid());
      if (::mkdir(dir.c_str(), 0755) != 0) continue;
      TestCgroup made(dir);
      bool all = true;
      for (const Setting& setting : settings) {
        const std::string& file = v1 ? setting.v1_file : setting.v2_file;
        std::string value = setting.value;
        if (value == "{parent}") value = read_first_line(parent + "/" + file);
        all = all && !value.empty() && write_file(dir + "/" + file, value);
      }
      if (all) return made;
    }
    return std::nullopt;
  }
  // Memory: memory.max (v2) or memory.limit_in_bytes (v1) at `bytes`.
  static std::optional<TestCgroup> memory(std::uint64_t bytes) {
    return make("memory", {{"memory.limit_in_bytes", "memory.max", std::to_string(bytes)}});
  }
  // A cpuset of `cpus` (a kernel cpu list such as "0"), memory nodes as the parent's.
  static std::optional<TestCgroup> cpuset(const std::string& cpus) {
    return make("cpuset", {{"cpuset.cpus", "cpuset.cpus", cpus}, {"cpuset.mems", "cpuset.mems", "{parent}"}});
  }
  TestCgroup(TestCgroup&& other) noexcept : dir_(std::exchange(other.dir_, std::string())) {}
  TestCgroup& operator=(TestCgroup&&) = delete;
  TestCgroup(const TestCgroup&) = delete;
  TestCgroup& operator=(const TestCgroup&) = delete;
  ~TestCgroup() {
    if (dir_.empty()) return;
    // A process killed a moment ago may not have left it yet.
    (void)eventually([&] { return ::rmdir(dir_.c_str()) == 0 || errno == ENOENT; }, std::chrono::seconds(5));
  }

  [[nodiscard]] const std::string& dir() const noexcept { return dir_; }
  // In a child, before exec: moves the calling process in; _exit(kHookFailed) when it cannot.
  void enter() const {
    if (!write_file(dir_ + "/cgroup.procs", std::to_string(::getpid()))) ::_exit(Spawned::kHookFailed);
  }

 private:
  explicit TestCgroup(std::string dir) : dir_(std::move(dir)) {}
  // Writes into an existing control file only: never creates one.
  static bool write_file(const std::string& path, const std::string& text) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    return written;
  }
  static std::string read_first_line(const std::string& path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
  }

  std::string dir_;
};

// An observer's view of engine `name` (no lane), or nothing when none answers now.
[[nodiscard]] inline std::optional<Attachment> observe(const std::string& name,
                                                       std::chrono::milliseconds limit = std::chrono::milliseconds(500)) {
  AttachOptions options;
  options.role = HandoffRole::observer;
  options.timeout = limit;
  auto attached = Attachment::attach(name, options);
  if (!attached) return std::nullopt;
  return std::move(*attached);
}

// Waits (bounded) until engine `name` answers a hand-off and is `pid` (SO_PEERCRED).
[[nodiscard]] inline bool segment_served_by(const std::string& name, pid_t pid,
                                            std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  return eventually(
      [&] {
        auto segment = observe(name);
        return segment && segment->engine_pid() == pid;
      },
      limit);
}

// A connection to the engine socket at `path`, made by hand (no hand-off yet): for tests of what
// the engine does with a connection, not what ShmClient does. Invalid when connect(2) fails.
[[nodiscard]] inline UniqueFd connect_raw(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (!fd || path.size() >= sizeof address.sun_path) return UniqueFd();
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) return UniqueFd();
  return fd;
}

// A hand-off reply read by hand, with the descriptors that came with it.
struct RawAnswer {
  HandoffReply reply{};
  std::vector<UniqueFd> fds;
};
// The next hand-off reply on `fd` (for a connection whose request was never sent, or refused
// before it was read), waiting at most 2 s.
[[nodiscard]] inline std::optional<RawAnswer> read_raw(int fd) {
  RawAnswer answer;
  auto received = receive_handoff(fd, std::as_writable_bytes(std::span(&answer.reply, 1)),
                                  std::chrono::steady_clock::now() + std::chrono::seconds(2));
  if (!received || received->bytes != sizeof answer.reply) return std::nullopt;
  answer.reply.message[kHandoffMessageBytes - 1] = '\0';
  answer.fds = std::move(received->fds);
  return answer;
}

// The engine's answer to one hand-off request for `role` sent by hand on `fd`, waiting at most 2 s.
[[nodiscard]] inline std::optional<RawAnswer> ask_raw(int fd, HandoffRole role) {
  const HandoffRequest request{kHandoffMagic, kHandoffVersion, static_cast<std::uint16_t>(role), kLayoutVersion, 0};
  if (!send_handoff(fd, std::as_bytes(std::span(&request, 1)), {})) return std::nullopt;
  return read_raw(fd);
}

// "exited 1", "killed by signal 9": for failure messages.
[[nodiscard]] inline std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return fmt::format("wait status {:#x}", status);
}

}  // namespace ipcfloor::fault
