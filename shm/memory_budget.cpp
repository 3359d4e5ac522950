#include "shm/memory_budget.hpp"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

// A v1 limit at or above this is "no limit" (the kernel writes LONG_MAX rounded down to a page).
constexpr std::uint64_t kNoLimitAbove = std::uint64_t{1} << 62;

std::optional<std::uint64_t> parse_u64(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  std::uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

// The value of "key N" (memory.stat) or "Key:   N kB" (meminfo) in `text`; empty when absent.
std::optional<std::uint64_t> field(std::string_view text, std::string_view key) {
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    if (!line.starts_with(key) || line.size() == key.size()) continue;
    std::string_view rest = line.substr(key.size());
    if (rest.front() != ' ' && rest.front() != ':') continue;
    const std::size_t digits = rest.find_first_not_of(": ");
    if (digits == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(digits);
    return parse_u64(rest.substr(0, rest.find(' ')));
  }
  return std::nullopt;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

struct CgroupMount {
  std::string root;         // the cgroup path this mount shows at its mount point
  std::string mount_point;
};

// The cgroup2 mount, or the v1 mount of the memory controller, from /proc/self/mountinfo:
// "ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [TAGS...] - FSTYPE SOURCE SUPER_OPTIONS".
std::optional<CgroupMount> find_cgroup_mount(const std::string& mountinfo, bool v2) {
  std::istringstream lines(mountinfo);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash));
    std::istringstream tail(line.substr(dash + 3));
    std::string id, parent, numbers, root, mount_point, type, source, options;
    if (!(head >> id >> parent >> numbers >> root >> mount_point) || !(tail >> type >> source >> options)) continue;
    if (v2 ? type != "cgroup2" : type != "cgroup" || ("," + options + ",").find(",memory,") == std::string::npos)
      continue;
    return CgroupMount{root, mount_point};
  }
  return std::nullopt;
}

// This process's cgroup path for the hierarchy: "0::/a/b" (v2) or "4:memory,...:/a/b" (v1).
std::optional<std::string> find_cgroup_path(const std::string& cgroups, bool v2) {
  std::istringstream lines(cgroups);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t first = line.find(':');
    const std::size_t second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const bool match = v2 ? line.substr(0, first) == "0" && controllers.empty()
                          : ("," + controllers + ",").find(",memory,") != std::string::npos;
    if (match) return line.substr(second + 1);
  }
  return std::nullopt;
}

// Every level from this process's cgroup up to the mount's root, as its files state it.
std::vector<CgroupLevel> read_cgroup_levels(bool v2) {
  std::vector<CgroupLevel> levels;
  const auto mount = find_cgroup_mount(read_text("/proc/self/mountinfo"), v2);
  const auto path = find_cgroup_path(read_text("/proc/self/cgroup"), v2);
  if (!mount || !path) return levels;
  std::string relative = *path;
  if (mount->root != "/") {
    if (!relative.starts_with(mount->root)) return levels;
    relative.erase(0, mount->root.size());
  }
  std::string dir = mount->mount_point + relative;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const char* limit_file = v2 ? "memory.max" : "memory.limit_in_bytes";
  const char* usage_file = v2 ? "memory.current" : "memory.usage_in_bytes";
  const char* inactive_key = v2 ? "inactive_file" : "total_inactive_file";
  for (;;) {
    CgroupLevel level;
    level.path = dir + "/" + limit_file;
    const std::string limit = read_text(level.path);
    if (!limit.empty()) {
      const auto value = parse_u64(limit);
      level.limit = value && *value < kNoLimitAbove ? value : std::nullopt;  // "max" or LONG_MAX: none
      level.usage = parse_u64(read_text(dir + "/" + usage_file)).value_or(0);
      level.inactive_file = field(read_text(dir + "/memory.stat"), inactive_key).value_or(0);
      levels.push_back(std::move(level));
    }
    if (dir.size() <= mount->mount_point.size()) break;
    dir.erase(std::max(dir.rfind('/'), mount->mount_point.size()));
  }
  return levels;
}

}  // namespace

std::string bytes_text(std::uint64_t bytes) {
  constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  double value = static_cast<double>(bytes) / 1024.0;
  std::size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(kUnits)) {
    value /= 1024.0;
    ++unit;
  }
  return fmt::format("{:.1f} {}", value, kUnits[unit]);
}

std::optional<std::uint64_t> parse_mem_available(std::string_view meminfo) {
  const auto kib = field(meminfo, "MemAvailable");
  if (!kib) return std::nullopt;
  return *kib * 1024;
}

std::optional<MemoryLimit> tightest_cgroup_limit(std::span<const CgroupLevel> levels) {
  std::optional<MemoryLimit> tightest;
  for (const CgroupLevel& level : levels) {
    if (!level.limit) continue;
    const std::uint64_t used = level.usage - std::min(level.usage, level.inactive_file);
    const std::uint64_t left = *level.limit - std::min(*level.limit, used);
    if (tightest && tightest->bytes <= left) continue;
    tightest = MemoryLimit{left, fmt::format("the cgroup limit in {} ({}, {} of it in use)", level.path,
                                             bytes_text(*level.limit), bytes_text(used))};
  }
  return tightest;
}

Expected<void> check_memory_budget(std::span<const MemoryNeed> needs, const HostMemory& host) {
  std::uint64_t total = 0;
  const MemoryNeed* largest = nullptr;
  std::string parts;
  for (const MemoryNeed& need : needs) {
    total = need.bytes > UINT64_MAX - total ? UINT64_MAX : total + need.bytes;  // saturates
    if (largest == nullptr || need.bytes > largest->bytes) largest = &need;
    parts += fmt::format("{}{}: {} for {}", parts.empty() ? "" : "; ", need.what, bytes_text(need.bytes), need.options);
  }
  const MemoryLimit* exceeded = nullptr;
  for (const std::optional<MemoryLimit>* limit : {&host.available, &host.cgroup}) {
    if (!*limit || total <= (*limit)->bytes) continue;
    if (exceeded == nullptr || (*limit)->bytes < exceeded->bytes) exceeded = &**limit;
  }
  if (exceeded == nullptr) return {};
  return fail(ErrorCode::resource, "the host cannot back these sizes: they need {} of memory in all ({}), but {} "
              "allows {} more; lower {}", bytes_text(total), parts, exceeded->source, bytes_text(exceeded->bytes),
              largest->options);
}

HostMemory read_host_memory() {
  HostMemory host;
  if (const auto available = parse_mem_available(read_text("/proc/meminfo")))
    host.available = MemoryLimit{*available, "MemAvailable in /proc/meminfo"};
  std::vector<CgroupLevel> levels = read_cgroup_levels(true);
  const std::vector<CgroupLevel> v1 = read_cgroup_levels(false);
  levels.insert(levels.end(), v1.begin(), v1.end());
  host.cgroup = tightest_cgroup_limit(levels);
  return host;
}

}  // namespace ipcfloor
