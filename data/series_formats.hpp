#pragma once
// The series file formats one by one, behind data/series_io.hpp. Internal to the kernel: only
// series_io.cpp calls these, after it has picked the format from the path and read the file;
// validation, the file system and the choice of format stay there. One translation unit per
// format (series_csv.cpp, series_npy.cpp, series_raw.cpp); the helpers they share are here and
// in series_formats.cpp, which calls nothing of series_io.cpp (so no two files call each other).
//
// Readers fail with ErrorCode::bad_data, their message naming `path` and the fault; writers
// append the whole file's bytes to `out` and cannot fail.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/error.hpp"
#include "data/series_columns.hpp"

namespace ipcfloor::series_formats {

inline constexpr std::size_t kBytesPerBar = sizeof(double);

static_assert(sizeof(double) == 8 && std::numeric_limits<double>::is_iec559,
              "the series formats are IEEE-754 binary64");

// Inline: the CSV reader calls these once per cell.
inline bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\r'; }

inline std::string_view trim(std::string_view s) {
  while (!s.empty() && is_blank(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_blank(s.back())) s.remove_suffix(1);
  return s;
}

// ASCII case-insensitive equality (file extensions, the `close` header name). series_formats.cpp.
bool iequals(std::string_view a, std::string_view b);

// File text quoted in a message: control and non-ASCII bytes escaped, long text cut (also the
// combo files' rows, data/combo_io.cpp). series_formats.cpp.
std::string snippet(std::string_view text);

// The column a CSV header cell or a structured .npy field names, compared case-insensitively:
// `close_name` (--column; empty: "close") for the close, "open", "high", "low", "volume"; nullopt
// for any other name (a date or time column among them). series_formats.cpp.
std::optional<Column> column_named(std::string_view name, std::string_view close_name);

// Refuses `bars` bars of `columns` columns (8 bytes each) that the host has less memory available
// for than they take: resource, naming `path` and both sizes. Reads /proc (once). series_formats.cpp.
[[nodiscard]] Expected<void> check_parsed_room(std::size_t bars, std::size_t columns, const std::string& path);

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

// ---- Raw little-endian float64 (series_raw.cpp) ------------------------------------------

// The bars of a headerless file; fails when its size is not a whole number of float64 values.
[[nodiscard]] Expected<std::vector<double>> take_raw(FileBytes& file, const std::string& path);
// The values as little-endian float64, whatever the host's byte order.
void append_le_f64(std::string& out, std::span<const double> values);

// ---- NumPy .npy (series_npy.cpp) ---------------------------------------------------------

// The series of a .npy v1.0-3.0: a 1-D, C-order '<f8' array (closes; `column` must be empty),
// or a 1-D structured array of packed records whose fields name the columns
// (load_series_columns: `column`, else `close`, is the close field). Anything else is refused
// with what it holds and how to convert it.
[[nodiscard]] Expected<SeriesColumns> take_npy(FileBytes& file, const std::string& path, std::string_view column);
// A .npy v1.0 file as numpy writes it: '<f8', 1-D, header padded to 64 bytes.
void append_npy(std::string& out, std::span<const double> values);
// The header of a .npy v1.0 file of `count` records of dtype `descr` (a numpy dtype as Python
// writes it: '<f8', or a structured [('name', '<u8'), ...]), 1-D; the caller appends the records.
void append_npy_header(std::string& out, std::string_view descr, std::size_t count);

// ---- CSV (series_csv.cpp) ----------------------------------------------------------------

// The series of a CSV, every cell parsed with correct rounding: the `close` column of its header
// (or the column `column` names, case-insensitively) and the open, high, low and volume columns
// it names, or a headerless single column of closes. Checks the memory they take first.
[[nodiscard]] Expected<SeriesColumns> parse_csv(std::string_view text, const std::string& path,
                                                std::string_view column);
// The line (1-based) of data bar `bar` of a CSV parse_csv read: for messages about a bar that
// parsed but is out of range. 0 when the text has fewer bars.
[[nodiscard]] std::size_t csv_line_of_bar(std::string_view text, std::size_t bar);
// A CSV with the single column `close`, 17 significant digits per bar.
void append_csv(std::string& out, std::span<const double> values);

}  // namespace ipcfloor::series_formats
