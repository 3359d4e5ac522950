#include "bench/serialization_bench.hpp"

#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/host_info.hpp"
#include "bench/latency.hpp"
#include "data/gbm.hpp"

namespace ipcfloor {
namespace {

// Keeps the optimiser from discarding a result it can see is unused.
template <class T>
void keep(const T& value) {
  __asm__ __volatile__("" : : "g"(&value) : "memory");
}

}  // namespace

Expected<nlohmann::json> run_serialization_bench(const SerializationOptions& options) {
  GbmParams params;
  params.bars = options.bars;
  auto close = generate_gbm(params);
  if (!close) return std::unexpected(close.error());
  const TscClock clock = TscClock::calibrate();
  const std::size_t bytes = close->size() * sizeof(double);

  std::vector<double> raw_encode, raw_decode, json_encode, json_decode;
  std::vector<unsigned char> wire(bytes);
  std::vector<double> decoded(close->size());
  std::string text;
  std::size_t json_bytes = 0;
  for (std::size_t r = 0; r < options.repeats + 2; ++r) {  // two untimed warm-up rounds
    const bool timed = r >= 2;
    // Raw: the bytes as they sit in memory (little-endian hosts need no swapping).
    std::uint64_t t0 = TscClock::now();
    std::memcpy(wire.data(), close->data(), bytes);
    keep(wire);
    std::uint64_t t1 = TscClock::now();
    if (timed) raw_encode.push_back(clock.to_ns(t1 - t0));
    t0 = TscClock::now();
    std::memcpy(decoded.data(), wire.data(), bytes);
    keep(decoded);
    t1 = TscClock::now();
    if (timed) raw_decode.push_back(clock.to_ns(t1 - t0));

    // JSON: a document {"close":[...]} as a service API would exchange it.
    t0 = TscClock::now();
    text = nlohmann::json{{"close", *close}}.dump();
    keep(text);
    t1 = TscClock::now();
    if (timed) json_encode.push_back(clock.to_ns(t1 - t0));
    json_bytes = text.size();
    t0 = TscClock::now();
    auto parsed = nlohmann::json::parse(text)["close"].get<std::vector<double>>();
    keep(parsed);
    t1 = TscClock::now();
    if (timed) json_decode.push_back(clock.to_ns(t1 - t0));
    if (parsed.size() != close->size() || parsed[parsed.size() / 2] != (*close)[close->size() / 2])
      return fail(ErrorCode::bad_data, "the JSON round trip changed the series");
  }
  if (std::memcmp(decoded.data(), close->data(), bytes) != 0)
    return fail(ErrorCode::bad_data, "the raw round trip changed the series");

  std::vector<double> raw_trip(raw_encode.size()), json_trip(json_encode.size());
  for (std::size_t i = 0; i < raw_trip.size(); ++i) {
    raw_trip[i] = raw_encode[i] + raw_decode[i];
    json_trip[i] = json_encode[i] + json_decode[i];
  }
  auto row = [&](const char* name, std::vector<double>& ns, std::size_t size) {
    auto j = to_json(summarize(name, "one-way", ns));
    j["bytes"] = size;
    return j;
  };
  nlohmann::json results = nlohmann::json::array({
      row("raw-encode", raw_encode, bytes), row("raw-decode", raw_decode, bytes),
      row("json-encode", json_encode, json_bytes), row("json-decode", json_decode, json_bytes),
      row("raw-roundtrip", raw_trip, bytes), row("json-roundtrip", json_trip, json_bytes)});
  const auto p50 = [&](std::size_t i) { return results[i]["p50"].get<double>(); };
  return nlohmann::json{
      {"suite", "serialization"},
      {"host", collect_host_info()},
      {"config", {{"bars", options.bars}, {"repeats", options.repeats}, {"json_library", "nlohmann::json 3.11 (Debian)"},
                  {"raw", "little-endian float64 bytes, memcpy"}}},
      {"results", results},
      {"ratios", {{"json_encode/raw_encode", p50(2) / p50(0)},
                  {"json_decode/raw_decode", p50(3) / p50(1)},
                  {"json_roundtrip/raw_roundtrip", p50(5) / p50(4)},
                  {"json_bytes/raw_bytes", static_cast<double>(json_bytes) / static_cast<double>(bytes)}}},
  };
}

void print_serialization(const nlohmann::json& report) {
  fmt::print("serialization: the {}-bar close series, raw bytes vs JSON (nlohmann::json), us per operation\n",
             report["config"]["bars"].get<std::size_t>());
  fmt::print("  {:<16} {:>10} {:>10} {:>10} {:>10} {:>12}\n", "operation", "p50", "p90", "p99", "max", "bytes");
  for (const auto& r : report["results"])
    fmt::print("  {:<16} {:>10.1f} {:>10.1f} {:>10.1f} {:>10.1f} {:>12}\n", r["name"].get<std::string>(),
               r["p50"].get<double>() / 1e3, r["p90"].get<double>() / 1e3, r["p99"].get<double>() / 1e3,
               r["max"].get<double>() / 1e3, r["bytes"].get<std::size_t>());
  const auto& q = report["ratios"];
  fmt::print("  JSON / raw at p50: encode {:.0f}x, decode {:.0f}x, round trip {:.0f}x; JSON is {:.2f}x the bytes\n",
             q["json_encode/raw_encode"].get<double>(), q["json_decode/raw_decode"].get<double>(),
             q["json_roundtrip/raw_roundtrip"].get<double>(), q["json_bytes/raw_bytes"].get<double>());
}

}  // namespace ipcfloor
