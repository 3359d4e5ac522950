#pragma once
// Where the close series comes from: a file (--data) or the embedded default, which is the
// GBM generator of docs/SPEC.md §1 run at startup (150,000 bars, seed 42 unless told otherwise).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/bars.hpp"
#include "data/gbm.hpp"
#include "common/error.hpp"

namespace ipcfloor {

struct SeriesSource {
  std::optional<std::string> data_path;  // set: load and validate this file
  GbmParams gbm;                         // otherwise: generate with these parameters
  std::string column;                    // a CSV's column of closes (--column); empty: `close`
};

struct LoadedSeries {
  std::vector<double> close;
  // The other columns where the data had them (as long as close), empty where it had none.
  std::vector<double> open, high, low, volume;
  std::string description;  // for reports: "data.csv" or "gbm(bars=150000, seed=42)"
  bool is_default = false;  // the embedded default data set, where the fingerprint applies

  // Every column, as the bars a strategy runs on (a view: the series must outlive it).
  [[nodiscard]] Bars bars() const noexcept {
    Bars b(close);
    const auto column = [this](const std::vector<double>& c) { return c.size() == close.size() ? c.data() : nullptr; };
    b.open = column(open);
    b.high = column(high);
    b.low = column(low);
    b.volume = column(volume);
    return b;
  }
};

// Loads or generates the series. Setup path: allocates; the error names the file and bar, or
// (resource) the memory generated bars would need when the host has less available.
[[nodiscard]] Expected<LoadedSeries> load_series_source(const SeriesSource& source);

// The published parity fingerprint of docs/SPEC.md §1: L=6 on the default data.
inline constexpr std::int64_t kFingerprintLength = 6;
inline constexpr double kFingerprintPnl = -5165.577039790348;
inline constexpr std::int64_t kFingerprintTrades = 57029;
// The default data's checksum (fnv1a64 of its bytes, as a segment's header carries it): a client
// tells an engine that serves the fingerprint's data without generating the series again.
inline constexpr std::uint64_t kDefaultSeriesChecksum = 0xaa8dbb76d06ab607ULL;

}  // namespace ipcfloor
