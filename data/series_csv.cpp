#include "data/series_formats.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <charconv>
#include <expected>
#include <iterator>
#include <optional>
#include <system_error>

#include <fmt/format.h>

#include "data/series_io.hpp"

namespace ipcfloor::series_formats {
namespace {

struct CsvCell {
  std::string_view text;  // trimmed; for a quoted cell, what is between the quotes
  bool quoted = false;
};

// One data record as parse_csv needs it: its cell count, whether it is a blank line, and the
// cell of each column the layout names. Flat fields rather than CsvCell copies: copying a cell
// struct per bar made the loop stall on store forwarding.
struct CsvRow {
  std::size_t cells = 0;
  bool blank = false;
  std::uint32_t has = 0;  // IPCFLOOR_COLUMN_* bits of the cells the record holds
  std::string_view cell[kColumnCount];
};

// Walks CSV records over the whole file text. Quoted cells may hold commas and newlines
// ("" is an escaped quote and is left doubled in the cell text: no cell we read holds one).
class CsvScanner {
 public:
  explicit CsvScanner(std::string_view text)
      : text_(text), has_quotes_(text.find('"') != std::string_view::npos) {}

  [[nodiscard]] bool at_end() const { return pos_ >= text_.size(); }
  // The physical line number (1-based) where the next record starts.
  [[nodiscard]] std::size_t line() const { return line_; }
  // The last record as written, without its line ending.
  [[nodiscard]] std::string_view record_text() const {
    std::string_view text = trim(text_.substr(record_start_, record_end_ - record_start_));
    while (!text.empty() && text.back() == '\n') text = trim(text.substr(0, text.size() - 1));
    return text;
  }

  // Reads one record into `row`, keeping the cell of each column `layout` names; fails like
  // next_record. This is the per-bar loop.
  std::expected<void, std::string> next_row(const CsvColumnsLayout& layout, CsvRow& row) {
    record_start_ = pos_;
    const std::size_t newline = text_.find('\n', pos_);
    const std::size_t line_end = (newline == std::string_view::npos) ? text_.size() : newline;
    std::string_view line = text_.substr(pos_, line_end - pos_);
    const std::size_t known = layout.column_at.size();
    row.has = 0;
    if (has_quotes_ && line.find('"') != std::string_view::npos) {
      bool first_empty = false;
      bool first_quoted = false;
      auto cells = next_record([&](std::size_t index, const CsvCell& cell) {
        if (index == 0) {
          first_empty = cell.text.empty();
          first_quoted = cell.quoted;
        }
        if (index < known && layout.column_at[index] >= 0) {
          row.cell[layout.column_at[index]] = cell.text;
          row.has |= 1U << layout.column_at[index];
        }
      });
      if (!cells) return std::unexpected(std::move(cells.error()));
      row.cells = *cells;
      row.blank = (*cells == 1 && first_empty && !first_quoted);
      return {};
    }
    std::size_t index = 0;
    std::string_view first;
    for (;;) {
      const std::size_t comma = line.find(',');
      const std::string_view cell = trim(line.substr(0, comma));
      if (index == 0) first = cell;
      if (index < known && layout.column_at[index] >= 0) {
        row.cell[layout.column_at[index]] = cell;
        row.has |= 1U << layout.column_at[index];
      }
      ++index;
      if (comma == std::string_view::npos) break;
      line.remove_prefix(comma + 1);
    }
    row.cells = index;
    row.blank = index == 1 && first.empty();
    record_end_ = line_end;
    pos_ = line_end;
    if (newline != std::string_view::npos) {
      ++pos_;
      ++line_;
    }
    return {};
  }

  // Reads one record with the full quote-aware walk, calling visit(index, cell) per cell;
  // returns the number of cells, or a phrase describing a broken quote.
  template <class Visit>
  std::expected<std::size_t, std::string> next_record(Visit&& visit) {
    record_start_ = pos_;
    std::size_t index = 0;
    for (;;) {
      while (pos_ < text_.size() && is_blank(text_[pos_])) ++pos_;
      CsvCell cell;
      if (pos_ < text_.size() && text_[pos_] == '"') {
        const std::size_t start = ++pos_;
        for (;;) {
          if (pos_ >= text_.size()) {
            record_end_ = pos_;
            return std::unexpected(std::string("a quoted cell is never closed"));
          }
          if (text_[pos_] == '"') {
            if (pos_ + 1 < text_.size() && text_[pos_ + 1] == '"') {
              pos_ += 2;
              continue;
            }
            break;
          }
          if (text_[pos_] == '\n') ++line_;
          ++pos_;
        }
        cell = {trim(text_.substr(start, pos_ - start)), true};
        ++pos_;  // the closing quote
        while (pos_ < text_.size() && is_blank(text_[pos_])) ++pos_;
        if (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '\n') {
          record_end_ = pos_;
          return std::unexpected(fmt::format("text '{}' follows a quoted cell",
                                             snippet(text_.substr(pos_, 10))));
        }
      } else {
        const std::size_t start = pos_;
        while (pos_ < text_.size() && text_[pos_] != ',' && text_[pos_] != '\n') ++pos_;
        cell = {trim(text_.substr(start, pos_ - start)), false};
      }
      visit(index++, cell);
      if (pos_ >= text_.size()) {
        record_end_ = pos_;
        return index;
      }
      if (text_[pos_] == '\n') {
        record_end_ = pos_;
        ++pos_;
        ++line_;
        return index;
      }
      ++pos_;  // the comma
    }
  }

 private:
  std::string_view text_;
  bool has_quotes_;  // false for most files: then no line needs a look for quotes
  std::size_t pos_ = 0;
  std::size_t line_ = 1;
  std::size_t record_start_ = 0;
  std::size_t record_end_ = 0;
};

// A cell of a CSV's first record, which is either its header or (a single column of closes
// without one) its first bar.
struct FirstCell {
  std::string_view text;
  bool quoted = false;
};

std::string_view header_name(const FirstCell& cell) {
  std::string_view name = cell.text;
  // Some writers single-quote names; a name really spelled 'x' is not worth supporting.
  if (!cell.quoted && name.size() >= 2 && name.front() == '\'' && name.back() == '\'') {
    name = trim(name.substr(1, name.size() - 2));
  }
  return name;
}

std::size_t count_newlines(std::string_view text) {
  // A plain loop the compiler vectorises; a find() per line costs a call per bar.
  std::size_t count = 0;
  for (const char c : text) count += (c == '\n') ? 1U : 0U;
  return count;
}

enum class NumberError { none, not_a_number, out_of_range };

// Correctly rounded, so the 17 significant digits save_series writes come back bit for bit.
NumberError parse_close(std::string_view text, double& value) {
  // from_chars rejects a leading '+', which spreadsheets and Python's float() accept.
  if (text.size() > 1 && text.front() == '+' && text[1] != '-' && text[1] != '+') {
    text.remove_prefix(1);
  }
  const char* const end = text.data() + text.size();
  const auto [stop, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range && stop == end) return NumberError::out_of_range;
  if (ec != std::errc{} || stop != end) return NumberError::not_a_number;
  return NumberError::none;
}

// The header's cell of each column it names (column_named: --column's or `close`, then open, high,
// low, volume), each named once; a close column is required. Any other cell (a date or time among
// them) is kept out of the numbers.
Expected<CsvColumnsLayout> columns_of_header(const std::vector<std::string_view>& names, std::string_view column,
                                             const std::string& path) {
  CsvColumnsLayout layout;
  layout.cells = names.size();
  layout.columns = 0;
  layout.column_at.assign(names.size(), -1);
  for (std::size_t i = 0; i < names.size(); ++i) {
    const auto named = column_named(names[i], column);
    if (!named) continue;
    const auto k = static_cast<std::size_t>(*named);
    if ((layout.columns & column_bit(*named)) != 0) {
      const std::string_view what = *named == Column::close && !column.empty() ? column : kColumnNames[k];
      return fail(ErrorCode::bad_data,
                  "{}: the header has two '{}' columns (columns {} and {}); which one is the {} is ambiguous", path,
                  snippet(what), layout.cell_of[k] + 1, i + 1, *named == Column::close ? "series" : kColumnNames[k]);
    }
    layout.columns |= column_bit(*named);
    layout.cell_of[k] = i;
    layout.column_at[i] = static_cast<std::int8_t>(k);
  }
  if ((layout.columns & IPCFLOOR_COLUMN_CLOSE) != 0) return layout;
  const std::string_view wanted = column.empty() ? std::string_view("close") : column;
  if (names.size() == 1 && names.front().empty()) {
    return fail(ErrorCode::bad_data, "{}: no '{}' column: the header row (line 1) is empty", path,
                snippet(wanted));
  }
  std::string found;
  for (const auto name : names) {
    if (!found.empty()) found += ", ";
    found += fmt::format("'{}'", snippet(name));
  }
  return fail(ErrorCode::bad_data, "{}: no '{}' column in the header (line 1); columns found: {}{}", path,
              snippet(wanted), found,
              column.empty() ? "; --column NAME picks another one (e.g. --column 'Adj Close')" : "");
}

// The one rule every CSV reader follows (a file, `--data -`, feed's standard input): a first
// record that is a single number starts a headerless column of closes; anything else is the
// header, which names the close column (`close`, or the one `column` names) and the others.
Expected<CsvColumnsLayout> csv_layout(const std::vector<FirstCell>& first, std::string_view column,
                                      const std::string& path) {
  const bool numbers = !first.empty() && std::all_of(first.begin(), first.end(), [](const FirstCell& cell) {
    double value = 0.0;
    return !cell.quoted && !cell.text.empty() && parse_close(cell.text, value) == NumberError::none;
  });
  if (numbers && first.size() == 1) {
    if (!column.empty()) {
      return fail(ErrorCode::bad_data,
                  "{}: --column '{}' names a column, but the input has no header row (line 1 is the close "
                  "{}): a single column of closes needs no --column",
                  path, snippet(column), snippet(first.front().text));
    }
    CsvColumnsLayout layout;
    layout.headerless = true;
    layout.column_at = {0};
    return layout;
  }
  if (numbers) {
    return fail(ErrorCode::bad_data,
                "{}: line 1 holds {} numbers, not column names: a CSV of several columns needs a header row "
                "naming them (a 'close' column, or the one --column names)",
                path, first.size());
  }
  std::vector<std::string_view> names;
  for (const FirstCell& cell : first) names.push_back(header_name(cell));
  return columns_of_header(names, column, path);
}

// The number in one cell of column `c`, or why it holds none: "line N ..." after `path`.
Expected<double> number_of_cell(const CsvRow& row, const CsvColumnsLayout& layout, Column c, std::size_t line,
                                std::string_view record, const std::string& path) {
  const auto k = static_cast<std::size_t>(c);
  const std::string_view name = kColumnNames[k];
  if ((row.has & column_bit(c)) == 0) {
    return fail(ErrorCode::bad_data,
                "{}: line {} has no {} cell: the {} is column {} but the row has {} cell{}: '{}'", path, line, name,
                c == Column::close ? "series" : name, layout.cell_of[k] + 1, row.cells, row.cells == 1 ? "" : "s",
                snippet(record));
  }
  const std::string_view text = row.cell[k];
  if (text.empty()) {
    return fail(ErrorCode::bad_data, "{}: line {} has an empty {} cell: '{}'", path, line, name, snippet(record));
  }
  double value = 0.0;
  switch (parse_close(text, value)) {
    case NumberError::none:
      return value;
    case NumberError::not_a_number:
      return fail(ErrorCode::bad_data, "{}: line {}: the {} cell '{}' is not a number", path, line, name,
                  snippet(text));
    case NumberError::out_of_range:
      break;
  }
  return fail(ErrorCode::bad_data, "{}: line {}: the {} cell '{}' is outside the float64 range", path, line, name,
              snippet(text));
}

// The bar one data record holds (every column the layout names), or why it holds none.
Expected<Bar> bar_of_row(const CsvRow& row, const CsvColumnsLayout& layout, std::size_t line, std::string_view record,
                         const std::string& path) {
  // More cells than the header names means the columns are shifted, most often by a decimal
  // comma ("1,5"): reading on would load the wrong numbers without a word.
  if (row.cells > layout.cells) {
    return fail(ErrorCode::bad_data, "{}: line {} has {} cells but {} {} column{}: '{}'", path, line, row.cells,
                layout.headerless ? "the input is a headerless single" : "the header names", layout.cells,
                layout.cells == 1 ? "" : "s", snippet(record));
  }
  Bar bar;
  double* const slot[kColumnCount] = {&bar.close, &bar.open, &bar.high, &bar.low, &bar.volume};
  for (std::size_t k = 0; k < kColumnCount; ++k) {
    const auto c = static_cast<Column>(k);
    if ((layout.columns & column_bit(c)) == 0) continue;
    const auto value = number_of_cell(row, layout, c, line, record, path);
    if (!value) return std::unexpected(value.error());
    *slot[k] = *value;
  }
  return bar;
}

// The first record's cells, read by `scanner`.
Expected<std::vector<FirstCell>> read_first_record(CsvScanner& scanner, const std::string& path) {
  std::vector<FirstCell> first;
  auto read = scanner.next_record([&](std::size_t, const CsvCell& cell) { first.push_back({cell.text, cell.quoted}); });
  if (!read) return fail(ErrorCode::bad_data, "{}: line 1 (the header): {}", path, read.error());
  return first;
}

constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

// Where the columns' values go as the rows are read: the vectors `layout` names, reserved for
// `bars` bars.
struct ColumnSinks {
  std::vector<double>* of[kColumnCount] = {};
  ColumnSinks(SeriesColumns& series, const CsvColumnsLayout& layout, std::size_t bars) {
    for (std::size_t k = 0; k < kColumnCount; ++k) {
      if ((layout.columns & (1U << k)) == 0) continue;
      of[k] = &series.column(static_cast<Column>(k));
      of[k]->reserve(bars);
    }
  }
  void push(const Bar& bar) {
    for (std::size_t k = 0; k < kColumnCount; ++k)
      if (of[k] != nullptr) of[k]->push_back(bar.column(static_cast<Column>(k)));
  }
};

// The text after a UTF-8 BOM, and its CSV layout from the first record.
Expected<CsvColumnsLayout> layout_of_text(std::string_view& text, CsvScanner& scanner, const std::string& path,
                                          std::string_view column) {
  if (text.starts_with(kUtf8Bom)) text.remove_prefix(kUtf8Bom.size());
  scanner = CsvScanner(text);
  const auto first = read_first_record(scanner, path);
  if (!first) return std::unexpected(first.error());
  auto layout = csv_layout(*first, column, path);
  // A headerless column's first line is its first bar: read from the start again.
  if (layout && layout->headerless) scanner = CsvScanner(text);
  return layout;
}

}  // namespace

Expected<SeriesColumns> parse_csv(std::string_view text, const std::string& path, std::string_view column) {
  CsvScanner scanner(text);
  const auto layout = layout_of_text(text, scanner, path, column);
  if (!layout) return std::unexpected(layout.error());
  // One bar per remaining line at most; counting newlines is far cheaper than regrowing.
  const std::size_t most_bars = count_newlines(text) + 1;
  if (auto room = check_parsed_room(most_bars, static_cast<std::size_t>(std::popcount(layout->columns)), path); !room)
    return std::unexpected(room.error());
  SeriesColumns series;
  ColumnSinks sinks(series, *layout, most_bars);
  std::size_t blank_line = 0;  // the first blank line seen, 0 while none
  CsvRow row;
  while (!scanner.at_end()) {
    const std::size_t line = scanner.line();
    if (auto read = scanner.next_row(*layout, row); !read) {
      return fail(ErrorCode::bad_data, "{}: line {}: {}: '{}'", path, line, read.error(),
                  snippet(scanner.record_text()));
    }
    if (row.blank) {
      if (blank_line == 0) blank_line = line;
      continue;
    }
    // Blank lines at the end are harmless; one in the middle may hide a lost or merged file.
    if (blank_line != 0) {
      return fail(ErrorCode::bad_data,
                  "{}: line {} is blank but data rows follow (line {}); a blank line is not a "
                  "bar",
                  path, blank_line, line);
    }
    const auto bar = bar_of_row(row, *layout, line, scanner.record_text(), path);
    if (!bar) return std::unexpected(bar.error());
    sinks.push(*bar);
  }
  if (series.close.empty()) {
    return fail(ErrorCode::bad_data, "{}: the CSV has a header but no data rows", path);
  }
  return series;
}

std::size_t csv_line_of_bar(std::string_view text, std::size_t bar) {
  CsvScanner scanner(text);
  const auto layout = layout_of_text(text, scanner, "", {});
  // Only a text parse_csv read is asked about, so its layout is one a close column can have: any.
  CsvColumnsLayout any;
  const CsvColumnsLayout& walk = layout ? *layout : any;
  CsvRow row;
  std::size_t seen = 0;
  while (!scanner.at_end()) {
    const std::size_t line = scanner.line();
    if (!scanner.next_row(walk, row)) return 0;
    if (row.blank) continue;
    if (seen++ == bar) return line;
  }
  return 0;
}

void append_csv(std::string& out, std::span<const double> values) {
  // 17 significant digits always round-trip a binary64; a bar is at most ~24 characters.
  out.reserve(out.size() + 6 + values.size() * 24);
  out += "close\n";
  auto sink = std::back_inserter(out);
  for (const double v : values) fmt::format_to(sink, "{:.17g}\n", v);
}

}  // namespace ipcfloor::series_formats

namespace ipcfloor {

CsvBarStream::CsvBarStream(std::string column, std::string source)
    : column_(std::move(column)), source_(std::move(source)) {}

Expected<std::optional<Bar>> CsvBarStream::take(std::string_view line) {
  using namespace series_formats;
  ++line_;
  if (line_ == 1 && line.starts_with(kUtf8Bom)) line.remove_prefix(kUtf8Bom.size());
  if (trim(line).empty()) return std::optional<Bar>();
  CsvScanner scanner(line);
  if (!decided_) {
    const auto first = read_first_record(scanner, source_);
    if (!first) return std::unexpected(first.error());
    auto layout = csv_layout(*first, column_, source_);
    if (!layout) return std::unexpected(layout.error());
    decided_ = true;
    layout_ = std::move(*layout);
    if (!layout_.headerless) return std::optional<Bar>();
    scanner = CsvScanner(line);
  }
  CsvRow row;
  if (auto read = scanner.next_row(layout_, row); !read)
    return fail(ErrorCode::bad_data, "{}: line {}: {}: '{}'", source_, line_, read.error(), snippet(line));
  const auto bar = bar_of_row(row, layout_, line_, line, source_);
  if (!bar) return std::unexpected(bar.error());
  // The close is the engine's to judge (an APPEND's bad_price), as it always was for a stream;
  // the other columns, which an APPEND does not carry, are checked here.
  if (const auto fault = check_bar(*bar, layout_.columns & ~IPCFLOOR_COLUMN_CLOSE))
    return fail(ErrorCode::bad_data, "{}: line {}: {}", source_, line_, bar_fault_text(*bar, *fault));
  return std::optional<Bar>(*bar);
}

}  // namespace ipcfloor
