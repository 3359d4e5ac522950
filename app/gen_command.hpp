#pragma once
// `ipcfloor gen`: writes the GBM close series the engine would generate, without Python.

#include <string>

#include <CLI/CLI.hpp>

#include "data/gbm.hpp"

namespace ipcfloor {

struct GenOptions {
  GbmParams gbm;
  std::string out_path;  // .f64, .csv or .npy
};

// Adds the `gen` subcommand, bound to `options`.
CLI::App* add_gen_subcommand(CLI::App& app, GenOptions& options);

// Generates and writes the series. Returns the exit code; errors go to stderr.
[[nodiscard]] int run_gen_command(const GenOptions& options);

}  // namespace ipcfloor
