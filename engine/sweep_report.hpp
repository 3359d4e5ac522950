#pragma once
// The user-facing side of a sweep: parsing --lengths / --grid, and printing the results as
// JSON lines (the SPEC §7 contract scripts depend on) or as a table a person reads.

#include <cstdint>
#include <cstdio>
#include <span>
#include <string_view>
#include <vector>

#include "engine/kernel.hpp"
#include "shm/combo.hpp"
#include "shm/error.hpp"

namespace ipcfloor {

struct SweepRow {
  std::int64_t length;  // the user-facing L the combo was built from
  Combo params;
  BacktestResult result;
};

// "6,8,11" -> {6, 8, 11}. Each length must be a whole number >= 1.
[[nodiscard]] Expected<std::vector<std::int64_t>> parse_lengths(std::string_view text);

// "6:200:80" -> round(linspace(6, 200, 80)), like numpy. first <= last, count >= 1.
[[nodiscard]] Expected<std::vector<std::int64_t>> parse_grid(std::string_view text);

// One JSON object per row and line: {"L":6,"params":[3,6,2,1,2,3],"pnl":...,"trades":...},
// pnl with 17 significant digits so the exact double can be recovered.
void print_sweep_json(std::FILE* out, std::span<const SweepRow> rows);

// An aligned table with a header, for people.
void print_sweep_table(std::FILE* out, std::span<const SweepRow> rows);

}  // namespace ipcfloor
