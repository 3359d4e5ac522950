#include "bench/host_info.hpp"

#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

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
