#include "bench/suite_common.hpp"

#include "bench/engine_child.hpp"
#include "common/affinity.hpp"
#include "kernel/kernel.hpp"

namespace ipcfloor {

SuitePlacement place_suite(int client_cpu, int server_cpu, const std::string& binary) {
  const auto cpus = allowed_cpus();
  return SuitePlacement{client_cpu >= 0 ? client_cpu : cpus.front(), server_cpu >= 0 ? server_cpu : cpus.back(),
                        binary.empty() ? self_executable() : binary};
}

std::vector<Combo> default_grid_combos() {
  std::vector<Combo> combos;
  for (const auto length : grid_lengths(6, 200, 80)) combos.push_back(combo_from_length(length));
  return combos;
}

Expected<void> same_results(std::string_view way, std::span<const BacktestResult> got,
                            std::span<const BacktestResult> expected) {
  if (got.size() != expected.size())
    return fail(ErrorCode::bad_data, "{}: {} results for {} combos", way, got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(got[i] == expected[i]))
      return fail(ErrorCode::bad_data, "{}: combo {} gave pnl {} trades {}, in-process {} {}", way, i, got[i].pnl,
                  got[i].trades, expected[i].pnl, expected[i].trades);
  return {};
}

}  // namespace ipcfloor
