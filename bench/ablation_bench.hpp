#pragma once
// `ipcfloor bench ablation`: where the nanoseconds of one request go, in the style of the
// third seed's latency-floor analysis. For the shm ring and for the Unix socket, on a short
// series and on the default one: the kernel alone (in-process), the transport alone (ECHO of
// 48 bytes) and the full request (one BACKTEST combo); plumbing = full - kernel - transport.
// The shm row is taken twice: computed on the serving thread (--workers 0) and handed to a worker
// (--inline-cost 0), whose difference is the cost of the hand-over behind --inline-cost.

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ipcfloor {

struct AblationOptions {
  std::size_t short_bars = 1'000;
  std::size_t short_samples = 20'000;    // per measurement on the short series
  std::size_t default_samples = 300;     // per measurement on the 150,000-bar series
  std::int64_t length = 20;              // the combo: combo_from_length(length)
  int client_cpu = -1;
  int server_cpu = -1;
  std::string binary;
};

[[nodiscard]] Expected<nlohmann::json> run_ablation(const AblationOptions& options);
void print_ablation(const nlohmann::json& report);

}  // namespace ipcfloor
