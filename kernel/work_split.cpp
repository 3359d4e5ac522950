#include "kernel/work_split.hpp"

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

std::vector<std::uint64_t> load_per_worker(std::span<const std::uint64_t> costs, std::span<const std::uint32_t> owner,
                                           std::uint32_t workers) {
  std::vector<std::uint64_t> load(workers, 0);
  for (std::size_t i = 0; i < costs.size() && i < owner.size(); ++i)
    if (owner[i] < workers) load[owner[i]] += costs[i];
  return load;
}

}  // namespace ipcfloor
