#include "cluster/work_split.hpp"

#include <algorithm>
#include <functional>
#include <numeric>
#include <queue>
#include <utility>

namespace ipcfloor {

std::vector<std::uint32_t> split_by_cost(std::span<const std::uint64_t> costs, std::uint32_t workers) {
  std::vector<std::uint32_t> owner(costs.size(), 0);
  if (workers <= 1 || costs.empty()) return owner;
  std::vector<std::size_t> order(costs.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  // Ties keep file order, so the split does not depend on the sort's implementation.
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return costs[a] > costs[b]; });
  // (load, worker), smallest load first, then the lowest worker.
  using Slot = std::pair<std::uint64_t, std::uint32_t>;
  std::priority_queue<Slot, std::vector<Slot>, std::greater<>> least;
  for (std::uint32_t w = 0; w < workers; ++w) least.emplace(0, w);
  for (const std::size_t item : order) {
    auto [load, worker] = least.top();
    least.pop();
    owner[item] = worker;
    least.emplace(load + costs[item], worker);
  }
  return owner;
}

std::vector<std::uint32_t> split_in_tiles(std::span<const std::uint64_t> costs, std::span<const std::uint32_t> group,
                                          std::uint32_t workers, std::size_t tiles_per_worker) {
  std::vector<std::uint32_t> owner(costs.size(), 0);
  if (workers <= 1 || costs.empty()) return owner;
  const std::size_t tiles_wanted = std::size_t{workers} * std::max<std::size_t>(1, tiles_per_worker);
  const std::size_t tile_items = std::max<std::size_t>(1, (costs.size() + tiles_wanted - 1) / tiles_wanted);
  // Tile t holds items [start[t], start[t + 1]): never across a group boundary.
  std::vector<std::size_t> start;
  for (std::size_t i = 0; i < costs.size(); ++i)
    if (start.empty() || i - start.back() == tile_items || group[i] != group[i - 1]) start.push_back(i);
  start.push_back(costs.size());
  std::vector<std::uint64_t> tile_cost(start.size() - 1, 0);
  for (std::size_t t = 0; t + 1 < start.size(); ++t)
    for (std::size_t i = start[t]; i < start[t + 1]; ++i) tile_cost[t] += costs[i];
  const std::vector<std::uint32_t> tile_owner = split_by_cost(tile_cost, workers);
  for (std::size_t t = 0; t + 1 < start.size(); ++t)
    for (std::size_t i = start[t]; i < start[t + 1]; ++i) owner[i] = tile_owner[t];
  return owner;
}

std::vector<std::uint64_t> load_per_worker(std::span<const std::uint64_t> costs, std::span<const std::uint32_t> owner,
                                           std::uint32_t workers) {
  std::vector<std::uint64_t> load(workers, 0);
  for (std::size_t i = 0; i < costs.size() && i < owner.size(); ++i)
    if (owner[i] < workers) load[owner[i]] += costs[i];
  return load;
}

}  // namespace ipcfloor
