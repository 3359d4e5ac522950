#include "shm/huge_pages.hpp"

#include <algorithm>
#include <cstddef>
#include <fstream>
#include <optional>
#include <sstream>
#include <string_view>

namespace ipcfloor {
namespace {

// "\040" style escapes in /proc/mounts fields.
std::string unescape_mount_field(std::string_view field) {
  std::string out;
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string_view digits = field.substr(i + 1, 3);
      if (std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out.push_back(static_cast<char>((digits[0] - '0') * 64 + (digits[1] - '0') * 8 + (digits[2] - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(field[i]);
  }
  return out;
}

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

// "2M", "1G", "2048k" -> bytes; 0 when unparsable.
std::size_t parse_page_size(std::string_view text) {
  std::size_t value = 0;
  std::size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) value = value * 10 + static_cast<std::size_t>(text[i] - '0');
  if (i == text.size()) return value;
  switch (text[i]) {
    case 'k': case 'K': return value << 10;
    case 'm': case 'M': return value << 20;
    case 'g': case 'G': return value << 30;
    default: return 0;
  }
}

// Mount points of hugetlbfs with 2 MiB pages, in /proc/mounts order, deduplicated.
}  // namespace

std::vector<std::string> hugetlbfs_2m_mounts() {
  std::vector<std::string> mounts;
  std::ifstream in("/proc/mounts");
  std::string line;
  const std::size_t default_page = meminfo_value("Hugepagesize").value_or(0) * 1024;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string device, dir, type, options;
    if (!(fields >> device >> dir >> type >> options) || type != "hugetlbfs") continue;
    std::size_t page = default_page;
    std::istringstream option_list(options);
    for (std::string option; std::getline(option_list, option, ',');) {
      if (option.rfind("pagesize=", 0) == 0) page = parse_page_size(std::string_view(option).substr(9));
    }
    if (page != kHugePageBytes) continue;
    std::string unescaped = unescape_mount_field(dir);
    if (std::find(mounts.begin(), mounts.end(), unescaped) == mounts.end()) mounts.push_back(std::move(unescaped));
  }
  return mounts;
}

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
