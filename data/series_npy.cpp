#include "data/series_formats.hpp"

#include <algorithm>
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

// The bar count a .npy header declares, once its dtype, order and shape are what a series
// needs: '<f8', C order, 1-D.
Expected<std::uint64_t> read_npy_bars(std::string_view header, const std::string& path) {
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
    return fail(ErrorCode::bad_data, "{}: the array has shape {}, which is {}-D; a series .npy must be 1-D: {}",
                path, describe_shape(*shape), shape->items.size(), one_dimension_hint(*shape));
  }
  return shape->items.front().number;
}

}  // namespace

Expected<std::vector<double>> take_npy(FileBytes& file, const std::string& path) {
  const std::string_view bytes = file.view();
  const auto preamble = read_npy_preamble(bytes, path);
  if (!preamble) return std::unexpected(preamble.error());
  const std::size_t data_offset = preamble->header_offset + preamble->header_length;
  const auto bars = read_npy_bars(bytes.substr(preamble->header_offset, preamble->header_length), path);
  if (!bars) return std::unexpected(bars.error());
  const std::string_view data = bytes.substr(data_offset);
  if (*bars > data.size() / kBytesPerBar) {
    return fail(ErrorCode::bad_data,
                "{}: data truncated: shape ({},) needs {} bars but only {} bytes ({} whole "
                "bars) follow the header",
                path, *bars, *bars, data.size(), data.size() / kBytesPerBar);
  }
  if (data.size() != *bars * kBytesPerBar) {
    return fail(ErrorCode::bad_data,
                "{}: {} stray bytes follow the {} bars that shape ({},) declares", path,
                data.size() - *bars * kBytesPerBar, *bars, *bars);
  }
  return file.take_series(data_offset, *bars);
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
