#include "bench/python_suite.hpp"

#include <sys/wait.h>

#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "bench/helper_files.hpp"
#include "bench/host_info.hpp"

namespace ipcfloor {

Expected<nlohmann::json> run_python_bench(const PythonBenchOptions& options) {
  auto script = helper_file("bench/python_bench.py", "the Python benchmark (python_bench.py)");
  if (!script) return std::unexpected(script.error());
  auto package = helper_file("python/ipcfloor/__init__.py", "the ipcfloor Python package");
  if (!package) return std::unexpected(package.error());
  auto root = helper_dir();
  if (!root) return std::unexpected(root.error());
  if (auto python = check_python(options.python); !python) return std::unexpected(python.error());

  std::string command = fmt::format(
      "'{}' '{}' --ipcfloor '{}' --package-root '{}/python' --json --samples {} --rounds {} --warmup {} --sweeps {} "
      "--bars {}",
      options.python, *script, self_executable(), *root, options.samples, options.rounds, options.warmup,
      options.sweeps, options.bars);
  if (options.client_cpu >= 0) command += fmt::format(" --client-cpu {}", options.client_cpu);
  if (options.server_cpu >= 0) command += fmt::format(" --server-cpu {}", options.server_cpu);

  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return fail(ErrorCode::io, "could not start '{}'", command);
  char buffer[1 << 16];
  for (std::size_t got; (got = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) output.append(buffer, got);
  const int status = pclose(pipe);
  if (status != 0) {
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return fail(ErrorCode::io, "the Python benchmark failed (exit {}; its reason is on stderr above): {}", code,
                command);
  }
  nlohmann::json report = nlohmann::json::parse(output, nullptr, false);
  if (report.is_discarded() || !report.contains("results"))
    return fail(ErrorCode::io, "the Python benchmark printed no report (command: {})", command);
  report["host"] = collect_host_info();
  report["command"] = command;
  return report;
}

void print_python_bench(const nlohmann::json& report) {
  const auto& config = report["config"];
  fmt::print("python: one combo {} on {} bars, from Python {}; RTT ns, each call timed with perf_counter_ns ({})\n",
             config["params"].dump(), config["bars"].get<std::size_t>(), report["python"].get<std::string>(),
             report["host"]["cpu"].get<std::string>());
  fmt::print("  {:<14} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9}\n", "path", "p50", "p90", "p99", "p99.9", "max", "samples");
  for (const auto& row : report["results"])
    fmt::print("  {:<14} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9}\n", row["name"].get<std::string>(),
               row["p50"].get<std::int64_t>(), row["p90"].get<std::int64_t>(), row["p99"].get<std::int64_t>(),
               row["p99.9"].get<std::int64_t>(), row["max"].get<std::int64_t>(), row["samples"].get<std::int64_t>());
  const auto& ratios = report["ratios"];
  const auto& goal = report["goal"];
  fmt::print("  backtest: Unix socket / segment at p50 {:.1f}x (goal {:.0f}x: {}); echo alone {:.1f}x\n",
             ratios["backtest uds/shm p50"].get<double>(), goal["target"].get<double>(),
             goal["met"].get<bool>() ? "met" : "not met", ratios["echo uds/shm p50"].get<double>());
  if (report.contains("bound")) {
    const auto& bound = report["bound"];
    fmt::print("  20x would leave {:.0f} ns per call; Python's own share of one call is {} ns (call-floor-py) and the "
               "backtest computes about {} ns: with no transport and no compute at all the ratio would be {:.1f}x\n",
               bound["allowed_shm_p50"].get<double>(), bound["python_call_floor_p50"].get<std::int64_t>(),
               bound["compute_p50_estimate"].get<std::int64_t>(),
               bound["best_ratio_with_zero_transport_and_compute"].get<double>());
  }
  const auto& sweep = report["sweep"];
  fmt::print("  sweep of {} combos: segment {:.0f} combos/s, Unix socket {:.0f} combos/s ({:.2f}x)\n",
             config["combos"].get<std::size_t>(), sweep["shm_combos_per_s"].get<double>(),
             sweep["uds_combos_per_s"].get<double>(), sweep["uds/shm"].get<double>());
}

}  // namespace ipcfloor
