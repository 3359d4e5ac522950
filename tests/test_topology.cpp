// The topology reader on canned sysfs trees (tests/data/topology/*.tree), the placement rule and
// the matrix analysis on canned matrices, and the floor matrix measured on this host: every pair of
// allowed cpus, and no other cpu.

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench/floor_matrix.hpp"
#include "common/affinity.hpp"
#include "common/placement.hpp"
#include "common/topology.hpp"

using namespace ipcfloor;

namespace {

// Writes tests/data/topology/NAME.tree ("path = first line" per line) into a fresh folder and
// returns it; removed with the object.
class CannedTree {
 public:
  explicit CannedTree(const std::string& name) {
    char pattern[] = "/tmp/ipcfloor-topology-XXXXXX";
    REQUIRE(::mkdtemp(pattern) != nullptr);
    root_ = pattern;
    std::ifstream in(std::string(IPCFLOOR_SOURCE_DIR) + "/tests/data/topology/" + name + ".tree");
    REQUIRE_MESSAGE(in.good(), name);
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      const auto equals = line.find(" = ");
      REQUIRE_MESSAGE(equals != std::string::npos, line);
      const std::filesystem::path file = std::filesystem::path(root_) / line.substr(0, equals);
      std::filesystem::create_directories(file.parent_path());
      std::ofstream(file) << line.substr(equals + 3) << '\n';
    }
  }
  ~CannedTree() {
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  CannedTree(const CannedTree&) = delete;
  CannedTree& operator=(const CannedTree&) = delete;
  [[nodiscard]] const std::string& root() const { return root_; }

 private:
  std::string root_;
};

// A symmetric matrix over `cpus` where every pair costs `base` but those listed.
FloorMatrix canned_matrix(const std::vector<int>& cpus, double base, const std::vector<std::pair<std::pair<int, int>, double>>& set) {
  FloorMatrix m(cpus);
  for (const int a : cpus)
    for (const int b : cpus)
      if (a != b) m.set(a, b, base);
  for (const auto& [pair, ns] : set) {
    m.set(pair.first, pair.second, ns);
    m.set(pair.second, pair.first, ns);
  }
  return m;
}

PairFloor canned_pair(int client, int server, CpuRelation relation, double p50, std::vector<double> rounds = {}) {
  PairFloor p;
  p.client_cpu = client;
  p.server_cpu = server;
  p.relation = relation;
  p.rtt.samples = 1000;
  p.rtt.p50 = p.rtt.p50_interp = p50;
  p.rtt.p99 = 2 * p50;
  p.round_p50 = rounds.empty() ? std::vector<double>{p50, p50} : std::move(rounds);
  return p;
}

bool mentions(const std::vector<std::string>& lines, const std::string& text) {
  return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(text) != std::string::npos; });
}

}  // namespace

TEST_CASE("the reader finds SMT siblings, the shared L2 and two L3 domains of a canned tree") {
  CannedTree tree("smt_two_l3");
  const HostTopology t = read_topology(tree.root());
  CHECK(t.online == std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(t.allowed == t.online);
  CHECK_FALSE(t.hypervisor);
  REQUIRE(t.find(5) != nullptr);
  CHECK(t.find(5)->threads == std::vector<int>{1, 5});
  CHECK(t.find(5)->l2 == std::vector<int>{1, 5});  // the instruction cache is skipped, L1d is not L2
  CHECK(t.find(5)->l3 == std::vector<int>{0, 1, 4, 5});
  CHECK(t.find(5)->node == 0);
  CHECK(t.relation(1, 5) == CpuRelation::smt_siblings);
  CHECK(t.relation(1, 4) == CpuRelation::shared_l3);
  CHECK(t.relation(1, 2) == CpuRelation::another_l3);
  CHECK(t.relation(3, 3) == CpuRelation::same_cpu);
  CHECK(t.grouped_allowed() == std::vector<int>{0, 4, 1, 5, 2, 6, 3, 7});
}

TEST_CASE("the reader keeps to a cgroup v1 cpuset and an affinity mask, and tells two NUMA nodes apart") {
  CannedTree tree("two_nodes_cpuset");
  const HostTopology t = read_topology(tree.root());
  CHECK(t.online.size() == 8);
  CHECK(t.allowed == std::vector<int>{2, 3, 4, 5});
  CHECK(t.hypervisor);
  CHECK(t.relation(2, 3) == CpuRelation::shared_l3);
  CHECK(t.relation(3, 4) == CpuRelation::other_node);
  CHECK(t.find(6)->node == 1);
  CHECK(read_topology(tree.root(), {3, 4, 5, 6, 7}).allowed == std::vector<int>{3, 4, 5});  // taskset within the cpuset
  CHECK(allowed_cpus_under(tree.root()) == std::vector<int>{2, 3, 4, 5});
}

TEST_CASE("a VM that declares no cache puts its two vCPUs on one node with nothing shared") {
  CannedTree tree("vm_no_caches");
  const HostTopology t = read_topology(tree.root());
  CHECK(t.allowed == std::vector<int>{0, 1});
  CHECK(t.find(1)->l3.empty());
  CHECK(t.relation(0, 1) == CpuRelation::same_node);
  const MatrixFindings f = analyze_matrix(t, {canned_pair(0, 1, CpuRelation::same_node, 245.0)});
  CHECK(mentions(f.notes, "virtual machine"));
  CHECK(mentions(f.notes, "declares no caches"));
}

TEST_CASE("without a matrix, --cpu auto serves next to an SMT sibling, never on cpu 0, and lists cpu 0 last") {
  CannedTree tree("smt_two_l3");
  const HostTopology t = read_topology(tree.root());
  const auto placed = place_engine(t, nullptr);
  REQUIRE(placed.has_value());
  CHECK_FALSE(placed->measured);
  // cpu 4's sibling is cpu 0, kept for the kernel: 4 is never the best. 2, 3, 6 and 7 tie on the
  // mean over their clients; the highest wins.
  CHECK(placed->serving_cpu == 7);
  CHECK(placed->near_cpus == std::vector<int>{3, 2, 6, 1, 4, 5, 0});
}

TEST_CASE("with a matrix, --cpu auto follows the measured floor, even against the declared topology") {
  CannedTree tree("smt_two_l3");
  const HostTopology t = read_topology(tree.root());
  SUBCASE("the fastest SMT pair") {
    const FloorMatrix m = canned_matrix(t.allowed, 90.0, {{{1, 5}, 32.0}, {{2, 6}, 31.0}, {{3, 7}, 33.0}, {{0, 4}, 20.0}});
    const auto placed = place_engine(t, &m);
    REQUIRE(placed.has_value());
    CHECK(placed->measured);
    CHECK(placed->serving_cpu == 6);  // 0/4 is faster, but cpu 0 stays free and 4 cannot have it as client
    CHECK(placed->near_cpus.front() == 2);
    CHECK(placed->near_cpus.back() == 0);
  }
  SUBCASE("a cross-L3 pair measured fastest") {
    const FloorMatrix m = canned_matrix(t.allowed, 90.0, {{{1, 2}, 25.0}});
    const auto placed = place_engine(t, &m);
    REQUIRE(placed.has_value());
    CHECK(placed->serving_cpu == 2);
    CHECK(placed->near_cpus.front() == 1);
  }
  SUBCASE("a matrix that misses an allowed cpu is set aside for the declared topology") {
    const FloorMatrix m = canned_matrix({1, 2, 3}, 90.0, {{{1, 2}, 25.0}});
    const auto placed = place_engine(t, &m);
    REQUIRE(placed.has_value());
    CHECK_FALSE(placed->measured);
    CHECK(placed->serving_cpu == 7);
  }
}

TEST_CASE("--cpu auto with one allowed cpu is refused, naming it") {
  HostTopology t;
  t.online = {0, 1};
  t.allowed = {0};
  const auto placed = place_engine(t, nullptr);
  REQUIRE_FALSE(placed.has_value());
  CHECK(placed.error().code == ErrorCode::resource);
  CHECK(placed.error().message.find("needs two cpus") != std::string::npos);
  CHECK(placed.error().message.find("only cpu 0") != std::string::npos);
}

TEST_CASE("workers go farthest from the serving pair first and onto the serving core's sibling last") {
  CannedTree tree("smt_two_l3");
  const HostTopology t = read_topology(tree.root());
  // Serving 7, client 3 (its sibling): the other L3 domain first (highest first), then the shared
  // L3, then cpu 0; cpu 3 shares the serving core and goes last.
  CHECK(worker_order(t, t.allowed, 7, 3) == std::vector<int>{5, 4, 1, 6, 2, 0, 3});
  // Serving 6, client 1 on the other L3 (every cpu shares an L3 with one of them): the highest
  // first, then cpu 0, the client's sibling 5, the client, and the serving sibling 2.
  CHECK(worker_order(t, t.allowed, 6, 1) == std::vector<int>{7, 4, 3, 0, 5, 1, 2});
}

TEST_CASE("the analysis flags a nearer relation measured slower, an outlier pair and a floor that moved") {
  CannedTree tree("smt_two_l3");
  const HostTopology t = read_topology(tree.root());
  std::vector<PairFloor> pairs = {
      canned_pair(1, 5, CpuRelation::smt_siblings, 30.0), canned_pair(2, 6, CpuRelation::smt_siblings, 31.0),
      canned_pair(3, 7, CpuRelation::smt_siblings, 29.0), canned_pair(0, 1, CpuRelation::shared_l3, 140.0),
      canned_pair(4, 5, CpuRelation::shared_l3, 150.0),   canned_pair(2, 3, CpuRelation::shared_l3, 145.0),
      canned_pair(1, 2, CpuRelation::another_l3, 100.0),  canned_pair(5, 6, CpuRelation::another_l3, 98.0),
      canned_pair(4, 7, CpuRelation::another_l3, 300.0, {100.0, 500.0}),
  };
  const MatrixFindings f = analyze_matrix(t, pairs);
  REQUIRE(f.best != nullptr);
  CHECK(f.best->client_cpu == 3);
  CHECK(f.worst->server_cpu == 7);
  CHECK(mentions(f.disagreements, "pairs declared shared-l3"));
  CHECK(mentions(f.disagreements, "cpu 4 -> cpu 7 (declared another-l3) measured p50 300.0 ns"));
  CHECK(mentions(f.disagreements, "p50 moved from 100.0 to 500.0 ns"));
  CHECK_FALSE(mentions(f.disagreements, "smt-siblings ("));  // the SMT pairs agree with their declaration
  pairs.resize(3);
  CHECK(analyze_matrix(t, pairs).disagreements.empty());
}

TEST_CASE("a saved report reads back into the floors it holds, and a damaged one is refused by name") {
  nlohmann::json report{{"suite", "topology"},
                        {"pairs", {{{"client_cpu", 0}, {"server_cpu", 1}, {"samples", 10}, {"p50_interp", 245.5}},
                                   {{"client_cpu", 1}, {"server_cpu", 2}, {"samples", 0}, {"p50_interp", 0.0}}}}};
  auto floors = floor_matrix_from_json(report);
  REQUIRE(floors.has_value());
  CHECK(floors->floor(1, 0) == 245.5);  // measured one way, it answers for both
  CHECK(floors->floor(1, 2) < 0);       // no round trip completed: no floor
  report["pairs"][0]["p50_interp"] = -3.0;
  CHECK(floor_matrix_from_json(report).error().message.find("not a time") != std::string::npos);
  report["pairs"][0]["server_cpu"] = 0;
  CHECK(floor_matrix_from_json(report).error().message.find("not two cpus") != std::string::npos);
  CHECK_FALSE(floor_matrix_from_json(nlohmann::json{{"suite", "ladder"}}).has_value());
}

TEST_CASE("a saved report of valid JSON with wrong types is refused naming the field, never thrown at") {
  const nlohmann::json good{{"suite", "topology"},
                            {"host", {{"hostname", "h"}, {"cpu", "c"}}},
                            {"context", {{"date", "2026-12-06"}}},
                            {"pairs", {{{"client_cpu", 0}, {"server_cpu", 1}, {"samples", 10}, {"p50_interp", 245.5},
                                        {"p99", 300.0}}}}};
  REQUIRE(floor_matrix_from_json(good).has_value());
  // JSON pointer of the field broken, the value put there, and what the error must name.
  const std::vector<std::tuple<std::string, nlohmann::json, std::string>> broken{
      {"/pairs/0/client_cpu", "0", "pairs[0].client_cpu is a string, not an integer"},
      {"/pairs/0/server_cpu", 1.5, "pairs[0].server_cpu is a number, not an integer"},
      {"/pairs/0/server_cpu", 18446744073709551615ULL, "pairs[0].server_cpu is 18446744073709551615: not a cpu"},
      {"/pairs/0/client_cpu", -1, "pairs[0].client_cpu is -1: not a cpu"},
      {"/pairs/0/samples", "ten", "pairs[0].samples is a string, not a count of samples"},
      {"/pairs/0/samples", -4, "pairs[0].samples is -4: not a count of samples"},
      {"/pairs/0/p50_interp", "245", "pairs[0].p50_interp is a string, not a number"},
      {"/pairs/0/p99", nullptr, "pairs[0].p99 is null, not a number"},
      {"/pairs/0", 7, "pairs[0] is an integer, not an object"},
      {"/pairs", {{"a", 1}}, "pairs is an object, not an array"},
      {"/host", nlohmann::json::array(), "host is an array, not an object"},
      {"/host/hostname", 5, "host.hostname is an integer, not a string"},
      {"/host/cpu", false, "host.cpu is a boolean, not a string"},
      {"/context", "today", "context is a string, not an object"},
      {"/context/date", 20261206, "context.date is an integer, not a string"},
      {"/suite", 3, "not an `ipcfloor topology` report"},
  };
  for (const auto& [pointer, value, named] : broken) {
    CAPTURE(pointer);
    nlohmann::json report = good;
    report[nlohmann::json::json_pointer(pointer)] = value;
    Expected<FloorMatrix> floors = floor_matrix_from_json(report);  // before: nlohmann::json::type_error
    REQUIRE_FALSE(floors.has_value());
    CHECK(floors.error().code == ErrorCode::bad_data);
    CHECK_MESSAGE(floors.error().message.find(named) != std::string::npos, floors.error().message);
  }
  for (const char* text : {"[]", "3", "null", "{\"suite\":\"topology\"}", "{\"suite\":\"topology\",\"pairs\":[[]]}", "{"}) {
    CAPTURE(text);
    CHECK_FALSE(parse_saved_matrix(text).has_value());
  }
}

TEST_CASE("the matrix measured here covers every pair of allowed cpus and no other cpu") {
  HostTopology t = read_host_topology();
  const MatrixPlan tiny{400, 100, 2, true, 0.05};
  std::set<int> seen;
  auto m = measure_floor_matrix(t, tiny, [&](std::size_t, std::size_t, const PairFloor& p) {
    seen.insert(p.client_cpu);
    seen.insert(p.server_cpu);
  });
  REQUIRE_MESSAGE(m.has_value(), m.error().message);
  std::set<std::pair<int, int>> pairs;
  for (const PairFloor& p : m->pairs) {
    CHECK(p.client_cpu != p.server_cpu);
    CHECK(p.rtt.samples > 0);
    CHECK(p.rtt.p50 > 0);
    CHECK(p.rtt.p99 >= p.rtt.p50);
    pairs.insert({p.client_cpu, p.server_cpu});
  }
  std::set<std::pair<int, int>> expected;
  for (const int a : t.allowed)
    for (const int b : t.allowed)
      if (a != b) expected.insert({a, b});
  CHECK(pairs == expected);
  CHECK(m->pairs.size() == expected.size());
  CHECK(seen == std::set<int>(t.allowed.begin(), t.allowed.end()));
  // Narrowed to one cpu, nothing is measured at all.
  t.allowed.resize(1);
  auto none = measure_floor_matrix(t, tiny);
  REQUIRE(none.has_value());
  CHECK(none->pairs.empty());
}

TEST_CASE("serve --cpu auto under a one-cpu affinity mask is refused before anything starts") {
  const std::string command = std::string("taskset -c 0 ") + IPCFLOOR_BINARY +
                              " serve --cpu auto --name topology-one-cpu --bars 100 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string output;
  char buffer[512];
  while (std::fgets(buffer, sizeof buffer, pipe) != nullptr) output += buffer;
  const int status = ::pclose(pipe);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 4);  // environment: the host gives it too few cpus
  CHECK_MESSAGE(output.find("--cpu auto needs two cpus") != std::string::npos, output);
  CHECK_MESSAGE(output.find("only cpu 0") != std::string::npos, output);
}
