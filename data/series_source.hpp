#pragma once
// Where the series comes from: a file (--data; every column it has) or the embedded default, which is the
// GBM generator of docs/SPEC.md §1 run at startup (150,000 bars, seed 42 unless told otherwise).

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/bars.hpp"
#include "data/gbm.hpp"
#include "data/series_columns.hpp"
#include "common/error.hpp"

namespace ipcfloor {

struct SeriesSource {
  std::optional<std::string> data_path;  // set: load and validate this file
  GbmParams gbm;                         // otherwise: generate with these parameters
  std::string column;                    // the close column of a CSV or structured .npy (--column); empty: `close`
};

// The series' columns (close, and open, high, low and volume where the data had them; bars() is
// every column as a strategy sees it) and where they came from.
struct LoadedSeries : SeriesColumns {
  std::string description;  // for reports: "data.csv" or "gbm(bars=150000, seed=42)"
  bool is_default = false;  // the embedded default data set, where the fingerprint applies
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
