#pragma once
// `ipcfloor bench echo` (docs/SPEC.md §7.2): RTT against payload size, 8 B to 1.2 MB (1 to 150,000
// floats), the study's scalpel. Over the Unix socket (opcode 1: the series goes and comes back
// verbatim) and through the segment (the lane's bulk region: the engine copies the floats in
// and out, touching every byte as the socket server does), with the study's model
// RTT = floor + bytes / bandwidth fitted to each.

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ipcfloor {

struct EchoOptions {
  std::size_t max_samples = 2'000;   // per size; large sizes take fewer (see run_echo)
  int client_cpu = -1;
  int server_cpu = -1;
  std::string binary;
};

// JSON: {"suite":"echo", "series":[{"transport", "points":[{floats, bytes, p50, p90, p99, max,
// samples}], "fit":{"floor_ns", "bytes_per_ns", "gb_per_s"}}], ...}
[[nodiscard]] Expected<nlohmann::json> run_echo(const EchoOptions& options);
void print_echo(const nlohmann::json& report);

// Least squares (relative error) of y = a + x / b over (x, y) points; {a, b}. Exposed for tests.
struct FloorBandwidthFit {
  double floor_ns;
  double bytes_per_ns;
};
[[nodiscard]] FloorBandwidthFit fit_floor_bandwidth(const std::vector<double>& bytes, const std::vector<double>& ns);

}  // namespace ipcfloor
