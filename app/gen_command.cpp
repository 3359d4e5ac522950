#include "app/gen_command.hpp"

#include <cstdio>

#include <fmt/format.h>

#include "app/cli_common.hpp"
#include "data/series_io.hpp"

namespace ipcfloor {

CLI::App* add_gen_subcommand(CLI::App& app, GenOptions& options) {
  auto* gen = app.add_subcommand("gen", "Write numpy's GBM close series (default_rng) without Python");
  add_gbm_options(*gen, options.gbm);
  gen->add_option("-o,--out", options.out_path, "output file: .f64 (raw little-endian), .csv or .npy")->check(file_path())->required();
  return gen;
}

int run_gen_command(const GenOptions& options) {
  auto close = generate_gbm(options.gbm);
  if (!close) return report_error("gen", close.error());
  if (auto saved = save_series(options.out_path, *close); !saved) return report_error("gen", saved.error());
  fmt::print(stderr, "ipcfloor gen: wrote {} bars (seed {}) to {}\n", close->size(), options.gbm.seed,
             options.out_path);
  return 0;
}

}  // namespace ipcfloor
