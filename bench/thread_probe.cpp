#include "bench/thread_probe.hpp"

#include <dirent.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ipcfloor {

pid_t find_thread(pid_t pid, const std::string& name) {
  if (pid <= 0) return -1;
  const std::string task_dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* dir = opendir(task_dir.c_str());
  if (dir == nullptr) return -1;
  pid_t found = -1;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] == '.') continue;
    std::ifstream comm(task_dir + "/" + entry->d_name + "/comm");
    std::string comm_name;
    if (std::getline(comm, comm_name) && comm_name == name) {
      found = static_cast<pid_t>(std::stol(entry->d_name));
      break;
    }
  }
  closedir(dir);
  return found;
}

Expected<ThreadCounters> read_thread_counters(pid_t pid, pid_t tid) {
  const std::string dir = "/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid);
  std::ifstream stat(dir + "/stat");
  std::string line;
  if (!stat || !std::getline(stat, line))
    return fail(ErrorCode::io, "cannot read {}/stat: {}", dir, std::strerror(errno));
  // Fields after the ")" of the command name: state(3) ppid pgrp session tty tpgid flags
  // minflt(10) cminflt majflt(12).
  std::istringstream fields(line.substr(line.rfind(')') + 2));
  std::vector<std::string> f;
  std::string token;
  while (fields >> token) f.push_back(token);
  if (f.size() < 10) return fail(ErrorCode::io, "{}/stat has too few fields", dir);
  ThreadCounters counters;
  counters.minor_faults = std::stoull(f[7]);
  counters.major_faults = std::stoull(f[9]);
  std::ifstream status(dir + "/status");
  while (std::getline(status, line)) {
    if (line.rfind("voluntary_ctxt_switches:", 0) == 0) counters.voluntary_switches = std::stoull(line.substr(24));
    if (line.rfind("nonvoluntary_ctxt_switches:", 0) == 0) counters.involuntary_switches = std::stoull(line.substr(27));
  }
  return counters;
}

SyscallCounter::~SyscallCounter() {
  if (tracer_.joinable()) (void)stop();
}

Expected<void> SyscallCounter::start(pid_t tid) {
  tid_ = tid;
  // release: publishes tid_; the thread start below orders it too (trace_loop reads it first).
  phase_.store(1, std::memory_order_release);
  tracer_ = std::thread([this] { trace_loop(); });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  // acquire: pairs with the release stores of 2 (or of -1 with error_number_) in trace_loop.
  while (phase_.load(std::memory_order_acquire) == 1) {
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (phase_.load(std::memory_order_acquire) != 2) {  // acquire: as above
    tracer_.join();
    return fail(ErrorCode::permission, "cannot trace thread {}: {} (needs ptrace rights over the engine)", tid,
                std::strerror(error_number_));
  }
  return {};
}

Expected<std::uint64_t> SyscallCounter::stop() {
  if (!tracer_.joinable()) return fail(ErrorCode::invalid_argument, "the syscall counter was not started");
  // release: asks the tracer to detach; pairs with the acquire load in trace_loop's loop.
  phase_.store(3, std::memory_order_release);
  tracer_.join();
  // acquire: pairs with trace_loop's final release store of 4 (or of -1); the join orders it too.
  if (phase_.load(std::memory_order_acquire) != 4)
    return fail(ErrorCode::io, "detaching from thread {} failed: {}", tid_, std::strerror(error_number_));
  return syscalls_.load(std::memory_order_relaxed);  // relaxed: trace_loop's fetch_add happened before the join
}

void SyscallCounter::trace_loop() {
  const auto failed = [this] {
    error_number_ = errno;
    // release: publishes error_number_; pairs with the acquire loads in start() and stop().
    phase_.store(-1, std::memory_order_release);
  };
  if (ptrace(PTRACE_SEIZE, tid_, nullptr, reinterpret_cast<void*>(PTRACE_O_TRACESYSGOOD)) != 0) return failed();
  int status = 0;
  if (ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) != 0 || waitpid(tid_, &status, __WALL) != tid_) return failed();
  if (ptrace(PTRACE_SYSCALL, tid_, nullptr, nullptr) != 0) return failed();
  phase_.store(2, std::memory_order_release);  // release: tracing is live; pairs with the acquire loads in start()
  bool in_syscall = false;
  // acquire: pairs with the release store of 3 in stop().
  while (phase_.load(std::memory_order_acquire) == 2) {
    const pid_t got = waitpid(tid_, &status, __WALL | WNOHANG);
    if (got == 0) {
      std::this_thread::sleep_for(std::chrono::microseconds(500));
      continue;
    }
    if (got != tid_ || WIFEXITED(status) || WIFSIGNALED(status)) return failed();
    int deliver = 0;
    if (WIFSTOPPED(status) && WSTOPSIG(status) == (SIGTRAP | 0x80)) {
      // relaxed: stop() reads it after joining this thread.
      if (!in_syscall) syscalls_.fetch_add(1, std::memory_order_relaxed);
      in_syscall = !in_syscall;  // stops alternate: entry, exit
    } else if (WIFSTOPPED(status) && status >> 16 == 0) {
      deliver = WSTOPSIG(status);  // a real signal: pass it on
    }
    if (ptrace(PTRACE_SYSCALL, tid_, nullptr, reinterpret_cast<void*>(static_cast<long>(deliver))) != 0) return failed();
  }
  if (ptrace(PTRACE_INTERRUPT, tid_, nullptr, nullptr) != 0) return failed();
  while (true) {
    if (waitpid(tid_, &status, __WALL) != tid_) return failed();
    if (WIFSTOPPED(status) && (status >> 16 == PTRACE_EVENT_STOP || WSTOPSIG(status) == (SIGTRAP | 0x80))) break;
    if (ptrace(PTRACE_SYSCALL, tid_, nullptr, nullptr) != 0) return failed();
  }
  if (ptrace(PTRACE_DETACH, tid_, nullptr, nullptr) != 0) return failed();
  phase_.store(4, std::memory_order_release);  // release: counts are final; pairs with the acquire load in stop()
}

}  // namespace ipcfloor
