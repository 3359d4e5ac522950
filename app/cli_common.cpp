#include "app/cli_common.hpp"

#include <cstdio>

#include <fmt/format.h>

namespace ipcfloor {

int report_error(std::string_view command, const Error& error) {
  if (command.empty()) {
    fmt::print(stderr, "ipcfloor: {}\n", error.message);
  } else {
    fmt::print(stderr, "ipcfloor {}: {}\n", command, error.message);
  }
  return exit_code_for(error.code);
}

void add_gbm_options(CLI::App& command, GbmParams& gbm, bool* given) {
  CLI::Option* options[] = {
      command.add_option("--bars", gbm.bars, "number of bars to generate")->capture_default_str(),
      command.add_option("--seed", gbm.seed, "numpy default_rng seed")->capture_default_str(),
      command.add_option("--mu", gbm.mu, "drift per year")->capture_default_str(),
      command.add_option("--sigma", gbm.sigma, "volatility per year")->capture_default_str(),
      command.add_option("--s0", gbm.s0, "first close")->capture_default_str(),
      command.add_option("--dt", gbm.dt, "bar length in years (default 1/(252*390))"),
  };
  if (given == nullptr) return;
  for (CLI::Option* option : options) option->each([given](const std::string&) { *given = true; });
}

}  // namespace ipcfloor
