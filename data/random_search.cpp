#include "data/random_search.hpp"

#include <cctype>
#include <charconv>
#include <limits>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

std::string_view trimmed(std::string_view text) noexcept {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())) != 0) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())) != 0) text.remove_suffix(1);
  return text;
}

bool whole_number(std::string_view text, std::int64_t& out) noexcept {
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), out);
  return error == std::errc{} && end == text.data() + text.size();
}

// One operand of a comparison: a parameter's index, or a whole number.
Expected<std::pair<int, std::int64_t>> operand(std::string_view text, const std::vector<ParamRange>& ranges,
                                               std::string_view term) {
  text = trimmed(text);
  std::int64_t value = 0;
  if (whole_number(text, value)) return std::pair{-1, value};
  for (std::size_t k = 0; k < ranges.size(); ++k)
    if (ranges[k].name == text) return std::pair{static_cast<int>(k), std::int64_t{0}};
  return fail(ErrorCode::invalid_argument, "--where '{}': '{}' is neither a --param nor a whole number", term, text);
}

std::vector<std::string_view> split_terms(std::string_view text) {
  std::vector<std::string_view> terms;
  while (!text.empty()) {
    std::size_t cut = text.size();
    std::size_t skip = 0;
    if (const auto comma = text.find(','); comma != std::string_view::npos) {
      cut = comma;
      skip = 1;
    }
    if (const auto word = text.find(" and "); word != std::string_view::npos && word < cut) {
      cut = word;
      skip = 5;
    }
    terms.push_back(trimmed(text.substr(0, cut)));
    text = cut == text.size() ? std::string_view{} : text.substr(cut + skip);
  }
  return terms;
}

}  // namespace

Expected<ParamRange> parse_param_range(std::string_view text) {
  const auto equals = text.find('=');
  if (equals == std::string_view::npos || equals == 0)
    return fail(ErrorCode::invalid_argument, "--param {}: write NAME=LO:HI (both ends included), or NAME=VALUE", text);
  ParamRange range;
  range.name = std::string(trimmed(text.substr(0, equals)));
  const std::string_view span = trimmed(text.substr(equals + 1));
  const auto colon = span.find(':');
  const std::string_view low = colon == std::string_view::npos ? span : span.substr(0, colon);
  const std::string_view high = colon == std::string_view::npos ? span : span.substr(colon + 1);
  if (!whole_number(trimmed(low), range.lo) || !whole_number(trimmed(high), range.hi))
    return fail(ErrorCode::invalid_argument, "--param {}: LO and HI must be whole numbers (NAME=LO:HI)", text);
  if (range.lo > range.hi)
    return fail(ErrorCode::invalid_argument, "--param {}: LO {} is above HI {}", text, range.lo, range.hi);
  return range;
}

Expected<std::vector<Constraint>> parse_where(std::string_view text, const std::vector<ParamRange>& ranges) {
  static constexpr std::pair<std::string_view, Constraint::Op> kOps[] = {
      {"<=", Constraint::Op::le}, {">=", Constraint::Op::ge}, {"==", Constraint::Op::eq},
      {"!=", Constraint::Op::ne}, {"<", Constraint::Op::lt},  {">", Constraint::Op::gt}};
  std::vector<Constraint> constraints;
  for (const std::string_view term : split_terms(text)) {
    std::size_t at = std::string_view::npos;
    std::size_t length = 0;
    Constraint c;
    for (const auto& [spelling, op] : kOps) {
      const auto found = term.find(spelling);
      if (found != std::string_view::npos && (at == std::string_view::npos || found < at)) {
        at = found;
        length = spelling.size();
        c.op = op;
      }
    }
    if (at == std::string_view::npos)
      return fail(ErrorCode::invalid_argument, "--where '{}': a term compares two sides with <, <=, >, >=, == or != "
                  "(terms are joined by ',' or 'and')", term);
    auto left = operand(term.substr(0, at), ranges, term);
    if (!left) return std::unexpected(left.error());
    auto right = operand(term.substr(at + length), ranges, term);
    if (!right) return std::unexpected(right.error());
    c.left = left->first;
    c.left_value = left->second;
    c.right = right->first;
    c.right_value = right->second;
    constraints.push_back(c);
  }
  return constraints;
}

std::uint32_t NumpyIntegers::next_uint32() noexcept {
  // PCG64's 32-bit draw: the low half of a 64-bit output, then its high half.
  if (has_high_) {
    has_high_ = false;
    return high_;
  }
  const std::uint64_t next = bits_.next_uint64();
  has_high_ = true;
  high_ = static_cast<std::uint32_t>(next >> 32);
  return static_cast<std::uint32_t>(next & 0xFFFF'FFFFU);
}

std::int64_t NumpyIntegers::between(std::int64_t lo, std::int64_t hi) noexcept {
  const std::uint64_t off = static_cast<std::uint64_t>(lo);
  const std::uint64_t rng = static_cast<std::uint64_t>(hi) - static_cast<std::uint64_t>(lo);
  if (rng == 0) return lo;
  if (rng <= 0xFFFF'FFFFU) {
    if (rng == 0xFFFF'FFFFU) return static_cast<std::int64_t>(off + next_uint32());
    const auto excl = static_cast<std::uint32_t>(rng + 1);
    std::uint64_t m = std::uint64_t{next_uint32()} * excl;
    auto leftover = static_cast<std::uint32_t>(m);
    if (leftover < excl) {
      const std::uint32_t threshold = (std::numeric_limits<std::uint32_t>::max() - static_cast<std::uint32_t>(rng)) % excl;
      while (leftover < threshold) {
        m = std::uint64_t{next_uint32()} * excl;
        leftover = static_cast<std::uint32_t>(m);
      }
    }
    return static_cast<std::int64_t>(off + (m >> 32));
  }
  if (rng == std::numeric_limits<std::uint64_t>::max()) return static_cast<std::int64_t>(off + bits_.next_uint64());
  const std::uint64_t excl = rng + 1;
  Uint128 m = static_cast<Uint128>(bits_.next_uint64()) * excl;
  auto leftover = static_cast<std::uint64_t>(m);
  if (leftover < excl) {
    const std::uint64_t threshold = (std::numeric_limits<std::uint64_t>::max() - rng) % excl;
    while (leftover < threshold) {
      m = static_cast<Uint128>(bits_.next_uint64()) * excl;
      leftover = static_cast<std::uint64_t>(m);
    }
  }
  return static_cast<std::int64_t>(off + static_cast<std::uint64_t>(m >> 64));
}

RandomCombos::RandomCombos(std::uint64_t seed, std::vector<ParamRange> ranges, std::vector<Constraint> constraints,
                           std::vector<int> order)
    : integers_(seed), ranges_(std::move(ranges)), constraints_(std::move(constraints)), order_(std::move(order)),
      values_(ranges_.size()) {}

bool RandomCombos::accepted(const std::vector<std::int64_t>& values) const noexcept {
  for (const Constraint& c : constraints_) {
    const std::int64_t a = c.left >= 0 ? values[static_cast<std::size_t>(c.left)] : c.left_value;
    const std::int64_t b = c.right >= 0 ? values[static_cast<std::size_t>(c.right)] : c.right_value;
    bool holds = false;
    switch (c.op) {
      case Constraint::Op::lt: holds = a < b; break;
      case Constraint::Op::le: holds = a <= b; break;
      case Constraint::Op::gt: holds = a > b; break;
      case Constraint::Op::ge: holds = a >= b; break;
      case Constraint::Op::eq: holds = a == b; break;
      case Constraint::Op::ne: holds = a != b; break;
    }
    if (!holds) return false;
  }
  return true;
}

Expected<Combo> RandomCombos::next() {
  for (std::uint32_t attempt = 0; attempt < kMaxRejections; ++attempt) {
    for (std::size_t k = 0; k < ranges_.size(); ++k) values_[k] = integers_.between(ranges_[k].lo, ranges_[k].hi);
    if (!accepted(values_)) continue;
    Combo combo{};
    auto* out = reinterpret_cast<std::int64_t*>(&combo);
    for (std::size_t p = 0; p < order_.size(); ++p)
      if (order_[p] >= 0) out[p] = values_[static_cast<std::size_t>(order_[p])];
    return combo;
  }
  return fail(ErrorCode::invalid_argument, "the --where constraints rejected {} draws in a row: they leave (almost) "
              "nothing of the --param ranges; widen the ranges or loosen the constraints", kMaxRejections);
}

Expected<std::vector<int>> param_order(const std::vector<ParamRange>& ranges, const std::vector<std::string>& names) {
  std::vector<int> order(names.size(), -1);
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    bool known = false;
    for (std::size_t p = 0; p < names.size(); ++p) {
      if (names[p] != ranges[k].name) continue;
      if (order[p] >= 0) return fail(ErrorCode::invalid_argument, "--param {} is given twice", ranges[k].name);
      order[p] = static_cast<int>(k);
      known = true;
    }
    if (!known) {
      std::string list;
      for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
      return fail(ErrorCode::invalid_argument, "--param {}: the strategy has no such parameter; its parameters are {}",
                  ranges[k].name, list);
    }
  }
  for (std::size_t p = 0; p < names.size(); ++p)
    if (order[p] < 0)
      return fail(ErrorCode::invalid_argument, "--search random needs a --param for each of the strategy's parameters; "
                  "{} has none (NAME=LO:HI, or NAME=VALUE to fix it)", names[p]);
  return order;
}

}  // namespace ipcfloor
