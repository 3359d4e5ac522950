#include "kernel/combo_io.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernel/input_file.hpp"
#include "kernel/series_formats.hpp"

namespace ipcfloor {
namespace {

constexpr std::array<std::string_view, 6> kColumns = {"h", "L", "s", "p3", "p2", "p"};

using series_formats::trim;

// Calls visit(index, field) for every comma-separated field of `line`, trimmed; returns how many.
template <class Visit>
std::size_t for_each_field(std::string_view line, Visit&& visit) {
  std::size_t index = 0;
  std::size_t start = 0;
  for (;;) {
    const auto end = line.find(',', start);
    visit(index++, trim(line.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start)));
    if (end == std::string_view::npos) return index;
    start = end + 1;
  }
}

// The line that starts at `offset`, without its newline.
std::string_view line_at(std::string_view text, std::size_t offset) {
  const auto end = text.find('\n', offset);
  return text.substr(offset, end == std::string_view::npos ? std::string_view::npos : end - offset);
}

// A CSV row's windows (`column`: the field of each window). False, with the reason in *error
// when error is not null, when it does not parse.
bool parse_csv_row(std::string_view line, std::size_t number, std::size_t header_fields,
                   const std::array<std::size_t, 6>& column, Combo& combo, std::string* error) {
  const std::size_t fields = static_cast<std::size_t>(std::count(line.begin(), line.end(), ',')) + 1;
  if (fields != header_fields) {
    if (error != nullptr) *error = fmt::format("line {} has {} fields, the header {}", number, fields, header_fields);
    return false;
  }
  std::array<std::int64_t, 6> windows{};
  std::size_t bad = kColumns.size();  // the first window (in h,L,s,p3,p2,p order) that does not parse
  std::string_view bad_field;
  for_each_field(line, [&](std::size_t index, std::string_view field) {
    for (std::size_t c = 0; c < kColumns.size(); ++c) {
      if (column[c] != index) continue;
      const auto [end, failed] = std::from_chars(field.data(), field.data() + field.size(), windows[c]);
      if ((field.empty() || failed != std::errc{} || end != field.data() + field.size()) && c < bad) {
        bad = c;
        bad_field = field;
      }
    }
  });
  if (bad < kColumns.size()) {
    if (error != nullptr) *error = fmt::format("line {}: {} '{}' is not a whole number", number, kColumns[bad], bad_field);
    return false;
  }
  combo = Combo{windows[0], windows[1], windows[2], windows[3], windows[4], windows[5]};
  return true;
}

bool parse_json_row(std::string_view line, std::size_t number, Combo& combo, std::string* error) {
  const auto refuse = [&](std::string why) {
    if (error != nullptr) *error = std::move(why);
    return false;
  };
  const nlohmann::json object = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (object.is_discarded() || !object.is_object()) return refuse(fmt::format("line {} is not a JSON object", number));
  std::array<std::int64_t, 6> windows{};
  if (object.contains("params")) {
    const auto& params = object["params"];
    if (!params.is_array() || params.size() != 6)
      return refuse(fmt::format("line {}: \"params\" must be an array of six whole numbers", number));
    for (std::size_t c = 0; c < 6; ++c) {
      if (!params[c].is_number_integer())
        return refuse(fmt::format("line {}: params[{}] ({}) is not a whole number", number, c, params[c].dump()));
      windows[c] = params[c].get<std::int64_t>();
    }
  } else {
    for (std::size_t c = 0; c < kColumns.size(); ++c) {
      const std::string key(kColumns[c]);
      if (!object.contains(key) || !object[key].is_number_integer())
        return refuse(fmt::format("line {}: \"{}\" is missing or not a whole number (write h, L, s, p3, p2, p or "
                                  "\"params\":[six windows])", number, key));
      windows[c] = object[key].get<std::int64_t>();
    }
  }
  combo = Combo{windows[0], windows[1], windows[2], windows[3], windows[4], windows[5]};
  return true;
}

// The header's fields and the field of each window, or the error naming the missing one.
Expected<void> read_header(std::string_view header, std::size_t number, std::string_view source,
                           std::size_t& fields, std::array<std::size_t, 6>& column) {
  std::array<bool, 6> found{};
  fields = for_each_field(header, [&](std::size_t index, std::string_view name) {
    for (std::size_t c = 0; c < kColumns.size(); ++c)
      if (!found[c] && name == kColumns[c]) {
        found[c] = true;
        column[c] = index;
      }
  });
  for (std::size_t c = 0; c < kColumns.size(); ++c)
    if (!found[c])
      return fail(ErrorCode::bad_data, "{}: line {}: the header '{}' has no column '{}'; a combo CSV has the header "
                  "h,L,s,p3,p2,p", source, number, trim(header), kColumns[c]);
  return {};
}

// Refuses rows the host cannot back, counted from the text's lines before anything is allocated.
Expected<void> check_room(std::string_view text, std::string_view source, std::size_t kept_bytes_per_row) {
  const std::size_t lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  const std::size_t per_row = ComboRows::kBytesPerRow + kept_bytes_per_row;
  const std::size_t need = lines * per_row;
  const auto available = available_memory_bytes();
  if (available && need > *available)
    return fail(ErrorCode::resource, "{}: its {} lines take up to {} once parsed ({} bytes a row{}), more than the {} "
                "this host has available (MemAvailable, or the cgroup's memory.max): split the file or free memory",
                source, lines, byte_size_text(need), per_row, kept_bytes_per_row > 0 ? ", with what the sweep keeps" : "",
                byte_size_text(*available));
  return {};
}

}  // namespace

ComboLine ComboRows::operator[](std::size_t i) const {
  ComboLine row;
  row.line = lines_[i];
  row.combo = combos_[i];
  if (parsed(i)) return row;
  const std::string_view line = line_at(text_, offsets_[i]);
  row.raw = series_formats::snippet(trim(line));
  Combo ignored{};
  (void)(json_ ? parse_json_row(line, row.line, ignored, &row.error)
               : parse_csv_row(line, row.line, header_fields_, column_, ignored, &row.error));
  return row;
}

Expected<ComboRows> parse_combos(std::string text, std::string_view source, std::size_t kept_bytes_per_row) {
  if (text.size() > std::numeric_limits<std::uint32_t>::max())
    return fail(ErrorCode::invalid_argument, "{} is larger than a combo file may be", source);
  if (auto room = check_room(text, source, kept_bytes_per_row); !room) return std::unexpected(room.error());
  ComboRows rows;
  rows.text_ = std::move(text);
  const std::string_view all = rows.text_;
  const std::size_t lines = static_cast<std::size_t>(std::count(all.begin(), all.end(), '\n')) + 1;
  bool first = true;
  std::size_t number = 0;
  for (std::size_t start = 0; start <= all.size();) {
    const std::string_view line = line_at(all, start);
    const std::size_t offset = start;
    start += line.size() + 1;
    ++number;
    if (trim(line).empty()) continue;
    if (first) {
      first = false;
      rows.json_ = trim(line).front() == '{';
      if (!rows.json_) {
        auto header = read_header(line, number, source, rows.header_fields_, rows.column_);
        if (!header) return std::unexpected(header.error());
        continue;
      }
    }
    if (rows.combos_.capacity() == 0) {  // the first row: room for every line, counted by check_room
      for (auto* column : {&rows.lines_, &rows.offsets_}) column->reserve(lines);
      rows.combos_.reserve(lines);
      rows.parsed_.reserve(lines);
    }
    Combo combo{};
    const bool parsed = rows.json_ ? parse_json_row(line, number, combo, nullptr)
                                   : parse_csv_row(line, number, rows.header_fields_, rows.column_, combo, nullptr);
    rows.combos_.push_back(parsed ? combo : Combo{});
    rows.lines_.push_back(static_cast<std::uint32_t>(number));
    rows.offsets_.push_back(static_cast<std::uint32_t>(offset));
    rows.parsed_.push_back(parsed ? 1 : 0);
  }
  if (first) return fail(ErrorCode::bad_data, "{} holds no combos", source);
  return rows;
}

Expected<ComboRows> load_combos(const std::string& path, std::size_t kept_bytes_per_row) {
  auto input = InputFile::open(path, "combo file");
  if (!input) return std::unexpected(input.error());
  std::string text;
  auto read = input->read_all(kMaxComboFileBytes, [&text](std::size_t bytes) {
    text.resize(bytes);
    return text.data();
  });
  if (!read) return std::unexpected(read.error());
  text.resize(*read);
  return parse_combos(std::move(text), input->name(), kept_bytes_per_row);
}

}  // namespace ipcfloor
