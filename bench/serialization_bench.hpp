#pragma once
// `ipcfloor bench serialization`: the study's serialization tax (docs/SPEC.md §7.3). The 150,000-float
// close series encoded as raw little-endian bytes and as JSON (nlohmann::json, a real JSON
// library from Debian), encode and decode timed separately, each repetition a sample.

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ipcfloor {

struct SerializationOptions {
  std::size_t bars = 150'000;
  std::size_t repeats = 30;  // samples per codec and direction
};

// JSON: {"suite":"serialization","host":{...},"config":{...},"results":[{name, kind:"one-way",
// p50..max (ns), bytes}], "ratios":{"json_encode/raw_encode":..., "json_decode/raw_decode":...,
// "json_roundtrip/raw_roundtrip":...}}
[[nodiscard]] Expected<nlohmann::json> run_serialization_bench(const SerializationOptions& options);
void print_serialization(const nlohmann::json& report);

}  // namespace ipcfloor
