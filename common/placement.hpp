#pragma once
// Where the engine's serving thread, its clients and its workers go, from the declared topology
// and, when one was measured, the floor matrix: the p50 RTT of one cache line bounced between
// each pair of cpus (bench/floor_matrix.hpp measures it; `ipcfloor topology` shows it).
//
// The rule (docs/OPERATIONS.md, "Placing the engine"):
//   1. The serving cpu is never cpu 0 (the kernel's housekeeping: timers, RCU, most interrupts).
//      It needs a second allowed cpu for a client: with fewer than two, --cpu auto is refused.
//   2. A client's candidates are the allowed cpus but the serving one, cpu 0 only when it is the
//      last one left.
//   3. The serving cpu is the candidate whose nearest client cpu has the lowest floor; ties go to
//      the lower mean floor over all its client cpus, then to the higher cpu (today's default, the
//      last allowed cpu). Without a matrix "floor" is the declared relation's rank (SMT siblings
//      nearest, another NUMA node farthest).
//   4. The near list is every other allowed cpu, nearest first by the same measure, cpu 0 last.
//   5. Workers take the cpus that disturb the serving pair (the serving cpu and its nearest
//      client cpu) least first. From first taken to last: cpus sharing no cache with the pair
//      (the highest first), then those sharing an L3 with it, then an L2, then cpu 0, then the
//      client cpu's SMT siblings, the client cpu itself, and last the serving cpu's SMT siblings.
//
// Pure functions of their arguments: no file is read, nothing is measured. Allocate.

#include <vector>

#include "common/error.hpp"
#include "common/topology.hpp"

namespace ipcfloor {

// The p50 RTT, ns, of a cache line bounced with the measuring side on cpu `client` and the
// answering side on cpu `server`, for the cpus measured.
class FloorMatrix {
 public:
  FloorMatrix() = default;
  explicit FloorMatrix(std::vector<int> cpus);

  [[nodiscard]] const std::vector<int>& cpus() const noexcept { return cpus_; }
  [[nodiscard]] bool empty() const noexcept { return cpus_.empty(); }
  // Records a measurement; cpus outside cpus() are ignored.
  void set(int client, int server, double p50_ns);
  // The measured p50, or a negative number when the pair was not measured (or client == server).
  // A pair measured one way only answers for both.
  [[nodiscard]] double floor(int client, int server) const noexcept;
  // True when every ordered pair of distinct `cpus` has a floor.
  [[nodiscard]] bool covers(const std::vector<int>& cpus) const noexcept;

 private:
  [[nodiscard]] int index_of(int cpu) const noexcept;
  std::vector<int> cpus_;
  std::vector<double> p50_ns_;  // row: client, column: server; negative: not measured
};

struct EnginePlacement {
  int serving_cpu = -1;
  std::vector<int> near_cpus;  // rule 4, nearest first
  bool measured = false;       // chosen from the matrix, not the declared topology
};

// Rules 1 to 4 over topology.allowed. `matrix` may be null or empty (the declared topology
// decides); a matrix that does not cover every allowed cpu is not used. resource with fewer than
// two allowed cpus, naming them.
[[nodiscard]] Expected<EnginePlacement> place_engine(const HostTopology& topology, const FloorMatrix* matrix);

// Rule 4 for a serving cpu chosen elsewhere (serve --cpu N). The serving cpu need not be allowed.
[[nodiscard]] std::vector<int> near_cpus(const HostTopology& topology, const FloorMatrix* matrix, int serving_cpu);

// Rule 5: `candidates` (the serving cpu left out) ordered for workers; `client_cpu` -1 when none
// is known.
[[nodiscard]] std::vector<int> worker_order(const HostTopology& topology, std::vector<int> candidates,
                                            int serving_cpu, int client_cpu);

}  // namespace ipcfloor
