#pragma once
// What the kernel says about where each cpu sits: its core's other hardware threads (SMT), the
// cpus it shares an L2 and an L3 with, its NUMA node and package, and which cpus this process may
// use. Read from sysfs under a root folder, so a canned tree (tests/data/topology/) can stand in
// for a host; read_host_topology() reads the real one.
//
// Setup path: every call reads files and allocates; any thread. Nothing here measures: the
// declared topology is what the floor matrix (bench/floor_matrix.hpp) is compared against.

#include <string>
#include <string_view>
#include <vector>

namespace ipcfloor {

// One online cpu as sysfs declares it. A fact sysfs does not give is -1 or an empty list (a VM
// often declares no caches at all).
struct CpuPlace {
  int cpu = -1;
  int package = -1;          // topology/physical_package_id
  int core = -1;             // topology/core_id (unique within its package)
  int node = -1;             // the NUMA node whose cpulist holds it
  std::vector<int> threads;  // topology/thread_siblings_list: its core's hardware threads, itself included
  std::vector<int> l2;       // the cpus sharing its unified or data L2, itself included
  std::vector<int> l3;       // the cpus sharing its L3, itself included
};

// How two cpus relate, nearest first. Each is the nearest that holds: smt_siblings before
// shared_l2, and so on. another_l3: both declare an L3 and the two differ (another CCX or die);
// same_node: one NUMA node (or one package, nodes undeclared) and no cache shared in sysfs, which
// is what a VM without cache information declares; other_node: another NUMA node or package.
enum class CpuRelation { same_cpu, smt_siblings, shared_l2, shared_l3, another_l3, same_node, other_node };

// "smt-siblings", "shared-l2", "shared-l3", "another-l3", "same-node", "other-node" ("same-cpu").
[[nodiscard]] std::string_view relation_name(CpuRelation relation) noexcept;
// A phrase for people: "SMT siblings (one core)", "another NUMA node", ...
[[nodiscard]] std::string_view relation_description(CpuRelation relation) noexcept;
// 0 for same_cpu up to 6 for other_node: the order of the enum, as a number to sort by.
[[nodiscard]] int relation_rank(CpuRelation relation) noexcept;

struct HostTopology {
  std::vector<int> online;     // ascending
  std::vector<int> allowed;    // online, within the cgroup cpuset and the affinity mask given; ascending
  std::vector<CpuPlace> cpus;  // one per online cpu, ascending
  bool hypervisor = false;     // /proc/cpuinfo's flags say "hypervisor": the topology is the VM's

  // The cpu's entry, or nullptr when it is not online.
  [[nodiscard]] const CpuPlace* find(int cpu) const noexcept;
  // How `a` and `b` relate by what sysfs declares. Pure.
  [[nodiscard]] CpuRelation relation(int a, int b) const noexcept;
  // The allowed cpus, grouped: by node, then L3, then core, so that cpus the topology puts together
  // sit next to each other (the matrix's order). Pure.
  [[nodiscard]] std::vector<int> grouped_allowed() const;
};

// Reads the tree under `root` ("" or "/" for the host): root/sys/devices/system/cpu/online and
// cpuN/{topology,cache}, root/sys/devices/system/node/nodeM/cpulist, the cgroup cpuset as
// allowed_cpus_under(root) reads it, and root/proc/cpuinfo's flags. `affinity` narrows the allowed
// cpus further (a process started under `taskset`); empty: no narrowing.
[[nodiscard]] HostTopology read_topology(const std::string& root, const std::vector<int>& affinity = {});

// This host, the allowed cpus narrowed by the calling thread's affinity mask: call it before the
// thread pins itself, and it honours `taskset`.
[[nodiscard]] HostTopology read_host_topology();

}  // namespace ipcfloor
