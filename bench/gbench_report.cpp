#include "bench/gbench_report.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

// A timed row found in a suite's report: where it sits (one label per level), the object that
// holds its figures, their unit, and for a flat row ("touch_p50_ns") the prefix of its keys.
struct TimedRow {
  std::string suite;
  std::vector<std::string> path;
  const nlohmann::json* node = nullptr;
  std::string unit;
  std::optional<std::string> flat_prefix;  // set: figures are PREFIX_STAT_UNIT keys
};

// A summary's keys and the aggregate names they become.
constexpr std::array<std::pair<std::string_view, std::string_view>, 10> kSummaryStats{{
    {"p50", "p50"}, {"p90", "p90"}, {"p99", "p99"}, {"p999", "p99.9"}, {"p99.9", "p99.9"}, {"p9999", "p99.99"},
    {"min", "min"}, {"max", "max"}, {"mean", "mean"}, {"stddev", "stddev"},
}};

// PREFIX_STAT_UNIT: a figure of a row whose figures are flat keys (memory's touch_p50_ns,
// throughput's p50_ms, compute's median_s).
const std::regex& flat_key() {
  static const std::regex pattern(R"(^(?:(.+)_)?(min|max|mean|median|p50|p90|p99|p999|p9999)_(ns|us|ms|s)$)");
  return pattern;
}

std::string_view flat_stat_name(const std::string& stat) {
  if (stat == "p999") return "p99.9";
  if (stat == "p9999") return "p99.99";
  return stat;
}

bool is_time_unit(const nlohmann::json& unit) {
  return unit.is_string() && (unit == "ns" || unit == "us" || unit == "ms" || unit == "s");
}

bool is_summary(const nlohmann::json& node) {
  return node.is_object() && node.contains("p50") && node["p50"].is_number();
}

// The unit of `node`, found under `key`: its own "unit", else its key's suffix (inproc_ms), else
// what its parent said.
std::string unit_of(const nlohmann::json& node, const std::string& key, const std::string& inherited) {
  if (node.is_object() && node.contains("unit") && is_time_unit(node["unit"])) return node["unit"].get<std::string>();
  for (const char* unit : {"ns", "us", "ms", "s"})
    if (key.ends_with(std::string("_") + unit)) return unit;
  return inherited;
}

// What tells an element of an array from its siblings: its name, or the strings that identify it,
// and where those repeat, the settings that differ ("bytes=1024"), else its index.
std::vector<std::string> element_labels(const nlohmann::json& array) {
  static constexpr std::array<const char*, 6> kIdentity{"transport", "isa", "backing", "what", "granularity", "way"};
  static constexpr std::array<const char*, 8> kSettings{"bytes", "combos", "workers", "lanes",
                                                        "in_flight", "prefault", "at_workers", "threads"};
  std::vector<std::string> labels;
  for (const auto& element : array) {
    std::string label;
    if (element.is_object() && element.contains("name") && element["name"].is_string()) {
      label = element["name"].get<std::string>();
    } else if (element.is_object()) {
      for (const char* key : kIdentity)
        if (element.contains(key) && element[key].is_string())
          label += fmt::format("{}{}", label.empty() ? "" : ",", element[key].get<std::string>());
    }
    labels.push_back(label);
  }
  const std::vector<std::string> bases = labels;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    if (!array[i].is_object() || (!bases[i].empty() && std::count(bases.begin(), bases.end(), bases[i]) == 1))
      continue;
    std::string settings;
    for (const char* key : kSettings) {
      if (!array[i].contains(key) || !(array[i][key].is_number_integer() || array[i][key].is_boolean())) continue;
      bool differs = false;
      for (std::size_t j = 0; j < array.size(); ++j)
        differs = differs || (j != i && bases[j] == bases[i] && array[j].is_object() &&
                              array[j].value(key, nlohmann::json()) != array[i][key]);
      if (differs) settings += fmt::format("{}{}={}", settings.empty() ? "" : ",", key, array[i][key].dump());
    }
    if (!settings.empty()) labels[i] += fmt::format("{}{}", labels[i].empty() ? "" : "/", settings);
  }
  for (std::size_t i = 0; i < labels.size(); ++i)
    if (labels[i].empty() || std::count(labels.begin(), labels.end(), labels[i]) > 1)
      labels[i] += fmt::format("[{}]", i);
  return labels;
}

void collect(const std::string& suite, const nlohmann::json& node, std::vector<std::string>& path,
             const std::string& unit, std::vector<TimedRow>& rows);

// Keys that only hold a list of rows: a row's name is its label in the list, not the list's key.
bool is_container_key(const std::string& key) {
  return key == "results" || key == "scenarios" || key == "paths" || key == "series" || key == "points" ||
         key == "rows";
}

void collect_object(const std::string& suite, const nlohmann::json& node, std::vector<std::string>& path,
                    const std::string& unit, std::vector<TimedRow>& rows) {
  const std::string here = node.contains("unit") && is_time_unit(node["unit"]) ? node["unit"].get<std::string>() : unit;
  std::vector<std::pair<std::string, std::string>> flat;  // prefix, unit
  for (const auto& [key, value] : node.items()) {
    std::smatch match;
    if (!value.is_number() || !std::regex_match(key, match, flat_key())) continue;
    std::pair<std::string, std::string> row{match[1].str(), match[3].str()};
    if (std::find(flat.begin(), flat.end(), row) == flat.end()) flat.push_back(row);
  }
  for (const auto& [prefix, flat_unit] : flat) {
    TimedRow row{suite, path, &node, flat_unit, prefix};
    if (!prefix.empty()) row.path.push_back(prefix);
    rows.push_back(std::move(row));
  }
  for (const auto& [key, value] : node.items()) {
    if (key == "host" || key == "context" || key == "config" || key == "distribution") continue;
    if (!value.is_object() && !value.is_array()) continue;
    const bool named = !is_container_key(key);
    if (named) path.push_back(key);
    if (is_summary(value)) {
      rows.push_back({suite, path, &value, unit_of(value, key, here), std::nullopt});
    } else {
      collect(suite, value, path, unit_of(value, key, here), rows);
    }
    if (named) path.pop_back();
  }
}

void collect(const std::string& suite, const nlohmann::json& node, std::vector<std::string>& path,
             const std::string& unit, std::vector<TimedRow>& rows) {
  if (node.is_object()) {
    collect_object(suite, node, path, unit, rows);
  } else if (node.is_array()) {
    // Arrays of plain values (samples, rounds, window rates) hold no rows.
    if (std::none_of(node.begin(), node.end(), [](const nlohmann::json& e) { return e.is_structured(); })) return;
    const std::vector<std::string> labels = element_labels(node);
    for (std::size_t i = 0; i < node.size(); ++i) {
      // An element named after the list it is in (an echo series' points) is told by its settings.
      std::string label = labels[i];
      if (!path.empty() && label.starts_with(path.back() + "/")) label.erase(0, path.back().size() + 1);
      path.push_back(label);
      if (is_summary(node[i])) {
        rows.push_back({suite, path, &node[i], unit_of(node[i], "", unit), std::nullopt});
      } else {
        collect(suite, node[i], path, unit, rows);
      }
      path.pop_back();
    }
  }
}

// SUITE/ROW: the labels of the row's path, joined; a name met twice gets its index.
std::vector<std::string> run_names(const std::vector<TimedRow>& rows) {
  std::vector<std::string> names;
  for (const TimedRow& row : rows) {
    std::string name = row.suite;
    for (const std::string& label : row.path) name += fmt::format("/{}", label);
    if (std::find(names.begin(), names.end(), name) != names.end()) name += fmt::format("[{}]", names.size());
    names.push_back(name);
  }
  return names;
}

// One entry of "benchmarks", its keys in the order Google Benchmark writes them: an iteration
// (round `repetition` of `repetitions`) when `stat` is empty, else the aggregate `stat`.
nlohmann::ordered_json run_entry(const std::string& run_name, std::size_t family, std::size_t repetitions,
                                 std::size_t repetition, std::string_view stat, std::size_t iterations, double value,
                                 const std::string& unit) {
  nlohmann::ordered_json out;
  out["name"] = stat.empty() ? run_name : fmt::format("{}_{}", run_name, stat);
  out["family_index"] = family;
  out["per_family_instance_index"] = 0;
  out["run_name"] = run_name;
  out["run_type"] = stat.empty() ? "iteration" : "aggregate";
  out["repetitions"] = repetitions;
  if (stat.empty()) out["repetition_index"] = repetition;
  out["threads"] = 1;
  if (!stat.empty()) {
    out["aggregate_name"] = stat;
    out["aggregate_unit"] = "time";
  }
  out["iterations"] = std::max<std::size_t>(iterations, 1);
  out["real_time"] = value;
  out["cpu_time"] = value;
  out["time_unit"] = unit;
  return out;
}

// The entries of one row: its rounds as iterations (if any), then one aggregate per figure.
void add_row(const TimedRow& row, const std::string& run_name, std::size_t family,
             nlohmann::ordered_json& benchmarks) {
  const nlohmann::json& node = *row.node;
  const nlohmann::json rounds = !row.flat_prefix && node.contains("round_p50") && node["round_p50"].is_array()
                                    ? node["round_p50"]
                                    : nlohmann::json::array();
  const std::size_t repetitions = std::max<std::size_t>(rounds.size(), 1);
  const std::string samples_key = "samples_" + row.unit;  // throughput's grid keeps its samples so
  std::size_t samples = 1;
  if (node.contains("samples") && node["samples"].is_number_unsigned()) {
    samples = node["samples"].get<std::size_t>();
  } else if (node.contains(samples_key) && node[samples_key].is_array()) {
    samples = node[samples_key].size();
  }
  for (std::size_t i = 0; i < rounds.size(); ++i)
    if (rounds[i].is_number())
      benchmarks.push_back(
          run_entry(run_name, family, repetitions, i, {}, samples / repetitions, rounds[i].get<double>(), row.unit));
  if (row.flat_prefix) {
    for (const auto& [key, value] : node.items()) {
      std::smatch match;
      if (!value.is_number() || !std::regex_match(key, match, flat_key())) continue;
      if (match[1].str() != *row.flat_prefix || match[3].str() != row.unit) continue;
      benchmarks.push_back(run_entry(run_name, family, repetitions, 0, flat_stat_name(match[2].str()), samples,
                                     value.get<double>(), row.unit));
    }
    return;
  }
  for (const auto& [key, stat] : kSummaryStats)
    if (node.contains(key) && node[std::string(key)].is_number())
      benchmarks.push_back(run_entry(run_name, family, repetitions, 0, stat, samples,
                                     node[std::string(key)].get<double>(), row.unit));
}

nlohmann::ordered_json context_of(const nlohmann::json& combined) {
  const nlohmann::json& context = combined.value("context", nlohmann::json::object());
  const nlohmann::json& host = combined.value("host", nlohmann::json::object());
  std::string date = context.value("date", std::string());
  if (date.ends_with("Z")) date = date.substr(0, date.size() - 1) + "+00:00";
  std::string build = context.value("build_type", std::string("release"));
  std::transform(build.begin(), build.end(), build.begin(), [](unsigned char c) { return std::tolower(c); });
  const std::string governor = host.value("governor", std::string());
  return nlohmann::ordered_json{
      {"date", date},
      {"host_name", context.value("hostname", host.value("hostname", std::string()))},
      {"executable", context.value("command", combined.value("command", std::string("ipcfloor bench")))},
      {"num_cpus", context.value("online_cpus", host.value("online_cpus", 0))},
      {"mhz_per_cpu", host.value("cpu_mhz", 0)},
      {"cpu_scaling_enabled", !governor.empty() && governor != "performance" && governor != "unavailable"},
      {"caches", host.value("caches", nlohmann::json::array())},
      {"load_avg", context.value("load_avg", nlohmann::json::array())},
      {"library_build_type", build},
      {"ipcfloor_version", context.value("version", std::string())},
      {"git_commit", context.value("git_commit", std::string())},
      {"cpu", context.value("cpu", host.value("cpu", std::string()))},
      {"kernel", context.value("kernel", host.value("kernel", std::string()))},
      {"kernel_isa", context.value("kernel_isa", std::string())},
      {"percentile", "nearest rank: the smallest sample with at least p% of the samples at or below it"},
      {"cpu_time", "ipcfloor measures wall-clock time only: cpu_time repeats real_time"},
  };
}

}  // namespace

nlohmann::ordered_json google_benchmark_report(const nlohmann::json& combined) {
  std::vector<TimedRow> rows;  // pointing into `combined`
  if (const auto suites = combined.find("suites"); suites != combined.end() && suites->is_object()) {
    for (const auto& [suite, report] : suites->items()) {
      std::vector<std::string> path;
      collect(suite, report, path, "ns", rows);
    }
  }
  const std::vector<std::string> names = run_names(rows);
  nlohmann::ordered_json benchmarks = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < rows.size(); ++i) add_row(rows[i], names[i], i, benchmarks);
  nlohmann::ordered_json report;
  report["context"] = context_of(combined);
  report["benchmarks"] = std::move(benchmarks);
  return report;
}

}  // namespace ipcfloor
