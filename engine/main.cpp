// The ipcfloor command line (SPEC §7). Scripts depend on it: flags and output formats are a
// contract. Errors go to stderr with a non-zero exit code.

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/compute_bench.hpp"
#include "engine/gbm.hpp"
#include "engine/kernel.hpp"
#include "engine/series_io.hpp"
#include "engine/series_source.hpp"
#include "engine/sweep_report.hpp"

namespace {

using namespace ipcfloor;

constexpr int kExitFailure = 1;

int report_error(const Error& error) {
  fmt::print(stderr, "ipcfloor: {}\n", error.message);
  return kExitFailure;
}

void add_gbm_options(CLI::App& command, GbmParams& gbm) {
  command.add_option("--bars", gbm.bars, "number of bars to generate")->capture_default_str();
  command.add_option("--seed", gbm.seed, "numpy default_rng seed")->capture_default_str();
  command.add_option("--mu", gbm.mu, "drift per year")->capture_default_str();
  command.add_option("--sigma", gbm.sigma, "volatility per year")->capture_default_str();
  command.add_option("--s0", gbm.s0, "first close")->capture_default_str();
  command.add_option("--dt", gbm.dt, "bar length in years (default 1/(252*390))");
}

int run_gen(const GbmParams& gbm, const std::string& out_path) {
  auto close = generate_gbm(gbm);
  if (!close) return report_error(close.error());
  if (auto saved = save_series(out_path, *close); !saved) return report_error(saved.error());
  fmt::print(stderr, "ipcfloor gen: wrote {} bars (seed {}) to {}\n", close->size(), gbm.seed, out_path);
  return 0;
}

struct SweepOptions {
  bool inproc = false;
  SeriesSource source;
  std::string lengths;
  std::string grid = "6:200:80";
  bool json = false;
  double fee = kDefaultFee;
  unsigned threads = 0;
};

int run_sweep_command(const SweepOptions& options) {
  auto lengths = options.lengths.empty() ? parse_grid(options.grid) : parse_lengths(options.lengths);
  if (!lengths) return report_error(lengths.error());
  auto series = load_series_source(options.source);
  if (!series) return report_error(series.error());

  std::vector<Combo> combos;
  combos.reserve(lengths->size());
  for (const auto length : *lengths) combos.push_back(combo_from_length(length));
  auto results = run_sweep(series->close, combos, options.fee, options.threads);
  if (!results) return report_error(results.error());

  std::vector<SweepRow> rows;
  rows.reserve(combos.size());
  for (std::size_t i = 0; i < combos.size(); ++i) rows.push_back({(*lengths)[i], combos[i], (*results)[i]});
  if (options.json) {
    print_sweep_json(stdout, rows);
    return 0;
  }
  fmt::print("sweep: {} combos over {} ({} bars), in-process, fee {}\n", rows.size(), series->description,
             series->close.size(), options.fee);
  print_sweep_table(stdout, rows);
  if (series->is_default && options.fee == kDefaultFee) {
    for (const SweepRow& row : rows) {
      if (row.length != kFingerprintLength) continue;
      const bool holds = row.result.pnl == kFingerprintPnl && row.result.trades == kFingerprintTrades;
      fmt::print("fingerprint L=6: pnl {:.17g}, trades {}: {}\n", row.result.pnl, row.result.trades,
                 holds ? "matches the published -5165.577039790348 / 57029"
                       : "DOES NOT MATCH the published -5165.577039790348 / 57029");
      if (!holds) return kExitFailure;
    }
  }
  return 0;
}

struct BenchOptions {
  std::vector<std::string> suites;
  std::string out_dir;
  bool json = false;
  bool quick = false;
  ComputeBenchOptions compute;
};

int write_report(const std::string& out_dir, const std::string& name, const nlohmann::json& report) {
  if (out_dir.empty()) return 0;
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  const std::string path = out_dir + "/" + name + ".json";
  std::ofstream out(path);
  if (ec || !(out << report.dump(2) << '\n')) {
    fmt::print(stderr, "ipcfloor bench: could not write {}\n", path);
    return kExitFailure;
  }
  fmt::print(stderr, "ipcfloor bench: wrote {}\n", path);
  return 0;
}

int run_bench_command(BenchOptions options) {
  if (options.suites.empty()) options.suites = {"compute"};
  for (const std::string& suite : options.suites) {
    if (suite != "compute") {
      fmt::print(stderr, "ipcfloor bench: unknown suite '{}'; available: compute\n", suite);
      return kExitFailure;
    }
  }
  if (options.quick) {
    options.compute.repeats = 3;
    options.compute.reference_repeats = 1;
  }
  auto report = run_compute_bench(options.compute);
  if (!report) return report_error(report.error());
  if (options.json)
    fmt::print("{}\n", report->dump(2));
  else
    print_compute_report(*report);
  return write_report(options.out_dir, "compute", *report);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ipcfloor: the same-host latency floor for HMA/HMA3 backtests"};
  app.require_subcommand(1);

  GbmParams gen_params;
  std::string gen_out;
  auto* gen = app.add_subcommand("gen", "Write numpy's GBM close series (SPEC §1) without Python");
  add_gbm_options(*gen, gen_params);
  gen->add_option("-o,--out", gen_out, "output file: .f64 (raw little-endian), .csv or .npy")->required();

  SweepOptions sweep_options;
  std::string sweep_data;
  auto* sweep = app.add_subcommand("sweep", "Run a grid of combos and print pnl and trades per combo");
  sweep->add_flag("--inproc", sweep_options.inproc, "run the kernel in this process")->required();
  sweep->add_option("--data", sweep_data, "close series: .csv with a close column, .f64 or .npy")
      ->check(CLI::ExistingFile);
  add_gbm_options(*sweep, sweep_options.source.gbm);
  auto* lengths = sweep->add_option("--lengths", sweep_options.lengths, "comma-separated lengths, e.g. 6,8,11");
  sweep->add_option("--grid", sweep_options.grid, "FIRST:LAST:COUNT, like round(linspace(...))")
      ->capture_default_str()
      ->excludes(lengths);
  sweep->add_flag("--json", sweep_options.json, "one JSON object per combo and line");
  sweep->add_option("--fee", sweep_options.fee, "fee per round trip, percentage points")->capture_default_str();
  sweep->add_option("--threads", sweep_options.threads, "worker threads (0 = one per core)")->capture_default_str();

  BenchOptions bench_options;
  auto* bench = app.add_subcommand("bench", "Run benchmark suites and print (and write) their reports");
  bench->add_option("suite", bench_options.suites, "suites to run: compute");
  bench->add_option("--out", bench_options.out_dir, "directory for the JSON reports");
  bench->add_flag("--json", bench_options.json, "print the report as JSON");
  bench->add_flag("--quick", bench_options.quick, "fewer repeats");
  bench->add_option("--repeats", bench_options.compute.repeats, "timed in-process sweeps")->capture_default_str();
  bench->add_option("--reference-repeats", bench_options.compute.reference_repeats, "timed numba sweeps")
      ->capture_default_str();
  bench->add_option("--threads", bench_options.compute.threads, "kernel worker threads (0 = one per core)");
  bench->add_option("--python", bench_options.compute.python, "python with numpy and numba")->capture_default_str();

  CLI11_PARSE(app, argc, argv);

  if (*gen) return run_gen(gen_params, gen_out);
  if (*sweep) {
    if (!sweep_data.empty()) sweep_options.source.data_path = sweep_data;
    return run_sweep_command(sweep_options);
  }
  if (*bench) return run_bench_command(std::move(bench_options));
  return 0;
}
