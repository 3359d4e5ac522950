#include "app/doctor_command.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "app/cli_common.hpp"
#include "shm/layout.hpp"

namespace ipcfloor {

CLI::App* add_doctor_subcommand(CLI::App& app, DoctorCli& cli) {
  auto* doctor = app.add_subcommand("doctor", "Check the host for the latency floor: each finding with its fix");
  doctor->add_option("--cpu", cli.options.cpu, "the serving cpu to check (default: the one serve would pick)")
      ->check(cpu_index());
  doctor->add_option("--bars", cli.options.bars, "bars of the planned series")
      ->check(in_range<std::size_t>(2, 1'000'000'000))
      ->capture_default_str();
  doctor->add_option("--lanes", cli.options.lanes, "lanes of the planned engine")
      ->check(in_range<std::uint32_t>(1, kMaxLanes))
      ->capture_default_str();
  doctor->add_option("--name", cli.options.name, "the engine name to check in the socket directory")
      ->check(engine_name())
      ->capture_default_str();
  doctor->add_option("--unit", cli.options.unit,
                     "the systemd unit engines run under: its user's memory-lock limit is checked (default, as root: "
                     "the installed ipcfloor@.service)")
      ->check(CLI::ExistingFile);
  cli.options.socket_dir = socket_dir_default();
  add_socket_dir_option(*doctor, cli.options.socket_dir);
  doctor->add_flag("--json", cli.json, "print JSON");
  return doctor;
}

int run_doctor_command(const DoctorCli& cli) {
  const std::vector<HostCheck> checks = run_host_checks(cli.options);
  bool failed = false;
  for (const HostCheck& check : checks) failed |= check.level == CheckLevel::fail;
  if (cli.json) {
    fmt::print("{}\n", nlohmann::json{{"checks", to_json(checks)}, {"summary", summarize(checks)}}.dump(2));
  } else {
    for (const HostCheck& check : checks) {
      fmt::print("{:<5} {:<15} {}\n", to_string(check.level), check.name, check.finding);
      if (!check.fix.empty()) fmt::print("{:<21} fix: {}\n", "", check.fix);
    }
    fmt::print("\n{}\n", summarize(checks));
  }
  return failed ? kExitEnvironment : 0;
}

}  // namespace ipcfloor
