#pragma once
// `ipcfloor status`: what a live engine holds and does, read from its read-only data object
// without disturbing it. Once (a table, JSON or a Prometheus text exposition), or refreshed like
// `aeron-stat` with --watch: uptime, heartbeat age, and per lane the owner, requests/s, errors/s,
// ring fill and the service-time percentiles of the last interval.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "shm/segment.hpp"

namespace ipcfloor {

// The schema version of describe_segment's JSON: bumped whenever a field changes meaning.
inline constexpr int kStatusSchemaVersion = 3;

// Everything `status` shows, as JSON: a timestamp and schema version, the engine, its series, its
// counters, and each lane's owner, counters and service-time histogram. Reads only.
[[nodiscard]] nlohmann::json describe_segment(const Attachment& segment);

// describe_segment's status as a Prometheus text exposition (format 0.0.4; metric names
// ipcfloor_*, label engine="NAME"): what `status --prometheus` prints and `serve --metrics`
// serves. Every scrape has the same families, and each lane's service-time histogram the same
// buckets (powers of two from 64 ns to 8.6 s, then +Inf) with its _sum and _count. A null status
// (the engine is gone, or not yet attached) gives ipcfloor_up 0 alone. Pure: allocates only.
[[nodiscard]] std::string prometheus_exposition(std::string_view engine, const nlohmann::json* status);

// Why describe_segment's status says the engine does not serve (ipcfloor_up 0): its process
// exited, or its heartbeat is stale (judge_engine_health); nullopt while it serves. One sentence
// naming the engine, its pid and the figures. Allocates.
[[nodiscard]] std::optional<std::string> why_not_up(const nlohmann::json& status);

struct StatusOptions {
  std::string name = "ipcfloor";
  bool name_given = false;  // --name was on the command line (else a failure names the default)
  std::string socket_dir = default_socket_dir();  // --socket-dir (default: shm/socket_dir.hpp)
  bool json = false;
  bool prometheus = false;
  bool watch = false;
  double interval_s = 1.0;
  std::uint64_t count = 0;  // --watch refreshes before stopping (0: until Ctrl-C or the engine goes)
};

// Adds the `status` subcommand, bound to `options`.
CLI::App* add_status_subcommand(CLI::App& app, StatusOptions& options);

// Attaches to NAME as an observer (no lane) and prints its status. Returns the exit code.
[[nodiscard]] int run_status(const StatusOptions& options);

}  // namespace ipcfloor
