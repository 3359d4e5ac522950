#include "kernel/series_source.hpp"

#include <fmt/format.h>

#include "kernel/series_io.hpp"

namespace ipcfloor {

Expected<LoadedSeries> load_series_source(const SeriesSource& source) {
  if (source.data_path) {
    auto close = load_series(*source.data_path);
    if (!close) return std::unexpected(close.error());
    return LoadedSeries{std::move(*close), *source.data_path, false};
  }
  auto close = generate_gbm(source.gbm);
  if (!close) return std::unexpected(close.error());
  const GbmParams defaults{};
  const GbmParams& g = source.gbm;
  const bool is_default = g.bars == defaults.bars && g.seed == defaults.seed && g.mu == defaults.mu &&
                          g.sigma == defaults.sigma && g.s0 == defaults.s0 && g.dt == defaults.dt;
  return LoadedSeries{std::move(*close),
                      fmt::format("gbm(bars={}, seed={}, mu={}, sigma={}, s0={}, dt={:.6g})",
                                  g.bars, g.seed, g.mu, g.sigma, g.s0, g.dt),
                      is_default};
}

}  // namespace ipcfloor
