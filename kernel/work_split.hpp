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

// The sum of the costs each worker got.
[[nodiscard]] std::vector<std::uint64_t> load_per_worker(std::span<const std::uint64_t> costs,
                                                         std::span<const std::uint32_t> owner, std::uint32_t workers);

}  // namespace ipcfloor
