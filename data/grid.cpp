#include "data/grid.hpp"

#include <charconv>

#include "kernel/kernel.hpp"

namespace ipcfloor {
namespace {

template <class T>
Expected<T> parse_number(std::string_view text, std::string_view what) {
  T value{};
  const auto* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc{} || ptr != end || text.empty())
    return fail(ErrorCode::invalid_argument, "{} '{}' is not a valid number", what, text);
  return value;
}

}  // namespace

Expected<std::vector<std::int64_t>> parse_lengths(std::string_view text) {
  std::vector<std::int64_t> lengths;
  while (true) {
    const auto comma = text.find(',');
    const auto item = text.substr(0, comma);
    auto value = parse_number<std::int64_t>(item, "length");
    if (!value) return std::unexpected(value.error());
    if (*value < 1) return fail(ErrorCode::invalid_argument, "length {} must be at least 1", *value);
    lengths.push_back(*value);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return lengths;
}

Expected<std::vector<std::int64_t>> parse_grid(std::string_view text) {
  const auto first_colon = text.find(':');
  const auto second_colon = first_colon == std::string_view::npos ? first_colon : text.find(':', first_colon + 1);
  if (second_colon == std::string_view::npos)
    return fail(ErrorCode::invalid_argument, "grid '{}' must be FIRST:LAST:COUNT, e.g. 6:200:80", text);
  auto first = parse_number<double>(text.substr(0, first_colon), "grid start");
  auto last = parse_number<double>(text.substr(first_colon + 1, second_colon - first_colon - 1), "grid end");
  auto count = parse_number<std::size_t>(text.substr(second_colon + 1), "grid count");
  if (!first) return std::unexpected(first.error());
  if (!last) return std::unexpected(last.error());
  if (!count) return std::unexpected(count.error());
  if (*first < 1 || *last < *first || *count < 1 || *count > 100'000)
    return fail(ErrorCode::invalid_argument,
                "grid '{}' needs 1 <= FIRST <= LAST and 1 <= COUNT <= 100000", text);
  return grid_lengths(*first, *last, *count);
}

}  // namespace ipcfloor
