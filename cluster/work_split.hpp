#pragma once
// Splitting a sweep's work across workers (MPI ranks) so that they finish together. A backtest's
// cost grows with its windows and its bars (kernel/cost.hpp), so an even split by count leaves
// the ranks with the short windows idle while one grinds through the long ones.
//
// Longest-processing-time-first: items in descending cost, each to the worker with the least
// work so far (the lowest-numbered one on a tie). Every worker that computes the split from the
// same costs gets the same answer, so the ranks agree on it without talking. The heaviest worker
// ends at most one item's cost above the lightest. Pure; allocates the result.

#include <cstdint>
#include <span>
#include <vector>

namespace ipcfloor {

// The worker of each item (same order as `costs`), for `workers` >= 1.
[[nodiscard]] std::vector<std::uint32_t> split_by_cost(std::span<const std::uint64_t> costs, std::uint32_t workers);

// The same split over tiles: runs of consecutive items of one group (a series), about
// items / (workers x tiles_per_worker) long, so that each worker gets a few whole tiles and loads
// only their groups (a rank reads a few series, not all of them). `group` has one entry per item,
// items of a group consecutive. The heaviest worker ends at most one tile's cost above the
// lightest.
[[nodiscard]] std::vector<std::uint32_t> split_in_tiles(std::span<const std::uint64_t> costs,
                                                        std::span<const std::uint32_t> group, std::uint32_t workers,
                                                        std::size_t tiles_per_worker = 8);

// The sum of the costs each worker got.
[[nodiscard]] std::vector<std::uint64_t> load_per_worker(std::span<const std::uint64_t> costs,
                                                         std::span<const std::uint32_t> owner, std::uint32_t workers);

}  // namespace ipcfloor
