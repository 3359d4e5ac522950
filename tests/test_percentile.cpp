// The one percentile of every benchmark (bench/percentile.hpp): nearest rank, at its edges.

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "bench/percentile.hpp"

namespace ipcfloor {
namespace {

// 1, 2, ..., n: the sample of rank r is r.
std::vector<double> ramp(std::size_t n) {
  std::vector<double> v(n);
  std::iota(v.begin(), v.end(), 1.0);
  return v;
}

}  // namespace

TEST_CASE("one sample is every percentile") {
  const std::vector<double> one{42.0};
  for (const double p : {0.0, 1.0, 50.0, 90.0, 99.0, 99.9, 99.99, 100.0}) CHECK(sorted_percentile(one, p) == 42.0);
}

TEST_CASE("of two samples, the median is the lower one and anything above 50% the upper one") {
  const std::vector<double> two{10.0, 20.0};
  CHECK(sorted_percentile(two, 0.0) == 10.0);
  CHECK(sorted_percentile(two, 50.0) == 10.0);  // the smallest sample with half the samples at or below it
  CHECK(sorted_percentile(two, 50.001) == 20.0);
  CHECK(sorted_percentile(two, 90.0) == 20.0);
  CHECK(sorted_percentile(two, 100.0) == 20.0);
}

TEST_CASE("p0 is the minimum and p100 the maximum, whatever the count") {
  for (const std::size_t n : {1u, 2u, 3u, 7u, 1000u, 100'003u}) {
    const auto v = ramp(n);
    CHECK(sorted_percentile(v, 0.0) == 1.0);
    CHECK(sorted_percentile(v, 100.0) == static_cast<double>(n));
  }
}

TEST_CASE("the percentile is the sample of rank ceil(p/100 * n), never an average of two") {
  const auto ten = ramp(10);
  CHECK(sorted_percentile(ten, 10.0) == 1.0);
  CHECK(sorted_percentile(ten, 10.5) == 2.0);
  CHECK(sorted_percentile(ten, 30.0) == 3.0);  // 0.3 * 10 is 3.0000000000000004 in binary: still rank 3
  CHECK(sorted_percentile(ten, 50.0) == 5.0);
  CHECK(sorted_percentile(ten, 90.0) == 9.0);
  CHECK(sorted_percentile(ten, 99.0) == 10.0);
  const auto hundred = ramp(100);
  CHECK(sorted_percentile(hundred, 50.0) == 50.0);
  CHECK(sorted_percentile(hundred, 99.0) == 99.0);
  const auto odd = ramp(5);
  CHECK(sorted_percentile(odd, 50.0) == 3.0);  // the middle of an odd count
}

TEST_CASE("decimal levels do not round a rank up through their binary error") {
  CHECK(sorted_percentile(ramp(1000), 99.9) == 999.0);
  CHECK(sorted_percentile(ramp(10'000), 99.99) == 9'999.0);
  CHECK(sorted_percentile(ramp(100'000), 99.999) == 99'999.0);
  CHECK(sorted_percentile(ramp(1000), 0.1) == 1.0);
  CHECK(sorted_percentile(ramp(1000), 0.2) == 2.0);
}

TEST_CASE("p99.9 and p99.99 of small counts are the maximum") {
  for (const std::size_t n : {2u, 10u, 100u, 999u}) {
    const auto v = ramp(n);
    CHECK(sorted_percentile(v, 99.9) == static_cast<double>(n));
    CHECK(sorted_percentile(v, 99.99) == static_cast<double>(n));
  }
  CHECK(sorted_percentile(ramp(1001), 99.9) == 1000.0);  // the first count where p99.9 leaves the maximum
  CHECK(sorted_percentile(ramp(10'001), 99.99) == 10'000.0);
}

TEST_CASE("ties: the percentile is the tied value, and a level between ranks takes the next one") {
  const std::vector<double> tied{5.0, 5.0, 5.0, 9.0};
  CHECK(sorted_percentile(tied, 75.0) == 5.0);
  CHECK(sorted_percentile(tied, 75.1) == 9.0);
}

TEST_CASE("levels outside 0..100, NaN and no samples give an answer rather than an out-of-range read") {
  const auto v = ramp(4);
  CHECK(sorted_percentile(v, -5.0) == 1.0);
  CHECK(sorted_percentile(v, 250.0) == 4.0);
  CHECK(sorted_percentile(v, std::numeric_limits<double>::quiet_NaN()) == 1.0);
  CHECK(sorted_percentile({}, 50.0) == 0.0);
  CHECK(percentile_index(0, 50.0) == 0);
}

TEST_CASE("percentile sorts a copy of unsorted samples and leaves them as they were") {
  const std::vector<double> shuffled{7.0, 1.0, 9.0, 3.0, 5.0};
  CHECK(percentile(shuffled, 50.0) == 5.0);
  CHECK(percentile(shuffled, 100.0) == 9.0);
  CHECK(shuffled.front() == 7.0);
}

TEST_CASE("the index is the rank minus one for every level of a large count") {
  const std::size_t n = 100'000;
  for (int tenth = 1; tenth <= 1000; ++tenth) {
    const double p = tenth / 10.0;
    const auto expected = static_cast<std::size_t>(std::llround(p * 1000.0)) - 1;  // p/100 * n is a whole rank here
    CHECK_MESSAGE(percentile_index(n, p) == expected, "p = " << p);
  }
}

}  // namespace ipcfloor
