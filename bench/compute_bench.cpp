#include "bench/compute_bench.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "bench/helper_files.hpp"
#include "bench/host_info.hpp"
#include "kernel/gbm.hpp"
#include "kernel/kernel.hpp"
#include "kernel/series_source.hpp"
#include "kernel/grid.hpp"

namespace ipcfloor {
namespace {

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : (values[mid - 1] + values[mid]) / 2.0;
}

Expected<std::string> run_and_capture(const std::string& command) {
  const std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return fail(ErrorCode::io, "could not start '{}'", command);
  std::string output;
  char buffer[1 << 16];
  std::size_t got = 0;
  while ((got = std::fread(buffer, 1, sizeof buffer, pipe.get())) > 0) output.append(buffer, got);
  return output;
}

}  // namespace

Expected<nlohmann::json> run_compute_bench(const ComputeBenchOptions& options) {
  // Before any work: a missing helper is reported at once, not after the timed sweeps.
  auto script = options.reference_script.empty()
                    ? helper_file("tools/reference/bench_numba.py", "the numba reference (bench_numba.py)")
                    : Expected<std::string>(options.reference_script);
  if (!script) return std::unexpected(script.error());
  if (auto python = check_python(options.python); !python) return std::unexpected(python.error());
  auto lengths = parse_grid(options.grid);
  if (!lengths) return std::unexpected(lengths.error());
  SeriesSource source;
  source.gbm.bars = options.bars;
  source.gbm.seed = options.seed;
  auto series = load_series_source(source);
  if (!series) return std::unexpected(series.error());

  std::vector<Combo> combos;
  for (const auto length : *lengths) combos.push_back(combo_from_length(length));

  // In-process: each repeat is one whole sweep, timed on its own (a sample, not a batch mean).
  std::vector<double> sweep_seconds;
  std::vector<BacktestResult> results;
  for (unsigned r = 0; r < std::max(1u, options.repeats); ++r) {
    const auto start = std::chrono::steady_clock::now();
    auto swept = run_sweep(series->close, combos, options.fee, options.threads);
    const auto stop = std::chrono::steady_clock::now();
    if (!swept) return std::unexpected(swept.error());
    sweep_seconds.push_back(std::chrono::duration<double>(stop - start).count());
    results = std::move(*swept);
  }
  // The single-thread figure is kept too: it separates the kernel's speed from the core count.
  std::vector<double> single_thread_seconds;
  for (unsigned r = 0; r < std::max(1u, options.repeats / 2); ++r) {
    const auto start = std::chrono::steady_clock::now();
    auto swept = run_sweep(series->close, combos, options.fee, 1);
    single_thread_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!swept) return std::unexpected(swept.error());
  }

  const std::string command =
      fmt::format("'{}' '{}' --bars {} --seed {} --grid {} --fee {:.17g} --repeats {}", options.python,
                  *script, options.bars, options.seed, options.grid, options.fee,
                  std::max(1u, options.reference_repeats));
  auto output = run_and_capture(command);
  if (!output) return std::unexpected(output.error());
  nlohmann::json reference = nlohmann::json::parse(*output, nullptr, false);
  if (reference.is_discarded() || !reference.contains("results"))
    return fail(ErrorCode::io,
                "the numba reference did not produce a report (command: {}); is python3-numba "
                "installed? run tools/setup",
                command);

  // Parity gate: trades exactly equal, |Δpnl| <= 1e-6, for every combo.
  const auto& ref_results = reference["results"];
  if (ref_results.size() != results.size())
    return fail(ErrorCode::bad_data, "the reference returned {} results for {} combos",
                ref_results.size(), results.size());
  double max_abs_dpnl = 0.0;
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const double dpnl = std::abs(results[i].pnl - ref_results[i]["pnl"].get<double>());
    max_abs_dpnl = std::max(max_abs_dpnl, dpnl);
    if (results[i].trades != ref_results[i]["trades"].get<std::int64_t>() || !(dpnl <= 1e-6)) ++mismatches;
  }

  const double ours = median(sweep_seconds);
  const double numba = median(reference["sweep_seconds"].get<std::vector<double>>());
  nlohmann::json report{
      {"suite", "compute"},
      {"host", collect_host_info()},
      {"config",
       {{"bars", options.bars}, {"seed", options.seed}, {"grid", options.grid}, {"combos", combos.size()},
        {"fee", options.fee}, {"threads", options.threads == 0 ? std::thread::hardware_concurrency() : options.threads}}},
      {"ipcfloor_sweep_seconds", sweep_seconds},
      {"ipcfloor_single_thread_sweep_seconds", single_thread_seconds},
      {"numba_sweep_seconds", reference["sweep_seconds"]},
      {"numba_version", reference.value("numba", "?")},
      {"ipcfloor_median_s", ours},
      {"ipcfloor_single_thread_median_s", median(single_thread_seconds)},
      {"numba_median_s", numba},
      {"speedup_vs_numba", numba / ours},
      {"speedup_single_thread_vs_numba", numba / median(single_thread_seconds)},
      {"parity", {{"combos", results.size()}, {"mismatches", mismatches}, {"max_abs_dpnl", max_abs_dpnl},
                  {"holds", mismatches == 0}}},
  };
  if (options.bars == GbmParams{}.bars && options.seed == GbmParams{}.seed && !results.empty() &&
      lengths->front() == kFingerprintLength) {
    report["fingerprint"] = {{"pnl", results.front().pnl},
                             {"trades", results.front().trades},
                             {"holds", results.front().pnl == kFingerprintPnl &&
                                           results.front().trades == kFingerprintTrades}};
  }
  if (mismatches != 0)
    return fail(ErrorCode::bad_data,
                "parity gate failed: {} of {} combos differ from the numba reference (max |dpnl| {:.3g})",
                mismatches, results.size(), max_abs_dpnl);
  return report;
}

void print_compute_report(const nlohmann::json& report) {
  const auto& config = report["config"];
  fmt::print("compute: {}-combo sweep, {} bars, seed {} ({})\n", config["combos"].get<std::size_t>(),
             config["bars"].get<std::size_t>(), config["seed"].get<std::uint64_t>(),
             report["host"]["cpu"].get<std::string>());
  fmt::print("  {:<44} {:>10}\n", "implementation", "median s");
  fmt::print("  {:<44} {:>10.4f}\n",
             fmt::format("ipcfloor kernel, {} threads", config["threads"].get<unsigned>()),
             report["ipcfloor_median_s"].get<double>());
  fmt::print("  {:<44} {:>10.4f}\n", "ipcfloor kernel, 1 thread", report["ipcfloor_single_thread_median_s"].get<double>());
  fmt::print("  {:<44} {:>10.4f}\n",
             fmt::format("numba {} @njit, 1 thread (reference)", report["numba_version"].get<std::string>()),
             report["numba_median_s"].get<double>());
  fmt::print("  speedup vs numba: {:.1f}x ({:.1f}x on one thread)\n", report["speedup_vs_numba"].get<double>(),
             report["speedup_single_thread_vs_numba"].get<double>());
  const auto& parity = report["parity"];
  fmt::print("  parity gate: {} ({} combos, max |dpnl| {:.3g})\n", parity["holds"].get<bool>() ? "holds" : "FAILS",
             parity["combos"].get<std::size_t>(), parity["max_abs_dpnl"].get<double>());
  if (report.contains("fingerprint"))
    fmt::print("  fingerprint L=6: pnl {:.17g}, trades {} ({})\n", report["fingerprint"]["pnl"].get<double>(),
               report["fingerprint"]["trades"].get<std::int64_t>(),
               report["fingerprint"]["holds"].get<bool>() ? "matches" : "DIFFERS");
}

}  // namespace ipcfloor
