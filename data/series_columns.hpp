#pragma once
// A series' columns as a file gave them (data/series_io.hpp reads them): close always; open,
// high, low and volume where the file has them, each as long as close, empty where it has none.
// Owns its bars; bars() is the view a strategy runs on.
//
// Threads: plain data; any thread. Noexcept accessors.

#include <cstdint>
#include <vector>

#include "common/bars.hpp"

namespace ipcfloor {

struct SeriesColumns {
  std::vector<double> close;
  std::vector<double> open, high, low, volume;

  [[nodiscard]] std::vector<double>& column(Column c) noexcept {
    switch (c) {
      case Column::open: return open;
      case Column::high: return high;
      case Column::low: return low;
      case Column::volume: return volume;
      case Column::close: break;
    }
    return close;
  }
  [[nodiscard]] const std::vector<double>& column(Column c) const noexcept {
    return const_cast<SeriesColumns&>(*this).column(c);  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  }
  // Every column, as the bars a strategy runs on (a view: the series must outlive it). A column
  // whose length is not close's is left out.
  [[nodiscard]] Bars bars() const noexcept {
    Bars b(close);
    const auto present = [this](const std::vector<double>& c) { return c.size() == close.size() ? c.data() : nullptr; };
    b.open = present(open);
    b.high = present(high);
    b.low = present(low);
    b.volume = present(volume);
    return b;
  }
  // IPCFLOOR_COLUMN_* bits of the columns present (close always).
  [[nodiscard]] std::uint32_t columns() const noexcept { return bars().columns(); }
};

}  // namespace ipcfloor
