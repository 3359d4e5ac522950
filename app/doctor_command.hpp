#pragma once
// `ipcfloor doctor`: checks the host the floor depends on and prints each finding with its fix.

#include <CLI/CLI.hpp>

#include "app/doctor.hpp"

namespace ipcfloor {

struct DoctorCli {
  DoctorOptions options;
  bool json = false;
};

// Adds the `doctor` subcommand, bound to `cli`.
CLI::App* add_doctor_subcommand(CLI::App& app, DoctorCli& cli);

// Runs the checks and prints them. Exit code 0, or kExitEnvironment when a check fails.
[[nodiscard]] int run_doctor_command(const DoctorCli& cli);

}  // namespace ipcfloor
