#include "data/series_formats.hpp"

#include <algorithm>

#include <fmt/format.h>

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

}  // namespace ipcfloor::series_formats
