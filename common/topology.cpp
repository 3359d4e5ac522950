#include "common/topology.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <tuple>

#include "common/affinity.hpp"

namespace ipcfloor {
namespace {

int number_in(const std::string& path) {
  const std::string text = kernel_file_line(path);
  int value = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  return error == std::errc{} && end == text.data() + text.size() ? value : -1;
}

bool contains(const std::vector<int>& cpus, int cpu) { return std::find(cpus.begin(), cpus.end(), cpu) != cpus.end(); }

// The L2 and L3 a cpu shares, from its cache/indexK folders: the level and type say which cache
// each is (the index numbers differ between vendors); instruction caches are skipped.
void read_caches(const std::string& cpu_dir, CpuPlace& place) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(cpu_dir + "/cache", ec)) {
    const std::string dir = entry.path().string();
    if (entry.path().filename().string().rfind("index", 0) != 0) continue;
    if (kernel_file_line(dir + "/type") == "Instruction") continue;
    const int level = number_in(dir + "/level");
    std::vector<int> shared = parse_cpu_list(kernel_file_line(dir + "/shared_cpu_list"));
    if (level == 2) place.l2 = std::move(shared);
    if (level == 3) place.l3 = std::move(shared);
  }
}

// Each node's cpulist, node by node, into the cpus' places.
void read_nodes(const std::string& root, std::vector<CpuPlace>& places) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root + "/sys/devices/system/node", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("node", 0) != 0) continue;
    int node = -1;
    const auto [end, error] = std::from_chars(name.data() + 4, name.data() + name.size(), node);
    if (error != std::errc{} || end != name.data() + name.size()) continue;
    for (const int cpu : parse_cpu_list(kernel_file_line(entry.path().string() + "/cpulist")))
      for (CpuPlace& place : places)
        if (place.cpu == cpu) place.node = node;
  }
}

bool cpuinfo_says_hypervisor(const std::string& root) {
  std::ifstream in(root + "/proc/cpuinfo");
  std::string line;
  while (in && std::getline(in, line))
    if (line.rfind("flags", 0) == 0) return line.find(" hypervisor") != std::string::npos;
  return false;
}

// Two non-empty cpu lists that are the same set: the same cache.
bool same_cache(const std::vector<int>& a, const std::vector<int>& b) { return !a.empty() && a == b; }

}  // namespace

namespace {

struct RelationText {
  std::string_view name;
  std::string_view description;
};
// In the order of CpuRelation.
constexpr RelationText kRelationText[] = {
    {"same-cpu", "the same cpu"},
    {"smt-siblings", "SMT siblings (one core)"},
    {"shared-l2", "two cores sharing an L2"},
    {"shared-l3", "two cores sharing an L3"},
    {"another-l3", "two cores on different L3s of one NUMA node"},
    {"same-node", "two cores of one NUMA node, no shared cache declared"},
    {"other-node", "another NUMA node or package"},
};
static_assert(std::size(kRelationText) == static_cast<std::size_t>(CpuRelation::other_node) + 1,
              "one text per relation");

}  // namespace

std::string_view relation_name(CpuRelation relation) noexcept { return kRelationText[relation_rank(relation)].name; }

std::string_view relation_description(CpuRelation relation) noexcept {
  return kRelationText[relation_rank(relation)].description;
}

int relation_rank(CpuRelation relation) noexcept { return static_cast<int>(relation); }

const CpuPlace* HostTopology::find(int cpu) const noexcept {
  const auto it = std::find_if(cpus.begin(), cpus.end(), [cpu](const CpuPlace& p) { return p.cpu == cpu; });
  return it == cpus.end() ? nullptr : &*it;
}


CpuRelation HostTopology::relation(int a, int b) const noexcept {
  if (a == b) return CpuRelation::same_cpu;
  const CpuPlace* pa = find(a);
  const CpuPlace* pb = find(b);
  if (pa == nullptr || pb == nullptr) return CpuRelation::other_node;
  if (contains(pa->threads, b)) return CpuRelation::smt_siblings;
  if (same_cache(pa->l2, pb->l2)) return CpuRelation::shared_l2;
  if (same_cache(pa->l3, pb->l3)) return CpuRelation::shared_l3;
  const bool one_node = pa->node >= 0 && pb->node >= 0 ? pa->node == pb->node : pa->package == pb->package;
  if (!one_node || pa->package != pb->package) return CpuRelation::other_node;
  return !pa->l3.empty() && !pb->l3.empty() ? CpuRelation::another_l3 : CpuRelation::same_node;
}

std::vector<int> HostTopology::grouped_allowed() const {
  std::vector<int> order = allowed;
  const auto key = [this](int cpu) {
    const CpuPlace* p = find(cpu);
    if (p == nullptr) return std::tuple{-1, -1, -1, -1, cpu};
    const auto first = [cpu](const std::vector<int>& list) { return list.empty() ? cpu : list.front(); };
    return std::tuple{p->node, p->package, first(p->l3), first(p->threads), cpu};
  };
  std::sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });
  return order;
}

HostTopology read_topology(const std::string& root, const std::vector<int>& affinity) {
  HostTopology topology;
  const std::string cpu_root = root + "/sys/devices/system/cpu";
  topology.online = parse_cpu_list(kernel_file_line(cpu_root + "/online"));
  topology.allowed = allowed_cpus_under(root);
  if (!affinity.empty()) {
    std::vector<int> narrowed;
    std::set_intersection(topology.allowed.begin(), topology.allowed.end(), affinity.begin(), affinity.end(),
                          std::back_inserter(narrowed));
    topology.allowed = std::move(narrowed);
  }
  for (const int cpu : topology.online) {
    CpuPlace place;
    place.cpu = cpu;
    const std::string dir = cpu_root + "/cpu" + std::to_string(cpu);
    place.package = number_in(dir + "/topology/physical_package_id");
    place.core = number_in(dir + "/topology/core_id");
    place.threads = parse_cpu_list(kernel_file_line(dir + "/topology/thread_siblings_list"));
    read_caches(dir, place);
    topology.cpus.push_back(std::move(place));
  }
  read_nodes(root, topology.cpus);
  topology.hypervisor = cpuinfo_says_hypervisor(root);
  return topology;
}

HostTopology read_host_topology() { return read_topology("", current_thread_cpus()); }

}  // namespace ipcfloor
