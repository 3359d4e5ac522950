#include "data/combo_io.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <limits>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "data/input_file.hpp"
#include "data/series_formats.hpp"

namespace ipcfloor {
namespace {

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

// Lines that are not blank: the header and the rows. A blank line takes no room.
std::size_t rows_in(std::string_view text) {
  std::size_t rows = 0;
  bool blank = true;
  for (const char c : text) {
    if (c == '\n') {
      rows += blank ? 0 : 1;
      blank = true;
    } else if (c != ' ' && c != '\t' && c != '\r') {
      blank = false;
    }
  }
  return rows + (blank ? 0 : 1);
}

std::string header_of(const ComboColumns& columns) {
  std::string header;
  for (std::size_t c = 0; c < columns.count; ++c) header += fmt::format("{}{}", c == 0 ? "" : ",", columns.names[c]);
  return header;
}

// Where a CSV's columns are: the header's field count and the field of each column.
struct CsvLayout {
  std::size_t fields = 0;
  std::array<std::size_t, 6> column{};
};

// A CSV row's combo (`layout`: where each column is). False, with the reason in *error when
// error is not null, when it does not parse: the first column, in the columns' order, that does not.
bool parse_csv_row(std::string_view line, std::size_t number, const ComboColumns& columns, const CsvLayout& layout,
                   Combo& combo, std::string* error) {
  const std::size_t fields = static_cast<std::size_t>(std::count(line.begin(), line.end(), ',')) + 1;
  if (fields != layout.fields) {
    if (error != nullptr) *error = fmt::format("line {} has {} fields, the header {}", number, fields, layout.fields);
    return false;
  }
  std::array<std::int64_t, 6> windows{};
  std::size_t bad = columns.count;
  std::string_view bad_field;
  for_each_field(line, [&](std::size_t index, std::string_view field) {
    for (std::size_t c = 0; c < columns.count; ++c) {
      if (layout.column[c] != index) continue;
      const auto [end, failed] = std::from_chars(field.data(), field.data() + field.size(), windows[c]);
      if ((field.empty() || failed != std::errc{} || end != field.data() + field.size()) && c < bad) {
        bad = c;
        bad_field = field;
      }
    }
  });
  if (bad < columns.count) {
    if (error != nullptr) *error = fmt::format("line {}: {} '{}' is not a whole number", number, columns.names[bad], bad_field);
    return false;
  }
  combo = Combo{windows[0], windows[1], windows[2], windows[3], windows[4], windows[5]};
  return true;
}

bool parse_json_row(std::string_view line, std::size_t number, const ComboColumns& columns, Combo& combo,
                    std::string* error) {
  const auto refuse = [error](std::string why) {
    if (error != nullptr) *error = std::move(why);
    return false;
  };
  const nlohmann::json object = nlohmann::json::parse(line.begin(), line.end(), nullptr, false);
  if (object.is_discarded() || !object.is_object()) return refuse(fmt::format("line {} is not a JSON object", number));
  std::array<std::int64_t, 6> windows{};
  if (object.contains("params")) {
    const auto& params = object["params"];
    if (!params.is_array() || (params.size() != 6 && params.size() != columns.count))
      return refuse(fmt::format("line {}: \"params\" must be an array of {} whole numbers (or six, the unused ones 0)",
                                number, columns.count));
    for (std::size_t c = 0; c < params.size(); ++c) {
      if (!params[c].is_number_integer())
        return refuse(fmt::format("line {}: params[{}] ({}) is not a whole number", number, c, params[c].dump()));
      windows[c] = params[c].get<std::int64_t>();
    }
  } else {
    for (std::size_t c = 0; c < columns.count; ++c) {
      const std::string key(columns.names[c]);
      if (!object.contains(key) || !object[key].is_number_integer())
        return refuse(fmt::format("line {}: \"{}\" is missing or not a whole number (write {} or \"params\":[...])",
                                  number, key, header_of(columns)));
      windows[c] = object[key].get<std::int64_t>();
    }
  }
  combo = Combo{windows[0], windows[1], windows[2], windows[3], windows[4], windows[5]};
  return true;
}

// The header's layout, or the error naming the column it lacks.
Expected<CsvLayout> read_header(std::string_view header, std::size_t number, std::string_view source,
                                const ComboColumns& columns) {
  CsvLayout layout;
  std::array<bool, 6> found{};
  layout.fields = for_each_field(header, [&](std::size_t index, std::string_view name) {
    for (std::size_t c = 0; c < columns.count; ++c)
      if (!found[c] && name == columns.names[c]) {
        found[c] = true;
        layout.column[c] = index;
      }
  });
  for (std::size_t c = 0; c < columns.count; ++c)
    if (!found[c])
      return fail(ErrorCode::bad_data, "{}: line {}: the header '{}' has no column '{}'; a combo CSV has the header "
                  "{}", source, number, trim(header), columns.names[c], header_of(columns));
  return layout;
}

// Refuses rows the host cannot back, counted from the text's lines before anything is allocated.
Expected<void> check_room(std::size_t rows, std::size_t params, std::string_view source,
                          std::size_t kept_bytes_per_row) {
  const std::size_t per_row = ComboRows::bytes_per_row(params) + kept_bytes_per_row;
  const std::size_t need = rows != 0 && kept_bytes_per_row > std::numeric_limits<std::size_t>::max() / 2 / rows
                               ? std::numeric_limits<std::size_t>::max()
                               : rows * per_row;
  const auto available = available_memory_bytes();
  if (available && need > *available)
    return fail(ErrorCode::resource, "{}: its {} rows take up to {} once parsed ({} bytes a row{}), more than the {} "
                "this host has available (MemAvailable, or the cgroup's memory.max): split the file or free memory",
                source, rows, byte_size_text(need), per_row, kept_bytes_per_row > 0 ? ", with what the sweep keeps" : "",
                byte_size_text(*available));
  return {};
}

}  // namespace

ComboColumns columns_of(const Strategy& strategy) noexcept {
  ComboColumns columns;
  columns.count = strategy.param_count();
  for (std::size_t c = 0; c < columns.count; ++c) columns.names[c] = strategy.param_name(static_cast<std::uint32_t>(c));
  return columns;
}

ComboRows ComboRows::of(std::vector<Combo> combos) {
  ComboRows rows;
  rows.rows_ = combos.size();
  rows.stride_ = 6;
  rows.values_.reserve(combos.size() * 6);
  for (const Combo& combo : combos)
    for (const std::int64_t value : combo.as_array()) rows.values_.push_back(value);
  return rows;
}

Combo ComboRows::combo(std::size_t i) const noexcept {
  std::array<std::int64_t, 6> values{};
  for (std::size_t c = 0; c < stride_; ++c) values[c] = values_[i * stride_ + c];
  return Combo{values[0], values[1], values[2], values[3], values[4], values[5]};
}

std::size_t ComboRows::line(std::size_t i) const noexcept {
  if (offsets_.empty()) return 0;
  const std::size_t mark = i / kRowsPerLineMark;
  const std::size_t from = offsets_[mark * kRowsPerLineMark];
  return line_marks_[mark] + static_cast<std::size_t>(std::count(text_.begin() + static_cast<std::ptrdiff_t>(from),
                                                                 text_.begin() + offsets_[i], '\n'));
}

ComboLine ComboRows::operator[](std::size_t i) const {
  ComboLine row;
  row.line = line(i);
  row.combo = combo(i);
  if (parsed(i)) return row;
  ComboColumns columns;
  columns.count = count_;
  for (std::size_t c = 0; c < count_; ++c) columns.names[c] = names_[c];
  const std::string_view line = line_at(text_, offsets_[i]);
  row.raw = series_formats::snippet(trim(line));
  Combo ignored{};
  (void)(json_ ? parse_json_row(line, row.line, columns, ignored, &row.error)
               : parse_csv_row(line, row.line, columns, CsvLayout{header_fields_, column_}, ignored, &row.error));
  return row;
}

Expected<ComboRows> parse_combos(std::string text, std::string_view source, const ComboColumns& columns,
                                 std::size_t kept_bytes_per_row) {
  if (text.size() >= std::numeric_limits<std::uint32_t>::max())
    return fail(ErrorCode::invalid_argument, "{} is larger than a combo file may be", source);
  const std::size_t room_rows = rows_in(text);
  // A CSV row holds the strategy's parameters only; a JSON row's "params" may hold all six (the
  // unused ones must be 0, which admission checks), so it keeps six.
  const auto first_char = text.find_first_not_of(" \t\r\n");
  const std::size_t stride = first_char != std::string::npos && text[first_char] == '{' ? 6 : columns.count;
  if (auto room = check_room(room_rows, stride, source, kept_bytes_per_row); !room)
    return std::unexpected(room.error());
  ComboRows rows;
  rows.count_ = columns.count;
  rows.stride_ = stride;
  for (std::size_t c = 0; c < columns.count; ++c) rows.names_[c] = std::string(columns.names[c]);
  rows.text_ = std::move(text);
  const std::string_view all = rows.text_;
  CsvLayout layout;
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
        auto header = read_header(line, number, source, columns);
        if (!header) return std::unexpected(header.error());
        layout = *header;
        rows.header_fields_ = layout.fields;
        rows.column_ = layout.column;
        continue;
      }
    }
    if (rows.offsets_.capacity() == 0) {  // the first row: room for every row, as check_room counted
      rows.values_.reserve(room_rows * rows.stride_);
      rows.offsets_.reserve(room_rows);
      rows.line_marks_.reserve(room_rows / ComboRows::kRowsPerLineMark + 1);
      rows.parsed_.reserve(room_rows);
    }
    Combo combo{};
    const bool parsed = rows.json_ ? parse_json_row(line, number, columns, combo, nullptr)
                                   : parse_csv_row(line, number, columns, layout, combo, nullptr);
    const auto values = parsed ? combo.as_array() : std::array<std::int64_t, 6>{};
    rows.values_.insert(rows.values_.end(), values.begin(), values.begin() + static_cast<std::ptrdiff_t>(rows.stride_));
    if (rows.rows_ % ComboRows::kRowsPerLineMark == 0) rows.line_marks_.push_back(static_cast<std::uint32_t>(number));
    rows.offsets_.push_back(static_cast<std::uint32_t>(offset));
    rows.parsed_.push_back(parsed ? 1 : 0);
    ++rows.rows_;
  }
  if (first) return fail(ErrorCode::bad_data, "{} holds no combos", source);
  return rows;
}

Expected<ComboInput> read_combo_input(const std::string& path) {
  auto input = InputFile::open(path, "combo file");
  if (!input) return std::unexpected(input.error());
  ComboInput read_in;
  auto read = input->read_all(kMaxComboFileBytes, [&read_in](std::size_t bytes) {
    read_in.text.resize(bytes);
    return read_in.text.data();
  });
  if (!read) return std::unexpected(read.error());
  read_in.text.resize(*read);
  read_in.source = input->name();
  return read_in;
}

Expected<ComboRows> load_combos(const std::string& path, const ComboColumns& columns, std::size_t kept_bytes_per_row) {
  auto input = read_combo_input(path);
  if (!input) return std::unexpected(input.error());
  return parse_combos(std::move(input->text), input->source, columns, kept_bytes_per_row);
}

}  // namespace ipcfloor
