#pragma once
// Several close series in one sweep, each by name: a --data file is named after its file name
// without the extension ("/data/ES_2024.npy" is "ES_2024"), standard input ("-") is "stdin", the
// generated series is "default".
// A sweep picks one by name or index, or all of them (--series NAME|INDEX|all). Setup path:
// allocates.

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "data/series_source.hpp"

namespace ipcfloor {

// The index `selector` spells when it is all digits and below `count`; nullopt otherwise.
[[nodiscard]] std::optional<std::size_t> series_index_of(const std::string& selector, std::size_t count);

// The indices of `names` that `selector` names: "all"; a name; a 0-based index in the order
// given (the index a BACKTEST, the C ABI and Python name a series by; a name that is all digits
// wins over the index it spells); or "" when there is exactly one. invalid_argument naming the
// known names otherwise. Pure apart from the error's allocation.
[[nodiscard]] Expected<std::vector<std::size_t>> select_series(std::span<const std::string> names,
                                                               const std::string& selector);

// The series a sweep may run on: one per --data path in order, or the generator when there is
// none. Names only; nothing is loaded.
class SeriesSet {
 public:
  // invalid_argument when two paths give the same name (naming both). `column`: every CSV's
  // column of closes (--column; empty: `close`).
  [[nodiscard]] static Expected<SeriesSet> make(const std::vector<std::string>& data_paths, const GbmParams& gbm,
                                                const std::string& column = {});

  [[nodiscard]] std::size_t size() const noexcept { return names_.size(); }
  [[nodiscard]] const std::vector<std::string>& names() const noexcept { return names_; }

  // select_series over this set's names.
  [[nodiscard]] Expected<std::vector<std::size_t>> select(const std::string& selector) const;

  // Loads (or generates) series `index`; the error names the file and the bad bar.
  [[nodiscard]] Expected<LoadedSeries> load(std::size_t index) const;

 private:
  std::vector<std::string> names_;
  std::vector<SeriesSource> sources_;
};

}  // namespace ipcfloor
