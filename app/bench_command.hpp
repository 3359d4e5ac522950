#pragma once
// `ipcfloor bench [suite...]`: the command-line front of every benchmark suite. Each suite
// registers in app/bench_command.cpp with a runner (returns its JSON report) and a printer.

#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "bench/ablation_bench.hpp"
#include "bench/compute_bench.hpp"
#include "bench/echo_bench.hpp"
#include "bench/granularity_bench.hpp"
#include "bench/live_bench.hpp"
#include "bench/restart_bench.hpp"
#include "bench/hygiene.hpp"
#include "bench/ladder.hpp"
#include "bench/python_suite.hpp"
#include "bench/serialization_bench.hpp"
#include "bench/throughput_bench.hpp"

namespace ipcfloor {

struct BenchOptions {
  std::vector<std::string> suites;  // empty: every registered suite
  std::string out_dir;              // set: write <suite>.json there
  bool json = false;                // print JSON instead of tables
  bool quick = false;               // fewer samples and repeats
  bool list = false;                // name every suite and transport, run nothing
  std::string hgrm_dir;             // set: every latency figure as DIR/<suite>-<name>.hgrm
  std::string gbench_file;          // set: every suite's figures in Google Benchmark's JSON shape
  std::string transports;           // ladder: comma-separated names
  std::string python = "/usr/bin/python3";  // numba reference and plots
  std::string plot_script;                  // empty: tools/plot_report.py among the helpers
  std::string command_line;                 // recorded in report.json
  bool client_near = false;  // --client-cpu near: the allowed cpu nearest the server cpu, for every suite
  LadderOptions ladder;
  HygieneOptions hygiene;
  ComputeBenchOptions compute;
  SerializationOptions serialization;
  GranularityOptions granularity;
  AblationOptions ablation;
  EchoOptions echo;
  ThroughputOptions throughput;
  PythonBenchOptions python_bench;
  LiveBenchOptions live;
  RestartBenchOptions restart;
};

// Adds the `bench` subcommand and its options, bound to `options`.
CLI::App* add_bench_subcommand(CLI::App& app, BenchOptions& options);

// Runs the chosen suites in order, printing each report and writing its JSON. Exit code. No
// suite named: prints `help` and returns the usage exit code. With --json, prints one document
// holding the context block and every suite's report.
[[nodiscard]] int run_bench_command(BenchOptions options, const std::string& help);

// Like Google Benchmark's context block: what ran, where and when (version, commit, build, date,
// command, host, cpu, kernel, governor, load), in every report. Reads /proc and /sys.
[[nodiscard]] nlohmann::json bench_context(const std::string& command_line);

// Runs tools/plot_report.py (`plot_script` when given) with `python` on the report at
// `report_path`, drawing into `out_dir`; the names of the PNGs drawn, or nothing (the reason on
// stderr: no script, no python, no matplotlib).
[[nodiscard]] std::optional<nlohmann::json> draw_plots(const std::string& python, const std::string& plot_script,
                                                       const std::string& report_path, const std::string& out_dir);

// Writes `report` as DIR/NAME.json (creating DIR). False, with a message on stderr, on failure.
bool write_json_report(const std::string& dir, const std::string& name, const nlohmann::json& report);

}  // namespace ipcfloor
