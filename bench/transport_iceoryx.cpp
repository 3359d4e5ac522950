// iceoryx: Eclipse iceoryx 2.0 request/response (iox::popo::Client / Server), the zero-copy
// shared-memory middleware users pick for this job. This file starts the RouDi daemon for the
// run, then the rung itself, `ipcfloor-iceoryx` (bench/iceoryx/iceoryx_rung_main.cpp): a client
// pinned to the client core and a forked echo server pinned to the server core, both
// busy-polling. It reads back one TSC tick count per round trip and converts it with the
// ladder's clock. The iceoryx code lives in that separate executable so that ipcfloor itself
// does not load the iceoryx libraries at every start, which the `spawn` rung would pay.

#include "bench/transports.hpp"

#if defined(IPCFLOOR_HAVE_ICEORYX)

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "bench/child_exit.hpp"

extern char** environ;

namespace ipcfloor {

namespace {

constexpr auto kRoudiStartup = std::chrono::seconds(15);
constexpr const char* kRungProgram = "ipcfloor-iceoryx";

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The last `limit` characters of a log, on one line and without terminal colour codes, for an
// error message.
std::string one_line_tail(const std::string& log, std::size_t limit = 400) {
  std::string text;
  for (std::size_t i = 0; i < log.size(); ++i) {
    if (log[i] == '\x1b' && i + 1 < log.size() && log[i + 1] == '[') {
      i += 2;
      while (i < log.size() && (log[i] < '@' || log[i] > '~')) ++i;  // to the sequence's final byte
      continue;
    }
    text += log[i];
  }
  if (text.size() > limit) text = "..." + text.substr(text.size() - limit);
  while (!text.empty() && text.back() == '\n') text.pop_back();
  for (char& c : text)
    if (c == '\n') c = ' ';
  return text.empty() ? "(no output)" : text;
}

// Removes a file whichever way the scope ends.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {}
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() { std::remove(path_.c_str()); }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

// Starts `argv` with stdout on `stdout_fd` (or the log) and stderr appended to `log`.
Expected<pid_t> spawn_logged(char* const* argv, int stdout_fd, const std::string& log) {
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  // A new file only: a link or file planted at the name in /tmp is never opened (O_EXCL).
  posix_spawn_file_actions_addopen(&files, STDERR_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, 0600);
  if (stdout_fd >= 0)
    posix_spawn_file_actions_adddup2(&files, stdout_fd, STDOUT_FILENO);
  else
    posix_spawn_file_actions_adddup2(&files, STDERR_FILENO, STDOUT_FILENO);
  pid_t pid = -1;
  const int spawned = posix_spawn(&pid, argv[0], &files, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&files);
  if (spawned != 0) return fail(ErrorCode::io, "iceoryx: starting {}: {}", argv[0], std::strerror(spawned));
  return pid;
}

// The RouDi daemon of one run: ready once its log says so, stopped with SIGINT (SIGKILL if it
// lingers). Only one RouDi can run on a host at a time.
class Roudi {
 public:
  explicit Roudi(const std::string& tag) : log_("/tmp/ipcfloor-roudi-" + tag + ".log") {}
  Roudi(const Roudi&) = delete;
  Roudi& operator=(const Roudi&) = delete;
  ~Roudi() { stop(); }

  [[nodiscard]] Expected<void> start() {
    // -k 1: at shutdown, wait 1 s (not 45) for still-registered processes before killing them.
    std::string program = IPCFLOOR_IOX_ROUDI, level = "-l", info = "info", delay = "-k", one = "1";
    char* argv[] = {program.data(), level.data(), info.data(), delay.data(), one.data(), nullptr};
    auto pid = spawn_logged(argv, -1, log_.path());
    if (!pid) return std::unexpected(pid.error());
    pid_ = *pid;
    const auto deadline = std::chrono::steady_clock::now() + kRoudiStartup;
    while (std::chrono::steady_clock::now() < deadline) {
      if (read_text(log_.path()).find("RouDi is ready for clients") != std::string::npos) return {};
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return fail(ErrorCode::resource, "iceoryx: {} {} before it was ready (is another RouDi running?): {}", program,
                    describe_wait_status(status), log_tail());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return fail(ErrorCode::timeout, "iceoryx: {} was not ready within {} s: {}", program, kRoudiStartup.count(),
                log_tail());
  }

  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGINT);
    (void)reap_child(pid_, std::chrono::seconds(10));
    pid_ = -1;
  }

  [[nodiscard]] std::string log_tail() const { return one_line_tail(read_text(log_.path())); }

 private:
  TempFile log_;
  pid_t pid_ = -1;
};

// Reads everything until the writer closes the pipe, bounded by `deadline`.
Expected<std::string> read_all(int fd, std::chrono::steady_clock::time_point deadline) {
  std::string bytes;
  char buffer[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return fail(ErrorCode::timeout, "iceoryx: {} did not finish in time", kRungProgram);
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR)
      return fail(ErrorCode::io, "iceoryx: poll: {}", std::strerror(errno));
    if ((p.revents & (POLLIN | POLLHUP)) == 0) continue;
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n == 0) return bytes;
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail(ErrorCode::io, "iceoryx: reading samples: {}", std::strerror(errno));
    }
    bytes.append(buffer, static_cast<std::size_t>(n));
  }
}

std::string unique_tag() {
  static std::atomic<int> counter{0};
  // relaxed: only distinctness matters.
  return std::to_string(getpid()) + "-" + std::to_string(counter.fetch_add(1, std::memory_order_relaxed));
}

}  // namespace

Expected<std::vector<double>> run_iceoryx(const TransportContext& context) {
  // The rung is built next to ipcfloor (bench/CMakeLists.txt).
  const std::filesystem::path rung = std::filesystem::path(context.binary).parent_path() / kRungProgram;
  if (access(rung.c_str(), X_OK) != 0)
    return fail(ErrorCode::io, "iceoryx: {} is missing next to {} (build the ipcfloor-iceoryx target)", rung.string(),
                context.binary);
  unpin_current_thread();  // RouDi and the rung inherit this mask; the rung's sides pin themselves
  const std::string tag = unique_tag();
  Roudi roudi(tag);
  if (auto started = roudi.start(); !started) return std::unexpected(started.error());

  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return fail(ErrorCode::io, "iceoryx: pipe2: {}", std::strerror(errno));
  const TempFile rung_log("/tmp/ipcfloor-iceoryx-" + tag + ".log");
  std::string program = rung.string(), samples = std::to_string(context.samples),
              warmup = std::to_string(context.warmup), client_cpu = std::to_string(context.client_cpu),
              server_cpu = std::to_string(context.server_cpu);
  char* argv[] = {program.data(), samples.data(), warmup.data(), client_cpu.data(), server_cpu.data(), nullptr};
  auto pid = spawn_logged(argv, pipe_fds[1], rung_log.path());
  close(pipe_fds[1]);
  if (!pid) {
    close(pipe_fds[0]);
    return std::unexpected(pid.error());
  }
  // Generous for a loaded 2-core host: start-up, connection, and 50 us per round trip.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30) +
                        std::chrono::microseconds(50) * (context.warmup + context.samples);
  auto bytes = read_all(pipe_fds[0], deadline);
  close(pipe_fds[0]);
  const int status = reap_child(*pid, std::chrono::seconds(5));
  const std::string roudi_log = roudi.log_tail();
  roudi.stop();
  // A killed iceoryx process leaves its runtime's socket and lock file in /tmp; the rung names
  // its two runtimes after its pid, and both processes are gone by now.
  for (const char* side : {"ipcfloor-echo-", "ipcfloor-ladder-"}) {
    const std::string socket = "/tmp/" + std::string(side) + std::to_string(*pid);
    std::remove(socket.c_str());
    std::remove((socket + ".lock").c_str());
  }

  if (!bytes) return std::unexpected(bytes.error());
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return fail(ErrorCode::peer_gone, "iceoryx: {} {}: {}; RouDi said: {}", kRungProgram, describe_wait_status(status),
                one_line_tail(read_text(rung_log.path())), roudi_log);
  if (bytes->size() != context.samples * sizeof(std::uint64_t))
    return fail(ErrorCode::protocol, "iceoryx: {} handed back {} bytes for {} samples", kRungProgram, bytes->size(),
                context.samples);
  std::vector<double> ns(context.samples);
  for (std::size_t i = 0; i < context.samples; ++i) {
    std::uint64_t ticks = 0;
    std::memcpy(&ticks, bytes->data() + i * sizeof ticks, sizeof ticks);
    ns[i] = context.clock->to_ns(ticks);
  }
  return ns;
}

}  // namespace ipcfloor

#else  // !IPCFLOOR_HAVE_ICEORYX

namespace ipcfloor {

Expected<std::vector<double>> run_iceoryx(const TransportContext&) {
  return fail(ErrorCode::resource,
              "iceoryx not installed (apt-get install libiceoryx-posh-dev iceoryx: headers and iox-roudi), so the "
              "iceoryx rung was not built");
}

}  // namespace ipcfloor

#endif
