// The ipcfloor command line. Scripts depend on it: flags and output formats are a contract
// (docs/SPEC.md, "Command line"). Each subcommand lives in its own *_command file; this file
// only wires them together. Errors go to stderr with a non-zero exit code.

#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "app/bench_command.hpp"
#include "app/cli_common.hpp"
#include "app/doctor_command.hpp"
#include "app/version_command.hpp"
#include "app/gen_command.hpp"
#include "app/journal_command.hpp"
#include "app/live_commands.hpp"
#include "app/serve_command.hpp"
#include "app/status_command.hpp"
#include "bench/stdio_server.hpp"
#include "kernel/isa.hpp"
#include "app/sweep_command.hpp"
#include "app/topology_command.hpp"
#include "app/trades_command.hpp"
#include "app/walkforward_command.hpp"
#include "shm/segment.hpp"

int main(int argc, char** argv) {
  using namespace ipcfloor;
  CLI::App app{"ipcfloor: the same-host latency floor for HMA/HMA3 backtests"};
  app.require_subcommand(0, 1);
  bool version = false;
  app.add_flag("--version", version, "print the version, git commit, build type, compiler and kernel path, then exit");

  GenOptions gen_options;
  auto* gen = add_gen_subcommand(app, gen_options);
  SweepOptions sweep_options;
  auto* sweep = add_sweep_subcommand(app, sweep_options);
  TradesOptions trades_options;
  auto* trades = add_trades_subcommand(app, trades_options);
  WalkForwardOptions walkforward_options;
  auto* walkforward = add_walkforward_subcommand(app, walkforward_options);
  BenchOptions bench_options;
  auto* bench = add_bench_subcommand(app, bench_options);
  ServeCli serve_cli;
  auto* serve = add_serve_subcommand(app, serve_cli);
  DoctorCli doctor_cli;
  auto* doctor = add_doctor_subcommand(app, doctor_cli);
  TopologyOptions topology_options;
  auto* topology = add_topology_subcommand(app, topology_options);
  StatusOptions status_options;
  auto* status = add_status_subcommand(app, status_options);
  FeedOptions feed_options;
  auto* feed = add_feed_subcommand(app, feed_options);
  SignalsOptions signals_options;
  auto* signals = add_signals_subcommand(app, signals_options);
  JournalOptions journal_options;
  auto* journal = add_journal_subcommand(app, journal_options);
  // Hidden: the engine as a process per call (the ladder's `spawn` rung): 48-byte ECHO frames on
  // stdin, answers on stdout.
  auto* stdio = app.add_subcommand("stdio", "")->group("");

  app.footer(std::string(kExitCodesHelp));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return report_parse_error(app, error, argc, argv);  // the help (0), or the error and a hint (2)
  }
  // The kernel's instruction-set path, from CPUID or IPCFLOOR_ISA, before anything runs it.
  if (auto isa = select_kernel_isa(); !isa) {
    fmt::print(stderr, "ipcfloor: {}\n", isa.error().message);
    return kExitInput;
  }
  if (version) {
    print_version();
    return 0;
  }
  if (app.get_subcommands().empty()) {
    fmt::print(stderr, "{}", app.help());
    return kExitUsage;
  }
  if (*stdio) return run_stdio_echo();
  if (*serve) return run_serve_command(serve_cli);
  if (*feed) return run_feed_command(feed_options);
  if (*signals) return run_signals_command(signals_options);
  if (*status) return run_status(status_options);
  if (*journal) return run_journal_command(*journal, journal_options);
  if (*gen) return run_gen_command(gen_options);
  if (*doctor) return run_doctor_command(doctor_cli);
  if (*sweep) {
    sweep_options.command_line = shell_words(argc, argv);
    return run_sweep_command(sweep_options);
  }
  if (*trades) return run_trades_command(trades_options);
  if (*walkforward) return run_walkforward_command(walkforward_options);
  if (*topology) {
    topology_options.command_line = shell_words(argc, argv);
    return run_topology_command(topology_options);
  }
  if (*bench) {
    bench_options.command_line = shell_words(argc, argv);
    return run_bench_command(std::move(bench_options), bench->help());
  }
  return 0;
}
