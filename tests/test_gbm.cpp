// The default data set against numpy. Expected values were printed once by numpy 1.24 with
//   rng = np.random.default_rng(seed); lr = mu*dt + sigma*np.sqrt(dt)*rng.standard_normal(n-1)
//   close[0] = s0; close[1:] = s0*np.exp(np.cumsum(lr))
// The generator evaluates numpy's own exp (data/numpy_exp.hpp), so the default series is
// bit-identical; most checks still use the 1e-14 relative contract, and one checks every bit.

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "data/gbm.hpp"

namespace {

constexpr double kRelTol = 1e-14;
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

bool close_enough(double got, double want) {
  return std::fabs(got - want) <= kRelTol * std::fabs(want);
}

std::vector<double> generate_ok(const ipcfloor::GbmParams& params) {
  auto series = ipcfloor::generate_gbm(params);
  REQUIRE_MESSAGE(series.has_value(), (series ? std::string() : series.error().message));
  return std::move(*series);
}

double sequential_sum(const std::vector<double>& values) {
  double sum = 0.0;
  for (const double v : values) {
    sum += v;
  }
  return sum;
}

std::string error_of(const ipcfloor::GbmParams& params) {
  const auto series = ipcfloor::generate_gbm(params);
  REQUIRE_FALSE(series.has_value());
  CHECK(series.error().code == ipcfloor::ErrorCode::invalid_argument);
  return series.error().message;
}

}  // namespace

TEST_CASE("default series matches numpy's first values, min, max and checksum") {
  const std::vector<double> close = generate_ok(ipcfloor::GbmParams{});
  REQUIRE(close.size() == 150000);

  const std::vector<double> head = {
      0x1.9000000000000p+6, 0x1.901dea89c7cdfp+6, 0x1.8fb8145a53cb0p+6, 0x1.9001a4ebb641bp+6,
      0x1.905de81fb47d2p+6, 0x1.8f9ec6ea5bf9cp+6, 0x1.8f1f6d4ca9b69p+6, 0x1.8f2bfac128693p+6,
      0x1.8f0d1c790bfa5p+6, 0x1.8f0b854f401a6p+6, 0x1.8eb8371584a1dp+6};
  for (std::size_t i = 0; i < head.size(); ++i) {
    CAPTURE(i);
    CHECK(close_enough(close[i], head[i]));
  }
  CHECK(close[0] == 100.0);
  CHECK(close[1] == doctest::Approx(100.029215).epsilon(1e-8));  // docs/SPEC.md §1's check value

  // Every 15,000th bar and the last one.
  const std::pair<std::size_t, double> spread[] = {
      {15000, 0x1.5e731ca333d83p+6},  {30000, 0x1.00c9342fab67fp+7},
      {45000, 0x1.d2bc35ee43a7bp+6},  {60000, 0x1.80bfe0c90038fp+6},
      {75000, 0x1.7a1cff0419dacp+6},  {90000, 0x1.60c014e02f23dp+6},
      {105000, 0x1.030c1a17fada7p+6}, {120000, 0x1.13cb7db367830p+6},
      {135000, 0x1.16831f487a507p+6}, {149999, 0x1.0acb4d01e05cfp+6}};
  for (const auto& [index, want] : spread) {
    CAPTURE(index);
    CHECK(close_enough(close[index], want));
  }

  const auto [lowest, highest] = std::minmax_element(close.begin(), close.end());
  CHECK(lowest - close.begin() == 108231);
  CHECK(highest - close.begin() == 36651);
  CHECK(close_enough(*lowest, 0x1.fca3a3e1511c7p+5));   // 63.579902420318426
  CHECK(close_enough(*highest, 0x1.14dc76aced2c5p+7));  // 138.43059292216472
  CHECK(close_enough(sequential_sum(close), 0x1.9da10ecf0f77fp+23));  // 13553799.40441489
}

TEST_CASE("the default series is bit-identical to numpy's") {
  const std::vector<double> close = generate_ok(ipcfloor::GbmParams{});
  // A sequential sum over all 150,000 bars equals numpy's to the last bit only when every bar
  // does; bar 51445 is one where glibc's exp would round differently.
  CHECK(sequential_sum(close) == 0x1.9da10ecf0f77fp+23);
  CHECK(close[51445] == 0x1.90796f1e3c4dbp+6);
}

TEST_CASE("seed 7, 1000 bars, mu 0.1, sigma 0.5 matches numpy") {
  ipcfloor::GbmParams params;
  params.bars = 1000;
  params.seed = 7;
  params.mu = 0.1;
  params.sigma = 0.5;
  const std::vector<double> close = generate_ok(params);
  REQUIRE(close.size() == 1000);
  const std::vector<double> head = {0x1.9000000000000p+6, 0x1.90004e1b0d6b6p+6,
                                    0x1.9031364666819p+6, 0x1.900488516ff3dp+6,
                                    0x1.8f7348562e89fp+6, 0x1.8f29424bc20a5p+6};
  for (std::size_t i = 0; i < head.size(); ++i) {
    CAPTURE(i);
    CHECK(close_enough(close[i], head[i]));
  }
  CHECK(close_enough(close.back(), 0x1.6547806f005a9p+6));
  CHECK(close_enough(*std::min_element(close.begin(), close.end()), 0x1.5739321788652p+6));
  CHECK(close_enough(*std::max_element(close.begin(), close.end()), 0x1.9031364666819p+6));
  CHECK(close_enough(sequential_sum(close), 0x1.65e5407dbea1ap+16));
}

TEST_CASE("two bars are the smallest series: s0 and one step") {
  ipcfloor::GbmParams params;
  params.bars = 2;
  const std::vector<double> close = generate_ok(params);
  REQUIRE(close.size() == 2);
  CHECK(close[0] == 100.0);
  CHECK(close_enough(close[1], 0x1.901dea89c7cdfp+6));  // the default series' second bar
}

TEST_CASE("zero sigma gives a pure drift path") {
  ipcfloor::GbmParams params;
  params.bars = 5;
  params.sigma = 0.0;
  const std::vector<double> close = generate_ok(params);
  for (std::size_t i = 1; i < close.size(); ++i) {
    CHECK(close[i] > close[i - 1]);
  }
}

TEST_CASE("rejects fewer than two bars") {
  ipcfloor::GbmParams params;
  params.bars = 1;
  const std::string message = error_of(params);
  CHECK(message.find("bars") != std::string::npos);
  CHECK(message.find("got 1") != std::string::npos);
  params.bars = 0;
  CHECK(error_of(params).find("got 0") != std::string::npos);
}

TEST_CASE("rejects a non-positive or non-finite s0") {
  for (const double s0 : {0.0, -1.0, kNaN, kInf}) {
    CAPTURE(s0);
    ipcfloor::GbmParams params;
    params.s0 = s0;
    CHECK(error_of(params).find("s0") != std::string::npos);
  }
}

TEST_CASE("rejects a non-positive or non-finite dt") {
  for (const double dt : {0.0, -0.5, kNaN, kInf}) {
    CAPTURE(dt);
    ipcfloor::GbmParams params;
    params.dt = dt;
    CHECK(error_of(params).find("dt") != std::string::npos);
  }
}

TEST_CASE("rejects a negative sigma") {
  ipcfloor::GbmParams params;
  params.sigma = -0.3;
  const std::string message = error_of(params);
  CHECK(message.find("sigma") != std::string::npos);
  CHECK(message.find("-0.3") != std::string::npos);
  params.sigma = kNaN;
  CHECK(error_of(params).find("sigma") != std::string::npos);
}

TEST_CASE("rejects a non-finite mu") {
  ipcfloor::GbmParams params;
  params.mu = -kInf;
  CHECK(error_of(params).find("mu") != std::string::npos);
}

TEST_CASE("rejects parameters that overflow a close, naming the bar") {
  ipcfloor::GbmParams params;
  params.bars = 10;
  params.mu = 1e300;
  params.dt = 1.0;
  const std::string message = error_of(params);
  CHECK(message.find("bar 1 ") != std::string::npos);
  CHECK(message.find("inf") != std::string::npos);
}

TEST_CASE("generating the default 150,000 bars takes well under 50 ms") {
  using Clock = std::chrono::steady_clock;
  auto best = Clock::duration::max();
  for (int run = 0; run < 5; ++run) {
    const auto start = Clock::now();
    const auto series = ipcfloor::generate_gbm(ipcfloor::GbmParams{});
    const auto elapsed = Clock::now() - start;
    REQUIRE(series.has_value());
    best = std::min(best, elapsed);
  }
  const double ms = std::chrono::duration<double, std::milli>(best).count();
  MESSAGE("best of 5: " << ms << " ms for 150,000 bars");
  // Generous so sanitizer and debug builds pass; Release measures ~1-2 ms.
  CHECK(ms < 50.0);
}
