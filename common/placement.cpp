#include "common/placement.hpp"

#include <algorithm>
#include <string>
#include <tuple>

#include <fmt/format.h>

namespace ipcfloor {

FloorMatrix::FloorMatrix(std::vector<int> cpus) : cpus_(std::move(cpus)), p50_ns_(cpus_.size() * cpus_.size(), -1.0) {}

int FloorMatrix::index_of(int cpu) const noexcept {
  const auto it = std::find(cpus_.begin(), cpus_.end(), cpu);
  return it == cpus_.end() ? -1 : static_cast<int>(it - cpus_.begin());
}

void FloorMatrix::set(int client, int server, double p50_ns) {
  const int row = index_of(client);
  const int column = index_of(server);
  if (row >= 0 && column >= 0 && row != column) p50_ns_[static_cast<std::size_t>(row) * cpus_.size() + column] = p50_ns;
}

double FloorMatrix::floor(int client, int server) const noexcept {
  const int row = index_of(client);
  const int column = index_of(server);
  if (row < 0 || column < 0 || row == column) return -1.0;
  const double there = p50_ns_[static_cast<std::size_t>(row) * cpus_.size() + column];
  return there >= 0 ? there : p50_ns_[static_cast<std::size_t>(column) * cpus_.size() + row];
}

bool FloorMatrix::covers(const std::vector<int>& cpus) const noexcept {
  for (const int a : cpus)
    for (const int b : cpus)
      if (a != b && floor(a, b) < 0) return false;
  return true;
}

namespace {

// How near `client` is to `serving`: the measured floor, or the declared relation's rank.
double nearness(const HostTopology& topology, const FloorMatrix* matrix, int client, int serving) {
  if (matrix != nullptr) return matrix->floor(client, serving);
  return relation_rank(topology.relation(client, serving));
}

// Rule 2: the allowed cpus a client of `serving` may take, cpu 0 only when nothing else is left.
std::vector<int> client_cpus(const HostTopology& topology, int serving) {
  std::vector<int> cpus = topology.allowed;
  std::erase(cpus, serving);
  if (cpus.size() > 1) std::erase(cpus, 0);
  return cpus;
}

bool shares(const std::vector<int>& list, int cpu) { return std::find(list.begin(), list.end(), cpu) != list.end(); }

}  // namespace

std::vector<int> near_cpus(const HostTopology& topology, const FloorMatrix* matrix, int serving_cpu) {
  if (matrix != nullptr && (matrix->empty() || !matrix->covers(topology.allowed))) matrix = nullptr;
  std::vector<int> cpus = topology.allowed;
  std::erase(cpus, serving_cpu);
  const auto key = [&](int cpu) { return std::tuple{cpu == 0, nearness(topology, matrix, cpu, serving_cpu), cpu}; };
  std::sort(cpus.begin(), cpus.end(), [&](int a, int b) { return key(a) < key(b); });
  return cpus;
}

Expected<EnginePlacement> place_engine(const HostTopology& topology, const FloorMatrix* matrix) {
  if (topology.allowed.size() < 2)
    return fail(ErrorCode::resource,
                "--cpu auto needs two cpus, one to serve and one for a client, but this process may use {} (the "
                "online cpus within its cgroup cpuset and its affinity mask, e.g. taskset -c)",
                topology.allowed.empty() ? std::string("none") : fmt::format("only cpu {}", topology.allowed.front()));
  if (matrix != nullptr && (matrix->empty() || !matrix->covers(topology.allowed))) matrix = nullptr;
  EnginePlacement best;
  std::tuple<double, double, int> best_key{0.0, 0.0, 0};
  for (const int serving : topology.allowed) {
    if (serving == 0) continue;  // rule 1
    const std::vector<int> clients = client_cpus(topology, serving);
    double nearest = -1.0, sum = 0.0;
    for (const int client : clients) {
      const double d = nearness(topology, matrix, client, serving);
      nearest = nearest < 0 ? d : std::min(nearest, d);
      sum += d;
    }
    const std::tuple key{nearest, sum / static_cast<double>(clients.size()), -serving};
    if (best.serving_cpu < 0 || key < best_key) {
      best.serving_cpu = serving;
      best_key = key;
    }
  }
  best.near_cpus = near_cpus(topology, matrix, best.serving_cpu);
  best.measured = matrix != nullptr;
  return best;
}

std::vector<int> worker_order(const HostTopology& topology, std::vector<int> candidates, int serving_cpu,
                              int client_cpu) {
  std::erase(candidates, serving_cpu);
  const CpuPlace none;
  const CpuPlace* serving = topology.find(serving_cpu);
  const CpuPlace* client = client_cpu >= 0 ? topology.find(client_cpu) : nullptr;
  if (serving == nullptr) serving = &none;
  if (client == nullptr) client = &none;
  const auto key = [&](int cpu) {
    const bool serving_sibling = shares(serving->threads, cpu);
    const bool client_sibling = shares(client->threads, cpu);
    const bool l2 = shares(serving->l2, cpu) || shares(client->l2, cpu);
    const bool l3 = shares(serving->l3, cpu) || shares(client->l3, cpu);
    return std::tuple{serving_sibling, cpu == client_cpu, client_sibling, cpu == 0, l2, l3, -cpu};
  };
  std::sort(candidates.begin(), candidates.end(), [&](int a, int b) { return key(a) < key(b); });
  return candidates;
}

}  // namespace ipcfloor
