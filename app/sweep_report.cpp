#include "app/sweep_report.hpp"

#include <fmt/format.h>

namespace ipcfloor {
void print_sweep_json(std::FILE* out, std::span<const SweepRow> rows) {
  for (const SweepRow& row : rows) {
    const auto w = row.params.as_array();
    fmt::print(out, "{{\"L\":{},\"params\":[{},{},{},{},{},{}],\"pnl\":{:.17g},\"trades\":{}}}\n",
               row.length, w[0], w[1], w[2], w[3], w[4], w[5], row.result.pnl, row.result.trades);
  }
}

void print_sweep_table(std::FILE* out, std::span<const SweepRow> rows) {
  fmt::print(out, "{:>5}  {:<28}  {:>22}  {:>7}\n", "L", "params [h,L,s,p3,p2,p]", "pnl (% points)", "trades");
  for (const SweepRow& row : rows) {
    const auto w = row.params.as_array();
    fmt::print(out, "{:>5}  {:<28}  {:>22.13f}  {:>7}\n", row.length,
               fmt::format("[{},{},{},{},{},{}]", w[0], w[1], w[2], w[3], w[4], w[5]), row.result.pnl,
               row.result.trades);
  }
}

}  // namespace ipcfloor
