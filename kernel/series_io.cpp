#include "kernel/series_io.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <system_error>
#include <utility>

#include <fmt/format.h>

namespace ipcfloor {
namespace {

constexpr std::string_view kNpyMagic{"\x93NUMPY", 6};
// numpy pads the preamble plus header to a multiple of 64 so the data is cache-line aligned
// when the file is memory-mapped; we do the same so our files look like numpy's.
constexpr std::size_t kNpyAlignment = 64;
constexpr std::string_view kNpyDtype = "<f8";
// Nesting allowed in a .npy header dict; real headers nest one level (the shape tuple), the
// limit only keeps a hostile file from recursing deep.
constexpr int kMaxLiteralDepth = 16;
// Quoted file text in messages is cut to this many characters so one bad row cannot flood
// the terminal.
constexpr std::size_t kMaxSnippet = 60;
constexpr std::size_t kBytesPerBar = sizeof(double);

static_assert(sizeof(double) == 8 && std::numeric_limits<double>::is_iec559,
              "the series formats are IEEE-754 binary64");

// Thread-safe, unlike std::strerror.
std::string os_reason(int err) { return std::system_category().message(err); }

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(),
                    [](char x, char y) { return ascii_lower(x) == ascii_lower(y); });
}

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// File text quoted in a message: control and non-ASCII bytes escaped, long text cut.
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

// A whole file's bytes, stored in doubles so a raw or .npy series is decoded in place and
// handed back without a copy. In a fresh process every page of a new buffer costs a page
// fault (tens of microseconds on some VMs), so the series is the only large buffer a raw or
// .npy load touches.
struct FileBytes {
  std::vector<double> storage;
  std::size_t size = 0;

  [[nodiscard]] std::string_view view() const {
    return {reinterpret_cast<const char*>(storage.data()), size};
  }
  // Moves `bars` values starting at byte `offset` to the front and returns them as the series.
  std::vector<double> take_series(std::size_t offset, std::size_t bars) {
    if (bars > 0 && offset > 0) {
      std::memmove(storage.data(), view().data() + offset, bars * kBytesPerBar);
    }
    storage.resize(bars);
    if constexpr (std::endian::native == std::endian::big) {
      for (double& v : storage) {
        v = std::bit_cast<double>(std::byteswap(std::bit_cast<std::uint64_t>(v)));
      }
    }
    return std::move(storage);
  }
};

// ---- Raw little-endian float64 ----------------------------------------------------------

void append_le_f64(std::string& out, std::span<const double> values) {
  const std::size_t at = out.size();
  out.resize(at + values.size() * kBytesPerBar);
  if (!values.empty()) std::memcpy(out.data() + at, values.data(), values.size() * kBytesPerBar);
  if constexpr (std::endian::native == std::endian::big) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto swapped = std::byteswap(std::bit_cast<std::uint64_t>(values[i]));
      std::memcpy(out.data() + at + i * kBytesPerBar, &swapped, kBytesPerBar);
    }
  }
}

Expected<std::vector<double>> take_raw(FileBytes& file, const std::string& path) {
  if (file.size % kBytesPerBar != 0) {
    return fail(ErrorCode::bad_data,
                "{}: truncated: {} bytes is not a whole number of float64 values (8 bytes each)",
                path, file.size);
  }
  return file.take_series(0, file.size / kBytesPerBar);
}

// ---- .npy -------------------------------------------------------------------------------

// One value of the Python literal that is a .npy header. Only what the checks need is kept.
struct PyValue {
  enum class Kind { string, boolean, integer, sequence, other };
  Kind kind = Kind::other;
  std::string_view text;       // a string's contents, or the literal as written
  bool flag = false;           // a boolean's value
  std::uint64_t number = 0;    // a non-negative integer's value
  std::vector<PyValue> items;  // a tuple's or list's elements
};

using PyDict = std::vector<std::pair<std::string_view, PyValue>>;

// A recursive-descent reader for the subset of Python literals numpy writes in a .npy header
// (dict, str, tuple, list, int, True/False/None). Errors are phrases; the caller adds the file.
class PyLiteralReader {
 public:
  explicit PyLiteralReader(std::string_view text) : text_(text) {}

  std::expected<PyDict, std::string> read_header_dict() {
    PyDict dict;
    if (auto ok = read_dict(0, &dict); !ok) return std::unexpected(ok.error());
    skip_space();
    if (pos_ != text_.size()) {
      return std::unexpected(fmt::format("unexpected text after the dict: '{}'",
                                         snippet(text_.substr(pos_))));
    }
    return dict;
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() && (is_blank(text_[pos_]) || text_[pos_] == '\n')) ++pos_;
  }

  bool take(char c) {
    skip_space();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  std::unexpected<std::string> error(std::string_view what) const {
    return std::unexpected(fmt::format("{} at offset {}", what, pos_));
  }

  // Reads `{key: value, ...}`; stores the pairs in `out` when it is not null.
  std::expected<void, std::string> read_dict(int depth, PyDict* out) {
    if (!take('{')) return error("expected '{'");
    for (;;) {
      if (take('}')) return {};
      auto key = read_value(depth + 1);
      if (!key) return std::unexpected(key.error());
      if (key->kind != PyValue::Kind::string) return error("a dict key is not a string");
      if (!take(':')) return error("expected ':' after a dict key");
      auto value = read_value(depth + 1);
      if (!value) return std::unexpected(value.error());
      if (out != nullptr) out->emplace_back(key->text, std::move(*value));
      if (take('}')) return {};
      if (!take(',')) return error("expected ',' or '}' in the dict");
    }
  }

  std::expected<PyValue, std::string> read_value(int depth) {
    if (depth > kMaxLiteralDepth) return error("nesting too deep");
    skip_space();
    if (pos_ >= text_.size()) return error("unexpected end of the header");
    const char c = text_[pos_];
    const std::size_t start = pos_;
    PyValue value;
    if (c == '\'' || c == '"') {
      ++pos_;
      while (pos_ < text_.size() && text_[pos_] != c) pos_ += (text_[pos_] == '\\') ? 2 : 1;
      if (pos_ >= text_.size()) return error("a string is never closed");
      value.kind = PyValue::Kind::string;
      value.text = text_.substr(start + 1, pos_ - start - 1);
      ++pos_;
    } else if (c == '(' || c == '[') {
      const char close = (c == '(') ? ')' : ']';
      ++pos_;
      value.kind = PyValue::Kind::sequence;
      while (!take(close)) {
        auto item = read_value(depth + 1);
        if (!item) return std::unexpected(item.error());
        value.items.push_back(std::move(*item));
        if (take(close)) break;
        if (!take(',')) return error("expected ',' in a tuple or list");
      }
    } else if (c == '{') {
      if (auto ok = read_dict(depth + 1, nullptr); !ok) return std::unexpected(ok.error());
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      if (c == '-') ++pos_;
      const std::size_t digits = pos_;
      while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
      if (pos_ == digits) return error("a '-' without digits");
      const auto [end, ec] = std::from_chars(text_.data() + digits, text_.data() + pos_, value.number);
      if (c != '-' && ec == std::errc{}) value.kind = PyValue::Kind::integer;
      // Python 2 era numpy wrote shapes as longs: (10L,).
      if (pos_ < text_.size() && (text_[pos_] == 'L' || text_[pos_] == 'l')) ++pos_;
    } else if (std::isalpha(static_cast<unsigned char>(c)) != 0) {
      while (pos_ < text_.size() && std::isalnum(static_cast<unsigned char>(text_[pos_])) != 0) ++pos_;
      const std::string_view word = text_.substr(start, pos_ - start);
      if (word == "True" || word == "False") {
        value.kind = PyValue::Kind::boolean;
        value.flag = (word == "True");
      } else if (word != "None") {
        pos_ = start;
        return error(fmt::format("unexpected name '{}'", snippet(word)));
      }
    } else {
      return error(fmt::format("unexpected character '{}'", snippet(text_.substr(pos_, 1))));
    }
    if (value.kind != PyValue::Kind::string) value.text = text_.substr(start, pos_ - start);
    return value;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

const PyValue* find_key(const PyDict& dict, std::string_view key) {
  for (const auto& [name, value] : dict) {
    if (name == key) return &value;
  }
  return nullptr;
}

// Spells a dtype string for a message: "'>f8' (big-endian float64)".
std::string describe_dtype(std::string_view descr) {
  std::string out = fmt::format("'{}'", snippet(descr));
  std::string_view rest = descr;
  std::string_view order;
  if (!rest.empty() && (rest.front() == '<' || rest.front() == '>')) {
    order = (rest.front() == '<') ? "little-endian " : "big-endian ";
  }
  if (!rest.empty() && std::string_view("<>|=").find(rest.front()) != std::string_view::npos) {
    rest.remove_prefix(1);
  }
  if (rest.size() < 2) return out;
  unsigned bytes = 0;
  const auto [end, ec] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), bytes);
  if (ec != std::errc{} || end != rest.data() + rest.size()) return out;
  std::string_view kind;
  switch (rest.front()) {
    case 'f': kind = "float"; break;
    case 'i': kind = "int"; break;
    case 'u': kind = "uint"; break;
    case 'c': kind = "complex"; break;
    case 'b': return out + " (bool)";
    default: return out;
  }
  return fmt::format("{} ({}{}{})", out, order, kind, bytes * 8);
}

std::string describe_shape(const PyValue& shape) {
  std::string out = "(";
  for (std::size_t i = 0; i < shape.items.size(); ++i) {
    if (i > 0) out += ", ";
    out += snippet(shape.items[i].text);
  }
  if (shape.items.size() == 1) out += ',';
  return out + ")";
}

Expected<std::vector<double>> take_npy(FileBytes& file, const std::string& path) {
  const std::string_view bytes = file.view();
  const std::size_t magic_seen = std::min(bytes.size(), kNpyMagic.size());
  if (bytes.substr(0, magic_seen) != kNpyMagic.substr(0, magic_seen)) {
    return fail(ErrorCode::bad_data,
                "{}: not a .npy file: bad magic '{}' (a .npy starts with '\\x93NUMPY')", path,
                snippet(bytes.substr(0, kNpyMagic.size())));
  }
  if (bytes.size() < kNpyMagic.size() + 2) {
    return fail(ErrorCode::bad_data, "{}: truncated header: the file is only {} bytes", path,
                bytes.size());
  }
  const auto major = static_cast<unsigned char>(bytes[6]);
  const auto minor = static_cast<unsigned char>(bytes[7]);
  // Version 1.0 stores the header length in 2 bytes; 2.0 (long headers) and 3.0 (UTF-8
  // headers) in 4. The header text we need is ASCII in every version.
  std::size_t length_bytes = 0;
  if (major == 1) {
    length_bytes = 2;
  } else if (major == 2 || major == 3) {
    length_bytes = 4;
  } else {
    return fail(ErrorCode::bad_data,
                "{}: unsupported .npy format version {}.{} (1.0, 2.0 and 3.0 are read)", path,
                unsigned{major}, unsigned{minor});
  }
  const std::size_t preamble = kNpyMagic.size() + 2 + length_bytes;
  if (bytes.size() < preamble) {
    return fail(ErrorCode::bad_data,
                "{}: truncated header: the file is only {} bytes, shorter than the {}-byte "
                ".npy v{}.{} preamble",
                path, bytes.size(), preamble, unsigned{major}, unsigned{minor});
  }
  std::size_t header_length = 0;
  for (std::size_t i = 0; i < length_bytes; ++i) {
    header_length |= static_cast<std::size_t>(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  }
  if (header_length > bytes.size() - preamble) {
    return fail(ErrorCode::bad_data,
                "{}: truncated header: the header length field says {} bytes but only {} "
                "follow the preamble",
                path, header_length, bytes.size() - preamble);
  }
  const std::string_view header = bytes.substr(preamble, header_length);
  const std::string_view data = bytes.substr(preamble + header_length);

  auto dict = PyLiteralReader(header).read_header_dict();
  if (!dict) {
    return fail(ErrorCode::bad_data, "{}: malformed .npy header ({}): '{}'", path, dict.error(),
                snippet(header));
  }
  const PyValue* descr = find_key(*dict, "descr");
  const PyValue* fortran_order = find_key(*dict, "fortran_order");
  const PyValue* shape = find_key(*dict, "shape");
  if (descr == nullptr || fortran_order == nullptr || shape == nullptr) {
    return fail(ErrorCode::bad_data,
                "{}: malformed .npy header: it needs the keys 'descr', 'fortran_order' and "
                "'shape': '{}'",
                path, snippet(header));
  }
  if (descr->kind != PyValue::Kind::string) {
    return fail(ErrorCode::bad_data,
                "{}: dtype {} is a structured type; a series .npy must hold little-endian "
                "float64 ('<f8'), one value per bar",
                path, snippet(descr->text));
  }
  if (descr->text != kNpyDtype) {
    return fail(ErrorCode::bad_data,
                "{}: dtype {} is not accepted; a series .npy must hold little-endian float64 "
                "('<f8'): convert with arr.astype('<f8')",
                path, describe_dtype(descr->text));
  }
  if (fortran_order->kind != PyValue::Kind::boolean || fortran_order->flag) {
    return fail(ErrorCode::bad_data,
                "{}: fortran_order is {}; a series .npy must be in C order (fortran_order: "
                "False)",
                path, snippet(fortran_order->text));
  }
  if (shape->kind != PyValue::Kind::sequence ||
      !std::all_of(shape->items.begin(), shape->items.end(),
                   [](const PyValue& v) { return v.kind == PyValue::Kind::integer; })) {
    return fail(ErrorCode::bad_data,
                "{}: malformed .npy header: shape {} is not a tuple of non-negative integers",
                path, snippet(shape->text));
  }
  if (shape->items.size() != 1) {
    return fail(ErrorCode::bad_data,
                "{}: the array has shape {}, which is {}-D; a series .npy must be 1-D "
                "(save arr.ravel())",
                path, describe_shape(*shape), shape->items.size());
  }
  const std::uint64_t bars = shape->items.front().number;
  if (bars > data.size() / kBytesPerBar) {
    return fail(ErrorCode::bad_data,
                "{}: data truncated: shape ({},) needs {} bars but only {} bytes ({} whole "
                "bars) follow the header",
                path, bars, bars, data.size(), data.size() / kBytesPerBar);
  }
  if (data.size() != bars * kBytesPerBar) {
    return fail(ErrorCode::bad_data,
                "{}: {} stray bytes follow the {} bars that shape ({},) declares", path,
                data.size() - bars * kBytesPerBar, bars, bars);
  }
  return file.take_series(preamble + header_length, bars);
}

void append_npy(std::string& out, std::span<const double> values) {
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': ({},), }}",
                                   kNpyDtype, values.size());
  const std::size_t preamble = kNpyMagic.size() + 2 + 2;
  const std::size_t unpadded = preamble + header.size() + 1;  // +1: the closing '\n'
  const std::size_t padded = (unpadded + kNpyAlignment - 1) / kNpyAlignment * kNpyAlignment;
  header.append(padded - unpadded, ' ');
  header.push_back('\n');
  // A 1-D '<f8' header is under 100 bytes, far inside version 1.0's 16-bit length field.
  out.append(kNpyMagic);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xffU));
  out.push_back(static_cast<char>((header.size() >> 8) & 0xffU));
  out += header;
  append_le_f64(out, values);
}

// ---- CSV --------------------------------------------------------------------------------

struct CsvCell {
  std::string_view text;  // trimmed; for a quoted cell, what is between the quotes
  bool quoted = false;
};

// One data record as parse_csv needs it: its cell count, whether it is a blank line, and the
// close cell. Flat fields rather than CsvCell copies: copying a cell struct per bar made the
// loop stall on store forwarding.
struct CsvRow {
  std::size_t cells = 0;
  bool blank = false;
  bool has_close = false;
  std::string_view close;
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

  // Reads one record into `row`, keeping cell `column` as the close cell; fails like
  // next_record. This is the per-bar loop.
  std::expected<void, std::string> next_row(std::size_t column, CsvRow& row) {
    record_start_ = pos_;
    const std::size_t newline = text_.find('\n', pos_);
    const std::size_t line_end = (newline == std::string_view::npos) ? text_.size() : newline;
    std::string_view line = text_.substr(pos_, line_end - pos_);
    if (has_quotes_ && line.find('"') != std::string_view::npos) {
      bool first_empty = false;
      bool first_quoted = false;
      row.has_close = false;
      auto cells = next_record([&](std::size_t index, const CsvCell& cell) {
        if (index == 0) {
          first_empty = cell.text.empty();
          first_quoted = cell.quoted;
        }
        if (index == column) {
          row.close = cell.text;
          row.has_close = true;
        }
      });
      if (!cells) return std::unexpected(std::move(cells.error()));
      row.cells = *cells;
      row.blank = (*cells == 1 && first_empty && !first_quoted);
      return {};
    }
    std::size_t index = 0;
    row.has_close = false;
    row.blank = false;
    for (;;) {
      const std::size_t comma = line.find(',');
      if (index == column) {
        row.close = trim(line.substr(0, comma));
        row.has_close = true;
      }
      ++index;
      if (comma == std::string_view::npos) break;
      line.remove_prefix(comma + 1);
    }
    row.cells = index;
    if (index == 1 && !row.has_close) row.blank = trim(line).empty();
    if (index == 1 && row.has_close) row.blank = row.close.empty();
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

std::string_view header_name(const CsvCell& cell) {
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

Expected<std::vector<double>> parse_csv(std::string_view text, const std::string& path) {
  constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";
  if (text.starts_with(kUtf8Bom)) text.remove_prefix(kUtf8Bom.size());

  CsvScanner scanner(text);
  std::vector<std::string_view> names;
  if (auto header = scanner.next_record(
          [&](std::size_t, const CsvCell& cell) { names.push_back(header_name(cell)); });
      !header) {
    return fail(ErrorCode::bad_data, "{}: line 1 (the header): {}", path, header.error());
  }
  std::optional<std::size_t> column;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!iequals(names[i], "close")) continue;
    if (column) {
      return fail(ErrorCode::bad_data,
                  "{}: the header has two 'close' columns (columns {} and {}); which one is "
                  "the series is ambiguous",
                  path, *column + 1, i + 1);
    }
    column = i;
  }
  if (!column) {
    if (names.size() == 1 && names.front().empty()) {
      return fail(ErrorCode::bad_data,
                  "{}: no 'close' column: the header row (line 1) is empty", path);
    }
    std::string found;
    for (const auto name : names) {
      if (!found.empty()) found += ", ";
      found += fmt::format("'{}'", snippet(name));
    }
    return fail(ErrorCode::bad_data,
                "{}: no 'close' column in the header (line 1); columns found: {}", path, found);
  }

  std::vector<double> close;
  // One bar per remaining line at most; counting newlines is far cheaper than regrowing.
  close.reserve(count_newlines(text) + 1);
  std::size_t blank_line = 0;  // the first blank line seen, 0 while none
  CsvRow row;
  while (!scanner.at_end()) {
    const std::size_t line = scanner.line();
    if (auto read = scanner.next_row(*column, row); !read) {
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
    // More cells than the header names means the columns are shifted, most often by a
    // decimal comma ("1,5"): reading on would load the wrong numbers without a word.
    if (row.cells > names.size()) {
      return fail(ErrorCode::bad_data,
                  "{}: line {} has {} cells but the header names {} column{}: '{}'", path, line,
                  row.cells, names.size(), names.size() == 1 ? "" : "s",
                  snippet(scanner.record_text()));
    }
    if (!row.has_close) {
      return fail(ErrorCode::bad_data,
                  "{}: line {} has no close cell: the close column is column {} but the row "
                  "has {} cell{}: '{}'",
                  path, line, *column + 1, row.cells, row.cells == 1 ? "" : "s",
                  snippet(scanner.record_text()));
    }
    if (row.close.empty()) {
      return fail(ErrorCode::bad_data, "{}: line {} has an empty close cell: '{}'", path, line,
                  snippet(scanner.record_text()));
    }
    double value = 0.0;
    switch (parse_close(row.close, value)) {
      case NumberError::none:
        break;
      case NumberError::not_a_number:
        return fail(ErrorCode::bad_data, "{}: line {}: the close cell '{}' is not a number",
                    path, line, snippet(row.close));
      case NumberError::out_of_range:
        return fail(ErrorCode::bad_data,
                    "{}: line {}: the close cell '{}' is outside the float64 range", path, line,
                    snippet(row.close));
    }
    close.push_back(value);
  }
  if (close.empty()) {
    return fail(ErrorCode::bad_data, "{}: the CSV has a header but no data rows", path);
  }
  return close;
}

void append_csv(std::string& out, std::span<const double> values) {
  // 17 significant digits always round-trip a binary64; a bar is at most ~24 characters.
  out.reserve(out.size() + 6 + values.size() * 24);
  out += "close\n";
  auto sink = std::back_inserter(out);
  for (const double v : values) fmt::format_to(sink, "{:.17g}\n", v);
}

// ---- Files ------------------------------------------------------------------------------

class FdGuard {
 public:
  explicit FdGuard(int fd) : fd_(fd) {}
  FdGuard(const FdGuard&) = delete;
  FdGuard& operator=(const FdGuard&) = delete;
  ~FdGuard() {
    if (fd_ >= 0) ::close(fd_);
  }
  // Closes now so the caller can see close()'s error, which can report a failed write-back.
  int close_now() {
    const int rc = ::close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

Expected<FileBytes> read_whole_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return fail(ErrorCode::io, "{}: cannot open the series file: {}", path, os_reason(err));
  }
  FdGuard guard(fd);
  // Size the buffer from fstat so a regular file is read in one call; +1 so end of file is
  // seen without growing. Pipes and the like grow as they go.
  std::size_t capacity = 64 * 1024;
  struct stat info {};
  if (::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && info.st_size > 0) {
    capacity = static_cast<std::size_t>(info.st_size) + 1;
  }
  FileBytes file;
  file.storage.resize((capacity + kBytesPerBar - 1) / kBytesPerBar);
  std::size_t& used = file.size;
  for (;;) {
    if (used == file.storage.size() * kBytesPerBar) file.storage.resize(file.storage.size() * 2);
    char* const buffer = reinterpret_cast<char*>(file.storage.data());
    const ssize_t got = ::read(fd, buffer + used, file.storage.size() * kBytesPerBar - used);
    if (got < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return fail(ErrorCode::io, "{}: cannot read the series file: {}", path, os_reason(err));
    }
    if (got == 0) break;
    used += static_cast<std::size_t>(got);
  }
  return file;
}

Expected<void> write_file_atomically(const std::string& path, std::string_view bytes) {
  namespace fs = std::filesystem;
  // Unique per process and call, hidden, and in the target's directory so rename() is atomic.
  static std::atomic<unsigned> counter{0};
  const fs::path target(path);
  const fs::path temp = target.parent_path() /
                        fmt::format(".{}.tmp-{}-{}", target.filename().string(), ::getpid(),
                                    counter.fetch_add(1, std::memory_order_relaxed));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    return fail(ErrorCode::io, "{}: cannot create a temporary file next to it ({}): {}", path,
                temp.string(), os_reason(err));
  }
  FdGuard guard(fd);
  const auto abandon = [&](std::string_view what, int err) {
    ::unlink(temp.c_str());
    return fail(ErrorCode::io, "{}: {}: {}", path, what, os_reason(err));
  };
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t wrote = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (wrote < 0) {
      const int err = errno;
      if (err == EINTR) continue;
      return abandon("cannot write the series", err);
    }
    done += static_cast<std::size_t>(wrote);
  }
  // Without fsync the rename can reach the disk before the data, and a power cut would leave
  // an empty file under the final name.
  if (::fsync(fd) != 0) return abandon("cannot flush the series to disk", errno);
  if (guard.close_now() != 0) return abandon("cannot write the series", errno);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    return abandon("cannot move the written series into place", errno);
  }
  return {};
}

}  // namespace

Expected<SeriesFormat> format_from_path(std::string_view path) {
  const std::size_t slash = path.find_last_of('/');
  const std::string_view name = (slash == std::string_view::npos) ? path : path.substr(slash + 1);
  const std::size_t dot = name.find_last_of('.');
  if (dot == std::string_view::npos || dot == 0) {
    return fail(ErrorCode::invalid_argument,
                "{}: no file extension to tell the series format; use .csv, .f64 (or .bin, "
                ".raw) or .npy",
                path);
  }
  const std::string_view extension = name.substr(dot);
  if (iequals(extension, ".csv")) return SeriesFormat::csv;
  if (iequals(extension, ".f64") || iequals(extension, ".bin") || iequals(extension, ".raw")) {
    return SeriesFormat::f64;
  }
  if (iequals(extension, ".npy")) return SeriesFormat::npy;
  return fail(ErrorCode::invalid_argument,
              "{}: unknown series format '{}'; use .csv, .f64 (or .bin, .raw) or .npy", path,
              snippet(extension));
}

Expected<void> validate_series(std::span<const double> close, std::string_view source) {
  for (std::size_t i = 0; i < close.size(); ++i) {
    // Written so NaN fails: every comparison with NaN is false.
    if (!(std::isfinite(close[i]) && close[i] > 0.0)) {
      return fail(ErrorCode::bad_data, "{}: bar {} is {}; every close must be finite and positive",
                  source, i, close[i]);
    }
  }
  if (close.size() < 2) {
    return fail(ErrorCode::bad_data, "{}: the series has {} bar{}; it needs at least 2", source,
                close.size(), close.size() == 1 ? "" : "s");
  }
  return {};
}

Expected<std::vector<double>> load_series(const std::string& path) {
  const auto format = format_from_path(path);
  if (!format) return std::unexpected(format.error());
  auto file = read_whole_file(path);
  if (!file) return std::unexpected(file.error());
  if (file->size == 0) return fail(ErrorCode::bad_data, "{}: the file is empty", path);

  Expected<std::vector<double>> close;
  switch (*format) {
    case SeriesFormat::csv: close = parse_csv(file->view(), path); break;
    case SeriesFormat::f64: close = take_raw(*file, path); break;
    case SeriesFormat::npy: close = take_npy(*file, path); break;
  }
  if (!close) return close;
  if (auto valid = validate_series(*close, path); !valid) return std::unexpected(valid.error());
  return close;
}

Expected<void> save_series(const std::string& path, std::span<const double> close) {
  const auto format = format_from_path(path);
  if (!format) return std::unexpected(format.error());
  std::string bytes;
  switch (*format) {
    case SeriesFormat::csv: append_csv(bytes, close); break;
    case SeriesFormat::f64: append_le_f64(bytes, close); break;
    case SeriesFormat::npy: append_npy(bytes, close); break;
  }
  return write_file_atomically(path, bytes);
}

}  // namespace ipcfloor
