#pragma once
// Host readiness: everything the latency floor depends on that the host decides, checked and
// explained with the exact fix. `ipcfloor doctor` prints the checks; `serve` logs a one-line
// summary of them at start.
//
// Setup path: reads /proc and /sys, samples /proc/stat for a moment, allocates. Any thread.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "app/host_check.hpp"

namespace ipcfloor {


struct DoctorOptions {
  int cpu = -1;                  // the serving cpu to check (-1: the one serve would pick)
  std::size_t bars = 150'000;    // the series the planned engine would hold
  std::uint32_t lanes = 4;
  std::uint32_t ring_capacity = 8;
  std::size_t bulk_bytes = std::size_t{5} << 19;
  std::string socket_dir;           // --socket-dir; the CLI fills in default_socket_dir()
  std::string name = "ipcfloor";    // --name: the engine name whose place in socket_dir is checked
  double sample_seconds = 0.25;  // how long to watch /proc/stat for a busy sibling and steal time
  // The systemd unit engines run under, whose user's memory-lock limit is checked
  // (app/doctor_unit.hpp). Empty: the installed ipcfloor@.service when doctor runs as root (a
  // service's limit is the unit's, not root's), none otherwise.
  std::string unit;
};

// Runs every check. Never fails: a check that cannot read its source says so as a warning.
// The checks that serve also decides on (huge pages, memlock) use serve's own rules from shm/,
// so the two cannot disagree.
[[nodiscard]] std::vector<HostCheck> run_host_checks(const DoctorOptions& options);

// "cpu_shared": warn when another process's serving thread (an engine's, named "ipcf-serve") is
// pinned to `cpu` alone, naming its pid and command line; ok otherwise. This process's own
// threads are not counted. serve logs it before it pins its own serving thread.
[[nodiscard]] HostCheck check_cpu_free(int cpu);

[[nodiscard]] const char* to_string(CheckLevel level) noexcept;
[[nodiscard]] nlohmann::json to_json(const std::vector<HostCheck>& checks);
// "9 ok, 3 warn (isolation, governor, irq_affinity), 0 fail".
[[nodiscard]] std::string summarize(const std::vector<HostCheck>& checks);

}  // namespace ipcfloor
