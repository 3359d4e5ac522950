// What `ipcfloor bench` writes for other tools: the .hgrm text of HdrHistogram's
// percentile distribution (what its plotter loads), and Google Benchmark's JSON shape (what its
// compare.py reads; tests/test_gbench_compare.py runs compare.py itself).

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bench/gbench_report.hpp"
#include "bench/ladder.hpp"
#include "bench/latency.hpp"
#include "bench/report.hpp"

namespace ipcfloor {
namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::string hgrm_of(std::vector<double> ns) { return hgrm_text(to_json(summarize("test", "rtt", ns))); }

// One row as HdrHistogram prints it: "%12.3f %2.12f %10d %14.2f", the 100% row without the last column.
std::string row(double us, double fraction, std::size_t count) {
  char text[128];
  if (fraction < 1.0)
    std::snprintf(text, sizeof text, "%12.3f %2.12f %10zu %14.2f", us, fraction, count, 1.0 / (1.0 - fraction));
  else
    std::snprintf(text, sizeof text, "%12.3f %2.12f %10zu", us, fraction, count);
  return text;
}

}  // namespace

TEST_CASE(".hgrm text has HdrHistogram's header, a row per percentile level and its three footer lines") {
  std::vector<double> ns;
  for (int i = 1; i <= 10'000; ++i) ns.push_back(static_cast<double>(i));
  const auto lines = lines_of(hgrm_of(ns));
  REQUIRE(lines.size() > 10);
  CHECK(lines[0] == "       Value     Percentile TotalCount 1/(1-Percentile)");
  CHECK(lines[1].empty());
  // The first row is the minimum at level 0 with its own count, never a TotalCount of 0.
  CHECK(lines[2] == row(0.001, 0.0, 1));
  CHECK(lines[3] == row(1.0, 0.1, 1000));
  CHECK(lines[7] == row(5.0, 0.5, 5000));
  CHECK(lines[8] == row(5.5, 0.55, 5500));  // five levels per halving of the distance to 100%
  const std::size_t footer = lines.size() - 3;
  CHECK(lines[footer - 1] == row(10.0, 1.0, 10'000));
  const std::regex row_shape(R"( {0,11}\d+\.\d{3} [01]\.\d{12} {1,10}\d+ {1,14}\d+\.\d{2})");
  for (std::size_t i = 2; i + 1 < footer; ++i) CHECK_MESSAGE(std::regex_match(lines[i], row_shape), lines[i]);
  const std::regex mean_line(R"(#\[Mean    = {1,12}\d+\.\d{3}, StdDeviation   = {1,12}\d+\.\d{3}\])");
  CHECK(std::regex_match(lines[footer], mean_line));
  CHECK(lines[footer + 1] == "#[Max     =       10.000, Total count    =        10000]");
  CHECK(lines[footer + 2] == "#[Buckets =            4, SubBuckets     =         2048]");
}

TEST_CASE(".hgrm rows: levels rise, values and counts never fall, and the maximum is reached once before 100%") {
  std::vector<double> ns;
  for (int i = 0; i < 100'000; ++i) ns.push_back(100.0 + (i % 997) * 0.5 + (i % 13 == 0 ? 5000.0 : 0.0));
  const LatencySummary summary = summarize("mixed", "rtt", ns);
  const auto& rows = summary.distribution;
  REQUIRE(rows.size() > 50);
  for (std::size_t i = 1; i < rows.size(); ++i) {
    CHECK(rows[i].fraction > rows[i - 1].fraction);
    CHECK(rows[i].value >= rows[i - 1].value);
    CHECK(rows[i].count >= rows[i - 1].count);
    CHECK(rows[i].count >= 1);
  }
  CHECK(rows.back().fraction == 1.0);
  CHECK(rows.back().value == summary.max);
  CHECK(rows[rows.size() - 2].count == ns.size());  // the one row at the level that reached the maximum
  CHECK(rows[rows.size() - 3].count < ns.size());
}

TEST_CASE(".hgrm rows count every sample at or below their value, so tied clock steps repeat their count") {
  std::vector<double> ns(60, 10.0);
  ns.insert(ns.end(), 30, 20.0);
  ns.insert(ns.end(), 10, 30.0);
  const auto lines = lines_of(hgrm_of(ns));
  const std::vector<std::string> expected{
      row(0.010, 0.0, 60),    row(0.010, 0.1, 60),    row(0.010, 0.2, 60),    row(0.010, 0.3, 60),
      row(0.010, 0.4, 60),    row(0.010, 0.5, 60),    row(0.010, 0.55, 60),   row(0.010, 0.6, 60),
      row(0.020, 0.65, 90),   row(0.020, 0.7, 90),    row(0.020, 0.75, 90),   row(0.020, 0.775, 90),
      row(0.020, 0.8, 90),    row(0.020, 0.825, 90),  row(0.020, 0.85, 90),   row(0.020, 0.875, 90),
      row(0.020, 0.8875, 90), row(0.020, 0.9, 90),    row(0.030, 0.9125, 100), row(0.030, 1.0, 100),
  };
  REQUIRE(lines.size() == 2 + expected.size() + 3);
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(lines[2 + i] == expected[i]);
}

TEST_CASE(".hgrm of one sample: its row at level 0 and at 100%") {
  const auto lines = lines_of(hgrm_of({250.0}));
  REQUIRE(lines.size() == 2 + 2 + 3);
  CHECK(lines[2] == row(0.25, 0.0, 1));
  CHECK(lines[3] == row(0.25, 1.0, 1));
  CHECK(lines[5] == "#[Max     =        0.250, Total count    =            1]");
  CHECK(lines[6] == "#[Buckets =            1, SubBuckets     =         2048]");
}

namespace {

// A combined report with a row of each kind the suites write.
nlohmann::json combined_report() {
  std::vector<double> ns{100, 110, 120, 130};
  nlohmann::json ladder_row = to_json(summarize("physical-floor", "rtt", ns));
  ladder_row["round_p50"] = {100.0, 120.0};
  nlohmann::json rtt = to_json(summarize("shm-call", "rtt", ns));
  return nlohmann::json{
      {"context", {{"date", "2026-12-06T01:02:03Z"}, {"hostname", "box"}, {"command", "ipcfloor bench all"},
                   {"online_cpus", 2}, {"build_type", "Release"}, {"load_avg", {0.5, 0.25, 0.125}},
                   {"version", "0.2.0"}, {"kernel_isa", "avx2"}}},
      {"host", {{"cpu_mhz", 2096}, {"governor", "unavailable"}, {"caches", nlohmann::json::array()}}},
      {"suites",
       {{"ladder", {{"config", {{"samples", 4}}}, {"results", {ladder_row}}}},
        {"compute",
         {{"paths", {{{"isa", "avx2"}, {"median_s", 0.5}, {"single_thread_median_s", 0.9}, {"speedup_vs_numba", 6.0}},
                     {{"isa", "scalar"}, {"median_s", 1.0}, {"single_thread_median_s", 2.0}}}},
          {"numba_median_s", 3.0}}},
        {"hygiene",
         {{"memory",
           {{"first_touch",
             {{{"backing", "memfd_4k"}, {"prefault", false}, {"touch_p50_ns", 900.0}, {"map_ns", 5.0}},
              {{"backing", "memfd_4k"}, {"prefault", true}, {"touch_p50_ns", 90.0}}}}}}}},
        {"throughput",
         {{"scenarios", {{{"name", "shm-call"}, {"rate_p50", 7e6}, {"rtt", rtt}}}},
          {"grid",
           {{{"name", "in-process"}, {"p50_ms", 116.3}, {"min_ms", 111.7}, {"samples_ms", {116.3, 111.7, 125.0}}}}}}},
        {"python", {{"sweep", {{"unit", "ms"}, {"shm", {{"p50", 5.0}, {"samples", 3}}}, {"shm/cli p50", 1.01}}}}}}},
  };
}

const nlohmann::ordered_json* entry_named(const nlohmann::ordered_json& report, const std::string& name) {
  for (const auto& e : report["benchmarks"])
    if (e["name"] == name) return &e;
  return nullptr;
}

}  // namespace

TEST_CASE("the Google Benchmark report has its context keys, in its order, from the run's context and host") {
  const auto report = google_benchmark_report(combined_report());
  std::vector<std::string> keys;
  for (const auto& [key, value] : report.items()) keys.push_back(key);
  CHECK(keys == std::vector<std::string>{"context", "benchmarks"});
  const auto& context = report["context"];
  std::vector<std::string> first;
  for (const auto& [key, value] : context.items())
    if (first.size() < 9) first.push_back(key);
  CHECK(first == std::vector<std::string>{"date", "host_name", "executable", "num_cpus", "mhz_per_cpu",
                                          "cpu_scaling_enabled", "caches", "load_avg", "library_build_type"});
  CHECK(context["date"] == "2026-12-06T01:02:03+00:00");
  CHECK(context["host_name"] == "box");
  CHECK(context["executable"] == "ipcfloor bench all");
  CHECK(context["num_cpus"] == 2);
  CHECK(context["mhz_per_cpu"] == 2096);
  CHECK(context["cpu_scaling_enabled"] == false);
  CHECK(context["library_build_type"] == "release");
}

TEST_CASE("every timed row becomes a run named after where it sits, one aggregate per figure in its own unit") {
  const auto report = google_benchmark_report(combined_report());
  const auto* p50 = entry_named(report, "ladder/physical-floor_p50");
  REQUIRE(p50 != nullptr);
  CHECK((*p50)["run_name"] == "ladder/physical-floor");
  CHECK((*p50)["run_type"] == "aggregate");
  CHECK((*p50)["aggregate_name"] == "p50");
  CHECK((*p50)["aggregate_unit"] == "time");
  CHECK((*p50)["iterations"] == 4);
  CHECK((*p50)["real_time"] == 110.0);  // the nearest rank of 100..130
  CHECK((*p50)["cpu_time"] == 110.0);
  CHECK((*p50)["time_unit"] == "ns");
  for (const char* name : {"ladder/physical-floor_p99.9", "ladder/physical-floor_p99.99", "ladder/physical-floor_min",
                           "ladder/physical-floor_max", "ladder/physical-floor_mean", "ladder/physical-floor_stddev",
                           "throughput/shm-call/rtt_p99"})
    CHECK_MESSAGE(entry_named(report, name) != nullptr, name);
  const auto* avx2 = entry_named(report, "compute/avx2_median");
  REQUIRE(avx2 != nullptr);
  CHECK((*avx2)["time_unit"] == "s");
  CHECK((*avx2)["real_time"] == 0.5);
  CHECK(entry_named(report, "compute/scalar/single_thread_median") != nullptr);
  CHECK(entry_named(report, "compute/numba_median") != nullptr);
  CHECK(entry_named(report, "hygiene/memory/first_touch/memfd_4k/prefault=true/touch_p50") != nullptr);
  const auto* grid = entry_named(report, "throughput/grid/in-process_p50");
  REQUIRE(grid != nullptr);
  CHECK((*grid)["time_unit"] == "ms");
  CHECK((*grid)["iterations"] == 3);
  const auto* sweep = entry_named(report, "python/sweep/shm_p50");
  REQUIRE(sweep != nullptr);
  CHECK((*sweep)["time_unit"] == "ms");
}

TEST_CASE("rounds become iteration entries; rates, ratios, settings and the config block stay out") {
  const auto report = google_benchmark_report(combined_report());
  std::vector<double> rounds;
  std::vector<std::string> names;
  for (const auto& e : report["benchmarks"]) {
    names.push_back(e["name"].get<std::string>());
    if (e["run_type"] == "iteration" && e["run_name"] == "ladder/physical-floor") {
      CHECK(e["repetition_index"] == rounds.size());
      CHECK(e["repetitions"] == 2);
      rounds.push_back(e["real_time"].get<double>());
    }
  }
  CHECK(rounds == std::vector<double>{100.0, 120.0});
  for (const std::string& name : names) {
    CHECK_MESSAGE(name.find("rate") == std::string::npos, name);
    CHECK_MESSAGE(name.find("speedup") == std::string::npos, name);
    CHECK_MESSAGE(name.find("map") == std::string::npos, name);
    CHECK_MESSAGE(name.find("config") == std::string::npos, name);
    CHECK_MESSAGE(name.find("shm/cli") == std::string::npos, name);
  }
  std::vector<std::string> aggregates;
  for (const auto& e : report["benchmarks"])
    if (e["run_type"] == "aggregate") aggregates.push_back(e["name"].get<std::string>());
  std::sort(aggregates.begin(), aggregates.end());
  CHECK(std::adjacent_find(aggregates.begin(), aggregates.end()) == aggregates.end());  // every name once
}

}  // namespace ipcfloor

namespace ipcfloor {
namespace {

nlohmann::json rung(const char* name, double p50, std::vector<double> rounds) {
  return {{"name", name}, {"p50_interp", p50}, {"round_p50", rounds}};
}

}  // namespace

TEST_CASE("the ladder's floor check flags a rung below the floor by more than the floor's round-to-round spread, "
          "and bench all's report carries it to every verdict measured against the floor") {
  // The floor's rounds: 400, 410 and 420 ns: a spread of 20 / 410, about 4.9%.
  const nlohmann::json floor = rung("physical-floor", 410.0, {400.0, 420.0, 410.0});
  const nlohmann::json within = check_floor(nlohmann::json::array({floor, rung("shm-call-spin", 395.0, {395.0})}));
  CHECK(within["checked"] == true);
  CHECK(within["trustworthy"] == true);
  CHECK(within["round_spread"].get<double>() == doctest::Approx(20.0 / 410.0));
  const nlohmann::json below = check_floor(nlohmann::json::array(
      {floor, rung("shm-call-spin", 330.0, {330.0}), rung("uds", 5000.0, {5000.0})}));
  CHECK(below["trustworthy"] == false);
  REQUIRE(below["below"].size() == 1);
  CHECK(below["below"][0]["name"] == "shm-call-spin");
  const std::string note = below["note"].get<std::string>();
  CHECK_MESSAGE(note.find("shm-call-spin (0.80x)") != std::string::npos, note);
  CHECK_MESSAGE(note.find("not trustworthy") != std::string::npos, note);
  CHECK(check_floor(nlohmann::json::array({rung("uds", 5000.0, {5000.0})}))["checked"] == false);

  // bench all's report: a warning at the top, the floor check under the ladder, the live goal's verdict caveated.
  nlohmann::json ladder{{"config", {{"samples", 10}, {"rounds", 3}, {"warmup", 1}, {"tsc_ghz", 2.0},
                                    {"client_cpu", 0}, {"server_cpu", 1}}},
                        {"results", nlohmann::json::array()}, {"skipped", nlohmann::json::array()},
                        {"ratios", nlohmann::json::object()}, {"floor_check", below}};
  const nlohmann::json summary{{"p50_interp", 100.0}, {"p99", 200.0}, {"p999", 300.0}, {"max", 400.0}};
  nlohmann::json live{{"physical_floor", summary}, {"one_bar_compute", summary},
                      {"tick_to_signal", nlohmann::json::array()}, {"throughput", nlohmann::json::array()},
                      {"goal", {{"what", "one combo"}, {"p50_ns", 100.0}, {"bound_ns", 400.0}, {"ratio", 0.5},
                                {"met", true}}}};
  const nlohmann::json combined{{"command", "ipcfloor bench all"}, {"host", nlohmann::json::object()},
                                {"suites", {{"ladder", ladder}, {"live", live}}}};
  const std::string md = render_markdown(combined);
  CHECK_MESSAGE(md.find("**Floor check failed**") != std::string::npos, md);
  CHECK_MESSAGE(md.find("**met** (not trustworthy") != std::string::npos, md);
}

}  // namespace ipcfloor
