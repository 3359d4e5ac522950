#pragma once
// Putting a thread on its own core: pinning, optional SCHED_FIFO, and whether the core is
// isolated from the scheduler (isolcpus / nohz_full), which decides how quiet it really is.
// Setup path only: every call is a syscall or reads /sys.

#include <string>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace ipcfloor {

// Pins the calling thread to `cpu`. Errors are check_cpu_usable's, or the kernel's refusal.
[[nodiscard]] Expected<void> pin_current_thread(int cpu);

// Lets the calling thread run on any of `cpus` and no other (a set, where pin_current_thread
// takes one). Errors name the first cpu check_cpu_usable refuses, or the kernel's refusal.
[[nodiscard]] Expected<void> restrict_current_thread(const std::vector<int>& cpus);

// Gives the calling thread SCHED_FIFO at `priority` (1..99). Needs CAP_SYS_NICE; the error
// says so. A spinning FIFO thread can starve its core: use it only on an isolated core.
[[nodiscard]] Expected<void> set_fifo_priority(int priority);

// The online CPUs that this process's cgroup cpuset allows (a container's), ascending, whatever
// mask the calling thread has now. Where /sys cannot be read, the kernel's count of online cpus.
[[nodiscard]] std::vector<int> allowed_cpus();

// The same read under `root` instead of "/" (root/sys/devices/system/cpu/online, root/proc/self/cgroup
// and the cgroup's cpuset file under root/sys/fs/cgroup), so that a canned tree can stand in for
// the host. Empty when root holds no online list.
[[nodiscard]] std::vector<int> allowed_cpus_under(const std::string& root);

// The calling thread's affinity mask now (sched_getaffinity), ascending; empty if it cannot be read.
[[nodiscard]] std::vector<int> current_thread_cpus();

// Pins the calling thread to the first of `cpus` the kernel accepts (an ordered preference, such as
// the cpus an engine publishes as nearest it) and returns that cpu. Errors name the cpus tried.
[[nodiscard]] Expected<int> pin_current_thread_to_first(const std::vector<int>& cpus);
// Whether this process may put a thread on `cpu`: serve decides with it when it pins, and doctor
// when it checks, so the two never disagree. invalid_argument naming the reason: "cpu N is not
// online (online: ...)", or "cpu N is online but not in this process's allowed cpus (cpuset:
// ...)" when only the cgroup's cpuset excludes it.
[[nodiscard]] Expected<void> check_cpu_usable(int cpu);

// The other hardware threads of `cpu`'s core (empty without SMT, or where /sys does not say).
[[nodiscard]] std::vector<int> smt_siblings(int cpu);

// True when `cpu` is listed in /sys/devices/system/cpu/isolated.
[[nodiscard]] bool cpu_isolated(int cpu);

// The first line of a small kernel file (sysfs, procfs), without its newline; empty when it cannot be read.
[[nodiscard]] std::string kernel_file_line(const std::string& path);

// Parses a kernel cpu list such as "1-3,5" (empty on a malformed list).
[[nodiscard]] std::vector<int> parse_cpu_list(std::string_view text);

}  // namespace ipcfloor
