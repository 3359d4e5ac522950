#include "data/series_formats.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <type_traits>
#include <cctype>
#include <charconv>
#include <expected>
#include <system_error>

#include <fmt/format.h>

namespace ipcfloor::series_formats {
namespace {

constexpr std::string_view kNpyMagic{"\x93NUMPY", 6};
// numpy pads the preamble plus header to a multiple of 64 so the data is cache-line aligned
// when the file is memory-mapped; we do the same so our files look like numpy's.
constexpr std::size_t kNpyAlignment = 64;
constexpr std::string_view kNpyDtype = "<f8";
// Nesting allowed in a .npy header dict; real headers nest one level (the shape tuple), the
// limit only keeps a hostile file from recursing deep.
constexpr int kMaxLiteralDepth = 16;

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

// How to save one series from an array of more dimensions. A flattened 2-D array interleaves its
// columns (bar 0's open, high, low, close, then bar 1's...), so the hint names a column, unless
// the array holds a single row or column anyway.
std::string one_dimension_hint(const PyValue& shape) {
  const auto& dims = shape.items;
  if (dims.size() == 2 && (dims[0].number == 1 || dims[1].number == 1))
    return "it holds one series, so save arr.ravel()";
  if (dims.size() == 2)
    return fmt::format("save the column of closes, np.save(path, arr[:, k]) with k in 0..{} (arr.ravel() would "
                       "interleave the {} columns)",
                       dims[1].number == 0 ? 0 : dims[1].number - 1, dims[1].number);
  return "save the one series it holds, e.g. np.save(path, arr[..., k]) for the closes' index k (arr.ravel() "
         "would interleave the values)";
}

// Where a .npy's header text starts and how long it is: the magic, the version and the length
// field checked against the file's size.
struct NpyPreamble {
  std::size_t header_offset = 0;
  std::size_t header_length = 0;
};

Expected<NpyPreamble> read_npy_preamble(std::string_view bytes, const std::string& path) {
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
  return NpyPreamble{preamble, header_length};
}

// One field of a structured dtype: its name, its dtype string and where it sits in a record.
struct NpyField {
  std::string_view name;  // empty for numpy's padding fields ('', '|V4') and titled fields
  std::string_view type;
  std::size_t offset = 0;
  std::size_t bytes = 0;
};

// What a .npy holds, once its order and shape are what a series needs (C order, 1-D): `bars`
// values of '<f8', or `bars` packed records of `fields`.
struct NpyLayout {
  std::uint64_t bars = 0;
  bool structured = false;
  std::vector<NpyField> fields;
  std::size_t record_bytes = kBytesPerBar;
};

// The bytes of one value of a dtype as a .npy descr spells it: '<f8' 8, '|S10' 10, '<U10' 40
// (UCS-4), '<M8[ns]' 8, '|V4' 4; nullopt for objects ('|O', which a .npy pickles instead of
// storing) or a string it cannot read.
std::optional<std::size_t> dtype_bytes(std::string_view type) {
  if (!type.empty() && std::string_view("<>|=").find(type.front()) != std::string_view::npos) type.remove_prefix(1);
  if (const std::size_t unit = type.find('['); unit != std::string_view::npos && type.back() == ']')
    type = type.substr(0, unit);
  if (type.size() < 2 || type.front() == 'O') return std::nullopt;
  std::size_t count = 0;
  const auto [end, ec] = std::from_chars(type.data() + 1, type.data() + type.size(), count);
  if (ec != std::errc{} || end != type.data() + type.size() || count == 0 || count > (std::size_t{1} << 20))
    return std::nullopt;
  return type.front() == 'U' ? count * 4 : count;
}

// The fields of a structured descr, a list of (name, dtype) tuples, packed one after another as
// numpy writes them (its padding appears as unnamed void fields).
Expected<std::vector<NpyField>> structured_fields(const PyValue& descr, const std::string& path) {
  std::vector<NpyField> fields;
  std::size_t offset = 0;
  for (const PyValue& item : descr.items) {
    if (item.kind != PyValue::Kind::sequence || item.items.size() < 2 ||
        item.items[1].kind != PyValue::Kind::string)
      return fail(ErrorCode::bad_data, "{}: malformed structured dtype {}: each field must be (name, dtype)", path,
                  snippet(descr.text));
    const std::string_view name = item.items[0].kind == PyValue::Kind::string ? item.items[0].text : "";
    const std::string_view type = item.items[1].text;
    if (item.items.size() > 2)
      return fail(ErrorCode::bad_data,
                  "{}: field '{}' of dtype {} is a sub-array {}; a series field holds one value per bar", path,
                  snippet(name), snippet(descr.text), snippet(item.items[2].text));
    const auto bytes = dtype_bytes(type);
    if (!bytes)
      return fail(ErrorCode::bad_data,
                  "{}: field '{}' has dtype {}, which a .npy does not store as plain bytes (objects are pickled): "
                  "drop it, or convert it with arr.astype(...)",
                  path, snippet(name), describe_dtype(type));
    fields.push_back({name, type, offset, *bytes});
    offset += *bytes;
  }
  if (fields.empty()) return fail(ErrorCode::bad_data, "{}: the structured dtype has no fields", path);
  return fields;
}

// The layout a .npy header declares, once its dtype, order and shape are what a series needs:
// '<f8' or packed records, C order, 1-D.
Expected<NpyLayout> read_npy_layout(std::string_view header, const std::string& path) {
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
  NpyLayout layout;
  if (descr->kind == PyValue::Kind::sequence) {
    auto fields = structured_fields(*descr, path);
    if (!fields) return std::unexpected(fields.error());
    layout.structured = true;
    layout.record_bytes = fields->back().offset + fields->back().bytes;
    layout.fields = std::move(*fields);
  } else if (descr->kind != PyValue::Kind::string) {
    return fail(ErrorCode::bad_data,
                "{}: dtype {} is a structured type with explicit offsets (align=True, or a dict); a series .npy holds "
                "'<f8' closes, or packed records: save np.lib.recfunctions.repack_fields(arr)",
                path, snippet(descr->text));
  } else if (descr->text != kNpyDtype) {
    return fail(ErrorCode::bad_data,
                "{}: dtype {} is not accepted; a series .npy must hold little-endian float64 "
                "('<f8'), or records with fields named close, open, high, low, volume: convert with arr.astype('<f8')",
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
    return fail(ErrorCode::bad_data, "{}: the array has shape {}, which is {}-D; a series .npy must be 1-D: {}",
                path, describe_shape(*shape), shape->items.size(), one_dimension_hint(*shape));
  }
  layout.bars = shape->items.front().number;
  return layout;
}

// The data after the header holds exactly `bars` items of `item_bytes` each.
Expected<void> check_npy_data(std::string_view data, std::uint64_t bars, std::size_t item_bytes,
                              const std::string& path) {
  const std::string_view unit = item_bytes == kBytesPerBar ? "bars" : "records";
  if (bars > data.size() / item_bytes) {
    return fail(ErrorCode::bad_data,
                "{}: data truncated: shape ({},) needs {} {} but only {} bytes ({} whole "
                "{}) follow the header",
                path, bars, bars, unit, data.size(), data.size() / item_bytes, unit);
  }
  if (data.size() != bars * item_bytes) {
    return fail(ErrorCode::bad_data, "{}: {} stray bytes follow the {} {} that shape ({},) declares", path,
                data.size() - bars * item_bytes, bars, unit, bars);
  }
  return {};
}

// A little-endian value of T at `at` (any alignment), on any host.
template <class T>
T load_le(const char* at) {
  T value;
  std::memcpy(&value, at, sizeof value);
  if constexpr (std::endian::native == std::endian::big) {
    using Bits = std::conditional_t<sizeof(T) == 8, std::uint64_t, std::uint32_t>;
    value = std::bit_cast<T>(std::byteswap(std::bit_cast<Bits>(value)));
  }
  return value;
}

// How one field's values become a column's doubles: '<f8' for every column; a volume may also be
// a little-endian integer of 4 or 8 bytes, converted exactly (a magnitude above 2^53 is refused).
enum class FieldRead : std::uint8_t { f8, i8, u8, i4, u4 };

Expected<FieldRead> field_read(const NpyField& field, Column column, const std::string& path) {
  if (field.type == "<f8") return FieldRead::f8;
  if (column == Column::volume) {
    if (field.type == "<i8") return FieldRead::i8;
    if (field.type == "<u8") return FieldRead::u8;
    if (field.type == "<i4") return FieldRead::i4;
    if (field.type == "<u4") return FieldRead::u4;
  }
  return fail(ErrorCode::bad_data,
              "{}: field '{}' (the {}) has dtype {}; a series .npy's {} must be little-endian float64 ('<f8'){}: "
              "convert it with arr.astype([... ('{}', '<f8') ...])",
              path, snippet(field.name), kColumnNames[static_cast<std::size_t>(column)], describe_dtype(field.type),
              column == Column::volume ? "volume" : "prices", column == Column::volume ? " or an integer" : "",
              snippet(field.name));
}

// Field `field`'s values over every record of `data`, as doubles, into `out`.
Expected<void> read_field(std::string_view data, const NpyLayout& layout, const NpyField& field, FieldRead how,
                          std::vector<double>& out, const std::string& path) {
  constexpr double kExact = 9007199254740992.0;  // 2^53: every integer up to it is a double
  out.resize(layout.bars);
  const char* at = data.data() + field.offset;
  for (std::uint64_t i = 0; i < layout.bars; ++i, at += layout.record_bytes) {
    double value = 0.0;
    switch (how) {
      case FieldRead::f8: value = load_le<double>(at); break;
      case FieldRead::i8: value = static_cast<double>(load_le<std::int64_t>(at)); break;
      case FieldRead::u8: value = static_cast<double>(load_le<std::uint64_t>(at)); break;
      case FieldRead::i4: value = static_cast<double>(load_le<std::int32_t>(at)); break;
      case FieldRead::u4: value = static_cast<double>(load_le<std::uint32_t>(at)); break;
    }
    if (how != FieldRead::f8 && std::fabs(value) > kExact)
      return fail(ErrorCode::bad_data, "{}: bar {}: its {} {} is beyond 2^53, where a float64 no longer holds every "
                  "integer", path, i, field.name, value);
    out[i] = value;
  }
  return {};
}

// The columns of a structured .npy: each field column_named names (the close one required).
Expected<SeriesColumns> take_structured(std::string_view data, const NpyLayout& layout, const std::string& path,
                                        std::string_view column) {
  const NpyField* of[kColumnCount] = {};
  for (const NpyField& field : layout.fields) {
    const auto named = column_named(field.name, column);
    if (!named) continue;
    const auto k = static_cast<std::size_t>(*named);
    if (of[k] != nullptr)
      return fail(ErrorCode::bad_data, "{}: fields '{}' and '{}' both name the {}; which one is meant is ambiguous",
                  path, snippet(of[k]->name), snippet(field.name), kColumnNames[k]);
    of[k] = &field;
  }
  if (of[0] == nullptr) {
    std::string found;
    for (const NpyField& field : layout.fields)
      if (!field.name.empty()) found += fmt::format("{}'{}'", found.empty() ? "" : ", ", snippet(field.name));
    return fail(ErrorCode::bad_data, "{}: no '{}' field in the structured dtype; fields found: {}{}", path,
                snippet(column.empty() ? std::string_view("close") : column), found,
                column.empty() ? "; --column NAME picks another one" : "");
  }
  std::size_t count = 0;
  FieldRead how[kColumnCount] = {};
  for (std::size_t k = 0; k < kColumnCount; ++k) {
    if (of[k] == nullptr) continue;
    auto read = field_read(*of[k], static_cast<Column>(k), path);
    if (!read) return std::unexpected(read.error());
    how[k] = *read;
    ++count;
  }
  if (auto room = check_parsed_room(layout.bars, count, path); !room) return std::unexpected(room.error());
  SeriesColumns series;
  for (std::size_t k = 0; k < kColumnCount; ++k) {
    if (of[k] == nullptr) continue;
    if (auto read = read_field(data, layout, *of[k], how[k], series.column(static_cast<Column>(k)), path); !read)
      return std::unexpected(read.error());
  }
  return series;
}

}  // namespace

Expected<SeriesColumns> take_npy(FileBytes& file, const std::string& path, std::string_view column) {
  const std::string_view bytes = file.view();
  const auto preamble = read_npy_preamble(bytes, path);
  if (!preamble) return std::unexpected(preamble.error());
  const std::size_t data_offset = preamble->header_offset + preamble->header_length;
  const auto layout = read_npy_layout(bytes.substr(preamble->header_offset, preamble->header_length), path);
  if (!layout) return std::unexpected(layout.error());
  const std::string_view data = bytes.substr(data_offset);
  if (auto whole = check_npy_data(data, layout->bars, layout->record_bytes, path); !whole)
    return std::unexpected(whole.error());
  if (layout->structured) return take_structured(data, *layout, path, column);
  if (!column.empty())
    return fail(ErrorCode::invalid_argument,
                "--column '{}' picks a field of a structured .npy, but {} is a plain .npy ('<f8': closes alone)",
                snippet(column), path);
  SeriesColumns series;
  series.close = file.take_series(data_offset, layout->bars);
  return series;
}

void append_npy(std::string& out, std::span<const double> values) {
  append_npy_header(out, fmt::format("'{}'", kNpyDtype), values.size());
  append_le_f64(out, values);
}

void append_npy_header(std::string& out, std::string_view descr, std::size_t count) {
  std::string header = fmt::format("{{'descr': {}, 'fortran_order': False, 'shape': ({},), }}", descr, count);
  const std::size_t preamble = kNpyMagic.size() + 2 + 2;
  const std::size_t unpadded = preamble + header.size() + 1;  // +1: the closing '\n'
  const std::size_t padded = (unpadded + kNpyAlignment - 1) / kNpyAlignment * kNpyAlignment;
  header.append(padded - unpadded, ' ');
  header.push_back('\n');
  // A 1-D header, even of a structured dtype of a few fields, is far inside version 1.0's 16-bit
  // length field.
  out.append(kNpyMagic);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xffU));
  out.push_back(static_cast<char>((header.size() >> 8) & 0xffU));
  out += header;
}

}  // namespace ipcfloor::series_formats
