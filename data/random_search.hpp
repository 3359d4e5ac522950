#pragma once
// Random search: combos drawn uniformly from a range per parameter, under constraints between
// them (`sweep --search random --trials N --seed S --param fast=5:50 --param slow=20:400 --where
// 'fast < slow'`). The same seed gives the same combos on every host, and numpy gives them too:
// every value is `numpy.random.default_rng(seed).integers(lo, hi, endpoint=True)`, drawn as a
// scalar, one call per parameter in the order the --param options were given, trial after trial;
// a trial the constraints reject is drawn again, whole. Draws are with replacement: a combo may
// come twice.
//
// Threads: a RandomCombos is one stream; one thread at a time. Noexcept after construction.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/combo.hpp"
#include "common/error.hpp"
#include "data/numpy_random.hpp"

namespace ipcfloor {

// One --param NAME=LO:HI (LO <= HI, both inclusive); NAME=V fixes it.
struct ParamRange {
  std::string name;
  std::int64_t lo = 0;
  std::int64_t hi = 0;
};
[[nodiscard]] Expected<ParamRange> parse_param_range(std::string_view text);

// One comparison of --where: two operands (a parameter or a whole number) and <, <=, >, >=, ==, !=.
struct Constraint {
  enum class Op : std::uint8_t { lt, le, gt, ge, eq, ne };
  int left = -1;   // a parameter's index among the ranges, or -1 for the literal
  std::int64_t left_value = 0;
  Op op = Op::lt;
  int right = -1;
  std::int64_t right_value = 0;
};
// "fast < slow" or several joined by "," or "and" ("fast < slow and slow <= 4 * ..." is not
// arithmetic: each side is a parameter of `ranges` or a whole number). The error names the term.
[[nodiscard]] Expected<std::vector<Constraint>> parse_where(std::string_view text,
                                                            const std::vector<ParamRange>& ranges);

// numpy's Generator.integers(lo, hi, endpoint=True) for one int64 scalar on `bits`: Lemire's
// bounded method on 32-bit draws (halves of one 64-bit output, low first) when hi - lo fits 32
// bits, on 64-bit draws otherwise; numpy 1.17 and later.
class NumpyIntegers {
 public:
  explicit NumpyIntegers(std::uint64_t seed) noexcept : bits_(seed) {}
  [[nodiscard]] std::int64_t between(std::int64_t lo, std::int64_t hi) noexcept;

 private:
  [[nodiscard]] std::uint32_t next_uint32() noexcept;
  Pcg64 bits_;
  bool has_high_ = false;
  std::uint32_t high_ = 0;
};

class RandomCombos {
 public:
  // `order`: for each of the strategy's parameters (position 0..5), the index of its range in
  // `ranges`, or -1 for a parameter it does not use (left 0). Every used parameter has a range.
  RandomCombos(std::uint64_t seed, std::vector<ParamRange> ranges, std::vector<Constraint> constraints,
               std::vector<int> order);
  // The next trial's combo; an error when the constraints rejected kMaxRejections draws in a row.
  [[nodiscard]] Expected<Combo> next();
  static constexpr std::uint32_t kMaxRejections = 100'000;

 private:
  [[nodiscard]] bool accepted(const std::vector<std::int64_t>& values) const noexcept;

  NumpyIntegers integers_;
  std::vector<ParamRange> ranges_;
  std::vector<Constraint> constraints_;
  std::vector<int> order_;
  std::vector<std::int64_t> values_;
};

// The combos' ranges in the strategy's order: `names` are its parameters; every one needs a
// --param, and every --param must name one. The error lists what is missing or unknown.
[[nodiscard]] Expected<std::vector<int>> param_order(const std::vector<ParamRange>& ranges,
                                                     const std::vector<std::string>& names);

}  // namespace ipcfloor
