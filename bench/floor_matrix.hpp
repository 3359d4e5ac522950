#pragma once
// The floor matrix: the RTT of one cache line bounced between every pair of allowed cpus
// (bench/pair_bounce.hpp, the ladder's physical-floor measurement), per sample, as p50 and p99
// per pair, set against what sysfs declares about the two cpus (common/topology.hpp). It finds
// the pair that holds the host's floor and where the measurement disagrees with the declared
// topology. `ipcfloor topology` prints and saves it; `serve --cpu auto`, `--client-cpu near` and
// the ladder's report read it (common/placement.hpp has the rule).
//
// Setup path: measuring pins threads to every allowed cpu in turn, never to another one, and
// spins both of a pair's cpus for at most the mode's budget per pair and round. Allocates.

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/latency.hpp"
#include "bench/saved_matrix.hpp"
#include "common/error.hpp"
#include "common/placement.hpp"
#include "common/topology.hpp"

namespace ipcfloor {

enum class MatrixMode { quick, thorough };

// How much one mode measures. Each pair (each direction, in thorough mode) is measured once per
// round, rounds interleaved so that every pair sees the same moments of the host; a round stops at
// its samples or its budget, whichever comes first.
struct MatrixPlan {
  std::size_t samples = 0;  // per pair and direction, over all rounds
  std::size_t warmup = 0;   // per pair, direction and round
  std::size_t rounds = 0;
  bool both_directions = false;  // also time b -> a (the matrix may then be asymmetric)
  double round_budget_s = 0;     // per pair, direction and round
};

[[nodiscard]] MatrixPlan plan_for(MatrixMode mode) noexcept;
// The longest the measurement of `cpus` allowed cpus takes under `plan`, in seconds (a round cut
// by its budget included); a pair whose answering side is never scheduled adds kStallGraceS.
[[nodiscard]] double bound_seconds(const MatrixPlan& plan, std::size_t cpus) noexcept;
inline constexpr double kStallGraceS = 0.5;

// One ordered pair as measured: the client cpu timed each round trip, the server cpu answered.
struct PairFloor {
  int client_cpu = -1;
  int server_cpu = -1;
  CpuRelation relation = CpuRelation::other_node;
  LatencySummary rtt;             // pooled over rounds
  std::vector<double> round_p50;  // p50_interp of each round
  bool cut_short = false;         // a round ran out of budget before its samples
};

struct MeasuredMatrix {
  HostTopology topology;
  MatrixPlan plan;
  std::vector<PairFloor> pairs;  // client < server first; with both directions, each pair twice
  double tsc_ghz = 0;
  double clock_step_ns = 0;
  double seconds = 0;  // wall time the measurement took
};

// Called after each measured pair and round: pairs done so far and the total.
using MatrixProgress = std::function<void(std::size_t done, std::size_t total, const PairFloor& last)>;

// Measures every pair of topology.allowed under `plan` and nothing else. An error when a cpu
// refuses a thread (the cpuset changed underneath).
[[nodiscard]] Expected<MeasuredMatrix> measure_floor_matrix(const HostTopology& topology, const MatrixPlan& plan,
                                                            const MatrixProgress& progress = {});

// What the measurement says about the declared topology. Pure.
struct MatrixFindings {
  const PairFloor* best = nullptr;   // lowest p50_interp
  const PairFloor* worst = nullptr;  // highest p50_interp
  std::vector<std::string> disagreements;
  std::vector<std::string> notes;
};
// Flags, each with the numbers behind it (thresholds in docs/OPERATIONS.md, "ipcfloor topology"):
// a nearer declared relation whose median p50 is above kRelationSlack x a farther one's; a pair
// above kOutlierRatio x its relation's median; a pair whose per-round p50 moved by more than
// kOutlierRatio; a pair whose two directions differ by more than kOutlierRatio.
[[nodiscard]] MatrixFindings analyze_matrix(const HostTopology& topology, const std::vector<PairFloor>& pairs);
inline constexpr double kRelationSlack = 1.25;
inline constexpr double kOutlierRatio = 1.5;

// The report: {"suite":"topology","host","config","topology","pairs","groups","best","worst",
// "worst_over_best","disagreements","notes","placement"} (docs/OPERATIONS.md describes each).
[[nodiscard]] nlohmann::json matrix_json(const MeasuredMatrix& matrix);

// Where a matrix is saved when no path is given: $IPCFLOOR_TOPOLOGY, else
// $XDG_CACHE_HOME/ipcfloor/topology.json, else $HOME/.cache/ipcfloor/topology.json ("" if none).
[[nodiscard]] std::string default_matrix_path();

// Reads a saved report and its floors (a regular file of at most 64 MiB, data/input_file.hpp;
// bench/saved_matrix.hpp checks its shape). bad_data when it is not a topology report, a field
// has the wrong type, it names another host (hostname or cpu model) than this one, or holds an
// unusable pair; InputFile's errors when it cannot be read.
[[nodiscard]] Expected<SavedMatrix> load_floor_matrix(const std::string& path);

// Whether `path`'s folder may take the matrix (common/atomic_file.hpp's rule: ours or root's, and
// writable by nobody else unless sticky). A missing folder passes: save_floor_matrix makes it.
// For `topology --save` to refuse before it measures.
[[nodiscard]] Expected<void> check_matrix_folder(const std::string& path);

// Writes the report to `path` (its folder made, mode 0700, when missing) through a temporary file
// of a random name renamed over it (common/atomic_file.hpp), so a reader never sees half a file and
// nobody's link is written through. permission for a folder another user owns or may write.
[[nodiscard]] Expected<void> save_floor_matrix(const std::string& path, const nlohmann::json& report);

// The tables for people: the p50 and p99 matrices in topology order with the best pair marked,
// the groups, best and worst and their ratio, the disagreements and notes, the placement.
void print_matrix(const nlohmann::json& report);

}  // namespace ipcfloor
