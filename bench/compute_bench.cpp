#include "bench/compute_bench.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <span>
#include <utility>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/child_process.hpp"
#include "bench/helper_files.hpp"
#include "bench/host_info.hpp"
#include "bench/latency.hpp"
#include "bench/percentile.hpp"
#include "common/tsc_clock.hpp"
#include "data/gbm.hpp"
#include "kernel/isa.hpp"
#include "data/series_io.hpp"
#include "kernel/kernel.hpp"
#include "data/series_source.hpp"
#include "data/grid.hpp"

namespace ipcfloor {
namespace {

struct PathTimes {
  std::vector<double> sweep_seconds;
  std::vector<double> single_thread_seconds;
  std::vector<BacktestResult> results;
};

// One path: each repeat is one whole sweep, timed on its own (a sample, not a batch mean). The
// single-thread figure separates the kernel's speed from the core count.
Expected<PathTimes> time_path(std::span<const double> close, std::span<const Combo> combos,
                              const ComputeBenchOptions& options) {
  PathTimes times;
  for (unsigned r = 0; r < std::max(1u, options.repeats); ++r) {
    const auto start = std::chrono::steady_clock::now();
    auto swept = run_sweep(builtin(), close, combos, options.fee, options.threads);
    const auto stop = std::chrono::steady_clock::now();
    if (!swept) return std::unexpected(swept.error());
    times.sweep_seconds.push_back(std::chrono::duration<double>(stop - start).count());
    times.results = std::move(*swept);
  }
  for (unsigned r = 0; r < std::max(1u, options.repeats / 2); ++r) {
    const auto start = std::chrono::steady_clock::now();
    auto swept = run_sweep(builtin(), close, combos, options.fee, 1);
    times.single_thread_seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    if (!swept) return std::unexpected(swept.error());
  }
  return times;
}

// What one BACKTEST costs the engine's serving thread on a short series, the case a caller that
// asks one combo at a time meets: `run_backtest` of the smallest grid combo on the series' first
// kShortBars bars, each call timed on its own. Returns ns per call.
constexpr std::size_t kShortBars = 1000;
constexpr std::size_t kShortCalls = 20'000;

std::vector<double> time_short_backtests(std::span<const double> close, double fee, const TscClock& clock) {
  const std::span<const double> bars = close.first(std::min(kShortBars, close.size()));
  const Combo combo = combo_from_length(kFingerprintLength);
  KernelWorkspace workspace(builtin().workspace_bytes(bars.size()));
  BacktestResult result;
  std::vector<double> ns;
  ns.reserve(kShortCalls);
  for (std::size_t i = 0; i < kShortCalls + kShortCalls / 10; ++i) {
    const std::uint64_t t0 = TscClock::now();
    (void)run_backtest(bars, combo, fee, workspace, result);
    const std::uint64_t t1 = TscClock::now();
    if (i >= kShortCalls / 10) ns.push_back(clock.to_ns(t1 - t0));  // the first tenth warms up
  }
  return ns;
}

// The bytes both sides compute on, in a private temporary directory removed on scope exit.
class SeriesFile {
 public:
  static Expected<SeriesFile> write(std::span<const double> close) {
    char dir[] = "/tmp/ipcfloor-compute-XXXXXX";
    if (::mkdtemp(dir) == nullptr) return fail(ErrorCode::io, "cannot make a temporary directory: {}", std::strerror(errno));
    SeriesFile file(dir);
    if (auto saved = save_series(file.path(), close); !saved) return std::unexpected(saved.error());
    return file;
  }
  SeriesFile(SeriesFile&& other) noexcept : dir_(std::exchange(other.dir_, {})) {}
  SeriesFile& operator=(SeriesFile&&) = delete;
  ~SeriesFile() {
    if (dir_.empty()) return;
    ::unlink(path().c_str());
    ::rmdir(dir_.c_str());
  }
  [[nodiscard]] std::string path() const { return dir_ + "/close.f64"; }

 private:
  explicit SeriesFile(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// The numba reference's report on the series this process generated (the reference reads it
// from a file: numpy's own exp differs between CPUs, and the claim here is about the kernel).
Expected<nlohmann::json> run_reference(const ComputeBenchOptions& options, const std::string& script,
                                       std::span<const double> close, std::size_t combos) {
  auto series_file = SeriesFile::write(close);
  if (!series_file) return std::unexpected(series_file.error());
  const std::vector<std::string> argv{options.python, script, "--data", series_file->path(), "--grid", options.grid,
                                      "--fee", fmt::format("{:.17g}", options.fee), "--repeats",
                                      std::to_string(std::max(1u, options.reference_repeats))};
  const std::string command = fmt::format("{}", fmt::join(argv, " "));
  auto output = run_captured(argv);
  if (!output)
    return fail(ErrorCode::io,
                "the numba reference failed (command: {}): {}; is python3-numba installed? run tools/setup", command,
                output.error().message);
  nlohmann::json reference = nlohmann::json::parse(*output, nullptr, false);
  if (reference.is_discarded() || !reference.contains("results"))
    return fail(ErrorCode::io,
                "the numba reference did not produce a report (command: {}); is python3-numba "
                "installed? run tools/setup",
                command);
  if (reference["results"].size() != combos)
    return fail(ErrorCode::bad_data, "the reference returned {} results for {} combos", reference["results"].size(),
                combos);
  return reference;
}

// What every kernel path is measured on.
struct ComputeInputs {
  const ComputeBenchOptions& options;
  std::span<const double> close;
  std::span<const Combo> combos;
  const nlohmann::json& reference_results;
  double numba_median_s;
  bool fingerprinted;  // the default series and a grid that starts at the fingerprint's length
};

// One kernel path (already selected): its sweep times, one short BACKTEST per call, and its
// parity with the reference, combo by combo (trades equal, pnl bit-identical).
Expected<nlohmann::json> measure_path(KernelIsa isa, const ComputeInputs& in, const TscClock& clock) {
  auto times = time_path(in.close, in.combos, in.options);
  if (!times) return std::unexpected(times.error());
  std::vector<double> short_ns = time_short_backtests(in.close, in.options.fee, clock);
  const LatencySummary short_call = summarize("one backtest", "call", short_ns, clock.step_ns());
  double max_abs_dpnl = 0.0;
  std::size_t mismatches = 0;
  for (std::size_t i = 0; i < in.combos.size(); ++i) {
    const double theirs = in.reference_results[i]["pnl"].get<double>();
    max_abs_dpnl = std::max(max_abs_dpnl, std::abs(times->results[i].pnl - theirs));
    if (times->results[i].trades != in.reference_results[i]["trades"].get<std::int64_t>() ||
        times->results[i].pnl != theirs)
      ++mismatches;
  }
  nlohmann::json path{
      {"isa", std::string(to_string(isa))},
      {"sweep_seconds", times->sweep_seconds},
      {"single_thread_sweep_seconds", times->single_thread_seconds},
      {"median_s", percentile(times->sweep_seconds, 50)},
      {"single_thread_median_s", percentile(times->single_thread_seconds, 50)},
      {"speedup_vs_numba", in.numba_median_s / percentile(times->sweep_seconds, 50)},
      {"speedup_single_thread_vs_numba", in.numba_median_s / percentile(times->single_thread_seconds, 50)},
      {"parity", {{"combos", in.combos.size()}, {"mismatches", mismatches}, {"max_abs_dpnl", max_abs_dpnl},
                  {"bit_identical", mismatches == 0}, {"holds", mismatches == 0}}},
      {"short_backtest", {{"bars", std::min(kShortBars, in.close.size())},
                          {"length", kFingerprintLength},
                          {"ns", to_json(short_call)}}},
  };
  if (in.fingerprinted && !times->results.empty()) {
    path["fingerprint"] = {{"pnl", times->results.front().pnl},
                           {"trades", times->results.front().trades},
                           {"holds", times->results.front().pnl == kFingerprintPnl &&
                                         times->results.front().trades == kFingerprintTrades}};
  }
  return path;
}

// Every path this CPU runs, the selected one first; IPCFLOOR_ISA narrows it to that one.
std::vector<KernelIsa> paths_to_run(KernelIsa selected, bool forced) {
  std::vector<KernelIsa> isas{selected};
  if (!forced)
    for (const KernelIsa isa : supported_kernel_isas())
      if (isa != selected) isas.push_back(isa);
  return isas;
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
  auto reference = run_reference(options, *script, series->close, combos.size());
  if (!reference) return std::unexpected(reference.error());
  const double numba = percentile((*reference)["sweep_seconds"].get<std::vector<double>>(), 50);

  const KernelIsa selected = active_kernel_isa();
  const char* forced_isa = std::getenv("IPCFLOOR_ISA");
  const bool forced = forced_isa != nullptr && *forced_isa != '\0';
  const ComputeInputs inputs{options, series->close, combos, (*reference)["results"], numba,
                             options.bars == GbmParams{}.bars && options.seed == GbmParams{}.seed &&
                                 lengths->front() == kFingerprintLength};
  nlohmann::json paths = nlohmann::json::array();
  std::string parity_failure;
  const TscClock clock = TscClock::calibrate();
  for (const KernelIsa isa : paths_to_run(selected, forced)) {
    if (auto set = set_kernel_isa(isa); !set) return std::unexpected(set.error());
    auto path = measure_path(isa, inputs, clock);
    if (!path) return std::unexpected(path.error());
    const auto& parity = (*path)["parity"];
    if (!parity["holds"].get<bool>() && parity_failure.empty())
      parity_failure = fmt::format("parity gate failed on the {} path: {} of {} combos differ from the numba "
                                   "reference (max |dpnl| {:.3g})", to_string(isa),
                                   parity["mismatches"].get<std::size_t>(), combos.size(),
                                   parity["max_abs_dpnl"].get<double>());
    paths.push_back(std::move(*path));
  }
  if (auto restored = set_kernel_isa(selected); !restored) return std::unexpected(restored.error());

  // The top-level figures are the selected path's: what `ipcfloor sweep` runs on this CPU.
  const nlohmann::json& ran = paths.front();
  nlohmann::json report{
      {"suite", "compute"},
      {"host", collect_host_info()},
      {"config",
       {{"bars", options.bars}, {"seed", options.seed}, {"grid", options.grid}, {"combos", combos.size()},
        {"fee", options.fee}, {"threads", options.threads == 0 ? std::thread::hardware_concurrency() : options.threads}}},
      {"kernel_isa", std::string(to_string(selected))},
      {"kernel_isa_forced", forced},
      {"paths", paths},
      {"ipcfloor_sweep_seconds", ran["sweep_seconds"]},
      {"ipcfloor_single_thread_sweep_seconds", ran["single_thread_sweep_seconds"]},
      {"numba_sweep_seconds", (*reference)["sweep_seconds"]},
      {"numba_version", reference->value("numba", "?")},
      {"ipcfloor_median_s", ran["median_s"]},
      {"ipcfloor_single_thread_median_s", ran["single_thread_median_s"]},
      {"numba_median_s", numba},
      {"speedup_vs_numba", ran["speedup_vs_numba"]},
      {"speedup_single_thread_vs_numba", ran["speedup_single_thread_vs_numba"]},
      {"parity", ran["parity"]},
  };
  if (ran.contains("fingerprint")) report["fingerprint"] = ran["fingerprint"];
  if (!parity_failure.empty()) return fail(ErrorCode::bad_data, "{}", parity_failure);
  return report;
}

void print_compute_report(const nlohmann::json& report) {
  const auto& config = report["config"];
  fmt::print("compute: {}-combo sweep, {} bars, seed {} ({})\n", config["combos"].get<std::size_t>(),
             config["bars"].get<std::size_t>(), config["seed"].get<std::uint64_t>(),
             report["host"]["cpu"].get<std::string>());
  fmt::print("  kernel path: {} ({})\n", report["kernel_isa"].get<std::string>(),
             report["kernel_isa_forced"].get<bool>() ? "forced by IPCFLOOR_ISA" : "chosen from CPUID");
  fmt::print("  {:<34} {:>10} {:>10} {:>9} {:>9}  {}\n", "implementation", "median s", "1 thread", "vs numba",
             "1 thread", "parity");
  const unsigned threads = config["threads"].get<unsigned>();
  for (const auto& path : report["paths"]) {
    const auto& parity = path["parity"];
    fmt::print("  {:<34} {:>10.4f} {:>10.4f} {:>8.1f}x {:>8.1f}x  {}\n",
               fmt::format("ipcfloor {} path, {} threads", path["isa"].get<std::string>(), threads),
               path["median_s"].get<double>(), path["single_thread_median_s"].get<double>(),
               path["speedup_vs_numba"].get<double>(), path["speedup_single_thread_vs_numba"].get<double>(),
               parity["holds"].get<bool>() ? fmt::format("bit-identical ({} combos)", parity["combos"].get<std::size_t>())
                                           : fmt::format("DIFFERS ({} combos, max |dpnl| {:.3g})",
                                                         parity["mismatches"].get<std::size_t>(),
                                                         parity["max_abs_dpnl"].get<double>()));
  }
  fmt::print("  {:<34} {:>10.4f}\n",
             fmt::format("numba {} @njit, 1 thread", report["numba_version"].get<std::string>()),
             report["numba_median_s"].get<double>());
  for (const auto& path : report["paths"]) {
    if (!path.contains("short_backtest")) continue;
    const auto& one = path["short_backtest"];
    const auto& ns = one["ns"];
    fmt::print("  one backtest, L={} on {} bars, {} path: p50 {:.0f} ns, p99 {:.0f} ns per call ({} calls)\n",
               one["length"].get<std::int64_t>(), one["bars"].get<std::size_t>(), path["isa"].get<std::string>(),
               ns["p50"].get<double>(), ns["p99"].get<double>(), ns["samples"].get<std::size_t>());
  }
  if (report.contains("fingerprint"))
    fmt::print("  fingerprint L=6: pnl {:.17g}, trades {} ({})\n", report["fingerprint"]["pnl"].get<double>(),
               report["fingerprint"]["trades"].get<std::int64_t>(),
               report["fingerprint"]["holds"].get<bool>() ? "matches" : "DIFFERS");
}

}  // namespace ipcfloor
