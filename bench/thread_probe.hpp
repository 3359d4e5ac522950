#pragma once
// Counts what one thread of another process does while a benchmark drives it: every syscall it
// enters (through ptrace syscall-stops, which cost nothing while none happen), and its page
// faults and context switches (from /proc). This is how the hygiene suite proves that the
// serving thread's hot path stays out of the kernel.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

#include "common/error.hpp"

namespace ipcfloor {

struct ThreadCounters {
  std::uint64_t minor_faults = 0;
  std::uint64_t major_faults = 0;
  std::uint64_t voluntary_switches = 0;
  std::uint64_t involuntary_switches = 0;
};

// Reads /proc/PID/task/TID/{stat,status}. Setup path.
[[nodiscard]] Expected<ThreadCounters> read_thread_counters(pid_t pid, pid_t tid);

// The tid of the thread of process `pid` named `name` (its /proc comm), or -1. Setup path.
[[nodiscard]] pid_t find_thread(pid_t pid, const std::string& name);

// Attaches to `tid` with PTRACE_SEIZE and counts its syscall entries until stop() detaches.
// The tracing runs on a thread of its own (ptrace requests must come from the attaching thread).
class SyscallCounter {
 public:
  SyscallCounter() = default;
  SyscallCounter(const SyscallCounter&) = delete;
  SyscallCounter& operator=(const SyscallCounter&) = delete;
  ~SyscallCounter();

  // Attaches and starts counting; returns once the tracee runs under syscall tracing.
  [[nodiscard]] Expected<void> start(pid_t tid);
  // Detaches and returns the number of syscalls the thread entered meanwhile.
  [[nodiscard]] Expected<std::uint64_t> stop();

 private:
  void trace_loop();

  pid_t tid_ = -1;
  std::thread tracer_;
  std::atomic<int> phase_{0};  // 0 idle, 1 attaching, 2 tracing, 3 stop requested, 4 done, -1 failed
  std::atomic<std::uint64_t> syscalls_{0};
  int error_number_ = 0;
};

}  // namespace ipcfloor
