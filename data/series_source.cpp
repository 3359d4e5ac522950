#include "data/series_source.hpp"

#include <fmt/format.h>

#include "data/input_file.hpp"
#include "data/series_io.hpp"

namespace ipcfloor {

Expected<LoadedSeries> load_series_source(const SeriesSource& source) {
  if (source.data_path) {
    auto columns = load_series_columns(*source.data_path, source.column);
    if (!columns) return std::unexpected(columns.error());
    LoadedSeries loaded;
    static_cast<SeriesColumns&>(loaded) = std::move(*columns);
    loaded.description = *source.data_path;
    return loaded;
  }
  // 8 bytes a bar, refused before they are allocated when the host cannot give them.
  const std::size_t bytes = source.gbm.bars * sizeof(double);
  if (const auto available = available_memory_bytes(); available && bytes > *available)
    return fail(ErrorCode::resource, "{} generated bars need {}; this host has {} of memory available",
                source.gbm.bars, byte_size_text(bytes), byte_size_text(*available));
  auto close = generate_gbm(source.gbm);
  if (!close) return std::unexpected(close.error());
  const GbmParams defaults{};
  const GbmParams& g = source.gbm;
  const bool is_default = g.bars == defaults.bars && g.seed == defaults.seed && g.mu == defaults.mu &&
                          g.sigma == defaults.sigma && g.s0 == defaults.s0 && g.dt == defaults.dt;
  LoadedSeries loaded;
  loaded.close = std::move(*close);
  loaded.description =
      fmt::format("gbm(bars={}, seed={}, mu={}, sigma={}, s0={}, dt={:.6g})", g.bars, g.seed, g.mu, g.sigma, g.s0, g.dt);
  loaded.is_default = is_default;
  return loaded;
}

}  // namespace ipcfloor
