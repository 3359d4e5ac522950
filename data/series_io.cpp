#include "data/series_io.hpp"


#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>

#include <fmt/format.h>

#include "common/atomic_file.hpp"
#include "data/input_file.hpp"
#include "data/series_formats.hpp"

namespace ipcfloor {
namespace {

using series_formats::FileBytes;
using series_formats::iequals;
using series_formats::kBytesPerBar;
using series_formats::snippet;

// The whole input (a regular file, or standard input for "-"), at most kMaxSeriesFileBytes.
Expected<FileBytes> read_whole_file(InputFile& input) {
  FileBytes file;
  auto read = input.read_all(kMaxSeriesFileBytes, [&file](std::size_t bytes) {
    file.storage.resize((bytes + kBytesPerBar - 1) / kBytesPerBar);
    return reinterpret_cast<char*>(file.storage.data());
  });
  if (!read) return std::unexpected(read.error());
  file.size = *read;
  return file;
}

// Standard input has no extension to name its format: a .npy says so in its first bytes, and
// anything else is read as CSV (raw float64 has no mark of its own: give it as a file).
SeriesFormat format_of_stdin(std::string_view bytes) {
  return bytes.starts_with("\x93NUMPY") ? SeriesFormat::npy : SeriesFormat::csv;
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

std::string bar_fault_text(const Bar& bar, const BarFault& fault) {
  if (fault.below_low)
    return fmt::format("its high {} is below its low {}; a bar's high must be at least its low", bar.high, bar.low);
  const std::string_view name = kColumnNames[static_cast<std::size_t>(fault.column)];
  return fmt::format("its {} is {}; every {} must be finite and {}", name, bar.column(fault.column), name,
                     fault.column == Column::volume ? ">= 0" : "positive");
}

Expected<void> validate_columns(const SeriesColumns& series, std::string_view source,
                                const std::function<std::size_t(std::size_t)>& line_of) {
  const auto at_line = [&line_of](std::size_t bar) {
    const std::size_t line = line_of ? line_of(bar) : 0;
    return line == 0 ? std::string() : fmt::format(" (line {})", line);
  };
  if (auto closes = validate_series(series.close, source); !closes) {
    // validate_series names the first bad close; the line is said after its sentence.
    const std::size_t bad = static_cast<std::size_t>(
        std::find_if(series.close.begin(), series.close.end(), [](double v) { return !(std::isfinite(v) && v > 0.0); }) -
        series.close.begin());
    if (bad < series.close.size()) closes.error().message += at_line(bad);
    return closes;
  }
  const Bars bars = series.bars();
  const std::uint32_t others = bars.columns() & ~IPCFLOOR_COLUMN_CLOSE;
  if (others == 0) return {};
  for (std::size_t i = 0; i < bars.size(); ++i) {
    const Bar bar = Bar::at(bars, i);
    if (const auto fault = check_bar(bar, others))
      return fail(ErrorCode::bad_data, "{}: bar {}{}: {}", source, i, at_line(i), bar_fault_text(bar, *fault));
  }
  return {};
}

Expected<SeriesColumns> load_series_columns(const std::string& path, std::string_view column) {
  // What the path is comes first: a FIFO or a device is refused as such, whatever its name.
  auto input = InputFile::open(path, "series file");
  if (!input) return std::unexpected(input.error());
  const bool from_stdin = input->is_stdin();
  auto format = from_stdin ? Expected<SeriesFormat>(SeriesFormat::csv) : format_from_path(path);
  if (!format) return std::unexpected(format.error());
  auto file = read_whole_file(*input);
  if (!file) return std::unexpected(file.error());
  const std::string& name = input->name();
  if (file->size == 0) return fail(ErrorCode::bad_data, "{}: the {} is empty", name, from_stdin ? "input" : "file");
  if (from_stdin) *format = format_of_stdin(file->view());
  if (!column.empty() && *format == SeriesFormat::f64)
    return fail(ErrorCode::invalid_argument, "--column '{}' picks a column of a CSV or a structured .npy, but {} is raw "
                "float64 (closes alone)", snippet(column), name);

  Expected<SeriesColumns> series;
  std::function<std::size_t(std::size_t)> line_of;
  switch (*format) {
    case SeriesFormat::csv:
      series = series_formats::parse_csv(file->view(), name, column);
      line_of = [&file](std::size_t bar) { return series_formats::csv_line_of_bar(file->view(), bar); };
      break;
    case SeriesFormat::f64: {
      auto close = series_formats::take_raw(*file, name);
      if (!close) return std::unexpected(close.error());
      series = SeriesColumns{};
      series->close = std::move(*close);
      break;
    }
    case SeriesFormat::npy: series = series_formats::take_npy(*file, name, column); break;
  }
  if (!series) return series;
  if (auto valid = validate_columns(*series, name, line_of); !valid) return std::unexpected(valid.error());
  return series;
}

Expected<std::vector<double>> load_series(const std::string& path, std::string_view column) {
  auto series = load_series_columns(path, column);
  if (!series) return std::unexpected(series.error());
  return std::move(series->close);
}

Expected<void> save_series(const std::string& path, std::span<const double> close) {
  const auto format = format_from_path(path);
  if (!format) return std::unexpected(format.error());
  std::string bytes;
  switch (*format) {
    case SeriesFormat::csv: series_formats::append_csv(bytes, close); break;
    case SeriesFormat::f64: series_formats::append_le_f64(bytes, close); break;
    case SeriesFormat::npy: series_formats::append_npy(bytes, close); break;
  }
  // Never through a link planted at the name, never in a directory another user may write
  // without the sticky bit (common/atomic_file.hpp).
  auto written = write_file_atomically(path, bytes, "the series file");
  if (!written) return std::unexpected(std::move(written.error()));
  return {};
}

}  // namespace ipcfloor
