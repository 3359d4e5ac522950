#include "app/bench_command.hpp"

#include <sched.h>

#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include "bench/child_process.hpp"
#include "bench/gbench_report.hpp"
#include "common/atomic_file.hpp"
#include "bench/helper_files.hpp"
#include "bench/host_info.hpp"
#include "app/cli_common.hpp"
#include "app/version_command.hpp"
#include "bench/latency.hpp"
#include "bench/pair_place.hpp"
#include "bench/suite_common.hpp"
#include "bench/report.hpp"
#include "bench/transports.hpp"
#include "shm/layout.hpp"
#include "shm/spsc_ring.hpp"

namespace ipcfloor {
namespace {

struct Suite {
  std::string name;
  std::function<Expected<nlohmann::json>(const BenchOptions&)> run;
  std::function<void(const nlohmann::json&)> print;
};

const std::vector<Suite>& suites() {
  static const std::vector<Suite> registry = {
      {"ladder", [](const BenchOptions& o) { return run_ladder(o.ladder); }, print_ladder},
      {"echo", [](const BenchOptions& o) { return run_echo(o.echo); }, print_echo},
      {"hygiene", [](const BenchOptions& o) { return run_hygiene(o.hygiene); }, print_hygiene},
      {"serialization", [](const BenchOptions& o) { return run_serialization_bench(o.serialization); },
       print_serialization},
      {"granularity", [](const BenchOptions& o) { return run_granularity(o.granularity); }, print_granularity},
      {"ablation", [](const BenchOptions& o) { return run_ablation(o.ablation); }, print_ablation},
      {"compute", [](const BenchOptions& o) { return run_compute_bench(o.compute); }, print_compute_report},
      {"throughput", [](const BenchOptions& o) { return run_throughput(o.throughput); }, print_throughput},
      {"python", [](const BenchOptions& o) { return run_python_bench(o.python_bench); }, print_python_bench},
      {"live", [](const BenchOptions& o) { return run_live_bench(o.live); }, print_live_bench},
      {"restart", [](const BenchOptions& o) { return run_restart_bench(o.restart); }, print_restart_bench},
  };
  return registry;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto comma = text.find(',', start);
    parts.push_back(text.substr(start, comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

// Every object in `node` that carries a "distribution" (a latency summary) becomes one .hgrm
// file named after the suite and the summary's name (or its place in the report).
bool write_hgrm_tree(const std::string& dir, const std::string& stem, const nlohmann::json& node, int& written) {
  if (node.is_object()) {
    if (node.contains("distribution") && node.contains("samples")) {
      std::string name = stem + "-" + node.value("name", std::to_string(written));
      std::replace_if(name.begin(), name.end(), [](char c) { return c == '/' || c == ' '; }, '_');
      const std::string path = dir + "/" + name + ".hgrm";
      if (auto saved = write_file_atomically(path, hgrm_text(node), "the histogram"); !saved) {
        fmt::print(stderr, "ipcfloor bench: {}\n", saved.error().message);
        return false;
      }
      ++written;
      return true;
    }
    for (const auto& [key, child] : node.items())
      if (!write_hgrm_tree(dir, key == "results" || key == "scenarios" ? stem : stem + "-" + key, child, written))
        return false;
  } else if (node.is_array()) {
    for (const auto& child : node)
      if (!write_hgrm_tree(dir, stem, child, written)) return false;
  }
  return true;
}

bool write_hgrm_files(const std::string& dir, const std::string& suite, const nlohmann::json& report) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  int written = 0;
  if (ec) fmt::print(stderr, "ipcfloor bench: could not make the directory {}: {}\n", dir, ec.message());
  if (ec || !write_hgrm_tree(dir, suite, report, written)) return false;
  fmt::print(stderr, "ipcfloor bench: wrote {} .hgrm files for {} in {}\n", written, suite, dir);
  return true;
}

// The figures of every suite that ran in Google Benchmark's JSON shape, as FILE (its folder made
// when missing).
bool write_gbench_report(const std::string& file, const nlohmann::json& combined) {
  std::error_code ec;
  if (const auto dir = std::filesystem::path(file).parent_path(); !dir.empty())
    std::filesystem::create_directories(dir, ec);
  std::ofstream out(file);
  if (ec || !(out << google_benchmark_report(combined).dump(2) << '\n')) {
    fmt::print(stderr, "ipcfloor bench: could not write {}\n", file);
    return false;
  }
  fmt::print(stderr, "ipcfloor bench: wrote {} (Google Benchmark's JSON shape)\n", file);
  return true;
}

// report.json, the plots (drawn by tools/plot_report.py from report.json) and report.md.
bool write_combined_report(const BenchOptions& options, nlohmann::json& combined) {
  if (!write_json_report(options.out_dir, "report", combined)) return false;
  if (auto plots = draw_plots(options.python, options.plot_script, options.out_dir + "/report.json", options.out_dir))
    combined["plots"] = std::move(*plots);
  const std::string md_path = options.out_dir + "/report.md";
  if (auto written = write_file_atomically(md_path, render_markdown(combined), "the report"); !written) {
    fmt::print(stderr, "ipcfloor bench: {}\n", written.error().message);
    return false;
  }
  fmt::print(stderr, "ipcfloor bench: wrote {} (the full report)\n", md_path);
  return true;
}

// --quick: fewer samples and repeats in every suite.
void make_quick(BenchOptions& options) {
  options.compute.repeats = 3;
  options.compute.reference_repeats = 1;
  options.ladder.samples = std::min<std::size_t>(options.ladder.samples, 20'000);
  options.ladder.warmup = std::min<std::size_t>(options.ladder.warmup, 2'000);
  options.hygiene.echo_requests = std::min<std::size_t>(options.hygiene.echo_requests, 100'000);
  options.hygiene.backtest_requests = std::min<std::size_t>(options.hygiene.backtest_requests, 2'000);
  options.hygiene.append_requests = std::min<std::size_t>(options.hygiene.append_requests, 2'000);
  options.hygiene.socket_requests = std::min<std::size_t>(options.hygiene.socket_requests, 5'000);
  options.hygiene.memory_touch_bytes = std::min<std::size_t>(options.hygiene.memory_touch_bytes, 16 << 20);
  options.serialization.repeats = std::min<std::size_t>(options.serialization.repeats, 10);
  options.granularity.repeats = std::min<std::size_t>(options.granularity.repeats, 3);
  options.granularity.floor_samples = std::min<std::size_t>(options.granularity.floor_samples, 5'000);
  options.ablation.short_samples = std::min<std::size_t>(options.ablation.short_samples, 5'000);
  options.ablation.default_samples = std::min<std::size_t>(options.ablation.default_samples, 60);
  options.echo.max_samples = std::min<std::size_t>(options.echo.max_samples, 300);
  options.throughput.windows = std::min<std::size_t>(options.throughput.windows, 8);
  options.throughput.window_requests = std::min<std::size_t>(options.throughput.window_requests, 5'000);
  options.throughput.grid_repeats = std::min<std::size_t>(options.throughput.grid_repeats, 3);
  if (options.throughput.workers.workers.empty()) options.throughput.workers.workers = {0, 1};
  options.throughput.workers.grid = "6:200:16";
  options.throughput.workers.bars = 30'000;
  options.throughput.workers.repeats = 1;
  options.throughput.workers.echo_samples = 2'000;
  options.throughput.workers.pickups = 3;
  options.python_bench.sweeps = std::min<std::size_t>(options.python_bench.sweeps, 5);
  options.live.samples = std::min<std::size_t>(options.live.samples, 3'000);
  options.live.warmup = std::min<std::size_t>(options.live.warmup, 500);
  options.live.throughput_bars = std::min<std::size_t>(options.live.throughput_bars, 5'000);
  options.restart.append_samples = std::min<std::size_t>(options.restart.append_samples, 500);
  options.restart.append_warmup = std::min<std::size_t>(options.restart.append_warmup, 100);
  options.restart.pipelined_bars = std::min<std::size_t>(options.restart.pipelined_bars, 5'000);
  options.restart.restarts = std::min<std::size_t>(options.restart.restarts, 5);
  options.restart.journal_bars = std::min<std::size_t>(options.restart.journal_bars, 100'000);
  options.restart.kills = std::min<std::size_t>(options.restart.kills, 10);
}

// --client-cpu near: every suite's client cpu is the allowed one nearest the server cpu.
Expected<void> resolve_near_client(BenchOptions& options) {
  if (!options.client_near) return {};
  auto matrix = find_saved_matrix(options.ladder.topology);
  if (!matrix) return std::unexpected(matrix.error());
  const SuitePlacement where = place_suite(-1, options.ladder.server_cpu, "");
  auto near = near_client_cpu(where.server_cpu, *matrix);
  if (!near) return std::unexpected(near.error());
  options.ladder.client_cpu = *near;
  options.ladder.server_cpu = where.server_cpu;
  return {};
}

// The options one flag sets for every suite: the cpus, the python, the ladder's transports.
void share_common_options(BenchOptions& options) {
  if (!options.transports.empty()) options.ladder.transports = split_commas(options.transports);
  options.compute.python = options.python;
  options.python_bench.python = options.python;
  options.python_bench.samples = options.ladder.samples;
  options.python_bench.rounds = options.ladder.rounds;
  options.python_bench.client_cpu = options.ladder.client_cpu;
  options.python_bench.server_cpu = options.ladder.server_cpu;
  options.hygiene.client_cpu = options.ladder.client_cpu;
  options.hygiene.server_cpu = options.ladder.server_cpu;
  options.granularity.client_cpu = options.ladder.client_cpu;
  options.granularity.server_cpu = options.ladder.server_cpu;
  options.ablation.client_cpu = options.ladder.client_cpu;
  options.ablation.server_cpu = options.ladder.server_cpu;
  options.echo.client_cpu = options.ladder.client_cpu;
  options.echo.server_cpu = options.ladder.server_cpu;
  options.throughput.client_cpu = options.ladder.client_cpu;
  options.throughput.server_cpu = options.ladder.server_cpu;
  options.live.client_cpu = options.ladder.client_cpu;
  options.live.server_cpu = options.ladder.server_cpu;
  options.restart.client_cpu = options.ladder.client_cpu;
  options.restart.server_cpu = options.ladder.server_cpu;
}

// The suites' names, and the ladder's transports, as validators of what names them.
CLI::Validator suite_names() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text == "all") return {};
        for (const Suite& s : suites())
          if (s.name == text) return {};
        std::string known;
        for (const Suite& s : suites()) known += (known.empty() ? "" : ", ") + s.name;
        return fmt::format("unknown suite '{}'; available: {} (or all)", text, known);
      },
      "a suite");
}

CLI::Validator transport_names() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        for (const std::string& name : split_commas(text)) {
          const auto& known = all_transports();
          if (std::none_of(known.begin(), known.end(), [&](const Transport& t) { return t.name == name; }))
            return fmt::format("unknown transport '{}' (bench --list names them)", name);
        }
        return {};
      },
      "transports, comma-separated");
}

}  // namespace

nlohmann::json bench_context(const std::string& command_line) {
  nlohmann::json context = build_context();  // version, commit, build type, compiler, kernel path
  const auto now = std::chrono::system_clock::now();
  context["date"] = fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", std::chrono::floor<std::chrono::seconds>(now));
  context["command"] = command_line;
  const nlohmann::json host = collect_host_info();
  for (const char* key : {"hostname", "cpu", "kernel", "governor", "online_cpus"})
    if (host.contains(key)) context[key] = host[key];
  double load[3] = {0, 0, 0};
  if (::getloadavg(load, 3) == 3) context["load_avg"] = {load[0], load[1], load[2]};
  return context;
}

CLI::App* add_bench_subcommand(CLI::App& app, BenchOptions& options) {
  std::string names;
  for (const Suite& s : suites()) names += (names.empty() ? "" : ", ") + s.name;
  auto* bench = app.add_subcommand("bench", "Run benchmark suites; print their tables and write their JSON");
  bench->add_option("suite", options.suites,
                    "suites to run: " + names + ", or all (every suite plus report.json, report.md and plots in --out)")
      ->check(suite_names());
  bench->add_option("--out", options.out_dir, "directory for the JSON reports")->check(file_path());
  bench->add_flag("--json", options.json, "print the reports as JSON");
  bench->add_flag("--quick", options.quick, "fewer samples and repeats");
  bench->add_flag("--list", options.list, "name every suite and ladder transport, then exit");
  bench->add_option("--gbench-json", options.gbench_file,
                    "also write every figure to FILE in Google Benchmark's JSON shape (compare two runs with its "
                    "compare.py: /usr/share/benchmark/compare.py benchmarks A.json B.json)")
      ->check(file_path());
  bench->add_option("--hgrm", options.hgrm_dir,
                    "write each latency figure's whole distribution as DIR/<suite>-<name>.hgrm (HdrHistogram format)")
      ->check(file_path());
  bench->add_option("--transports", options.transports, "ladder: comma-separated transports (default: all)")
      ->check(transport_names());
  bench->add_option("--samples", options.ladder.samples, "ladder and python: timed round trips per transport")
      ->check(in_range<std::size_t>(1, 100'000'000))
      ->capture_default_str();
  bench->add_option("--warmup", options.ladder.warmup, "ladder: untimed round trips first, per round")
      ->check(in_range<std::size_t>(0, 100'000'000))
      ->capture_default_str();
  bench->add_option("--rounds", options.ladder.rounds,
                    "ladder and python: interleaved rounds; each takes samples/rounds of every transport")
      ->capture_default_str()
      ->check(in_range<std::size_t>(1, 1000));
  bench->add_option("--ring-capacity", options.ladder.ring_capacity,
                    "ladder: slots per ring of the shm-ring-* engines, and lines per array of physical-floor-ring")
      ->capture_default_str()
      ->check(power_of_two(2, kMaxRingCapacity));
  bench->add_option_function<std::string>(
          "--client-cpu",
          [&options](const std::string& cpu) {
            options.client_near = cpu == "near";
            if (!options.client_near) options.ladder.client_cpu = std::stoi(cpu);
          },
          "core of the measuring side, or near: the allowed core nearest --server-cpu by the saved floor matrix, "
          "else by the declared topology (default: first allowed)")
      ->check(cpu_index_or("near"));
  bench->add_option("--topology", options.ladder.topology,
                    "the saved floor matrix the reports and --client-cpu near go by (default: the one `ipcfloor "
                    "topology --save` wrote, if any)")
      ->check(file_path());
  bench->add_option("--journal-dir", options.restart.journal_dir,
                    "restart: where the journals go (default: a fresh folder under /var/tmp, removed after)")
      ->check(file_path());
  bench->add_option("--kills", options.restart.kills, "restart: SIGKILLs per crash run (one run per --fsync policy)")
      ->check(in_range<std::size_t>(1, 100'000))
      ->capture_default_str();
  bench->add_option("--restarts", options.restart.restarts, "restart: restart-gap samples")
      ->check(in_range<std::size_t>(1, 100'000))
      ->capture_default_str();
  bench->add_option("--server-cpu", options.ladder.server_cpu, "core of the serving side (default: last allowed)")
      ->check(cpu_index());
  bench->add_option("--requests", options.hygiene.echo_requests, "hygiene: ECHO requests counted")
      ->check(in_range<std::size_t>(1, 1'000'000'000))
      ->capture_default_str();
  bench->add_option("--wait", options.hygiene.wait, "hygiene: engine and client wait mode")
      ->check(one_of({"spin", "backoff", "block"}))
      ->capture_default_str();
  bench->add_option("--repeats", options.compute.repeats, "compute: timed in-process sweeps")
      ->check(in_range(1u, 10'000u))
      ->capture_default_str();
  bench->add_option("--reference-repeats", options.compute.reference_repeats, "compute: timed numba sweeps")
      ->check(in_range(1u, 10'000u))
      ->capture_default_str();
  bench->add_option("--threads", options.compute.threads, "compute: kernel worker threads (0 = one per core)")
      ->check(in_range(0u, 1024u));
  bench->add_option("--python", options.python, "python with numpy, numba and matplotlib")
      ->check(file_path())
      ->capture_default_str();
  bench->add_option("--workers", options.throughput.workers.workers,
                    "throughput: worker counts, one row each (default: 0, 1, powers of two up to all cpus but two)")
      ->delimiter(',')
      ->check(in_range(0u, 256u));
  bench->add_option("--workers-grid", options.throughput.workers.grid, "throughput: the workers section's grid (with --strategy: how many combos)")
      ->check(grid_spec())
      ->capture_default_str();
  auto* no_workers = bench->add_flag("--no-workers", [&options](std::int64_t) { options.throughput.with_workers = false; },
                                     "throughput: leave out the workers section");
  bench->add_option("--strategy", options.throughput.workers.strategy,
                    "throughput: the workers section's rows run the strategy of FILE.so (the engine loads it; "
                    "the combos spread its first two params around its example) instead of the built-in one; "
                    "ladder: the shm-* engines load it too")
      ->check(file_path())
      ->each([&options](const std::string& path) { options.ladder.strategies = {path}; })
      ->excludes(no_workers);
  return bench;
}

std::optional<nlohmann::json> draw_plots(const std::string& python, const std::string& plot_script,
                                         const std::string& report_path, const std::string& out_dir) {
  // The plots are optional: without the script or a python, the report goes out without them.
  auto plotter = plot_script.empty() ? helper_file("tools/plot_report.py", "the plotting script (plot_report.py)")
                                     : Expected<std::string>(plot_script);
  if (plotter) {
    if (auto checked = check_python(python); !checked) plotter = std::unexpected(checked.error());
  }
  if (!plotter) {
    fmt::print(stderr, "ipcfloor: plots not drawn: {}\n", plotter.error().message);
    return std::nullopt;
  }
  auto output = run_captured({python, *plotter, report_path, out_dir}, Capture::stdout_and_stderr);
  if (output) {
    auto drawn = nlohmann::json::parse(*output, nullptr, false);
    if (drawn.is_discarded()) return std::nullopt;
    return drawn;
  }
  if (output.error().message.find("No module named 'matplotlib'") != std::string::npos)
    fmt::print(stderr, "ipcfloor: plots not drawn: {} has no matplotlib: apt-get install python3-matplotlib\n", python);
  else
    fmt::print(stderr, "ipcfloor: plots not drawn: {}\n", output.error().message);
  return std::nullopt;
}

bool write_json_report(const std::string& dir, const std::string& name, const nlohmann::json& report) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string path = dir + "/" + name + ".json";
  if (ec) {
    fmt::print(stderr, "ipcfloor bench: could not make the directory {}: {}\n", dir, ec.message());
    return false;
  }
  if (auto written = write_file_atomically(path, report.dump(2) + "\n", "the report"); !written) {
    fmt::print(stderr, "ipcfloor bench: {}\n", written.error().message);
    return false;
  }
  fmt::print(stderr, "ipcfloor: wrote {}\n", path);
  return true;
}

int run_bench_command(BenchOptions options, const std::string& help) {
  if (options.list) {
    fmt::print("suites:\n");
    for (const Suite& s : suites()) fmt::print("  {}\n", s.name);
    fmt::print("  all  (every suite, then report.json, report.md and the plots in --out)\n");
    fmt::print("ladder transports (--transports):\n");
    for (const Transport& t : all_transports()) fmt::print("  {:<24} {}\n", t.name, t.description);
    return 0;
  }
  if (options.suites.empty()) {
    fmt::print(stderr, "{}\nipcfloor bench: name a suite (or all); --list names them\n", help);
    return kExitUsage;
  }
  const bool all = std::find(options.suites.begin(), options.suites.end(), "all") != options.suites.end();
  if (all) {
    if (options.out_dir.empty()) options.out_dir = "bench-out";
    options.suites.clear();
    for (const Suite& s : suites()) options.suites.push_back(s.name);
  }
  std::vector<const Suite*> chosen;
  for (const std::string& name : options.suites) {
    const auto it = std::find_if(suites().begin(), suites().end(), [&](const Suite& s) { return s.name == name; });
    if (it == suites().end()) {
      std::string known;
      for (const Suite& s : suites()) known += (known.empty() ? "" : ", ") + s.name;
      fmt::print(stderr, "ipcfloor bench: unknown suite '{}'; available: {} (or all)\n", name, known);
      return kExitUsage;
    }
    chosen.push_back(&*it);
  }
  if (options.quick) make_quick(options);
  if (auto placed = resolve_near_client(options); !placed) {
    fmt::print(stderr, "ipcfloor bench: {}\n", placed.error().message);
    return exit_code_for(placed.error().code);
  }
  share_common_options(options);

  nlohmann::json combined{{"context", bench_context(options.command_line)},
                          {"host", collect_host_info()},
                          {"command", options.command_line},
                          {"suites", nlohmann::json::object()}};
  // Suites pin this thread to the client cpu, and every thread a later suite starts would
  // inherit that mask: `bench all` once timed the compute suite's two worker threads on one
  // cpu (2 threads 0.449 s against 1 thread 0.429 s; 0.25 s against 0.44 s when run alone).
  // Each suite therefore starts from the mask the process was given.
  cpu_set_t initial_mask;
  CPU_ZERO(&initial_mask);
  const bool have_mask = sched_getaffinity(0, sizeof initial_mask, &initial_mask) == 0;
  for (const Suite* suite : chosen) {
    if (have_mask) (void)sched_setaffinity(0, sizeof initial_mask, &initial_mask);  // best effort, as unpinning
    auto report = suite->run(options);
    if (!report) {
      fmt::print(stderr, "ipcfloor bench {}: {}\n", suite->name, report.error().message);
      return 1;
    }
    if (!options.json) suite->print(*report);
    (*report)["context"] = combined["context"];
    if (!options.out_dir.empty() && !write_json_report(options.out_dir, suite->name, *report)) return 1;
    if (!options.hgrm_dir.empty() && !write_hgrm_files(options.hgrm_dir, suite->name, *report)) return 1;
    combined["suites"][suite->name] = *report;
  }
  // The ladder's floor check reaches every verdict of the run measured against the floor.
  if (const auto& suites_run = combined["suites"]; suites_run.contains("ladder") && !options.json) {
    const auto check = suites_run["ladder"].value("floor_check", nlohmann::json::object());
    if (check.value("checked", false) && !check["trustworthy"].get<bool>() && chosen.size() > 1)
      fmt::print("\nWARNING: {}; the verdicts above that are measured against the floor (live's goal, the ratios) "
                 "are not trustworthy either.\n", check["note"].get<std::string>());
  }
  if (options.json) fmt::print("{}\n", combined.dump(2));
  if (!options.gbench_file.empty() && !write_gbench_report(options.gbench_file, combined)) return 1;
  if (all) return write_combined_report(options, combined) ? 0 : 1;
  return 0;
}

}  // namespace ipcfloor
