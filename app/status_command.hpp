#pragma once
// `ipcfloor status`: what a live segment holds, read without disturbing the engine.

#include <string>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "shm/segment.hpp"

namespace ipcfloor {

// Everything `status` shows, as JSON: version, backing, lock, engine pid and liveness,
// heartbeat age, the series, each lane's owner and counters. Reads only.
[[nodiscard]] nlohmann::json describe_segment(const Attachment& segment);

struct StatusOptions {
  std::string name = "ipcfloor";
  std::string socket_dir = std::string(kDefaultSocketDir);
  bool json = false;
};

// Adds the `status` subcommand, bound to `options`.
CLI::App* add_status_subcommand(CLI::App& app, StatusOptions& options);

// Attaches to NAME and prints its status (a table, or JSON). Returns the exit code.
[[nodiscard]] int run_status(const std::string& name, bool json, const std::string& socket_dir);

}  // namespace ipcfloor
