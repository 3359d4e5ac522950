#include "app/topology_command.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/bench_command.hpp"
#include "app/cli_common.hpp"
#include "app/sweep_report.hpp"
#include "bench/floor_matrix.hpp"
#include "bench/pair_place.hpp"
#include "common/log.hpp"
#include "common/topology.hpp"

namespace ipcfloor {

CLI::App* add_topology_subcommand(CLI::App& app, TopologyOptions& options) {
  auto* topology = app.add_subcommand(
      "topology", "Measure the floor between every pair of allowed cpus and set it against the declared topology");
  topology->add_option("--mode", options.mode,
                       "quick: 2 rounds of 10,000 round trips per pair, at most 0.1 s per pair and round; thorough: "
                       "both directions, 4 rounds of 50,000, at most 0.25 s each")
      ->check(one_of({"quick", "thorough"}))
      ->capture_default_str();
  topology->add_flag("--json", options.json, "print the report as JSON");
  topology->add_option("--out", options.out_dir, "write DIR/topology.json and its heatmap DIR/topology.png")
      ->check(file_path());
  topology->add_flag("--save", options.save,
                     "save the report where serve --cpu auto, --client-cpu near and the ladder look for it: "
                     "$IPCFLOOR_TOPOLOGY, else $XDG_CACHE_HOME/ipcfloor/topology.json, else "
                     "~/.cache/ipcfloor/topology.json");
  topology->add_option("--python", options.python, "python with matplotlib, for the heatmap")
      ->check(file_path())
      ->capture_default_str();
  return topology;
}

namespace {

Expected<nlohmann::json> measure_report(const HostTopology& topology, MatrixMode mode, bool show_progress) {
  const MatrixPlan plan = plan_for(mode);
  const std::size_t n = topology.allowed.size();
  const std::size_t total = n * (n > 0 ? n - 1 : 0) / 2 * (plan.both_directions ? 2 : 1) * plan.rounds;
  SweepProgress progress(total, show_progress, "pairs x rounds");
  auto measured = measure_floor_matrix(topology, plan,
                                       [&](std::size_t done, std::size_t, const PairFloor&) { progress.advance(done); });
  progress.finish();
  if (!measured) return std::unexpected(measured.error());
  return matrix_json(*measured);
}

// The report's floors, as place_engine takes them.
FloorMatrix floors_of(const nlohmann::json& report) {
  auto floors = floor_matrix_from_json(report);
  return floors ? std::move(*floors) : FloorMatrix{};
}

int write_outputs(const TopologyOptions& options, const nlohmann::json& report) {
  if (!options.out_dir.empty()) {
    if (!write_json_report(options.out_dir, "topology", report)) return kExitEnvironment;
    if (auto drawn = draw_plots(options.python, "", options.out_dir + "/topology.json", options.out_dir))
      for (const auto& name : *drawn) fmt::print(stderr, "ipcfloor topology: drew {}/{}\n", options.out_dir, name.get<std::string>());
  }
  if (options.save) {
    const std::string path = default_matrix_path();
    if (path.empty())
      return report_error("topology", Error{ErrorCode::invalid_argument,
                                            "--save: no place to save to (set IPCFLOOR_TOPOLOGY, XDG_CACHE_HOME or HOME)"});
    if (auto saved = save_floor_matrix(path, report); !saved) return report_error("topology", saved.error());
    fmt::print(stderr, "ipcfloor topology: saved {}\n", path);
  }
  return 0;
}

}  // namespace

int run_topology_command(const TopologyOptions& options) {
  // A folder --save may not write into is refused before the measurement, not after it.
  if (options.save && !default_matrix_path().empty())
    if (auto writable = check_matrix_folder(default_matrix_path()); !writable)
      return report_error("topology", writable.error());
  const HostTopology topology = read_host_topology();
  const MatrixMode mode = options.mode == "thorough" ? MatrixMode::thorough : MatrixMode::quick;
  if (!options.json)
    fmt::print(stderr, "ipcfloor topology: {} pairs of cpus {} ({} mode: at most {:.1f} s)\n",
               topology.allowed.size() * (topology.allowed.size() - (topology.allowed.empty() ? 0 : 1)) / 2,
               fmt::join(topology.allowed, ","), options.mode, bound_seconds(plan_for(mode), topology.allowed.size()));
  auto report = measure_report(topology, mode, !options.json);
  if (!report) return report_error("topology", report.error());
  (*report)["context"] = bench_context(options.command_line);
  if (options.json) fmt::print("{}\n", report->dump(2));
  else print_matrix(*report);
  return write_outputs(options, *report);
}

Expected<EnginePlacement> auto_engine_placement(const std::string& path) {
  const HostTopology topology = read_host_topology();
  if (topology.allowed.size() < 2) return place_engine(topology, nullptr);  // the error naming the cpus
  auto saved = find_saved_matrix(path);
  if (!saved) return std::unexpected(saved.error());
  if (*saved && (*saved)->floors.covers(topology.allowed)) {
    auto placed = place_engine(topology, &(*saved)->floors);
    if (placed)
      log(LogLevel::info, "serve: --cpu auto: cpu {} by the saved floor matrix {} (nearest client cpus {})",
          placed->serving_cpu, path.empty() ? default_matrix_path() : path, fmt::join(placed->near_cpus, ","));
    return placed;
  }
  if (*saved && !path.empty())
    return fail(ErrorCode::invalid_argument,
                "--topology {} holds no floor for some of the allowed cpus {}: measure them with `ipcfloor topology "
                "--save` (or leave --topology out to measure at start)",
                path, fmt::join(topology.allowed, ","));
  auto report = measure_report(topology, MatrixMode::quick, false);
  if (!report) return std::unexpected(report.error());
  const FloorMatrix floors = floors_of(*report);
  auto placed = place_engine(topology, &floors);
  if (placed)
    log(LogLevel::info, "serve: --cpu auto: cpu {} by a quick floor matrix measured now in {:.2f} s (nearest client "
        "cpus {}, p50 {:.1f} ns to the first); `ipcfloor topology --save` keeps one for the next start",
        placed->serving_cpu, (*report)["config"]["seconds"].get<double>(), fmt::join(placed->near_cpus, ","),
        placed->near_cpus.empty() ? 0.0 : floors.floor(placed->near_cpus.front(), placed->serving_cpu));
  return placed;
}

Expected<std::vector<int>> saved_near_cpus(int serving_cpu, const std::string& path) {
  auto saved = find_saved_matrix(path);
  if (!saved) return std::unexpected(saved.error());
  const HostTopology topology = read_host_topology();
  if (!*saved || !(*saved)->floors.covers(topology.allowed)) return std::vector<int>{};
  return near_cpus(topology, &(*saved)->floors, serving_cpu);
}

}  // namespace ipcfloor
