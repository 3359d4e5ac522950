#pragma once
// Rank 0's side of ipcfloor-mpi: the rows in plan order, series by series, each written as soon
// as every row before it is complete, whichever rank computed it. Single thread (rank 0's).
// Allocates.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cluster/mpi_wire.hpp"
#include "data/sweep_rows.hpp"

namespace ipcfloor::mpi {

class RowSink {
 public:
  // `names`: every series of the catalog, by index; `selected`: the catalog indices the run
  // covers, in output order, with their bar counts `n_bars` and `checksums` (each row names its
  // series by all three); `items`: the runnable (series, row) pairs, whose results arrive by
  // item index. `strategy`: the rows' strategy when this process has it (its refusals are put in
  // its words), named `strategy_name`.
  RowSink(SweepPlan plan, std::vector<std::string> names, std::vector<std::size_t> selected,
          std::vector<std::size_t> n_bars, std::vector<std::uint64_t> checksums, std::span<const Item> items,
          SweepWriter& writer, const Strategy* strategy, std::string strategy_name);

  // Records a batch of results and writes every row that is now complete.
  void take(std::span<const ResultWire> batch);

  [[nodiscard]] std::size_t written() const noexcept { return cursor_; }
  [[nodiscard]] std::size_t total() const noexcept { return item_of_.size(); }
  [[nodiscard]] std::size_t failed_rows() const noexcept { return failed_; }

 private:
  static constexpr std::size_t kNone = ~std::size_t{0};
  void flush();

  SweepPlan plan_;
  std::vector<std::string> names_;
  std::vector<std::size_t> selected_;
  std::vector<std::size_t> n_bars_;        // per selected series
  std::vector<std::uint64_t> checksums_;  // per selected series
  std::span<const Item> items_;
  SweepWriter& writer_;
  std::vector<std::size_t> item_of_;  // output row -> item (kNone: the row cannot run)
  std::vector<ResultWire> results_;
  std::vector<bool> have_;
  const Strategy* strategy_;
  std::string strategy_name_;
  std::size_t cursor_ = 0;
  std::size_t failed_ = 0;
};

// The error text of a row whose result carries a non-zero status.
[[nodiscard]] std::string error_text(const ResultWire& result, const SweepRow& row, std::size_t n_bars,
                                     const Strategy* strategy, std::string_view strategy_name);

}  // namespace ipcfloor::mpi
