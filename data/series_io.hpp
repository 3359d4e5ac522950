#pragma once
// Reading and writing a price series (docs/SPEC.md §4 `serve --data`, §6 `gen -o`): a CSV with a
// `close` column (or the column --column names, or a single column without a header) and, where
// its header names them, Open, High, Low and Volume columns; raw little-endian float64 (closes);
// or a NumPy .npy, a 1-D '<f8' array of closes or a structured array with fields of those names.
// The series is loaded once,
// before the segment exists, so this is setup-path code: it allocates, returns Expected and
// never throws on bad input. Every function is reentrant and may be called from any thread;
// the only shared state it touches is the file system.
//
// Every failure message names the file and the fault in it (the bad bar, line, dtype, size),
// because the person reading it is looking at a data file, not at this code.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/bars.hpp"
#include "common/error.hpp"
#include "data/series_columns.hpp"

namespace ipcfloor {

enum class SeriesFormat {
  csv,  // text with a header row naming a `close` column and, where it has them, `open`, `high`,
        // `low` and `volume` (other columns, a date or time among them, are ignored), or one
        // column of closes without a header
  f64,  // raw little-endian float64 closes, no header: `.f64`, `.bin` or `.raw`
  npy,  // NumPy .npy holding a 1-D, C-order array of dtype '<f8' (closes), or a 1-D structured
        // array whose fields name the columns as a CSV header does
};

// The format a path's extension names, compared case-insensitively. Fails with
// ErrorCode::invalid_argument for any other extension or none. Pure: never touches the file.
[[nodiscard]] Expected<SeriesFormat> format_from_path(std::string_view path);

// The largest series file read: 4 GiB, about 537 million float64 bars (or fewer, when the host
// has less memory available: data/input_file.hpp).
inline constexpr std::size_t kMaxSeriesFileBytes = std::size_t{4} << 30;

// Reads the whole file in the format its extension names and validate_series()es it; returns
// the bars in file order. Exact: every value comes back bit for bit (CSV digits are parsed
// with correct rounding). "-" reads standard input: a .npy when it starts with the .npy magic,
// CSV otherwise. Only a regular file or standard input is read (never a FIFO or a device), and
// at most kMaxSeriesFileBytes of it. Fails with invalid_argument for no such file, something
// that is not a regular file, an input over the bound or an unknown extension; permission
// when the file may not be read; io when the OS refuses it otherwise; bad_data when its content
// is malformed or holds a bad bar.
//
// CSV follows one rule wherever it is read (a file, `-`, feed's standard input: CsvBarStream):
// a first line that is a single number starts a headerless column of closes; otherwise the first
// line is the header, and the series is its `close` column, or the column `column` names (both
// case-insensitive). `column` is for CSV only: naming one for a .npy or .f64 is invalid_argument.
//
// The closes alone, as load_series_columns reads them (every column of the file is checked).
[[nodiscard]] Expected<std::vector<double>> load_series(const std::string& path, std::string_view column = {});

// Every column the file has, read and checked by the rules above and validate_columns. Besides
// close, a CSV header names its columns `open`, `high`, `low` and `volume` (any case, any order,
// quoted or not); `date`, `time`, `datetime` and `timestamp` name a time column, which is never
// read as a number (it may hold any text), and any other column is ignored. A structured .npy
// names them by its field names the same way (fields of other names are ignored, whatever their
// dtype): the prices must be '<f8', a volume '<f8', '<i8', '<u8', '<i4' or '<u4'. `column` picks
// the close column of a CSV or the close field of a structured .npy (the other columns keep their
// own names). Before the parsed columns are allocated, their size is checked against the memory
// the host has available (resource when it has less).
[[nodiscard]] Expected<SeriesColumns> load_series_columns(const std::string& path, std::string_view column = {});

// The header of a CSV and the cell of each column it names (CsvBarStream's state).
struct CsvColumnsLayout {
  bool headerless = false;
  std::size_t cells = 1;                         // cells the header names (1 without one)
  std::uint32_t columns = IPCFLOOR_COLUMN_CLOSE;  // IPCFLOOR_COLUMN_* bits it names
  std::size_t cell_of[kColumnCount] = {};         // the cell of each column in `columns`
  std::vector<std::int8_t> column_at;             // per cell: the Column it holds, or -1
};

// A CSV series read one line at a time, as a stream arrives (feed's standard input), by the rule
// load_series_columns follows (the same header names, the same checks of each bar); blank lines
// are skipped. Setup path: each call allocates only for the header and for an error.
class CsvBarStream {
 public:
  // `column`: the close column as --column names it (empty: `close`, or a headerless column);
  // `source`: how messages name the input ("standard input").
  CsvBarStream(std::string column, std::string source);

  // The bar on `line`, the input's next line without its line ending; nullopt for the header and
  // for a blank line. bad_data naming the line, the column and what is wrong with it otherwise
  // (a cell that is not a number; check_bar's rules for the other columns: an open, high or low
  // not finite and > 0, a volume not finite and >= 0, a high below the low). A close that is a
  // number is handed on as it is: the engine judges it (an APPEND's bad_price).
  [[nodiscard]] Expected<std::optional<Bar>> take(std::string_view line);

  // Lines taken so far: the number of the last one.
  [[nodiscard]] std::size_t line() const noexcept { return line_; }
  // IPCFLOOR_COLUMN_* bits of the columns the input has: known once its first line is taken
  // (close alone before).
  [[nodiscard]] std::uint32_t columns() const noexcept { return layout_.columns; }

 private:
  std::string column_;
  std::string source_;
  std::size_t line_ = 0;
  bool decided_ = false;  // the first record has said header or no header
  CsvColumnsLayout layout_;
};

// Succeeds when the series has at least 2 bars and every bar is finite and > 0; otherwise
// fails with ErrorCode::bad_data naming `source` (usually the file), the first bad bar's index
// and its value. Allocates only to build the error.
[[nodiscard]] Expected<void> validate_series(std::span<const double> close,
                                             std::string_view source);

// The sentence for check_bar's fault (common/bars.hpp): "its high 99.5 is below its low 100.25;
// a bar's high must be at least its low" (no location). Allocates.
[[nodiscard]] std::string bar_fault_text(const Bar& bar, const BarFault& fault);

// validate_series over the closes, then check_bar over every bar of the other columns (each as
// long as close); bad_data naming `source`, the bar and its column. `line_of`, when given, maps a
// bar index to its line in the file (a CSV), which the message names too.
[[nodiscard]] Expected<void> validate_columns(const SeriesColumns& series, std::string_view source,
                                              const std::function<std::size_t(std::size_t)>& line_of = {});

// Writes the series in the format the path's extension names: raw little-endian float64;
// .npy version 1.0, '<f8', 1-D; or CSV with the single column `close` and 17 significant
// digits, so every format round-trips exactly through load_series. The bytes go to a
// temporary file in the same directory that is fsync'ed and renamed over `path`: a reader or a
// crash sees the old file or the whole new one, never half of one; nothing planted at any name
// can redirect it (common/atomic_file.hpp). Does not validate: a series load_series would reject
// is written as given. Fails with ErrorCode::io naming the path and the OS reason, permission for
// a directory another user may write without the sticky bit, or invalid_argument for an unknown
// extension.
[[nodiscard]] Expected<void> save_series(const std::string& path, std::span<const double> close);

}  // namespace ipcfloor
