#pragma once
// Reading an `ipcfloor topology` report back (bench/floor_matrix.hpp writes it): the file `serve
// --cpu auto`, `--client-cpu near` and the ladder's report find. Every field any of them reads is
// checked for its type and range before one is read, so that a file that is valid JSON of the
// wrong shape is an error naming the field ("pairs[3].client_cpu is a string, not an integer"),
// never an exception.
//
// Pure: no I/O; allocates. Any thread. tests/fuzz/fuzz_matrix_report.cpp feeds it arbitrary bytes.

#include <string_view>

#include <nlohmann/json.hpp>

#include "common/error.hpp"
#include "common/placement.hpp"

namespace ipcfloor {

// The fields the readers use, each of the type they read it as: "suite" the string "topology";
// "pairs" an array of objects with integer "client_cpu" and "server_cpu" (two cpus in
// 0..CPU_SETSIZE-1), an optional unsigned integer "samples", a number "p50_interp" (finite and
// > 0 when samples > 0) and an optional number "p99"; optional objects "host" (strings "hostname",
// "cpu") and "context" (string "date"). bad_data naming the first field that is not.
[[nodiscard]] Expected<void> check_matrix_report(const nlohmann::json& report);

// The p50 of each pair of a report (after check_matrix_report).
[[nodiscard]] Expected<FloorMatrix> floor_matrix_from_json(const nlohmann::json& report);

// A saved report and its floors.
struct SavedMatrix {
  nlohmann::json report;
  FloorMatrix floors;
};
// Parses `text` (JSON), checks it and takes its floors. bad_data naming what is wrong.
[[nodiscard]] Expected<SavedMatrix> parse_saved_matrix(std::string_view text);

}  // namespace ipcfloor
