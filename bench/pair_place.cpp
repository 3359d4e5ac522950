#include "bench/pair_place.hpp"

#include <filesystem>

#include <fmt/format.h>

#include "common/log.hpp"
#include "common/placement.hpp"
#include "common/topology.hpp"

namespace ipcfloor {

Expected<std::optional<SavedMatrix>> find_saved_matrix(const std::string& path) {
  if (!path.empty()) {
    auto saved = load_floor_matrix(path);
    if (!saved) return std::unexpected(saved.error());
    return std::optional<SavedMatrix>(std::move(*saved));
  }
  const std::string fallback = default_matrix_path();
  std::error_code ec;
  if (fallback.empty() || !std::filesystem::exists(fallback, ec)) return std::optional<SavedMatrix>();
  auto saved = load_floor_matrix(fallback);
  if (!saved) {
    // Another host's, or damaged: as if none were saved, and said so (a --topology FILE given on
    // purpose is an error instead, above).
    log(LogLevel::warn, "ignoring the saved floor matrix: {} (as if none were saved; `ipcfloor topology --save` "
        "measures a new one)", saved.error().message);
    return std::optional<SavedMatrix>();
  }
  return std::optional<SavedMatrix>(std::move(*saved));
}

nlohmann::json describe_pair(int client_cpu, int server_cpu, const std::optional<SavedMatrix>& matrix) {
  const HostTopology topology = read_topology("");
  const CpuRelation relation = topology.relation(client_cpu, server_cpu);
  nlohmann::json pair{{"client_cpu", client_cpu}, {"server_cpu", server_cpu}, {"relation", relation_name(relation)},
                      {"description", relation_description(relation)}};
  if (!matrix) return pair;
  const double p50 = matrix->floors.floor(client_cpu, server_cpu);
  if (p50 <= 0) return pair;
  pair["matrix_p50"] = p50;
  for (const auto& row : matrix->report["pairs"])
    if (row.value("client_cpu", -1) == client_cpu && row.value("server_cpu", -1) == server_cpu)
      pair["matrix_p99"] = row.value("p99", 0.0);
  pair["matrix_date"] = matrix->report.value("context", nlohmann::json::object()).value("date", std::string());
  return pair;
}

std::string pair_text(const nlohmann::json& pair) {
  std::string text = fmt::format("client cpu {}, server cpu {}: {} ({})", pair["client_cpu"].get<int>(),
                                 pair["server_cpu"].get<int>(), pair["relation"].get<std::string>(),
                                 pair["description"].get<std::string>());
  if (pair.contains("matrix_p50"))
    return text + fmt::format("; this pair's floor by the saved matrix: p50 {:.1f} ns{}", pair["matrix_p50"].get<double>(),
                              pair.contains("matrix_p99") ? fmt::format(", p99 {:.1f} ns", pair["matrix_p99"].get<double>())
                                                          : std::string());
  return text + "; no saved matrix holds this pair (`ipcfloor topology --save` measures one)";
}

Expected<int> near_client_cpu(int server_cpu, const std::optional<SavedMatrix>& matrix) {
  const HostTopology topology = read_topology("");
  const std::vector<int> near = near_cpus(topology, matrix ? &matrix->floors : nullptr, server_cpu);
  if (near.empty())
    return fail(ErrorCode::invalid_argument, "--client-cpu near: no allowed cpu besides the server cpu {}", server_cpu);
  return near.front();
}

}  // namespace ipcfloor
