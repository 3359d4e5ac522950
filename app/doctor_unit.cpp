#include "app/doctor_unit.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "common/peer_policy.hpp"

namespace ipcfloor {
namespace {

constexpr std::string_view kUnitName = "ipcfloor@.service";

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())) != 0) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0) text.remove_suffix(1);
  return text;
}

// Applies the [Service] settings of one unit file or drop-in to `unit`; false when unreadable.
bool apply_unit_file(const std::string& path, UnitMemlock& unit) {
  std::ifstream in(path);
  if (!in) return false;
  bool service = false;
  for (std::string raw; std::getline(in, raw);) {
    const std::string_view line = trimmed(raw);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[') {
      service = line == "[Service]";
      continue;
    }
    const std::size_t eq = line.find('=');
    if (!service || eq == std::string_view::npos) continue;
    const std::string_view key = trimmed(line.substr(0, eq));
    const std::string value(trimmed(line.substr(eq + 1)));
    if (key == "User") {
      unit.user = value.empty() ? "root" : value;
    } else if (key == "LimitMEMLOCK") {
      if (value.empty()) {
        unit.limit.reset();
      } else {
        unit.limit = value.substr(0, value.find(':'));
      }
    } else if (key == "AmbientCapabilities") {
      // An empty assignment resets the list; a leading ~ inverts it.
      if (value.empty()) unit.ipc_lock_capability = false;
      else if (value.front() != '~' && value.find("CAP_IPC_LOCK") != std::string::npos) unit.ipc_lock_capability = true;
    }
  }
  return true;
}

// The drop-ins of unit `name`: NAME.d/*.conf beside the unit and in /etc/systemd/system, sorted
// by file name as systemd applies them.
std::vector<std::string> drop_ins(const std::filesystem::path& unit) {
  std::vector<std::filesystem::path> found;
  const std::string folder = unit.filename().string() + ".d";
  for (const std::filesystem::path& dir : {unit.parent_path() / folder, std::filesystem::path("/etc/systemd/system") / folder}) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(dir, error))
      if (entry.path().extension() == ".conf" &&
          std::find(found.begin(), found.end(), entry.path()) == found.end())
        found.push_back(entry.path());
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.filename() < b.filename(); });
  std::vector<std::string> paths;
  for (const auto& path : found) paths.push_back(path.string());
  return paths;
}

// DefaultLimitMEMLOCK= of /etc/systemd/system.conf, when it sets one.
std::optional<std::string> default_limit() {
  std::ifstream in("/etc/systemd/system.conf");
  std::optional<std::string> limit;
  for (std::string raw; std::getline(in, raw);) {
    const std::string_view line = trimmed(raw);
    if (line.starts_with("DefaultLimitMEMLOCK=")) {
      const std::string value(trimmed(line.substr(20)));
      limit = value.empty() ? std::nullopt : std::optional<std::string>(value.substr(0, value.find(':')));
    }
  }
  return limit;
}

std::string size_text(std::uint64_t bytes) {
  if (bytes >= (std::uint64_t{1} << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / (1 << 30));
  if (bytes >= (std::uint64_t{1} << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(bytes) / (1 << 20));
  return fmt::format("{} KiB", (bytes + 1023) / 1024);
}

}  // namespace

std::string installed_unit_path() {
  for (const char* dir : {"/etc/systemd/system", "/usr/local/lib/systemd/system", "/usr/lib/systemd/system",
                          "/lib/systemd/system"}) {
    const std::string path = fmt::format("{}/{}", dir, kUnitName);
    if (::access(path.c_str(), R_OK) == 0) return path;
  }
  return {};
}

std::optional<UnitMemlock> read_unit_memlock(const std::string& path) {
  UnitMemlock unit;
  unit.path = path;
  if (!apply_unit_file(path, unit)) return std::nullopt;
  for (const std::string& drop_in : drop_ins(path)) (void)apply_unit_file(drop_in, unit);
  return unit;
}

std::optional<std::uint64_t> parse_memlock_limit(const std::string& text, bool& ok) {
  ok = true;
  const std::string_view value = trimmed(text);
  if (value == "infinity") return std::nullopt;
  std::uint64_t number = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), number);
  std::string_view suffix(end, static_cast<std::size_t>(value.data() + value.size() - end));
  int shift = 0;
  if (suffix == "K") shift = 10;
  else if (suffix == "M") shift = 20;
  else if (suffix == "G") shift = 30;
  else if (suffix == "T") shift = 40;
  else if (!suffix.empty()) ok = false;
  if (error != std::errc{} || end == value.data() || (shift > 0 && number > (~std::uint64_t{0} >> shift))) ok = false;
  return ok ? std::optional<std::uint64_t>(number << shift) : std::optional<std::uint64_t>(0);
}

HostCheck check_unit_memlock(const std::string& path, std::uint64_t locked_bytes) {
  HostCheck check{"memlock_unit", CheckLevel::ok, {}, {}};
  const auto unit = read_unit_memlock(path);
  if (!unit) {
    check.level = CheckLevel::warn;
    check.finding = fmt::format("cannot read the unit {}: the memory-lock limit of the engines it starts is unknown", path);
    return check;
  }
  const std::string fix = fmt::format("LimitMEMLOCK=infinity in the [Service] section of {} (or a drop-in: systemctl "
                                      "edit {}), then systemctl daemon-reload and restart the engines", path, kUnitName);
  auto uid = resolve_user(unit->user, "User=");
  if (!uid) {
    check.level = CheckLevel::warn;
    check.finding = fmt::format("{} runs engines as User={}, which this host does not know: the unit cannot start",
                                path, unit->user);
    check.fix = fmt::format("useradd --system --no-create-home {}", unit->user);
    return check;
  }
  const std::string who = fmt::format("{} runs engines as uid {}", path, user_text(*uid));
  if (*uid == 0 || unit->ipc_lock_capability) {
    check.finding = fmt::format("{}{}: nothing limits what they lock (CAP_IPC_LOCK); the engine locks the {} it needs",
                                who, *uid == 0 ? "" : " with AmbientCapabilities=CAP_IPC_LOCK", size_text(locked_bytes));
    return check;
  }
  const std::optional<std::string> written = unit->limit ? unit->limit : default_limit();
  const std::string source = unit->limit ? "LimitMEMLOCK" : "systemd's DefaultLimitMEMLOCK (the unit sets none)";
  if (!written) {
    check.level = CheckLevel::warn;
    check.finding = fmt::format("{} and sets no LimitMEMLOCK: the engines get systemd's DefaultLimitMEMLOCK (systemctl "
                                "show -p DefaultLimitMEMLOCK), not the {} the engine locks, and run unlocked",
                                who, size_text(locked_bytes));
    check.fix = fix;
    return check;
  }
  bool ok = true;
  const std::optional<std::uint64_t> limit = parse_memlock_limit(*written, ok);
  if (!ok) {
    check.level = CheckLevel::warn;
    check.finding = fmt::format("{} with {}={}, which is not a size systemd reads", who, source, *written);
    check.fix = fix;
  } else if (!limit) {
    check.finding = fmt::format("{} with {}=infinity: the engine locks the {} it needs", who, source,
                                size_text(locked_bytes));
  } else if (*limit >= locked_bytes) {
    check.finding = fmt::format("{} with {}={} ({}), which covers the {} the engine locks", who, source, *written,
                                size_text(*limit), size_text(locked_bytes));
  } else {
    check.level = CheckLevel::warn;
    check.finding = fmt::format("{} with {}={} ({}), less than the {} the engine locks: it runs unlocked (pages may "
                                "be swapped out and fault back in on the request path)",
                                who, source, *written, size_text(*limit), size_text(locked_bytes));
    check.fix = fix;
  }
  return check;
}

}  // namespace ipcfloor
