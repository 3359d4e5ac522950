#pragma once
// The bars a backtest runs on: a series' columns, oldest first. Close is always there; open, high,
// low and volume where the data had them (null otherwise). A view: it owns nothing, copies are
// cheap, and it converts to the strategy ABI's ipcfloor_columns without copying a bar.
//
// Threads: plain data; any thread. Noexcept throughout.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "ipcfloor/strategy.h"

namespace ipcfloor {

// A column of a series, in the order of the IPCFLOOR_COLUMN_* bits (close is bit 0).
enum class Column : std::uint8_t { close = 0, open = 1, high = 2, low = 3, volume = 4 };
inline constexpr std::size_t kColumnCount = 5;
inline constexpr const char* kColumnNames[kColumnCount] = {"close", "open", "high", "low", "volume"};
[[nodiscard]] constexpr std::uint32_t column_bit(Column column) noexcept { return 1U << static_cast<unsigned>(column); }

struct Bars {
  std::span<const double> close;
  const double* open = nullptr;
  const double* high = nullptr;
  const double* low = nullptr;
  const double* volume = nullptr;

  Bars() = default;
  // Closes alone (a close-only series): every caller that had a span of closes has its bars.
  Bars(std::span<const double> closes) noexcept : close(closes) {}  // NOLINT(google-explicit-constructor)
  Bars(const std::vector<double>& closes) noexcept : close(closes) {}  // NOLINT(google-explicit-constructor)

  [[nodiscard]] std::size_t size() const noexcept { return close.size(); }
  [[nodiscard]] bool empty() const noexcept { return close.empty(); }
  // The column, or null where the series has none.
  [[nodiscard]] const double* column(Column c) const noexcept {
    switch (c) {
      case Column::close: return close.data();
      case Column::open: return open;
      case Column::high: return high;
      case Column::low: return low;
      case Column::volume: return volume;
    }
    return nullptr;
  }
  // IPCFLOOR_COLUMN_* bits of the columns present.
  [[nodiscard]] std::uint32_t columns() const noexcept {
    return IPCFLOOR_COLUMN_CLOSE | (open != nullptr ? IPCFLOOR_COLUMN_OPEN : 0U) |
           (high != nullptr ? IPCFLOOR_COLUMN_HIGH : 0U) | (low != nullptr ? IPCFLOOR_COLUMN_LOW : 0U) |
           (volume != nullptr ? IPCFLOOR_COLUMN_VOLUME : 0U);
  }
  // Bars [from, to) of these (from <= to <= size(): the caller checked).
  [[nodiscard]] Bars slice(std::size_t from, std::size_t to) const noexcept {
    Bars out;
    out.close = close.subspan(from, to - from);
    const auto at = [from](const double* column) noexcept { return column != nullptr ? column + from : nullptr; };
    out.open = at(open);
    out.high = at(high);
    out.low = at(low);
    out.volume = at(volume);
    return out;
  }
  // The first `count` bars (a live series as published so far).
  [[nodiscard]] Bars first(std::size_t count) const noexcept { return slice(0, count); }
  // The strategy ABI's view of the same bars.
  [[nodiscard]] ipcfloor_columns abi() const noexcept {
    return ipcfloor_columns{close.data(), open, high, low, volume, close.size()};
  }
};

// The first column `required` names that `present` lacks, as a column; close when none is missing.
[[nodiscard]] constexpr Column first_missing(std::uint32_t required, std::uint32_t present) noexcept {
  const std::uint32_t missing = required & ~present;
  for (std::size_t k = 0; k < kColumnCount; ++k)
    if ((missing >> k) & 1U) return static_cast<Column>(k);
  return Column::close;
}

// One bar with its columns: what a reader gives one line at a time and a live APPEND carries. The
// close, and open, high, low and volume where the series has them (0 where it does not).
struct Bar {
  double close = 0.0;
  double open = 0.0;
  double high = 0.0;
  double low = 0.0;
  double volume = 0.0;

  [[nodiscard]] constexpr double column(Column c) const noexcept {
    switch (c) {
      case Column::close: return close;
      case Column::open: return open;
      case Column::high: return high;
      case Column::low: return low;
      case Column::volume: return volume;
    }
    return 0.0;
  }
  // Bar `i` of `bars` (i < bars.size()), its absent columns 0.
  [[nodiscard]] static Bar at(const Bars& bars, std::size_t i) noexcept {
    const auto value = [i](const double* column) noexcept { return column != nullptr ? column[i] : 0.0; };
    return Bar{bars.close[i], value(bars.open), value(bars.high), value(bars.low), value(bars.volume)};
  }
};

// What is wrong with one bar, as check_bar finds it.
struct BarFault {
  Column column = Column::close;  // the column at fault (the high, when it is below the low)
  bool below_low = false;         // the high is below the low
};

// The one rule for a bar's values, which every reader and a live APPEND follow: a close, open,
// high or low finite and > 0, a volume finite and >= 0, and the high at least the low (where the
// bar has both). Only the columns `columns` (IPCFLOOR_COLUMN_* bits) names are looked at. An open
// or a close outside [low, high] is accepted as given: an adjusted close (--column 'Adj Close')
// or a vendor's settlement price may lie outside the traded range, so no strategy may assume
// that they do not. nullopt when the bar is good. Pure.
[[nodiscard]] inline std::optional<BarFault> check_bar(const Bar& bar, std::uint32_t columns) noexcept {
  for (std::size_t k = 0; k < kColumnCount; ++k) {
    const auto column = static_cast<Column>(k);
    if ((columns & column_bit(column)) == 0) continue;
    const double v = bar.column(column);
    // Written so that NaN fails: every comparison with NaN is false.
    const bool good = column == Column::volume ? (std::isfinite(v) && v >= 0.0) : (std::isfinite(v) && v > 0.0);
    if (!good) return BarFault{column, false};
  }
  const std::uint32_t range = IPCFLOOR_COLUMN_HIGH | IPCFLOOR_COLUMN_LOW;
  if ((columns & range) == range && bar.high < bar.low) return BarFault{Column::high, true};
  return std::nullopt;
}

}  // namespace ipcfloor
