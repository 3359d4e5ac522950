#include "data/series_formats.hpp"

#include <bit>
#include <cstdint>
#include <cstring>

namespace ipcfloor::series_formats {

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

}  // namespace ipcfloor::series_formats
