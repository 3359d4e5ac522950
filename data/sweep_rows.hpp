#pragma once
// A sweep's rows, the contract scripts depend on (docs/SPEC.md §6): which combos a sweep runs
// (a grid, a list of lengths or a combo file, bad rows kept in place with their error) and how
// each result is written (a table for people, JSON lines or CSV). Every way of running a sweep
// (in this process, through a segment, over a socket, across MPI ranks) plans its rows here and
// writes them here, so their outputs are identical row for row. Setup path: allocates.

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "common/backtest_result.hpp"
#include "common/trade_stats.hpp"
#include "common/combo.hpp"
#include "common/error.hpp"
#include "data/combo_io.hpp"
#include "kernel/strategy.hpp"

namespace ipcfloor {

struct SweepRow {
  // The series the row ran on, which every row of JSON and CSV names: its name, its bars and the
  // FNV-1a 64 checksum of their bytes (common/checksum.hpp), as the engine's header has it.
  std::string series;
  std::size_t series_bars = 0;
  std::uint64_t series_checksum = 0;
  // The bars [from_bar, to_bar) of that series the row ran on, when the sweep named a range
  // (SweepShape::ranged): every format then carries both.
  std::uint64_t from_bar = 0;
  std::uint64_t to_bar = 0;
  std::int64_t length = 0;  // the user-facing L the combo was built from: always its L window
  Combo params{};
  BacktestResult result{};
  TradeStats stats{};       // a sweep with --stats: the figures (docs/STATISTICS.md); pnl and trades as `result`
  std::string error;        // empty when the combo ran; otherwise its status and why
  std::size_t line = 0;     // its line in the combo file (0: not from a file); errors name it
  // Set exactly when the row of a combo file did not parse: its text as written. Such a row
  // has no params; the writer prints this text in their place.
  std::string raw;
};

// A sweep's rows before they run: a combo file's rows as parsed, or the combos of a grid or
// lengths (ComboRows, data/combo_io.hpp: 8 bytes a parameter and 6 a row, no string; the text and error of a
// row that did not parse are read again when the row is written). Read-only once planned: every
// series of a sweep runs the same plan.
using SweepPlan = ComboRows;

// Where a row stands on one series before it runs (1 byte a row): it runs, it did not parse, or
// the strategy refuses its windows for the series' bars. A row's error is worded only when it is
// written (planned_row), so no row keeps a string.
enum class RowVerdict : std::uint8_t { runnable, bad_row, refused };

// The bytes a sweep keeps per planned row besides the plan: its verdict on the series it runs.
// plan_rows counts them with the plan before allocating either.
inline constexpr std::size_t kSweepBytesPerRow = sizeof(RowVerdict);

// Where a sweep's combos come from: exactly one of a combo file, a list of lengths, a grid.
struct ComboSpec {
  std::string combos_path;     // set: a combo file (data/combo_io.hpp), "-" for stdin
  std::string lengths;         // used when lengths_given
  bool lengths_given = false;  // an empty list is then an error, not the grid
  std::string grid = "6:200:80";
};

// The rows of `spec`, in order, for a strategy whose combo files name `columns`. Lengths and a grid
// build the built-in strategy's combos, so only `lengths_allowed` takes them (another strategy
// needs a combo file). Errors: the file cannot be read or has no format; --lengths is empty; a
// length or grid does not parse; resource when the host cannot back a combo file's rows, counting
// the plan's bytes a row and the caller's `kept_bytes_per_row` (load_combos). A bad row of a
// combo file is a row that did not parse, kept in place.
[[nodiscard]] Expected<SweepPlan> plan_rows(const ComboSpec& spec, const ComboColumns& columns = columns_of(builtin()),
                                            bool lengths_allowed = true,
                                            std::size_t kept_bytes_per_row = kSweepBytesPerRow);

// The error of a row its strategy refuses on a series of `n_bars`: "window_out_of_range: params
// [...]: " and the strategy's own sentence (`strategy` is the strategy, when this process has it)
// or, without it, "refused by strategy NAME for a series of N bars"; "line N: " follows the
// status when the row came from a combo file. Every way of running a sweep words it here, so
// their rows stay identical.
[[nodiscard]] std::string window_error(const SweepRow& row, std::size_t n_bars, const Strategy* strategy,
                                       std::string_view strategy_name);

// Every row's verdict before a strategy judged it: runnable, or bad_row where it did not parse.
[[nodiscard]] std::vector<RowVerdict> verdicts_of(const SweepPlan& plan);

// The same, and refused for every row `strategy` refuses on a series of `n_bars` (its one check,
// Strategy::accepts).
[[nodiscard]] std::vector<RowVerdict> admit_rows(const SweepPlan& plan, const Strategy& strategy, std::size_t n_bars);

// Row i of `plan` as it is written before it runs (allocates): its params, length and line; a
// bad_row's error ("bad_row: " and why) and text; a refused row's window_error (with `strategy`,
// `strategy_name` and `n_bars` as there). The caller fills in its series and, once it ran, its
// result or error.
[[nodiscard]] SweepRow planned_row(const SweepPlan& plan, std::size_t i, RowVerdict verdict, std::size_t n_bars,
                                   const Strategy* strategy, std::string_view strategy_name);

enum class SweepFormat : std::uint8_t { table, json, csv };

// The shape of a sweep's rows: the built-in strategy's (the length L and its six windows), or
// another strategy's (its own parameters, named, and no length).
struct SweepShape {
  ComboColumns columns = columns_of(builtin());
  bool lengths = true;  // the built-in strategy: each row has its length L
  bool stats = false;   // each row has the figures of docs/STATISTICS.md after pnl and trades
  bool ranged = false;  // each row ends with the range of bars it ran on (from_bar, to_bar)
};

// Writes rows one by one, flushing each line, so a long sweep streams. Every JSON and CSV row
// ends with the series it ran on (name, bars, checksum), so a file of results says what data
// made it; the table's header line, written by the caller, says the same. With `with_series`
// (a sweep that picks among series) the name leads instead: a leading "series" field in JSON, a
// leading column in CSV and the table.
class SweepWriter {
 public:
  SweepWriter(std::FILE* out, SweepFormat format, bool with_series = false, SweepShape shape = {}) noexcept
      : out_(out), format_(format), with_series_(with_series), shape_(shape) {}
  // The table's or CSV's header line (nothing for JSON lines).
  void header();
  // JSON: {"L":6,"params":[3,6,2,1,2,3],"pnl":-5165.577039790348,"trades":57029,"series":"default",
  // "series_bars":150000,"series_checksum":"aa8dbb76d06ab607"} (pnl with 17 significant digits);
  // a failed row {"L":..,"params":[..],"error":"...",<series>}; a combo-file row that did not
  // parse {"raw":"3,x,2,1,2,3","error":"bad_row: line 4: ...",<series>}. CSV, under the header
  // h,L,s,p3,p2,p,pnl,trades,error,raw,series,series_bars,series_checksum (the combo file's
  // columns, the results, the series; L is the L column of the table and of JSON): a row that
  // did not parse has empty windows and its text in `raw`. The table prints that text in the
  // params column. Another strategy's rows have no "L" and only its parameters:
  // {"params":[10,40],...}, CSV under fast,slow,pnl,... Every JSON row also names each parameter
  // as a key of its own, after the results ({"params":[10,40],"pnl":...,"trades":...,"fast":10,
  // "slow":40,"series":...}; the built-in's L is already one), so `pandas.read_json(lines=True)`
  // gives each its column; a name that would clash with another field is prefixed "param_". With stats, the figures follow trades in every format, in
  // docs/STATISTICS.md's order: JSON writes NaN as null and infinity as "inf"/"-inf", CSV and the
  // table as nan and inf.
  void row(const SweepRow& row);

 private:
  std::FILE* out_;
  SweepFormat format_;
  bool with_series_;
  SweepShape shape_;
};

// A figure as JSON: its shortest round-trip digits (17 significant), null for NaN, "inf" or
// "-inf" for an infinity (JSON has neither). Allocates.
[[nodiscard]] std::string json_number(double value);
// A figure in CSV and tables: the same digits, or nan, inf, -inf.
[[nodiscard]] std::string text_number(double value);

}  // namespace ipcfloor
