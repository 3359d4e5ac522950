#pragma once
// Where a benchmark's two sides run, said in its report: the client and server cpus, how the
// kernel declares they relate (common/topology.hpp) and, when a saved floor matrix holds the pair
// (`ipcfloor topology --save`), that pair's floor; and `--client-cpu near`: the cpu nearest the
// server cpu to put the measuring side on.
//
// Setup path: reads sysfs and the saved matrix, allocates. Any thread.

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "bench/floor_matrix.hpp"
#include "common/error.hpp"

namespace ipcfloor {

// The saved matrix to use: `path` when given (its errors are returned), else the default one
// (default_matrix_path()) when it exists and is this host's, else none.
[[nodiscard]] Expected<std::optional<SavedMatrix>> find_saved_matrix(const std::string& path);

// {"client_cpu","server_cpu","relation","description"} and, from `matrix` when it holds the pair,
// "matrix_p50" (ns) and "matrix_p99".
[[nodiscard]] nlohmann::json describe_pair(int client_cpu, int server_cpu, const std::optional<SavedMatrix>& matrix);

// "client cpu 0, server cpu 1: two cores of one NUMA node, ...; floor p50 245.1 ns by the saved
// matrix" (or "no saved matrix holds this pair: `ipcfloor topology --save` measures one").
[[nodiscard]] std::string pair_text(const nlohmann::json& pair);

// The allowed cpu nearest `server_cpu` (common/placement.hpp, rule 4): by `matrix` when it covers
// the allowed cpus, else by the declared topology. invalid_argument when no other cpu is allowed.
[[nodiscard]] Expected<int> near_client_cpu(int server_cpu, const std::optional<SavedMatrix>& matrix);

}  // namespace ipcfloor
