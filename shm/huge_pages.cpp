#include "shm/huge_pages.hpp"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

namespace ipcfloor {
namespace {

// Value of "Key:   N kB" in /proc/meminfo, in the file's unit; nullopt when absent.
std::optional<std::uint64_t> meminfo_value(std::string_view key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 && line[key.size()] == ':') {
      std::istringstream fields(line.substr(key.size() + 1));
      std::uint64_t value = 0;
      if (fields >> value) return value;
    }
  }
  return std::nullopt;
}

std::optional<std::uint64_t> read_number_file(const char* path) {
  std::ifstream in(path);
  std::uint64_t value = 0;
  if (in >> value) return value;
  return std::nullopt;
}

}  // namespace

HugePageBudget huge_page_budget() {
  HugePageBudget budget;
  const auto total = read_number_file("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages");
  const auto free = read_number_file("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
  const auto reserved = read_number_file("/sys/kernel/mm/hugepages/hugepages-2048kB/resv_hugepages");
  if (total && free) {
    budget.total = *total;
    budget.available = *free - std::min(*free, reserved.value_or(0));
  } else if (meminfo_value("Hugepagesize").value_or(0) == 2048) {
    budget.total = meminfo_value("HugePages_Total").value_or(0);
    const std::uint64_t free_pages = meminfo_value("HugePages_Free").value_or(0);
    budget.available = free_pages - std::min(free_pages, meminfo_value("HugePages_Rsvd").value_or(0));
  }
  return budget;
}

std::string huge_pages_fix(std::uint64_t pages_needed, const HugePageBudget& budget) {
  const std::uint64_t want =
      std::max<std::uint64_t>(64, budget.total + pages_needed - std::min(pages_needed, budget.available));
  return "echo " + std::to_string(want) + " > /proc/sys/vm/nr_hugepages";
}

}  // namespace ipcfloor
