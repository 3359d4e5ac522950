// What `ipcfloor bench` writes for other tools: the .hgrm text of HdrHistogram's
// percentile distribution (what its plotter loads).

#include <doctest/doctest.h>

#include <cstdio>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bench/latency.hpp"

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
  CHECK(std::regex_match(lines[footer], std::regex(R"(#\[Mean    = {1,12}\d+\.\d{3}, StdDeviation   = {1,12}\d+\.\d{3}\])")));
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

}  // namespace ipcfloor
