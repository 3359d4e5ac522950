#include "app/doctor.hpp"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/cli_common.hpp"
#include "app/doctor_unit.hpp"
#include "common/affinity.hpp"
#include "engine/shm_engine.hpp"
#include "kernel/cost.hpp"
#include "kernel/isa.hpp"
#include "shm/huge_pages.hpp"
#include "shm/layout.hpp"
#include "shm/handoff.hpp"
#include "shm/name_claim.hpp"
#include "shm/shared_object.hpp"
#include "shm/socket_dir.hpp"

namespace ipcfloor {
namespace {

// What engine/shm_engine.cpp names its serving thread (pthread_setname_np); the benchmarks find
// it by the same name.
constexpr std::string_view kServingThreadName = "ipcf-serve";

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  std::string value = text.str();
  while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.pop_back();
  return value;
}

std::string_view trim_text(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\n')) text.remove_suffix(1);
  return text;
}

bool list_has(const std::string& cpu_list, int cpu) {
  const std::vector<int> cpus = parse_cpu_list(cpu_list);
  return std::find(cpus.begin(), cpus.end(), cpu) != cpus.end();
}

// One cpu's jiffies from /proc/stat: busy (user+nice+system+irq+softirq) and steal.
struct CpuTimes {
  std::uint64_t busy = 0, idle = 0, steal = 0;
};

std::vector<CpuTimes> read_cpu_times() {
  std::vector<CpuTimes> times;
  std::ifstream in("/proc/stat");
  std::string label;
  while (in >> label) {
    if (label.rfind("cpu", 0) != 0 || label == "cpu") {
      std::string rest;
      std::getline(in, rest);
      continue;
    }
    std::uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    in >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
    std::string rest;
    std::getline(in, rest);
    const int index = std::stoi(label.substr(3));
    if (index >= static_cast<int>(times.size())) times.resize(static_cast<std::size_t>(index) + 1);
    times[static_cast<std::size_t>(index)] = {user + nice + system + irq + softirq, idle + iowait, steal};
  }
  return times;
}

std::string human_bytes(std::uint64_t bytes) {
  if (bytes >= (std::uint64_t{1} << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1 << 30));
  if (bytes >= (std::uint64_t{1} << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
  return fmt::format("{} KiB", (bytes + 1023) / 1024);
}

void add(std::vector<HostCheck>& checks, std::string name, CheckLevel level, std::string finding, std::string fix = {}) {
  checks.push_back(HostCheck{std::move(name), level, std::move(finding), std::move(fix)});
}

// The same rule and the same fix as the segment's own fallback (shm/shared_object.cpp):
// huge_page_budget() for the pool, huge_pages_fix() for the command.
void check_huge_pages(std::vector<HostCheck>& checks, const SegmentGeometry& huge) {
  const HugePageBudget budget = huge_page_budget();
  const std::uint64_t need = huge.data_bytes / kHugePageBytes;
  if (budget.available >= need) {
    add(checks, "huge_pages", CheckLevel::ok,
        fmt::format("{} of {} 2 MiB huge pages free; the data object needs {}", budget.available, budget.total, need));
  } else {
    add(checks, "huge_pages", CheckLevel::warn,
        fmt::format("{} of {} 2 MiB huge pages free; the data object needs {}: serve falls back to 4 KiB pages "
                    "(more TLB misses when the kernel scans the series)",
                    budget.available, budget.total, need),
        huge_pages_fix(need, budget));
  }
}

// The rule mlock follows (shm/shared_object.hpp, memlock_limit_bytes): CAP_IPC_LOCK, as root
// has, lifts the limit, so doctor says what serve will do.
void check_memlock(std::vector<HostCheck>& checks, std::uint64_t locked_bytes) {
  const std::optional<std::uint64_t> limit = memlock_limit_bytes();
  if (!limit) {
    add(checks, "memlock", CheckLevel::ok,
        fmt::format("nothing limits what this process locks (CAP_IPC_LOCK, or RLIMIT_MEMLOCK unlimited): an engine "
                    "it starts locks the {} it needs in RAM (one under systemd: memlock_unit)",
                    human_bytes(locked_bytes)));
  } else if (*limit >= locked_bytes) {
    add(checks, "memlock", CheckLevel::ok,
        fmt::format("RLIMIT_MEMLOCK {} covers the {} the engine locks", human_bytes(*limit), human_bytes(locked_bytes)));
  } else {
    add(checks, "memlock", CheckLevel::warn,
        fmt::format("RLIMIT_MEMLOCK {} is less than the {} the engine locks, and this process lacks CAP_IPC_LOCK: it "
                    "runs unlocked (pages may be swapped out and fault back in on the request path)",
                    human_bytes(*limit), human_bytes(locked_bytes)),
        "ulimit -l unlimited (shell), LimitMEMLOCK=infinity (systemd), or prlimit --memlock=unlimited --pid PID");
  }
}

// Yama's ptrace_scope decides who may ptrace a process or open its /proc/PID/mem. A client's
// lane is its own memory: at scope 0 (or with no Yama at all) any process of the same user may
// read and write it there, and so forge the answers it waits for.
void check_ptrace_scope(std::vector<HostCheck>& checks) {
  const std::string scope = read_text("/proc/sys/kernel/yama/ptrace_scope");
  const std::string danger =
      "any process of the same user may ptrace a client, or read and write its memory through /proc/PID/mem, and so "
      "read or forge the answers it waits for: clients of one user are only as separate as that user's processes";
  const std::string fix =
      "sysctl -w kernel.yama.ptrace_scope=1 (only a process's ancestors may then trace it), and in "
      "/etc/sysctl.d/10-ptrace.conf for the next boot";
  if (scope.empty()) {
    add(checks, "ptrace_scope", CheckLevel::warn,
        fmt::format("no Yama LSM (/proc/sys/kernel/yama/ptrace_scope missing), which is the same as scope 0: {}",
                    danger),
        "boot a kernel with Yama (CONFIG_SECURITY_YAMA), then " + fix);
  } else if (scope == "0") {
    add(checks, "ptrace_scope", CheckLevel::warn, fmt::format("kernel.yama.ptrace_scope is 0: {}", danger), fix);
  } else {
    add(checks, "ptrace_scope", CheckLevel::ok,
        fmt::format("kernel.yama.ptrace_scope is {}: a process of the same user cannot ptrace a client or open its "
                    "/proc/PID/mem unless it is the client's ancestor (1) or privileged (2, 3)",
                    scope));
  }
}

// What serve would start with the same cpu and no --workers: one pinned worker per other cpu.
void check_workers(std::vector<HostCheck>& checks, int cpu) {
  const std::vector<int> workers = default_worker_cpus(cpu);
  if (workers.empty()) {
    add(checks, "workers", CheckLevel::warn,
        fmt::format("no cpu besides the serving cpu {}: serve would start no worker, so its serving thread computes "
                    "every BACKTEST and the other lanes wait behind each one",
                    cpu),
        "run with at least two cpus (taskset/cgroup cpuset)");
    return;
  }
  add(checks, "workers", CheckLevel::ok,
      fmt::format("serve --cpu {} would start {} worker{} on {}; BACKTESTs of {} work units or more go to them", cpu,
                  workers.size(), workers.size() == 1 ? "" : "s", cpu_list(workers), kDefaultInlineCost));
}

void check_isolation(std::vector<HostCheck>& checks, int cpu) {
  const std::string cmdline = read_text("/proc/cmdline");
  const bool isolated = list_has(read_text("/sys/devices/system/cpu/isolated"), cpu);
  const bool nohz = list_has(read_text("/sys/devices/system/cpu/nohz_full"), cpu);
  const auto rcu = cmdline.find("rcu_nocbs=");
  const bool rcu_offloaded = rcu != std::string::npos &&
                             list_has(cmdline.substr(rcu + 10, cmdline.find(' ', rcu) - rcu - 10), cpu);
  if (isolated && nohz && rcu_offloaded) {
    add(checks, "isolation", CheckLevel::ok, fmt::format("cpu {} is isolated, tickless and has its RCU callbacks offloaded", cpu));
    return;
  }
  std::vector<std::string> missing;
  if (!isolated) missing.push_back("isolcpus");
  if (!nohz) missing.push_back("nohz_full");
  if (!rcu_offloaded) missing.push_back("rcu_nocbs");
  std::string joined;
  for (const auto& m : missing) joined += (joined.empty() ? "" : ", ") + m;
  add(checks, "isolation", CheckLevel::warn,
      fmt::format("cpu {} lacks {}: other tasks, the scheduler tick and RCU callbacks can preempt the serving "
                  "thread and widen the tail",
                  cpu, joined),
      fmt::format("boot with isolcpus={0} nohz_full={0} rcu_nocbs={0} (kernel command line), then serve --cpu {0}", cpu));
}

void check_sibling_and_steal(std::vector<HostCheck>& checks, int cpu, double seconds) {
  const std::string siblings = read_text(fmt::format("/sys/devices/system/cpu/cpu{}/topology/thread_siblings_list", cpu));
  std::vector<int> others;
  for (const int c : parse_cpu_list(siblings))
    if (c != cpu) others.push_back(c);
  const auto before = read_cpu_times();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const auto after = read_cpu_times();
  if (others.empty()) {
    add(checks, "smt_sibling", CheckLevel::ok, fmt::format("cpu {} has no SMT sibling", cpu));
  } else {
    for (const int sibling : others) {
      const auto s = static_cast<std::size_t>(sibling);
      if (s >= before.size() || s >= after.size()) continue;
      const double busy = static_cast<double>(after[s].busy - before[s].busy);
      const double all = busy + static_cast<double>(after[s].idle - before[s].idle);
      const double share = all > 0 ? busy / all : 0.0;
      add(checks, "smt_sibling", share > 0.05 ? CheckLevel::warn : CheckLevel::ok,
          fmt::format("cpu {}'s SMT sibling cpu {} was {:.0f}% busy over {:.2f} s{}", cpu, sibling, share * 100, seconds,
                      share > 0.05 ? ": it shares the core's pipeline with the serving thread" : ""),
          share > 0.05 ? fmt::format("keep cpu {} idle (isolcpus={},{}), or disable SMT (echo off > "
                                     "/sys/devices/system/cpu/smt/control)", sibling, cpu, sibling)
                       : std::string{});
    }
  }
  std::uint64_t steal = 0, total = 0;
  for (std::size_t i = 0; i < std::min(before.size(), after.size()); ++i) {
    steal += after[i].steal - before[i].steal;
    total += (after[i].busy - before[i].busy) + (after[i].idle - before[i].idle) + (after[i].steal - before[i].steal);
  }
  const bool virtualised = read_text("/proc/cpuinfo").find(" hypervisor") != std::string::npos;
  const double share = total > 0 ? static_cast<double>(steal) / static_cast<double>(total) : 0.0;
  const std::string what = virtualised ? "a virtual machine" : "bare metal";
  if (share > 0.01) {
    add(checks, "virtualisation", CheckLevel::warn,
        fmt::format("{}; {:.1f}% of cpu time stolen by the hypervisor over {:.2f} s: the floor moves with the host", what,
                    share * 100, seconds),
        "dedicated (pinned) vCPUs, or bare metal");
  } else {
    add(checks, "virtualisation", virtualised ? CheckLevel::warn : CheckLevel::ok,
        fmt::format("{}; {:.1f}% steal over {:.2f} s{}", what, share * 100, seconds,
                    virtualised ? ": the core-to-core floor depends on where the host places the vCPUs" : ""),
        virtualised ? "pin the vCPUs on the host, or measure on bare metal" : "");
  }
}

void check_frequency(std::vector<HostCheck>& checks, int cpu) {
  const std::string governor = read_text(fmt::format("/sys/devices/system/cpu/cpu{}/cpufreq/scaling_governor", cpu));
  if (governor.empty()) {
    add(checks, "governor", CheckLevel::ok, "no cpufreq governor exposed (fixed frequency, or decided by the hypervisor)");
  } else if (governor == "performance") {
    add(checks, "governor", CheckLevel::ok, fmt::format("cpu {} governor: performance", cpu));
  } else {
    add(checks, "governor", CheckLevel::warn,
        fmt::format("cpu {} governor: {}: the core clocks down while it waits and takes time to come back", cpu, governor),
        "cpupower frequency-set -g performance");
  }
  std::string boost = read_text("/sys/devices/system/cpu/cpufreq/boost");
  if (boost.empty()) boost = read_text("/sys/devices/system/cpu/intel_pstate/no_turbo") == "0" ? "1" : "";
  if (boost == "1")
    add(checks, "boost", CheckLevel::warn, "turbo/boost is on: the clock depends on temperature and the other cores",
        "echo 0 > /sys/devices/system/cpu/cpufreq/boost (or echo 1 > /sys/devices/system/cpu/intel_pstate/no_turbo)");
  else
    add(checks, "boost", CheckLevel::ok, boost.empty() ? "boost control not exposed" : "boost is off");
}

void check_thp(std::vector<HostCheck>& checks) {
  const std::string thp = read_text("/sys/kernel/mm/transparent_hugepage/enabled");
  if (thp.find("[always]") != std::string::npos) {
    add(checks, "thp", CheckLevel::warn,
        "transparent huge pages: always: khugepaged may compact memory under a running engine",
        "echo madvise > /sys/kernel/mm/transparent_hugepage/enabled");
  } else {
    add(checks, "thp", CheckLevel::ok,
        fmt::format("transparent huge pages: {}", thp.empty() ? std::string("not exposed") : thp));
  }
}

void check_kernel_isa(std::vector<HostCheck>& checks) {
  std::string supported;
  for (const KernelIsa isa : supported_kernel_isas())
    supported += fmt::format("{}{}", supported.empty() ? "" : ", ", to_string(isa));
  const KernelIsa active = active_kernel_isa();
  if (active == KernelIsa::scalar && cpu_supports(KernelIsa::avx2)) {
    add(checks, "kernel_isa", CheckLevel::warn,
        fmt::format("the kernel runs its scalar path although this CPU supports {} (IPCFLOOR_ISA?)", supported),
        "unset IPCFLOOR_ISA");
    return;
  }
  add(checks, "kernel_isa", CheckLevel::ok,
      fmt::format("the kernel runs its {} path (this CPU supports {})", to_string(active), supported));
}

// The directory and the name, judged as serve judges them (shm/socket_dir.hpp,
// shm/name_claim.hpp): a directory another user could write, or a name another user's socket
// squats, fails with serve's own words.
void check_socket_place(std::vector<HostCheck>& checks, const std::string& dir, const std::string& name) {
  const bool private_default = dir == private_socket_dir();
  struct stat info {};
  if (private_default && ::lstat(dir.c_str(), &info) != 0 && errno == ENOENT) {
    add(checks, "socket_dir", CheckLevel::ok,
        fmt::format("{} (private to uid {}) does not exist yet: serve makes it, mode 0700", dir, ::geteuid()), "");
    return;
  }
  auto safe = private_default ? prepare_socket_dir(dir) : check_socket_dir(dir);
  if (!safe) {
    add(checks, "socket_dir", CheckLevel::fail, safe.error().message,
        fmt::format("serve --socket-dir DIR with a directory only you can write, or leave it out for the private "
                    "default {}", private_socket_dir()));
    return;
  }
  struct statvfs space {};
  if (::statvfs(dir.c_str(), &space) != 0 || ::access(dir.c_str(), W_OK) != 0) {
    add(checks, "socket_dir", CheckLevel::fail,
        fmt::format("{} is not writable: the engine cannot create its socket there", dir),
        fmt::format("serve --socket-dir DIR with a directory you can write, or leave it out for {}", private_socket_dir()));
    return;
  }
  auto found = inspect_socket_file(handoff_socket_path(dir, name), name);
  if (!found) {
    add(checks, "socket_dir", found.error().code == ErrorCode::busy ? CheckLevel::warn : CheckLevel::fail,
        found.error().message, fmt::format("serve --name with another name, or --socket-dir with a directory of "
                                           "your own"));
    return;
  }
  const std::uint64_t free_bytes = std::uint64_t{space.f_bavail} * space.f_frsize;
  add(checks, "socket_dir", free_bytes < 4096 ? CheckLevel::fail : CheckLevel::ok,
      fmt::format("{} is safe for engine sockets and writable, {} free; the name {} is {} (the shared memory is "
                  "memfds, counted as shared memory, not against it)",
                  dir, human_bytes(free_bytes), name,
                  *found == SocketFileState::absent ? "free" : "free (a dead engine's socket there is replaced)"),
      free_bytes < 4096 ? fmt::format("free space in {}", dir) : "");
}

void check_irqs(std::vector<HostCheck>& checks, int cpu) {
  std::size_t on_cpu = 0, total = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/irq", error)) {
    if (!entry.is_directory()) continue;
    const std::string affinity = read_text(entry.path().string() + "/smp_affinity_list");
    if (affinity.empty()) continue;
    ++total;
    if (list_has(affinity, cpu)) ++on_cpu;
  }
  if (total == 0) {
    add(checks, "irq_affinity", CheckLevel::ok, "no IRQ affinities readable");
  } else if (on_cpu == 0) {
    add(checks, "irq_affinity", CheckLevel::ok, fmt::format("none of {} IRQs may land on cpu {}", total, cpu));
  } else {
    add(checks, "irq_affinity", CheckLevel::warn,
        fmt::format("{} of {} IRQs may land on cpu {}: an interrupt stops the serving thread for microseconds", on_cpu,
                    total, cpu),
        fmt::format("for each IRQ N: echo <other cpus> > /proc/irq/N/smp_affinity_list (and keep irqbalance off cpu {}: "
                    "IRQBALANCE_BANNED_CPULIST={})", cpu, cpu));
  }
}

void check_kernel_features(std::vector<HostCheck>& checks) {
  utsname name{};
  ::uname(&name);
  int major = 0, minor = 0;
  (void)std::sscanf(name.release, "%d.%d", &major, &minor);
  const int version = major * 100 + minor;
  if (version < 501) {
    add(checks, "kernel", CheckLevel::fail,
        fmt::format("Linux {}: memfd F_SEAL_FUTURE_WRITE needs 5.1; the engine cannot hand out read-only data", name.release),
        "a kernel of 5.1 or later (Debian 12 ships 6.1)");
  } else if (version < 516) {
    add(checks, "kernel", CheckLevel::warn,
        fmt::format("Linux {}: no futex_waitv (5.16): a block-mode engine naps instead of sleeping on its doorbells",
                    name.release),
        "a kernel of 5.16 or later, or --wait spin/backoff");
  } else {
    add(checks, "kernel", CheckLevel::ok, fmt::format("Linux {}: sealed memfds and futex_waitv available", name.release));
  }
  const std::string source = read_text("/sys/devices/system/clocksource/clocksource0/current_clocksource");
  const std::string cpuinfo = read_text("/proc/cpuinfo");
  const bool invariant = cpuinfo.find("constant_tsc") != std::string::npos && cpuinfo.find("nonstop_tsc") != std::string::npos;
  if (source == "tsc" && invariant) {
    add(checks, "clock", CheckLevel::ok, "clocksource tsc, invariant TSC: per-sample timing reads the TSC without a syscall");
  } else {
    add(checks, "clock", CheckLevel::warn,
        fmt::format("clocksource {}{}: clock reads may be slow or drift, which the benchmarks' per-sample timing feels",
                    source.empty() ? "unknown" : source, invariant ? "" : ", TSC not invariant"),
        "echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource (if the TSC is reliable)");
  }
}

// A process's command line, NULs as spaces, cut for a message.
std::string command_line_of(const std::string& pid) {
  std::string text = read_text("/proc/" + pid + "/cmdline");
  std::replace(text.begin(), text.end(), '\0', ' ');
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text.size() > 120 ? text.substr(0, 117) + "..." : text;
}

}  // namespace

HostCheck check_cpu_free(int cpu) {
  std::vector<std::string> holders;
  std::error_code error;
  const std::string self = std::to_string(::getpid());
  for (const auto& process : std::filesystem::directory_iterator("/proc", error)) {
    const std::string pid = process.path().filename().string();
    if (pid.find_first_not_of("0123456789") != std::string::npos || pid == self) continue;
    std::error_code task_error;
    for (const auto& task : std::filesystem::directory_iterator(process.path() / "task", task_error)) {
      // The serving threads name themselves (engine/shm_engine.cpp): "ipcf-serve".
      if (read_text(task.path().string() + "/comm").rfind(kServingThreadName, 0) != 0) continue;
      const std::string status = read_text(task.path().string() + "/status");
      const auto at = status.find("Cpus_allowed_list:");
      if (at == std::string::npos) continue;
      const auto end = status.find('\n', at);
      const std::vector<int> cpus = parse_cpu_list(std::string(trim_text(status.substr(at + 18, end - at - 18))));
      if (cpus.size() == 1 && cpus.front() == cpu)
        holders.push_back(fmt::format("pid {} ({})", pid, command_line_of(pid)));
    }
  }
  if (holders.empty())
    return HostCheck{"cpu_shared", CheckLevel::ok, fmt::format("no other engine pins its serving thread to cpu {}", cpu),
                     ""};
  std::string joined;
  for (const std::string& holder : holders) joined += (joined.empty() ? "" : "; ") + holder;
  return HostCheck{"cpu_shared", CheckLevel::warn,
                   fmt::format("another engine already pins its serving thread to cpu {}: {}. Two serving threads on "
                               "one cpu take turns, and each one's requests wait out the other's time slices",
                               cpu, joined),
                   fmt::format("give each engine a cpu of its own: serve --cpu K with a K no engine uses, or stop the "
                               "one on cpu {}", cpu)};
}

const char* to_string(CheckLevel level) noexcept {
  switch (level) {
    case CheckLevel::ok: return "ok";
    case CheckLevel::warn: return "warn";
    case CheckLevel::fail: return "fail";
  }
  return "unknown";
}

std::vector<HostCheck> run_host_checks(const DoctorOptions& options) {
  std::vector<HostCheck> checks;
  const auto allowed = allowed_cpus();
  const int cpu = options.cpu >= 0 ? options.cpu : (allowed.empty() ? 0 : allowed.back());
  if (auto usable = check_cpu_usable(cpu); !usable) {
    // The rule serve pins its serving thread by (common/affinity.hpp): the same words.
    add(checks, "cpu", CheckLevel::fail, usable.error().message,
        fmt::format("serve --cpu K with a cpu this process may use ({})", fmt::join(allowed, ",")));
  } else if (allowed.size() < 2) {
    add(checks, "cpu", CheckLevel::warn,
        fmt::format("this process may use {} cpu(s): the engine's spinning thread and a spinning client need two",
                    allowed.size()),
        "run with at least two cpus (taskset/cgroup cpuset)");
  } else {
    add(checks, "cpu", CheckLevel::ok, fmt::format("serving cpu {}; this process may use {} cpus", cpu, allowed.size()));
  }
  const SegmentGeometry huge =
      compute_geometry(options.lanes, options.ring_capacity, options.bars, kHugePageBytes, options.bulk_bytes);
  check_huge_pages(checks, huge);
  // Locked: every lane object, and the data object when it has to live on 4 KiB pages.
  const SegmentGeometry small =
      compute_geometry(options.lanes, options.ring_capacity, options.bars, kSmallPageBytes, options.bulk_bytes);
  const bool huge_ok = huge_page_budget().available >= huge.data_bytes / kHugePageBytes;
  const std::uint64_t locked_bytes = std::uint64_t{options.lanes} * small.lane_bytes + (huge_ok ? 0 : small.data_bytes);
  check_memlock(checks, locked_bytes);
  const std::string unit = !options.unit.empty() ? options.unit : ::geteuid() == 0 ? installed_unit_path() : std::string();
  if (!unit.empty()) checks.push_back(check_unit_memlock(unit, locked_bytes));
  checks.push_back(check_cpu_free(cpu));
  check_workers(checks, cpu);
  check_isolation(checks, cpu);
  check_sibling_and_steal(checks, cpu, options.sample_seconds);
  check_frequency(checks, cpu);
  check_thp(checks);
  check_kernel_isa(checks);
  check_socket_place(checks, options.socket_dir, options.name);
  check_irqs(checks, cpu);
  check_kernel_features(checks);
  check_ptrace_scope(checks);
  return checks;
}

nlohmann::json to_json(const std::vector<HostCheck>& checks) {
  nlohmann::json out = nlohmann::json::array();
  for (const HostCheck& check : checks)
    out.push_back({{"check", check.name}, {"level", to_string(check.level)}, {"finding", check.finding}, {"fix", check.fix}});
  return out;
}

std::string summarize(const std::vector<HostCheck>& checks) {
  std::size_t counts[3] = {};
  std::string warned, failed;
  for (const HostCheck& check : checks) {
    ++counts[static_cast<int>(check.level)];
    if (check.level == CheckLevel::warn) warned += (warned.empty() ? "" : ", ") + check.name;
    if (check.level == CheckLevel::fail) failed += (failed.empty() ? "" : ", ") + check.name;
  }
  return fmt::format("{} ok, {} warn{}, {} fail{}", counts[0], counts[1], warned.empty() ? "" : " (" + warned + ")",
                     counts[2], failed.empty() ? "" : " (" + failed + ")");
}

}  // namespace ipcfloor
