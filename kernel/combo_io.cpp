#include "kernel/combo_io.hpp"

#include <algorithm>
#include <array>
#include <charconv>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernel/input_file.hpp"
#include "kernel/series_formats.hpp"

namespace ipcfloor {
namespace {

constexpr std::array<std::string_view, 6> kColumns = {"h", "L", "s", "p3", "p2", "p"};

using series_formats::trim;

std::vector<std::string_view> split(std::string_view line, char separator) {
  std::vector<std::string_view> fields;
  std::size_t start = 0;
  for (;;) {
    const auto end = line.find(separator, start);
    fields.push_back(trim(line.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start)));
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return fields;
}

// Every line with its number, blank ones dropped.
std::vector<std::pair<std::size_t, std::string_view>> lines_of(std::string_view text) {
  std::vector<std::pair<std::size_t, std::string_view>> lines;
  std::size_t number = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    const auto end = text.find('\n', start);
    const std::string_view line = text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    ++number;
    if (!trim(line).empty()) lines.emplace_back(number, line);
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return lines;
}

Expected<std::vector<ComboLine>> parse_csv(const std::vector<std::pair<std::size_t, std::string_view>>& lines,
                                           std::string_view source) {
  const auto [header_line, header] = lines.front();
  const std::vector<std::string_view> names = split(header, ',');
  std::array<std::size_t, 6> column{};
  for (std::size_t c = 0; c < kColumns.size(); ++c) {
    const auto found = std::find(names.begin(), names.end(), kColumns[c]);
    if (found == names.end())
      return fail(ErrorCode::bad_data, "{}: line {}: the header '{}' has no column '{}'; a combo CSV has the header "
                  "h,L,s,p3,p2,p", source, header_line, trim(header), kColumns[c]);
    column[c] = static_cast<std::size_t>(found - names.begin());
  }
  std::vector<ComboLine> rows;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    const auto [number, line] = lines[i];
    ComboLine row;
    row.line = number;
    row.raw = series_formats::snippet(trim(line));
    const std::vector<std::string_view> fields = split(line, ',');
    if (fields.size() != names.size()) {
      row.error = fmt::format("line {} has {} fields, the header {}", number, fields.size(), names.size());
      rows.push_back(std::move(row));
      continue;
    }
    std::array<std::int64_t, 6> windows{};
    for (std::size_t c = 0; c < kColumns.size() && row.error.empty(); ++c) {
      const std::string_view field = fields[column[c]];
      const auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), windows[c]);
      if (field.empty() || error != std::errc{} || end != field.data() + field.size())
        row.error = fmt::format("line {}: {} '{}' is not a whole number", number, kColumns[c], field);
    }
    if (row.error.empty()) row.combo = Combo{windows[0], windows[1], windows[2], windows[3], windows[4], windows[5]};
    rows.push_back(std::move(row));
  }
  return rows;
}

ComboLine parse_json_line(std::size_t number, std::string_view line) {
  ComboLine row;
  row.line = number;
  row.raw = series_formats::snippet(trim(line));
  const nlohmann::json object = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (object.is_discarded() || !object.is_object()) {
    row.error = fmt::format("line {} is not a JSON object", number);
    return row;
  }
  std::array<std::int64_t, 6> windows{};
  if (object.contains("params")) {
    const auto& params = object["params"];
    if (!params.is_array() || params.size() != 6) {
      row.error = fmt::format("line {}: \"params\" must be an array of six whole numbers", number);
      return row;
    }
    for (std::size_t c = 0; c < 6; ++c) {
      if (!params[c].is_number_integer()) {
        row.error = fmt::format("line {}: params[{}] ({}) is not a whole number", number, c, params[c].dump());
        return row;
      }
      windows[c] = params[c].get<std::int64_t>();
    }
  } else {
    for (std::size_t c = 0; c < kColumns.size(); ++c) {
      const std::string key(kColumns[c]);
      if (!object.contains(key) || !object[key].is_number_integer()) {
        row.error = fmt::format("line {}: \"{}\" is missing or not a whole number (write h, L, s, p3, p2, p or "
                                "\"params\":[six windows])", number, key);
        return row;
      }
      windows[c] = object[key].get<std::int64_t>();
    }
  }
  row.combo = Combo{windows[0], windows[1], windows[2], windows[3], windows[4], windows[5]};
  return row;
}

}  // namespace

Expected<std::vector<ComboLine>> parse_combos(std::string_view text, std::string_view source) {
  const auto lines = lines_of(text);
  if (lines.empty()) return fail(ErrorCode::bad_data, "{} holds no combos", source);
  if (trim(lines.front().second).front() == '{') {
    std::vector<ComboLine> rows;
    rows.reserve(lines.size());
    for (const auto& [number, line] : lines) rows.push_back(parse_json_line(number, line));
    return rows;
  }
  return parse_csv(lines, source);
}

Expected<std::vector<ComboLine>> load_combos(const std::string& path) {
  auto text = read_text_input(path, "combo file", kMaxComboFileBytes);
  if (!text) return std::unexpected(text.error());
  return parse_combos(*text, path == "-" ? "standard input" : path);
}

}  // namespace ipcfloor
