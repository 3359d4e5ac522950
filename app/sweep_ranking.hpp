#pragma once
// `sweep --sort-by METRIC [--top K]`: the rows ranked by one figure (pnl, trades, or a statistic
// of docs/STATISTICS.md), best first, ties in the order the rows were planned. With a top, only
// the best K rows are ever held (a bounded heap), so a sweep of millions of combos keeps K rows in
// memory, not millions. Rows that did not run (they carry an error) are not ranked: the caller
// reports them as they come.
//
// Threads: the sweep's thread. Allocates (the rows it keeps).

#include <cstddef>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "data/sweep_rows.hpp"

namespace ipcfloor {

// Which figure, and which way is best.
struct RankBy {
  int figure = -2;          // stats_figure_index: -2 pnl, -1 trades, 0.. a statistic
  bool ascending = false;   // true: smaller is better (the drawdowns by default)
  std::string name;         // as given, for messages
};

// Parses METRIC or METRIC:asc / METRIC:desc. METRIC is pnl, trades or a figure's name; without a
// direction, max_drawdown and max_drawdown_bars rank smallest first and every other figure
// largest first. `with_stats`: whether the rows have the figures (otherwise only pnl and trades).
[[nodiscard]] Expected<RankBy> parse_rank_by(const std::string& text, bool with_stats);

class RankedRows {
 public:
  // `keep`: the rows held at most (0: every row).
  RankedRows(RankBy by, std::size_t keep) : by_(std::move(by)), keep_(keep) {}
  // A row that ran (no error).
  void add(SweepRow row);
  // The rows held, best first. Leaves this empty.
  [[nodiscard]] std::vector<SweepRow> take_sorted();
  [[nodiscard]] std::size_t seen() const noexcept { return seen_; }

 private:
  struct Held {
    double value;
    std::size_t order;  // when it was added: ties keep the plan's order
    SweepRow row;
  };
  // True when `a` ranks before `b` (better), NaN after every number.
  [[nodiscard]] bool better(const Held& a, const Held& b) const noexcept;

  RankBy by_;
  std::size_t keep_;
  std::size_t seen_ = 0;
  std::vector<Held> held_;  // a heap whose front is the worst held row, when keep_ != 0
};

}  // namespace ipcfloor
