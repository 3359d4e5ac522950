#include "cluster/row_sink.hpp"

#include <utility>

#include "kernel/kernel.hpp"
#include "shm/frames.hpp"

namespace ipcfloor::mpi {

std::string error_text(const ResultWire& result, const SweepRow& row, std::size_t n_bars, const Strategy* strategy,
                       std::string_view strategy_name) {
  if (result.engine == 0) {
    const auto status = static_cast<KernelStatus>(result.status);
    return status == KernelStatus::window_out_of_range ? window_error(row, n_bars, strategy, strategy_name)
                                                       : std::string(to_string(status));
  }
  const auto status = static_cast<Status>(result.status);
  if (status == Status::window_out_of_range) return window_error(row, n_bars, strategy, strategy_name);
  return std::string(to_string(status));
}

RowSink::RowSink(SweepPlan plan, std::vector<std::string> names, std::vector<std::size_t> selected,
                 std::vector<std::size_t> n_bars, std::vector<std::uint64_t> checksums, std::span<const Item> items,
                 SweepWriter& writer, const Strategy* strategy, std::string strategy_name)
    : plan_(std::move(plan)),
      names_(std::move(names)),
      selected_(std::move(selected)),
      n_bars_(std::move(n_bars)),
      checksums_(std::move(checksums)),
      items_(items),
      writer_(writer),
      strategy_(strategy),
      strategy_name_(std::move(strategy_name)) {
  // Row k of selected series p is item_of_[p * plan.size() + k] (or kNone when it cannot run).
  item_of_.assign(selected_.size() * plan_.size(), kNone);
  std::vector<std::size_t> position_of(names_.size(), 0);  // a series' place among the selected
  for (std::size_t p = 0; p < selected_.size(); ++p) position_of[selected_[p]] = p;
  for (std::size_t i = 0; i < items_.size(); ++i)
    item_of_[position_of[items_[i].series] * plan_.size() + items_[i].row] = i;
  results_.resize(items_.size());
  have_.assign(items_.size(), false);
}

void RowSink::take(std::span<const ResultWire> batch) {
  for (const ResultWire& r : batch) {
    if (r.item >= results_.size()) continue;
    results_[r.item] = r;
    have_[r.item] = true;
  }
  flush();
}

void RowSink::flush() {
  while (cursor_ < item_of_.size()) {
    const std::size_t item = item_of_[cursor_];
    if (item != kNone && !have_[item]) return;
    const std::size_t s = cursor_ / plan_.size();
    const std::size_t k = cursor_ % plan_.size();
    // A row that cannot run did not parse, or its strategy refuses it on this series.
    const RowVerdict verdict = item != kNone       ? RowVerdict::runnable
                               : plan_.parsed(k) ? RowVerdict::refused
                                                 : RowVerdict::bad_row;
    SweepRow row = planned_row(plan_, k, verdict, n_bars_[s], strategy_, strategy_name_);
    row.series = names_[selected_[s]];
    row.series_bars = n_bars_[s];
    row.series_checksum = checksums_[s];
    if (item != kNone && results_[item].status != 0)
      row.error = error_text(results_[item], row, n_bars_[s], strategy_, strategy_name_);
    else if (item != kNone)
      row.result = BacktestResult{results_[item].pnl, results_[item].trades};
    if (!row.error.empty()) ++failed_;
    writer_.row(row);
    ++cursor_;
  }
}

}  // namespace ipcfloor::mpi
