#pragma once
// `ipcfloor topology`: what the kernel declares about the allowed cpus, the floor matrix measured
// between every pair of them (bench/floor_matrix.hpp), where the two disagree, and where
// `serve --cpu auto` would put the engine. Also the placement `serve --cpu auto` itself uses.

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/error.hpp"
#include "common/placement.hpp"

namespace ipcfloor {

struct TopologyOptions {
  std::string mode = "quick";               // quick or thorough (bench/floor_matrix.hpp, plan_for)
  bool json = false;                        // print the report as JSON instead of tables
  std::string out_dir;                      // set: DIR/topology.json and the heatmap DIR/topology.png
  bool save = false;                        // write the report where serve and bench look for it
  std::string python = "/usr/bin/python3";  // runs tools/plot_report.py for --out
  std::string command_line;                 // recorded in the report's context
};

// Adds the `topology` subcommand, bound to `options`.
CLI::App* add_topology_subcommand(CLI::App& app, TopologyOptions& options);

// Measures, prints and writes what `options` asks for. Exit code.
[[nodiscard]] int run_topology_command(const TopologyOptions& options);

// `serve --cpu auto` (common/placement.hpp's rule): from the saved matrix at `path` (or the
// default one, bench/floor_matrix.hpp) when it covers the allowed cpus, else from a quick matrix
// measured now (a fraction of a second on a few cpus). Logs what it used. Errors: fewer than two
// allowed cpus; `path` given but unreadable, another host's, or not covering the allowed cpus.
[[nodiscard]] Expected<EnginePlacement> auto_engine_placement(const std::string& path);

// `serve --cpu N`: the cpus nearest N by the saved matrix (`path`, or the default one) when one
// covers the allowed cpus; empty otherwise (the engine then ranks them by the declared topology).
// Errors only for a `path` given and unusable.
[[nodiscard]] Expected<std::vector<int>> saved_near_cpus(int serving_cpu, const std::string& path);

}  // namespace ipcfloor
