#pragma once
// `ipcfloor trades`: one combo in full. Its statistics, its trade list and its bar-by-bar
// marked-to-market equity (docs/STATISTICS.md), in this process (--inproc, the strategy loaded
// here) or through an engine (--name: the trade list comes a page at a time through the lane's
// bulk region and the equity is rebuilt here from it and the engine's own bars, by the code the
// engine's figures came from). Writes the list and the curve as CSV, JSON lines or .npy.

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/backtest_result.hpp"
#include "common/combo.hpp"
#include "common/error.hpp"
#include "common/trade_stats.hpp"
#include "data/series_source.hpp"

namespace ipcfloor {

struct TradesOptions {
  std::string name;                     // set: through this engine; else --inproc
  std::string socket_dir;
  std::vector<std::string> data_paths;  // --inproc: the series
  SeriesSource source;                  // --inproc: the generator, the column
  std::string series;                   // which series (name or index; default the first)
  std::string strategy;                 // a name the engine serves, or (--inproc) FILE.so; empty: hma
  std::string params;                   // the combo: comma-separated values, the strategy's parameters in order
  std::uint64_t from_bar = 0;           // the bars [from, to) of the series; to 0: to its end
  std::uint64_t to_bar = 0;
  bool fee_given = false;
  double fee = kDefaultFee;
  double bars_per_year = 0.0;           // 0: the engine's (--inproc: 252)
  std::string trades_out;               // .csv, .json (JSON lines) or .npy; empty: a summary on stdout
  std::string equity_out;               // the same for the equity curve
  bool json = false;                    // the summary (statistics and the first trades) as one JSON object
};

// One combo's whole answer, however it was computed.
struct FullCombo {
  std::string strategy;
  std::vector<std::string> param_names;
  Combo params{};
  std::string series;            // its name
  std::uint64_t first_bar = 0;   // the range's first bar: a trade's bars are relative to it
  std::vector<double> close;     // the bars it ran on
  std::vector<ipcfloor_trade> trades;
  std::vector<double> equity;
  TradeStats stats;
};

// The combo `options` name, run in this process or through its engine: its statistics, trade
// list and equity. Errors name what was refused. Allocates; the caller's thread.
[[nodiscard]] Expected<FullCombo> full_combo(const TradesOptions& options);

CLI::App* add_trades_subcommand(CLI::App& app, TradesOptions& options);

// Returns the exit code; errors go to stderr.
[[nodiscard]] int run_trades_command(TradesOptions& options);

}  // namespace ipcfloor
