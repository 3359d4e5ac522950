#include "bench/floor_matrix.hpp"

#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bench/host_info.hpp"
#include "common/atomic_file.hpp"
#include "common/unique_fd.hpp"
#include "bench/pair_bounce.hpp"
#include "data/input_file.hpp"

namespace ipcfloor {

MatrixPlan plan_for(MatrixMode mode) noexcept {
  // Quick: one direction, two rounds of 10,000, 0.1 s per pair and round at most: 16 cpus (120
  // pairs) in 24 s at worst, a 2-cpu host in 0.2 s. Thorough: both directions, four rounds of
  // 50,000, 0.25 s each: 16 cpus in 240 s at worst.
  if (mode == MatrixMode::quick) return MatrixPlan{20'000, 2'000, 2, false, 0.1};
  return MatrixPlan{200'000, 20'000, 4, true, 0.25};
}

double bound_seconds(const MatrixPlan& plan, std::size_t cpus) noexcept {
  const double pairs = static_cast<double>(cpus * (cpus > 0 ? cpus - 1 : 0) / 2) * (plan.both_directions ? 2 : 1);
  return pairs * static_cast<double>(plan.rounds) * plan.round_budget_s;
}

namespace {

// One pair, one round: the physical-floor bounce (one line, as the ladder's rung) on a thread of
// its own, so the caller's mask is left as it was. The round ends at its samples or its budget;
// a side never scheduled is cut free kStallGraceS later.
Expected<std::vector<double>> bounce_pair(int client, int server, std::size_t samples, const MatrixPlan& plan,
                                          const TscClock& clock, bool& cut_short) {
  BounceLines lines(1, 0);
  BounceSides sides;
  sides.client_cpu = client;
  sides.server_cpu = server;
  sides.warmup = plan.warmup;
  sides.samples = samples;
  sides.clock = &clock;
  sides.stop_tick = TscClock::now() + static_cast<std::uint64_t>(plan.round_budget_s * 1e9 / clock.ns_per_tick());
  auto timed = std::async(std::launch::async, [&] { return bounce_lines(sides, lines); });
  const auto limit = std::chrono::duration<double>(plan.round_budget_s + kStallGraceS);
  if (timed.wait_for(limit) == std::future_status::timeout) lines.abort();
  auto result = timed.get();
  if (result) cut_short = cut_short || result->size() < samples;
  return result;
}

std::vector<std::pair<int, int>> ordered_pairs(const std::vector<int>& cpus, bool both_directions) {
  std::vector<std::pair<int, int>> pairs;
  for (std::size_t i = 0; i < cpus.size(); ++i)
    for (std::size_t j = i + 1; j < cpus.size(); ++j) pairs.emplace_back(cpus[i], cpus[j]);
  if (both_directions) {
    const std::size_t one_way = pairs.size();
    for (std::size_t k = 0; k < one_way; ++k) pairs.emplace_back(pairs[k].second, pairs[k].first);
  }
  return pairs;
}

}  // namespace

Expected<MeasuredMatrix> measure_floor_matrix(const HostTopology& topology, const MatrixPlan& plan,
                                              const MatrixProgress& progress) {
  const auto start = std::chrono::steady_clock::now();
  MeasuredMatrix matrix;
  matrix.topology = topology;
  matrix.plan = plan;
  const TscClock clock = TscClock::calibrate();
  matrix.tsc_ghz = clock.ghz();
  matrix.clock_step_ns = clock.step_ns();
  const auto pairs = ordered_pairs(topology.allowed, plan.both_directions);
  const std::size_t rounds = std::max<std::size_t>(plan.rounds, 1);
  const std::size_t per_round = (plan.samples + rounds - 1) / rounds;
  std::vector<std::vector<double>> pooled(pairs.size());
  matrix.pairs.resize(pairs.size());
  for (std::size_t round = 0; round < rounds; ++round) {
    for (std::size_t k = 0; k < pairs.size(); ++k) {
      PairFloor& pair = matrix.pairs[k];
      pair.client_cpu = pairs[k].first;
      pair.server_cpu = pairs[k].second;
      pair.relation = topology.relation(pair.client_cpu, pair.server_cpu);
      auto samples = bounce_pair(pair.client_cpu, pair.server_cpu, per_round, plan, clock, pair.cut_short);
      if (!samples) return std::unexpected(samples.error());
      if (!samples->empty())
        pair.round_p50.push_back(summarize("round", "rtt", *samples, clock.step_ns()).p50_interp);
      pooled[k].insert(pooled[k].end(), samples->begin(), samples->end());
      if (progress) progress(round * pairs.size() + k + 1, rounds * pairs.size(), pair);
    }
  }
  for (std::size_t k = 0; k < pairs.size(); ++k)
    matrix.pairs[k].rtt = summarize(fmt::format("cpu {} -> cpu {}", pairs[k].first, pairs[k].second), "rtt",
                                    pooled[k], clock.step_ns());
  matrix.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return matrix;
}

namespace {

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n == 0 ? 0.0 : n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2.0;
}

std::string pair_name(const PairFloor& p) { return fmt::format("cpu {} -> cpu {}", p.client_cpu, p.server_cpu); }

// The measured pairs (at least one sample) by declared relation.
std::map<CpuRelation, std::vector<const PairFloor*>> by_relation(const std::vector<PairFloor>& pairs) {
  std::map<CpuRelation, std::vector<const PairFloor*>> groups;
  for (const PairFloor& p : pairs)
    if (p.rtt.samples > 0) groups[p.relation].push_back(&p);
  return groups;
}

double group_median(const std::vector<const PairFloor*>& group) {
  std::vector<double> p50s;
  for (const PairFloor* p : group) p50s.push_back(p->rtt.p50_interp);
  return median_of(p50s);
}

// A nearer relation measured slower than a farther one, group against group.
void check_relation_order(const std::map<CpuRelation, std::vector<const PairFloor*>>& groups, MatrixFindings& f) {
  for (auto near = groups.begin(); near != groups.end(); ++near)
    for (auto far = std::next(near); far != groups.end(); ++far) {
      const double near_p50 = group_median(near->second), far_p50 = group_median(far->second);
      if (near_p50 > kRelationSlack * far_p50)
        f.disagreements.push_back(fmt::format(
            "pairs declared {} ({}, median p50 {:.1f} ns over {} pairs) are slower than pairs declared {} ({}, "
            "{:.1f} ns over {}): the declared topology does not say where the floor is",
            relation_name(near->first), relation_description(near->first), near_p50, near->second.size(),
            relation_name(far->first), relation_description(far->first), far_p50, far->second.size()));
    }
}

// Pairs far from their own relation's median, or whose rounds or directions disagree.
void check_pairs(const std::map<CpuRelation, std::vector<const PairFloor*>>& groups,
                 const std::vector<PairFloor>& pairs, MatrixFindings& f) {
  for (const auto& [relation, group] : groups) {
    const double median = group_median(group);
    for (const PairFloor* p : group)
      if (group.size() > 2 && p->rtt.p50_interp > kOutlierRatio * median)
        f.disagreements.push_back(fmt::format("{} (declared {}) measured p50 {:.1f} ns, {:.2f}x the {:.1f} ns median "
                                              "of its relation's {} pairs",
                                              pair_name(*p), relation_name(relation), p->rtt.p50_interp,
                                              p->rtt.p50_interp / median, median, group.size()));
  }
  for (const PairFloor& p : pairs) {
    if (p.round_p50.size() < 2) continue;
    const auto [low, high] = std::minmax_element(p.round_p50.begin(), p.round_p50.end());
    if (*low > 0 && *high > kOutlierRatio * *low)
      f.disagreements.push_back(fmt::format("{}: p50 moved from {:.1f} to {:.1f} ns between rounds: the path between "
                                            "these cpus changed while it was measured (a VM's vCPUs moved by the host, "
                                            "or a frequency change); one matrix cannot describe it",
                                            pair_name(p), *low, *high));
  }
  for (const PairFloor& p : pairs) {
    if (p.client_cpu > p.server_cpu || p.rtt.samples == 0) continue;
    for (const PairFloor& back : pairs)
      if (back.client_cpu == p.server_cpu && back.server_cpu == p.client_cpu && back.rtt.samples > 0) {
        const double ratio = std::max(p.rtt.p50_interp, back.rtt.p50_interp) /
                             std::max(1e-9, std::min(p.rtt.p50_interp, back.rtt.p50_interp));
        if (ratio > kOutlierRatio)
          f.disagreements.push_back(fmt::format("{} and back differ: p50 {:.1f} against {:.1f} ns", pair_name(p),
                                                p.rtt.p50_interp, back.rtt.p50_interp));
      }
  }
}

}  // namespace

MatrixFindings analyze_matrix(const HostTopology& topology, const std::vector<PairFloor>& pairs) {
  MatrixFindings f;
  for (const PairFloor& p : pairs) {
    if (p.rtt.samples == 0) {
      f.notes.push_back(fmt::format("{}: no round trip completed within the budget (is a cpu of it saturated by a "
                                    "real-time task?)", pair_name(p)));
      continue;
    }
    if (f.best == nullptr || p.rtt.p50_interp < f.best->rtt.p50_interp) f.best = &p;
    if (f.worst == nullptr || p.rtt.p50_interp > f.worst->rtt.p50_interp) f.worst = &p;
    if (p.cut_short)
      f.notes.push_back(fmt::format("{}: {} samples, fewer than planned: a round reached its time budget", pair_name(p),
                                    p.rtt.samples));
  }
  const auto groups = by_relation(pairs);
  check_relation_order(groups, f);
  check_pairs(groups, pairs, f);
  if (topology.hypervisor)
    f.notes.push_back("this is a virtual machine (cpuinfo's 'hypervisor' flag): the declared topology is the "
                      "hypervisor's, and the host may move each vCPU to another physical cpu at any time");
  const bool any_cache = std::any_of(topology.cpus.begin(), topology.cpus.end(),
                                     [](const CpuPlace& c) { return !c.l2.empty() || !c.l3.empty(); });
  if (!any_cache) f.notes.push_back("sysfs declares no caches here: pairs can be told apart only by node");
  return f;
}

namespace {

nlohmann::json cpu_json(const CpuPlace& c) {
  return {{"cpu", c.cpu}, {"package", c.package}, {"core", c.core}, {"node", c.node},
          {"threads", c.threads}, {"l2", c.l2}, {"l3", c.l3}};
}

nlohmann::json pair_json(const PairFloor& p) {
  return {{"client_cpu", p.client_cpu}, {"server_cpu", p.server_cpu}, {"relation", relation_name(p.relation)},
          {"samples", p.rtt.samples}, {"min", p.rtt.min}, {"p50", p.rtt.p50}, {"p50_interp", p.rtt.p50_interp},
          {"p90", p.rtt.p90}, {"p99", p.rtt.p99}, {"p999", p.rtt.p999}, {"max", p.rtt.max},
          {"round_p50", p.round_p50}, {"cut_short", p.cut_short}};
}

nlohmann::json groups_json(const std::vector<PairFloor>& pairs) {
  nlohmann::json groups = nlohmann::json::array();
  for (const auto& [relation, group] : by_relation(pairs)) {
    std::vector<double> p50s;
    for (const PairFloor* p : group) p50s.push_back(p->rtt.p50_interp);
    groups.push_back({{"relation", relation_name(relation)}, {"description", relation_description(relation)},
                      {"pairs", group.size()}, {"p50_min", *std::min_element(p50s.begin(), p50s.end())},
                      {"p50_median", median_of(p50s)}, {"p50_max", *std::max_element(p50s.begin(), p50s.end())}});
  }
  return groups;
}

nlohmann::json placement_json(const MeasuredMatrix& m) {
  FloorMatrix floors(m.topology.allowed);
  for (const PairFloor& p : m.pairs)
    if (p.rtt.samples > 0) floors.set(p.client_cpu, p.server_cpu, p.rtt.p50_interp);
  auto placed = place_engine(m.topology, &floors);
  if (!placed) return {{"error", placed.error().message}};
  return {{"serving_cpu", placed->serving_cpu}, {"near_cpus", placed->near_cpus}, {"measured", placed->measured},
          {"nearest_p50", placed->near_cpus.empty() ? 0.0 : floors.floor(placed->near_cpus.front(), placed->serving_cpu)},
          {"rule", "serve --cpu auto: not cpu 0; the cpu whose nearest client cpu (cpu 0 last) has the lowest p50"}};
}

}  // namespace

nlohmann::json matrix_json(const MeasuredMatrix& m) {
  const MatrixFindings findings = analyze_matrix(m.topology, m.pairs);
  nlohmann::json cpus = nlohmann::json::array();
  for (const CpuPlace& c : m.topology.cpus) cpus.push_back(cpu_json(c));
  nlohmann::json pairs = nlohmann::json::array();
  for (const PairFloor& p : m.pairs) pairs.push_back(pair_json(p));
  const auto brief = [](const PairFloor* p) -> nlohmann::json {
    if (p == nullptr) return nullptr;
    return {{"client_cpu", p->client_cpu}, {"server_cpu", p->server_cpu}, {"relation", relation_name(p->relation)},
            {"p50_interp", p->rtt.p50_interp}, {"p99", p->rtt.p99}};
  };
  return {
      {"suite", "topology"},
      {"host", collect_host_info()},
      {"config",
       {{"samples_per_pair", m.plan.samples}, {"warmup", m.plan.warmup}, {"rounds", m.plan.rounds},
        {"directions", m.plan.both_directions ? "both" : "one"}, {"round_budget_s", m.plan.round_budget_s},
        {"bound_s", bound_seconds(m.plan, m.topology.allowed.size())}, {"seconds", m.seconds},
        {"tsc_ghz", m.tsc_ghz}, {"clock_step_ns", m.clock_step_ns},
        {"measurement", "physical-floor: one 64-byte line bounced between two pinned threads, one RTT per sample"}}},
      {"topology",
       {{"online", m.topology.online}, {"allowed", m.topology.allowed}, {"order", m.topology.grouped_allowed()},
        {"hypervisor", m.topology.hypervisor}, {"cpus", cpus}}},
      {"pairs", pairs},
      {"groups", groups_json(m.pairs)},
      {"best", brief(findings.best)},
      {"worst", brief(findings.worst)},
      {"worst_over_best", findings.best != nullptr && findings.best->rtt.p50_interp > 0
                              ? findings.worst->rtt.p50_interp / findings.best->rtt.p50_interp
                              : 0.0},
      {"disagreements", findings.disagreements},
      {"notes", findings.notes},
      {"placement", placement_json(m)},
  };
}

std::string default_matrix_path() {
  if (const char* explicit_path = std::getenv("IPCFLOOR_TOPOLOGY"); explicit_path != nullptr && *explicit_path != '\0')
    return explicit_path;
  if (const char* cache = std::getenv("XDG_CACHE_HOME"); cache != nullptr && *cache == '/')
    return std::string(cache) + "/ipcfloor/topology.json";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home == '/')
    return std::string(home) + "/.cache/ipcfloor/topology.json";
  return {};
}

Expected<SavedMatrix> load_floor_matrix(const std::string& path) {
  // A report of 256 cpus in both directions is a few MiB; the bound keeps a wrong file from being read whole.
  constexpr std::size_t kMaxReportBytes = std::size_t{64} << 20;
  auto text = read_text_input(path, "topology matrix", kMaxReportBytes);
  if (!text) return std::unexpected(text.error());
  auto saved = parse_saved_matrix(*text);
  if (!saved) return fail(ErrorCode::bad_data, "{}: {}", path, saved.error().message);
  const nlohmann::json here = collect_host_info();
  const nlohmann::json there = saved->report.value("host", nlohmann::json::object());
  for (const char* key : {"hostname", "cpu"})
    if (there.value(key, std::string()) != here.value(key, std::string()))
      return fail(ErrorCode::bad_data, "{} was measured on {} '{}', this host is '{}': measure this one with "
                  "`ipcfloor topology --save`", path, key, there.value(key, std::string("?")),
                  here.value(key, std::string("?")));
  return saved;
}

Expected<void> check_matrix_folder(const std::string& path) {
  const std::filesystem::path target(path);
  const std::string folder = target.has_parent_path() ? target.parent_path().string() : std::string(".");
  std::error_code ec;
  if (!std::filesystem::exists(folder, ec)) return {};  // made by save_floor_matrix, 0700 and ours
  UniqueFd dir(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return fail(ErrorCode::io, "cannot open the folder {} of the floor matrix {}: {}", folder, path, std::strerror(errno));
  return check_output_directory(dir.get(), folder, fmt::format("the floor matrix {}", path));
}

Expected<void> save_floor_matrix(const std::string& path, const nlohmann::json& report) {
  const std::filesystem::path target(path);
  std::error_code ec;
  if (target.has_parent_path() && !std::filesystem::exists(target.parent_path(), ec)) {
    std::filesystem::create_directories(target.parent_path(), ec);
    if (ec) return fail(ErrorCode::io, "cannot make the folder {}: {}", target.parent_path().string(), ec.message());
    ::chmod(target.parent_path().c_str(), 0700);
  }
  // The folder must be ours (or root's) and nobody else's to write, unless sticky; the file is
  // made there under a random name and renamed over the target (common/atomic_file.hpp).
  auto written = write_file_atomically(path, report.dump(2) + "\n", "the floor matrix", 0600);
  if (!written) return std::unexpected(written.error());
  return {};
}

}  // namespace ipcfloor

namespace ipcfloor {
namespace {

// A cpu's group in the printed order: node and L3, so that a column break shows where they change.
std::string group_of(const nlohmann::json& cpus, int cpu) {
  for (const auto& c : cpus)
    if (c.value("cpu", -1) == cpu) {
      const auto l3 = c.value("l3", std::vector<int>{});
      return fmt::format("{}/{}", c.value("node", -1), l3.empty() ? -1 : l3.front());
    }
  return {};
}

void print_cpus(const nlohmann::json& topology) {
  const auto list = [](const std::vector<int>& cpus) { return cpus.empty() ? std::string("-") : fmt::format("{}", fmt::join(cpus, ",")); };
  fmt::print("  {:>4} {:>4} {:>4} {:>4}  {:<12} {:<16} {:<16}\n", "cpu", "node", "pkg", "core", "SMT threads", "shares L2",
             "shares L3");
  const auto allowed = topology.value("allowed", std::vector<int>{});
  for (const auto& c : topology["cpus"]) {
    const int cpu = c.value("cpu", -1);
    if (std::find(allowed.begin(), allowed.end(), cpu) == allowed.end()) continue;
    fmt::print("  {:>4} {:>4} {:>4} {:>4}  {:<12} {:<16} {:<16}\n", cpu, c.value("node", -1), c.value("package", -1),
               c.value("core", -1), list(c.value("threads", std::vector<int>{})), list(c.value("l2", std::vector<int>{})),
               list(c.value("l3", std::vector<int>{})));
  }
}

// One matrix of `field` (p50_interp or p99): rows the client cpu, columns the server cpu, in the
// report's topology order, a '|' where the node or L3 changes, '*' on the best pair.
void print_field(const nlohmann::json& report, const char* field, const char* title) {
  const auto order = report["topology"].value("order", std::vector<int>{});
  const auto& cpus = report["topology"]["cpus"];
  std::map<std::pair<int, int>, double> cell;
  for (const auto& p : report["pairs"])
    if (p.value("samples", 0) > 0) cell[{p["client_cpu"].get<int>(), p["server_cpu"].get<int>()}] = p[field].get<double>();
  const auto at = [&](int a, int b) -> double {
    if (const auto it = cell.find({a, b}); it != cell.end()) return it->second;
    if (const auto it = cell.find({b, a}); it != cell.end()) return it->second;
    return -1.0;
  };
  const nlohmann::json& best = report["best"];
  const auto is_best = [&](int a, int b) {
    if (best.is_null()) return false;
    const int c = best["client_cpu"].get<int>(), s = best["server_cpu"].get<int>();
    return (a == c && b == s) || (a == s && b == c);
  };
  fmt::print("{}\n  {:>6} ", title, "");
  for (std::size_t j = 0; j < order.size(); ++j)
    fmt::print("{}{:>8}", j > 0 && group_of(cpus, order[j]) != group_of(cpus, order[j - 1]) ? " |" : "", order[j]);
  fmt::print("\n");
  for (std::size_t i = 0; i < order.size(); ++i) {
    fmt::print("  {:>6} ", order[i]);
    for (std::size_t j = 0; j < order.size(); ++j) {
      const double v = at(order[i], order[j]);
      const std::string text = i == j ? "-" : v < 0 ? "?" : fmt::format("{:.1f}{}", v, is_best(order[i], order[j]) ? "*" : " ");
      fmt::print("{}{:>8}", j > 0 && group_of(cpus, order[j]) != group_of(cpus, order[j - 1]) ? " |" : "", text);
    }
    fmt::print("\n");
  }
}

std::string brief_text(const nlohmann::json& pair) {
  return fmt::format("cpu {} -> cpu {} ({}): p50 {:.1f} ns, p99 {:.1f} ns", pair["client_cpu"].get<int>(),
                     pair["server_cpu"].get<int>(), pair["relation"].get<std::string>(),
                     pair["p50_interp"].get<double>(), pair["p99"].get<double>());
}

}  // namespace

void print_matrix(const nlohmann::json& report) {
  const auto& topology = report["topology"];
  const auto& config = report["config"];
  const auto allowed = topology.value("allowed", std::vector<int>{});
  fmt::print("topology: {} of {} online cpus allowed ({}); {}{}\n", allowed.size(),
             topology.value("online", std::vector<int>{}).size(), fmt::join(allowed, ","),
             report["host"].value("cpu", std::string("unknown cpu")),
             topology.value("hypervisor", false) ? ", a virtual machine" : "");
  print_cpus(topology);
  if (report["pairs"].empty()) {
    fmt::print("no pair to measure: this process may use {} cpu\n", allowed.size());
    return;
  }
  fmt::print("one cache line bounced between the two pinned cpus (the ladder's physical-floor), RTT ns; {} samples "
             "per pair{} in {} rounds, {:.1f} s\n",
             config["samples_per_pair"].get<std::size_t>(), config["directions"] == "both" ? " and direction" : "",
             config["rounds"].get<std::size_t>(), config["seconds"].get<double>());
  print_field(report, "p50_interp", "p50~ (rows: the timing cpu, columns: the answering cpu; '|' where node or L3 "
                                    "changes; * the best pair)");
  print_field(report, "p99", "p99");
  for (const auto& g : report["groups"])
    fmt::print("  {:<13} {:>3} pairs  p50 {:.1f} .. {:.1f} ns, median {:.1f}  ({})\n", g["relation"].get<std::string>(),
               g["pairs"].get<std::size_t>(), g["p50_min"].get<double>(), g["p50_max"].get<double>(),
               g["p50_median"].get<double>(), g["description"].get<std::string>());
  if (!report["best"].is_null()) {
    fmt::print("best:  {}\nworst: {}\nworst/best p50: {:.2f}x\n", brief_text(report["best"]), brief_text(report["worst"]),
               report["worst_over_best"].get<double>());
  }
  const auto& placement = report["placement"];
  if (placement.contains("serving_cpu"))
    fmt::print("serve --cpu auto: serving cpu {}, nearest client cpus {} (p50 {:.1f} ns to the first)\n",
               placement["serving_cpu"].get<int>(), fmt::join(placement["near_cpus"].get<std::vector<int>>(), ","),
               placement["nearest_p50"].get<double>());
  for (const auto& d : report["disagreements"]) fmt::print("disagrees: {}\n", d.get<std::string>());
  if (report["disagreements"].empty()) fmt::print("the measurement agrees with the declared topology\n");
  for (const auto& n : report["notes"]) fmt::print("note: {}\n", n.get<std::string>());
}

}  // namespace ipcfloor
