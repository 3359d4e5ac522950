#include "bench/saved_matrix.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

using nlohmann::json;

std::string_view kind_of(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::object: return "an object";
    case json::value_t::array: return "an array";
    case json::value_t::string: return "a string";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    default: return "not a JSON value";
  }
}

// A field of `parent` (an object), or nullptr when absent.
const json* field(const json& parent, const char* key) {
  const auto it = parent.find(key);
  return it == parent.end() ? nullptr : &*it;
}

std::unexpected<Error> wrong(const std::string& where, const json& value, std::string_view wanted) {
  return fail(ErrorCode::bad_data, "{} is {}, not {}", where, kind_of(value), wanted);
}

// An integer that fits int64, else nullopt.
std::optional<std::int64_t> integer_of(const json& value) {
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    return static_cast<std::int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<std::int64_t>();
  return std::nullopt;
}

Expected<void> check_strings(const json& root, const char* object, std::initializer_list<const char*> keys) {
  const json* parent = field(root, object);
  if (parent == nullptr) return {};
  if (!parent->is_object()) return wrong(object, *parent, "an object");
  for (const char* key : keys)
    if (const json* value = field(*parent, key); value != nullptr && !value->is_string())
      return wrong(fmt::format("{}.{}", object, key), *value, "a string");
  return {};
}

Expected<void> check_pair(const json& pair, std::size_t index) {
  const std::string at = fmt::format("pairs[{}]", index);
  if (!pair.is_object()) return wrong(at, pair, "an object");
  for (const char* key : {"client_cpu", "server_cpu"}) {
    const json* value = field(pair, key);
    if (value == nullptr) return fail(ErrorCode::bad_data, "{} has no {}", at, key);
    if (!value->is_number_integer()) return wrong(fmt::format("{}.{}", at, key), *value, "an integer");
    const auto cpu = integer_of(*value);
    if (!cpu || *cpu < 0 || *cpu >= CPU_SETSIZE)
      return fail(ErrorCode::bad_data, "{}.{} is {}: not a cpu in 0..{}", at, key, value->dump(), CPU_SETSIZE - 1);
  }
  std::int64_t samples = 0;
  if (const json* value = field(pair, "samples")) {
    if (!value->is_number_integer()) return wrong(fmt::format("{}.samples", at), *value, "a count of samples");
    const auto count = integer_of(*value);
    if (!count || *count < 0)
      return fail(ErrorCode::bad_data, "{}.samples is {}: not a count of samples", at, value->dump());
    samples = *count;
  }
  for (const char* key : {"p50_interp", "p99"}) {
    const json* value = field(pair, key);
    if (value != nullptr && !value->is_number()) return wrong(fmt::format("{}.{}", at, key), *value, "a number");
  }
  if (samples > 0 && field(pair, "p50_interp") == nullptr) return fail(ErrorCode::bad_data, "{} has no p50_interp", at);
  return {};
}

}  // namespace

Expected<void> check_matrix_report(const json& report) {
  if (!report.is_object()) return wrong("the report", report, "an object");
  const json* suite = field(report, "suite");
  if (suite == nullptr || !suite->is_string() || suite->get_ref<const std::string&>() != "topology")
    return fail(ErrorCode::bad_data, "not an `ipcfloor topology` report (no \"suite\": \"topology\" with \"pairs\")");
  const json* pairs = field(report, "pairs");
  if (pairs == nullptr) return fail(ErrorCode::bad_data, "not an `ipcfloor topology` report (no \"pairs\")");
  if (!pairs->is_array()) return wrong("pairs", *pairs, "an array");
  for (std::size_t i = 0; i < pairs->size(); ++i)
    if (auto ok = check_pair((*pairs)[i], i); !ok) return ok;
  if (auto ok = check_strings(report, "host", {"hostname", "cpu"}); !ok) return ok;
  return check_strings(report, "context", {"date"});
}

Expected<FloorMatrix> floor_matrix_from_json(const json& report) {
  if (auto ok = check_matrix_report(report); !ok) return std::unexpected(ok.error());
  std::vector<int> cpus;
  struct Row {
    int client, server;
    double p50;
  };
  std::vector<Row> rows;
  for (const auto& pair : report["pairs"]) {
    const int client = pair["client_cpu"].get<int>(), server = pair["server_cpu"].get<int>();
    if (client == server)
      return fail(ErrorCode::bad_data, "a pair names cpus {} and {}: not two cpus in 0..{}", client, server,
                  CPU_SETSIZE - 1);
    if (pair.value("samples", std::int64_t{0}) == 0) continue;  // never completed a round trip: no floor
    const double p50 = pair["p50_interp"].get<double>();
    if (!std::isfinite(p50) || p50 <= 0)
      return fail(ErrorCode::bad_data, "pair cpu {} -> cpu {} has p50 {}: not a time in ns", client, server, p50);
    for (const int cpu : {client, server})
      if (std::find(cpus.begin(), cpus.end(), cpu) == cpus.end()) cpus.push_back(cpu);
    rows.push_back({client, server, p50});
  }
  std::sort(cpus.begin(), cpus.end());
  FloorMatrix floors(cpus);
  for (const Row& row : rows) floors.set(row.client, row.server, row.p50);
  return floors;
}

Expected<SavedMatrix> parse_saved_matrix(std::string_view text) {
  SavedMatrix saved;
  saved.report = json::parse(text, nullptr, false);
  if (saved.report.is_discarded()) return fail(ErrorCode::bad_data, "it is not JSON");
  auto floors = floor_matrix_from_json(saved.report);
  if (!floors) return std::unexpected(floors.error());
  saved.floors = std::move(*floors);
  return saved;
}

}  // namespace ipcfloor
