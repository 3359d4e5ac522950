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

Expected<std::vector<double>> load_series(const std::string& path, std::string_view column) {
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
  if (!column.empty() && *format != SeriesFormat::csv)
    return fail(ErrorCode::invalid_argument, "--column '{}' picks a column of a CSV, but {} is {}", snippet(column),
                name, *format == SeriesFormat::npy ? "a .npy" : "raw float64");

  Expected<std::vector<double>> close;
  switch (*format) {
    case SeriesFormat::csv: close = series_formats::parse_csv(file->view(), name, column); break;
    case SeriesFormat::f64: close = series_formats::take_raw(*file, name); break;
    case SeriesFormat::npy: close = series_formats::take_npy(*file, name); break;
  }
  if (!close) return close;
  if (auto valid = validate_series(*close, name); !valid) return std::unexpected(valid.error());
  return close;
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
