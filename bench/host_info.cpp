#include "bench/host_info.hpp"

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace ipcfloor {
namespace {

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return "unavailable";
  return line.empty() ? "(none)" : line;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "unavailable";
}

// The first "cpu MHz" of /proc/cpuinfo, whole; 0 when the kernel does not say.
long cpu_mhz() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu MHz", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) return 0;
    try {
      return std::lround(std::stod(line.substr(colon + 1)));
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

// How many cpus a sysfs cpu list ("0-3,8") names.
int cpus_in_list(const std::string& list) {
  int count = 0;
  std::istringstream ranges(list);
  for (std::string range; std::getline(ranges, range, ',');) {
    const auto dash = range.find('-');
    try {
      count += dash == std::string::npos ? 1 : std::stoi(range.substr(dash + 1)) - std::stoi(range.substr(0, dash)) + 1;
    } catch (const std::exception&) {
      return count;
    }
  }
  return count;
}

// cpu0's caches as sysfs lists them, in Google Benchmark's shape: {type, level, size (bytes),
// num_sharing}. Empty where sysfs has none (many VMs).
nlohmann::json cpu_caches() {
  nlohmann::json caches = nlohmann::json::array();
  for (int index = 0;; ++index) {
    const std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/";
    const std::string level = read_first_line((dir + "level").c_str());
    if (level == "unavailable") break;
    const std::string size = read_first_line((dir + "size").c_str());
    long bytes = 0;
    try {
      bytes = std::stol(size) * (size.ends_with("K") ? 1024L : size.ends_with("M") ? 1024L * 1024 : 1L);
    } catch (const std::exception&) {
      bytes = 0;
    }
    caches.push_back({{"type", read_first_line((dir + "type").c_str())},
                      {"level", std::atoi(level.c_str())},
                      {"size", bytes},
                      {"num_sharing", cpus_in_list(read_first_line((dir + "shared_cpu_list").c_str()))}});
  }
  return caches;
}

std::string meminfo_value(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) {
      std::istringstream fields(line.substr(key.size() + 1));
      std::string value, unit;
      fields >> value >> unit;
      return unit.empty() ? value : value + " " + unit;
    }
  }
  return "unavailable";
}

std::string memlock_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_MEMLOCK, &limit) != 0) return "unavailable";
  if (limit.rlim_cur == RLIM_INFINITY) return "unlimited";
  return std::to_string(limit.rlim_cur / 1024) + " KiB";
}

}  // namespace

nlohmann::json collect_host_info() {
  utsname names{};
  const bool have_uname = uname(&names) == 0;
  return nlohmann::json{
      {"cpu", cpu_model()},
      {"cpu_mhz", cpu_mhz()},
      {"caches", cpu_caches()},
      {"online_cpus", sysconf(_SC_NPROCESSORS_ONLN)},
      {"hardware_concurrency", std::thread::hardware_concurrency()},
      {"kernel", have_uname ? std::string(names.release) : "unavailable"},
      {"hostname", have_uname ? std::string(names.nodename) : "unavailable"},
      {"isolated_cpus", read_first_line("/sys/devices/system/cpu/isolated")},
      {"hugepages_total", meminfo_value("HugePages_Total")},
      {"hugepages_free", meminfo_value("HugePages_Free")},
      {"hugepage_size", meminfo_value("Hugepagesize")},
      {"thp", read_first_line("/sys/kernel/mm/transparent_hugepage/enabled")},
      {"governor", read_first_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")},
      {"memlock", memlock_limit()},
  };
}

}  // namespace ipcfloor
