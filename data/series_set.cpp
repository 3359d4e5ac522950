#include "data/series_set.hpp"

#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace ipcfloor {

Expected<SeriesSet> SeriesSet::make(const std::vector<std::string>& data_paths, const GbmParams& gbm,
                                    const std::string& column) {
  SeriesSet set;
  if (data_paths.empty()) {
    set.names_.push_back("default");
    set.sources_.push_back(SeriesSource{std::nullopt, gbm, {}});
    return set;
  }
  for (const std::string& path : data_paths) {
    const std::string name = path == "-" ? std::string("stdin") : std::filesystem::path(path).stem().string();
    for (std::size_t i = 0; i < set.names_.size(); ++i)
      if (set.names_[i] == name)
        return fail(ErrorCode::invalid_argument, "--data {} and --data {} both name a series '{}'; rename one file",
                    set.sources_[i].data_path.value_or("?"), path, name);
    set.names_.push_back(name);
    set.sources_.push_back(SeriesSource{path, gbm, column});
  }
  return set;
}

std::optional<std::size_t> series_index_of(const std::string& selector, std::size_t count) {
  if (selector.empty() || selector.size() > 4 || selector.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  const std::size_t index = std::stoul(selector);
  return index < count ? std::optional<std::size_t>(index) : std::nullopt;
}

Expected<std::vector<std::size_t>> select_series(std::span<const std::string> names, const std::string& selector) {
  std::vector<std::size_t> chosen;
  if (selector == "all" || (selector.empty() && names.size() == 1)) {
    for (std::size_t i = 0; i < names.size(); ++i) chosen.push_back(i);
    return chosen;
  }
  if (selector.empty())
    return fail(ErrorCode::invalid_argument, "{} series given ({}): pick one with --series NAME, or --series all",
                names.size(), fmt::join(names, ", "));
  for (std::size_t i = 0; i < names.size(); ++i)
    if (names[i] == selector) return std::vector<std::size_t>{i};
  if (const auto index = series_index_of(selector, names.size())) return std::vector<std::size_t>{*index};
  return fail(ErrorCode::invalid_argument,
              "--series '{}' is not one of the series given ({}), nor an index 0..{}, nor 'all'", selector,
              fmt::join(names, ", "), names.size() - 1);
}

Expected<std::vector<std::size_t>> SeriesSet::select(const std::string& selector) const {
  return select_series(names_, selector);
}

Expected<LoadedSeries> SeriesSet::load(std::size_t index) const {
  if (index >= sources_.size())
    return fail(ErrorCode::invalid_argument, "series {} of {} does not exist", index, sources_.size());
  return load_series_source(sources_[index]);
}

}  // namespace ipcfloor
