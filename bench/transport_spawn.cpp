// spawn: a process per call, the way a script shells out to a tool. Each sample starts
// `ipcfloor stdio` (bench/stdio_server.hpp) pinned to the server core, writes the 48-byte
// request on its stdin, closes it, reads the 48-byte reply from its stdout and reaps it. The
// sample spans spawn to reap: exec, dynamic linking, the engine's start-up, the round trip and
// the exit, which is what a caller waits for.

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "bench/child_exit.hpp"
#include "bench/rung_timing.hpp"
#include "bench/transports.hpp"

namespace ipcfloor {

namespace {

constexpr auto kCallTimeout = std::chrono::seconds(5);

// Closes a descriptor once, whatever path leaves the scope.
class Fd {
 public:
  Fd() = default;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() noexcept {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  [[nodiscard]] int* out() noexcept { return &fd_; }
  [[nodiscard]] int get() const noexcept { return fd_; }

 private:
  int fd_ = -1;
};

// O_CLOEXEC on both ends: the child keeps only the two it dup2s onto stdin and stdout, so it
// sees end of input as soon as this side closes its write end.
bool make_pipe(Fd& read_end, Fd& write_end) {
  int ends[2];
  if (pipe2(ends, O_CLOEXEC) != 0) return false;
  *read_end.out() = ends[0];
  *write_end.out() = ends[1];
  return true;
}

// Keeps SIGPIPE blocked on this thread while it lives: a child that exits before reading its
// request must turn the write into EPIPE, not kill the benchmark. A SIGPIPE left pending is
// consumed before the old mask comes back.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &previous_);
  }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;
  ~SigpipeBlocked() {
    drain();
    pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
  }
  void drain() noexcept {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_, nullptr, &zero) == SIGPIPE) {
    }
  }
  // The mask to restore in a child before exec, so it starts as this thread was.
  [[nodiscard]] const sigset_t& previous() const noexcept { return previous_; }

 private:
  sigset_t pipe_;
  sigset_t previous_;
};

// vfork, not fork: the child borrows the parent's memory until it execs, so the sample does
// not include copying this process's page tables (posix_spawn does the same, but cannot set
// the child's cpu mask). Between vfork and exec the child only makes syscalls on prepared data.
pid_t spawn_pinned(char* const* argv, int stdin_fd, int stdout_fd, const cpu_set_t& cpus, const sigset_t& mask) {
  const pid_t pid = vfork();
  if (pid == 0) {
    if (dup2(stdin_fd, STDIN_FILENO) < 0 || dup2(stdout_fd, STDOUT_FILENO) < 0) _exit(126);
    if (sched_setaffinity(0, sizeof cpus, &cpus) != 0) _exit(126);
    pthread_sigmask(SIG_SETMASK, &mask, nullptr);
    execv(argv[0], argv);
    _exit(127);
  }
  return pid;
}

// Waits until `fd` is readable or `deadline` passes. False on timeout or a poll error.
bool wait_readable(int fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left.count()) + 1);
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return false;
  }
}

// Reads the reply and then the end of the child's stdout, bounded by `deadline`. Returns the
// reply bytes read, or -1 if the child neither answered nor closed its stdout in time.
ssize_t read_reply(int fd, unsigned char* data, std::size_t size, std::chrono::steady_clock::time_point deadline) {
  std::size_t got = 0;
  for (;;) {
    if (!wait_readable(fd, deadline)) return -1;
    unsigned char extra[64];
    unsigned char* into = got < size ? data + got : extra;
    const std::size_t room = got < size ? size - got : sizeof extra;
    const ssize_t n = read(fd, into, room);
    if (n == 0) return static_cast<ssize_t>(got);  // the child closed stdout: it is exiting
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    got += static_cast<std::size_t>(n);
  }
}

// One call of `ipcfloor stdio` as the timed part left it.
struct SpawnCall {
  int spawn_errno = 0;  // vfork's errno when it failed, else 0
  bool sent = false;    // the whole request was written
  ssize_t got = 0;      // reply bytes read; -1 when the child neither answered nor exited in time
  int status = 0;       // the child's wait status
};

// What one call came to: ok, or an error naming what went wrong.
Expected<Answer> check_reply(const TransportContext& context, std::size_t i, const SpawnCall& call,
                             const Combo& payload, const Combo& reply) {
  if (call.spawn_errno != 0) return fail(ErrorCode::io, "spawn: vfork: {}", std::strerror(call.spawn_errno));
  const bool exited_ok = WIFEXITED(call.status) && WEXITSTATUS(call.status) == 0;
  if (call.got < 0)
    return fail(ErrorCode::timeout, "spawn: `{} stdio` did not answer within {} s and was killed", context.binary,
                kCallTimeout.count());
  if (call.got == 0 && !exited_ok)
    return fail(ErrorCode::io,
                "spawn: `{} stdio` answered nothing and {}: this binary does not serve the hidden `stdio` "
                "subcommand (bench/stdio_server.hpp run_stdio_echo) yet",
                context.binary, describe_wait_status(call.status));
  if (!call.sent || call.got != static_cast<ssize_t>(sizeof reply) || !exited_ok)
    return fail(ErrorCode::protocol, "spawn: call {}: sent {}, got {} of {} reply bytes, and the child {}", i,
                call.sent ? "the request" : "nothing", call.got, sizeof reply, describe_wait_status(call.status));
  if (reply != payload) return fail(ErrorCode::protocol, "spawn: ECHO {} came back as {}", i, reply.h);
  return Answer::answered;
}

}  // namespace

Expected<std::vector<double>> run_spawn(const TransportContext& context) {
  unpin_current_thread();  // an earlier rung may have pinned this thread elsewhere
  if (access(context.binary.c_str(), X_OK) != 0)
    return fail(ErrorCode::io, "spawn: {} is not an executable: {}", context.binary, std::strerror(errno));
  cpu_set_t server_cpus;
  CPU_ZERO(&server_cpus);
  CPU_SET(context.server_cpu, &server_cpus);
  std::string program = context.binary;
  std::string command = "stdio";
  char* const argv[] = {program.data(), command.data(), nullptr};

  SigpipeBlocked sigpipe_blocked;
  TransportContext capped = context;
  capped.samples = std::min(context.samples, kSpawnMaxSamples);
  capped.warmup = std::min(context.warmup, kSpawnMaxWarmup);
  Combo payload{};
  Combo reply{};
  Fd request_read, request_write, reply_read, reply_write;
  std::chrono::steady_clock::time_point deadline;
  return time_round_trips(capped, RoundTrip{
      .prepare = [&](std::size_t i) -> Expected<void> {
        payload = ladder_payload(i);
        reply = Combo{};
        for (Fd* fd : {&request_read, &request_write, &reply_read, &reply_write}) fd->reset();
        if (!make_pipe(request_read, request_write) || !make_pipe(reply_read, reply_write))
          return fail(ErrorCode::io, "spawn: pipe2: {}", std::strerror(errno));
        deadline = std::chrono::steady_clock::now() + kCallTimeout;
        return {};
      },
      .exchange = [&](std::size_t) {
        SpawnCall call;
        const pid_t pid =
            spawn_pinned(argv, request_read.get(), reply_write.get(), server_cpus, sigpipe_blocked.previous());
        if (pid < 0) {
          call.spawn_errno = errno;
          return call;
        }
        request_read.reset();
        reply_write.reset();
        // A pipe holds 64 KiB, so 48 bytes never block even if the child is slow to read them.
        call.sent = write(request_write.get(), &payload, sizeof payload) == static_cast<ssize_t>(sizeof payload);
        request_write.reset();
        if (!call.sent) sigpipe_blocked.drain();
        call.got = read_reply(reply_read.get(), reinterpret_cast<unsigned char*>(&reply), sizeof reply, deadline);
        if (call.got < 0) kill(pid, SIGKILL);  // it neither answered nor exited in time
        while (waitpid(pid, &call.status, 0) < 0 && errno == EINTR) {
        }
        return call;
      },
      .check = [&](std::size_t i, const SpawnCall& call) { return check_reply(context, i, call, payload, reply); },
  });
}

}  // namespace ipcfloor
