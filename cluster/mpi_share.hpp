#pragma once
// One rank's share of ipcfloor-mpi's items: computed in process with the kernel, or through the
// engine on this host (--name), and handed over in batches as they complete. The rank's thread
// only; allocates.

#include <cstddef>
#include <functional>
#include <span>
#include <vector>

#include "cluster/mpi_options.hpp"
#include "cluster/mpi_wire.hpp"
#include "common/error.hpp"
#include "data/series_set.hpp"

namespace ipcfloor::mpi {

// Results per batch: streams rows without a message per combo.
inline constexpr std::size_t kBatch = 32;

using Deliver = std::function<void(std::span<const ResultWire>)>;
using Between = std::function<void()>;

// Computes items[mine[k]] for every k, in order, and hands each batch of results to `deliver`;
// `between` runs after each batch (rank 0 receives there). In process (`set`: the series of
// --data/--bars), series by series, each loaded once, the combos of a series in chunks over
// options.threads threads. Through the engine (options.name): every item on the engine's series
// of its index, pipelined through one lane.
[[nodiscard]] Expected<void> compute_share(const MpiSweepOptions& options, const SeriesSet& set,
                                           std::span<const RowWire> rows, std::span<const Item> items,
                                           std::span<const std::size_t> mine, const Deliver& deliver,
                                           const Between& between);

}  // namespace ipcfloor::mpi
