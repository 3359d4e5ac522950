#include "common/affinity.hpp"

#include <pthread.h>
#include <unistd.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include <fmt/ranges.h>

namespace ipcfloor {

std::vector<int> parse_cpu_list(std::string_view text) {
  std::vector<int> cpus;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string_view item = text.substr(0, comma);
    const auto dash = item.find('-');
    int first = 0, last = 0;
    const auto parse = [](std::string_view s, int& out) {
      const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
      return ec == std::errc{} && ptr == s.data() + s.size();
    };
    if (dash == std::string_view::npos) {
      if (!parse(item, first)) return {};
      last = first;
    } else if (!parse(item.substr(0, dash), first) || !parse(item.substr(dash + 1), last) || last < first) {
      return {};
    }
    for (int c = first; c <= last; ++c) cpus.push_back(c);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return cpus;
}

std::string kernel_file_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  return line;
}

namespace {

// The cpus this process's cgroup lets it use (a container's --cpuset-cpus), from cgroup v2's
// cpuset.cpus.effective or v1's cpuset.effective_cpus; empty where neither can be read.
std::vector<int> cgroup_cpus(const std::string& root) {
  std::ifstream cgroups(root + "/proc/self/cgroup");
  std::string line;
  while (cgroups && std::getline(cgroups, line)) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path == "/") path.clear();
    std::string file;
    if (controllers.empty()) file = root + "/sys/fs/cgroup" + path + "/cpuset.cpus.effective";
    else if (controllers == "cpuset") file = root + "/sys/fs/cgroup/cpuset" + path + "/cpuset.effective_cpus";
    else continue;
    if (auto cpus = parse_cpu_list(kernel_file_line(file)); !cpus.empty()) return cpus;
  }
  return {};
}

}  // namespace

std::vector<int> allowed_cpus_under(const std::string& root) {
  const std::vector<int> cpus = parse_cpu_list(kernel_file_line(root + "/sys/devices/system/cpu/online"));
  const std::vector<int> permitted = cgroup_cpus(root);
  std::vector<int> both;
  std::set_intersection(cpus.begin(), cpus.end(), permitted.begin(), permitted.end(), std::back_inserter(both));
  return both.empty() ? cpus : both;
}

namespace {

// The online cpus from /sys, or, where /sys cannot be read (an empty /sys in a container), the
// kernel's count of online cpus numbered from 0.
std::vector<int> online_cpus() {
  std::vector<int> cpus = parse_cpu_list(kernel_file_line("/sys/devices/system/cpu/online"));
  if (cpus.empty())
    for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN); ++c) cpus.push_back(static_cast<int>(c));
  return cpus;
}

bool holds(const std::vector<int>& cpus, int cpu) { return std::find(cpus.begin(), cpus.end(), cpu) != cpus.end(); }

}  // namespace
std::vector<int> allowed_cpus() {
  // The online cpus that the cgroup allows, not this thread's mask: a benchmark thread is
  // usually pinned already, and the threads and children it starts must still be able to go to
  // the other cores. A container's cpuset does bind every thread, so it is taken into account.
  std::vector<int> cpus = allowed_cpus_under("");
  if (cpus.empty())
    for (long c = 0; c < sysconf(_SC_NPROCESSORS_ONLN); ++c) cpus.push_back(static_cast<int>(c));
  return cpus;
}

std::vector<int> current_thread_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (pthread_getaffinity_np(pthread_self(), sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

Expected<int> pin_current_thread_to_first(const std::vector<int>& cpus) {
  std::string refused;
  for (const int cpu : cpus) {
    auto pinned = pin_current_thread(cpu);
    if (pinned) return cpu;
    refused += (refused.empty() ? "" : "; ") + pinned.error().message;
  }
  if (cpus.empty()) return fail(ErrorCode::resource, "no cpu to pin to: the list is empty");
  return fail(ErrorCode::resource, "none of cpus {} can take this thread: {}", fmt::join(cpus, ","), refused);
}

Expected<void> check_cpu_usable(int cpu) {
  const std::vector<int> online = online_cpus();
  if (cpu < 0 || cpu >= CPU_SETSIZE || !holds(online, cpu))
    return fail(ErrorCode::invalid_argument, "cpu {} is not online (online: {})", cpu, fmt::join(online, ","));
  const std::vector<int> allowed = allowed_cpus();
  if (!holds(allowed, cpu))
    return fail(ErrorCode::invalid_argument,
                "cpu {} is online but not in this process's allowed cpus (cpuset: {}); its cgroup cpuset excludes it",
                cpu, fmt::join(allowed, ","));
  return {};
}

Expected<void> pin_current_thread(int cpu) { return restrict_current_thread({cpu}); }

Expected<void> restrict_current_thread(const std::vector<int>& cpus) {
  if (cpus.empty())
    return fail(ErrorCode::invalid_argument, "no cpu given (allowed: {})", fmt::join(allowed_cpus(), ","));
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int cpu : cpus) {
    if (auto usable = check_cpu_usable(cpu); !usable) return usable;
    CPU_SET(cpu, &set);
  }
  if (const int rc = pthread_setaffinity_np(pthread_self(), sizeof set, &set); rc != 0)
    return fail(ErrorCode::io, "could not put the thread on cpus {}: {} (a cpuset or container may exclude them)",
                fmt::join(cpus, ","), std::strerror(rc));
  return {};
}

Expected<void> set_fifo_priority(int priority) {
  if (priority < 1 || priority > 99)
    return fail(ErrorCode::invalid_argument, "SCHED_FIFO priority {} is outside 1..99", priority);
  sched_param param{};
  param.sched_priority = priority;
  if (const int rc = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param); rc != 0)
    return fail(ErrorCode::permission, "could not switch to SCHED_FIFO {}: {} (needs root or CAP_SYS_NICE)",
                priority, std::strerror(rc));
  return {};
}

std::vector<int> smt_siblings(int cpu) {
  std::vector<int> siblings =
      parse_cpu_list(kernel_file_line("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list"));
  std::erase(siblings, cpu);
  return siblings;
}

bool cpu_isolated(int cpu) {
  std::ifstream in("/sys/devices/system/cpu/isolated");
  std::string line;
  if (!in || !std::getline(in, line)) return false;
  const auto cpus = parse_cpu_list(line);
  return std::find(cpus.begin(), cpus.end(), cpu) != cpus.end();
}

}  // namespace ipcfloor
