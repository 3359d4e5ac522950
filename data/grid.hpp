#pragma once
// The lengths a sweep runs, as users write them: a list ("6,8,11") or a numpy-style grid
// ("6:200:80" is round(linspace(6, 200, 80))). Setup path: allocates; errors name the bad text.

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace ipcfloor {

// "6,8,11" -> {6, 8, 11}. Each length must be a whole number >= 1.
[[nodiscard]] Expected<std::vector<std::int64_t>> parse_lengths(std::string_view text);

// "6:200:80" -> round(linspace(6, 200, 80)), like numpy. first <= last, count >= 1.
[[nodiscard]] Expected<std::vector<std::int64_t>> parse_grid(std::string_view text);

}  // namespace ipcfloor
