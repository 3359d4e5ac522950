#include "app/sweep_ranking.hpp"

#include <algorithm>
#include <cmath>

#include "common/trade_stats.hpp"

namespace ipcfloor {
namespace {

double value_of(const SweepRow& row, int figure) noexcept {
  if (figure == -2) return row.result.pnl;
  if (figure == -1) return static_cast<double>(row.result.trades);
  return stats_figure(row.stats, static_cast<std::size_t>(figure));
}

}  // namespace

Expected<RankBy> parse_rank_by(const std::string& text, bool with_stats) {
  RankBy by;
  std::string name = text;
  std::string direction;
  if (const auto colon = text.find(':'); colon != std::string::npos) {
    name = text.substr(0, colon);
    direction = text.substr(colon + 1);
  }
  by.figure = stats_figure_index(name.c_str());
  if (by.figure == -3) {
    std::string known = "pnl, trades";
    for (const char* figure : kStatsFigureNames) known += std::string(", ") + figure;
    return fail(ErrorCode::invalid_argument, "--sort-by {}: no such figure; it takes one of {} (with :asc or :desc)",
                name, known);
  }
  if (by.figure >= 0 && !with_stats)
    return fail(ErrorCode::invalid_argument, "--sort-by {} is a statistic: add --stats (without it a row has only pnl "
                "and trades)", name);
  by.ascending = name == "max_drawdown" || name == "max_drawdown_bars";
  if (direction == "asc") {
    by.ascending = true;
  } else if (direction == "desc") {
    by.ascending = false;
  } else if (!direction.empty()) {
    return fail(ErrorCode::invalid_argument, "--sort-by {}: the direction after ':' is asc or desc, not '{}'", text,
                direction);
  }
  by.name = text;
  return by;
}

bool RankedRows::better(const Held& a, const Held& b) const noexcept {
  const bool a_nan = std::isnan(a.value);
  const bool b_nan = std::isnan(b.value);
  if (a_nan != b_nan) return b_nan;  // a number before NaN, whichever the direction
  if (!a_nan && a.value != b.value) return by_.ascending ? a.value < b.value : a.value > b.value;
  return a.order < b.order;
}

void RankedRows::add(SweepRow row) {
  Held held{value_of(row, by_.figure), seen_++, std::move(row)};
  if (keep_ == 0) {
    held_.push_back(std::move(held));
    return;
  }
  // A heap with the worst held row at the front: a better row replaces it.
  const auto worse_first = [this](const Held& a, const Held& b) { return better(a, b); };
  if (held_.size() < keep_) {
    held_.push_back(std::move(held));
    std::push_heap(held_.begin(), held_.end(), worse_first);
  } else if (better(held, held_.front())) {
    std::pop_heap(held_.begin(), held_.end(), worse_first);
    held_.back() = std::move(held);
    std::push_heap(held_.begin(), held_.end(), worse_first);
  }
}

std::vector<SweepRow> RankedRows::take_sorted() {
  std::sort(held_.begin(), held_.end(), [this](const Held& a, const Held& b) { return better(a, b); });
  std::vector<SweepRow> rows;
  rows.reserve(held_.size());
  for (Held& held : held_) rows.push_back(std::move(held.row));
  held_.clear();
  return rows;
}

}  // namespace ipcfloor
