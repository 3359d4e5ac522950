#include "data/series_formats.hpp"

#include <algorithm>

#include <limits>

#include <fmt/format.h>

#include "data/input_file.hpp"

namespace ipcfloor::series_formats {
namespace {

// Quoted file text in messages is cut to this many characters so one bad row cannot flood
// the terminal.
constexpr std::size_t kMaxSnippet = 60;

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(),
                    [](char x, char y) { return ascii_lower(x) == ascii_lower(y); });
}

std::string snippet(std::string_view text) {
  std::string out;
  const bool cut = text.size() > kMaxSnippet;
  if (cut) text = text.substr(0, kMaxSnippet);
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte >= 0x7f) {
      out += fmt::format("\\x{:02x}", byte);
    } else {
      out += c;
    }
  }
  if (cut) out += "...";
  return out;
}

std::optional<Column> column_named(std::string_view name, std::string_view close_name) {
  if (iequals(name, close_name.empty() ? std::string_view("close") : close_name)) return Column::close;
  for (const Column c : {Column::open, Column::high, Column::low, Column::volume})
    if (iequals(name, kColumnNames[static_cast<std::size_t>(c)])) return c;
  return std::nullopt;
}

Expected<void> check_parsed_room(std::size_t bars, std::size_t columns, const std::string& path) {
  const std::size_t per_bar = columns * kBytesPerBar;
  const std::size_t need =
      per_bar != 0 && bars > std::numeric_limits<std::size_t>::max() / per_bar ? std::numeric_limits<std::size_t>::max()
                                                                                : bars * per_bar;
  const auto available = available_memory_bytes();
  if (available && need > *available)
    return fail(ErrorCode::resource,
                "{}: its {} bars of {} column{} take up to {} once parsed, more than the {} this host has available "
                "(MemAvailable, or the cgroup's memory.max): split the file or free memory",
                path, bars, columns, columns == 1 ? "" : "s", byte_size_text(need), byte_size_text(*available));
  return {};
}

}  // namespace ipcfloor::series_formats
