// fuzz-sources: bench/saved_matrix.cpp common/placement.cpp common/topology.cpp common/affinity.cpp
// fuzz-libs: -lfmt
// fuzz-smoke-runs: 30000
//
// libFuzzer harness for the saved floor matrix's reader (bench/saved_matrix.hpp): the file that
// `serve --cpu auto`, every `serve` (for the cpus nearest the engine), `--client-cpu near` and the
// ladder's report read from ~/.cache/ipcfloor/topology.json or --topology FILE. The input is that
// file's text; the first byte picks a mode:
//   0    the bytes as they are (mostly not JSON: the parser's refusals);
//   else a report of the right shape whose fields take types and values from the input, so that
//        the shape checks, not the JSON parser, are what is exercised.
//
// Build and run every harness with tools/fuzz (see docs/RELIABILITY.md, "Fuzzing").
//
// Invariants (a violation traps; an exception that escapes is a crash too, as it aborted `serve`):
//   - parse_saved_matrix never throws; it returns floors or a bad_data error with a sentence;
//   - accepted floors hold only the cpus the report's pairs name, each in 0..CPU_SETSIZE-1, and
//     every floor they give is a finite number > 0 or "none" (negative);
//   - after check_matrix_report accepted a report, every read the engine and the ladder make of it
//     (value() of the pairs, host and context fields) succeeds without an exception.

#include <sched.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "bench/saved_matrix.hpp"

namespace {

using namespace ipcfloor;
using nlohmann::json;

void require(bool condition) {
  if (!condition) __builtin_trap();
}

// A value of some JSON type, taken from the input (advancing it).
json value_from(std::string_view& input) {
  if (input.empty()) return nullptr;
  const auto kind = static_cast<unsigned char>(input.front());
  input.remove_prefix(1);
  std::int64_t number = 0;
  for (int i = 0; i < 8 && !input.empty(); ++i, input.remove_prefix(1))
    number = (number << 8) | static_cast<unsigned char>(input.front());
  switch (kind % 9) {
    case 0: return nullptr;
    case 1: return number % 3;                                     // small cpus, often valid
    case 2: return number;                                         // any int64
    case 3: return static_cast<std::uint64_t>(number);             // past INT64_MAX too
    case 4: return static_cast<double>(number) / 7.0;              // a float
    case 5: return std::string(static_cast<std::size_t>(number & 7), 'x');
    case 6: return json::array({number});
    case 7: return json::object({{"k", number}});
    default: return (number & 1) != 0;
  }
}

std::string shaped_report(std::string_view input) {
  json pairs = json::array();
  const std::size_t count = input.empty() ? 0 : static_cast<unsigned char>(input.front()) % 6;
  if (!input.empty()) input.remove_prefix(1);
  for (std::size_t i = 0; i < count; ++i)
    pairs.push_back({{"client_cpu", value_from(input)}, {"server_cpu", value_from(input)},
                     {"samples", value_from(input)}, {"p50_interp", value_from(input)}, {"p99", value_from(input)}});
  json report{{"suite", "topology"}, {"pairs", pairs}};
  if (!input.empty()) report["host"] = {{"hostname", value_from(input)}, {"cpu", value_from(input)}};
  if (!input.empty()) report["context"] = {{"date", value_from(input)}};
  if (!input.empty() && (input.front() & 1) != 0) report["pairs"] = value_from(input);
  return report.dump();
}

// The reads the engine and the ladder make of an accepted report (bench/pair_place.cpp,
// bench/floor_matrix.cpp): none may throw.
void read_like_the_engine(const json& report) {
  for (const auto& row : report["pairs"]) {
    (void)row.value("client_cpu", -1);
    (void)row.value("server_cpu", -1);
    (void)row.value("p99", 0.0);
    (void)row.value("samples", std::int64_t{0});
  }
  const json host = report.value("host", json::object());
  (void)host.value("hostname", std::string());
  (void)host.value("cpu", std::string());
  (void)report.value("context", json::object()).value("date", std::string());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view input(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string text = data[0] == 0 ? std::string(input) : shaped_report(input);
  Expected<SavedMatrix> saved;
  try {
    saved = parse_saved_matrix(text);
  } catch (...) {
    require(false);  // before: nlohmann::json::type_error, and serve aborted
  }
  if (!saved) {
    require(saved.error().code == ErrorCode::bad_data && !saved.error().message.empty());
    return 0;
  }
  try {
    read_like_the_engine(saved->report);
  } catch (...) {
    require(false);
  }
  for (const int cpu : saved->floors.cpus()) {
    require(cpu >= 0 && cpu < CPU_SETSIZE);
    for (const int other : saved->floors.cpus()) {
      const double floor = saved->floors.floor(cpu, other);
      require(floor < 0 || (std::isfinite(floor) && floor > 0));
    }
  }
  return 0;
}
