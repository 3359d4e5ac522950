#pragma once
// The user-facing side of a sweep: its results as JSON lines (the contract scripts depend on,
// docs/SPEC.md §6) or as a table a person reads.

#include <cstdint>
#include <cstdio>
#include <span>
#include <string_view>
#include <vector>

#include "kernel/kernel.hpp"
#include "common/combo.hpp"
#include "common/error.hpp"

namespace ipcfloor {

struct SweepRow {
  std::int64_t length;  // the user-facing L the combo was built from
  Combo params;
  BacktestResult result;
};

// One JSON object per row and line: {"L":6,"params":[3,6,2,1,2,3],"pnl":...,"trades":...},
// pnl with 17 significant digits so the exact double can be recovered.
void print_sweep_json(std::FILE* out, std::span<const SweepRow> rows);

// An aligned table with a header, for people.
void print_sweep_table(std::FILE* out, std::span<const SweepRow> rows);

}  // namespace ipcfloor
