#pragma once
// `ipcfloor bench hygiene`: syscalls, page faults and context switches per request on the
// engine's serving thread (docs/SPEC.md §7.6), counted over a million requests through the ring
// (and over live APPENDs through an engine whose journal's writer thread does the file's I/O), and
// the same on the socket server's thread for comparison; plus the memory choices behind the
// segment (bench/memory_bench.hpp: first touch with and without prefault, 2 MiB vs 4 KiB scans).

#include <string>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ipcfloor {

struct HygieneOptions {
  std::size_t echo_requests = 1'000'000;
  std::size_t backtest_requests = 20'000;
  std::size_t append_requests = 20'000;        // live APPENDs through an engine with a journal
  std::size_t socket_requests = 20'000;        // counted (faults, context switches), untraced
  std::size_t socket_traced_requests = 1'000;  // under the syscall tracer: each syscall stops twice
  std::size_t memory_touch_bytes = 64 << 20;   // the first-touch region of the memory measurements
  std::string wait = "spin";
  int client_cpu = -1;  // -1: first allowed cpu
  int server_cpu = -1;  // -1: last allowed cpu
  std::string binary;   // empty: this executable
};

// JSON: {"suite":"hygiene","host":{...},"results":[{"transport","opcode","requests","syscalls",
// "minor_faults","major_faults","voluntary_switches","involuntary_switches", "..._per_request"}],
// "memory":{...run_memory_bench...}}
[[nodiscard]] Expected<nlohmann::json> run_hygiene(const HygieneOptions& options);

void print_hygiene(const nlohmann::json& report);

}  // namespace ipcfloor
