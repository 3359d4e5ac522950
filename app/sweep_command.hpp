#pragma once
// `ipcfloor sweep`: runs combos (a grid, a list of lengths, or a combo file) in this process,
// through an engine's segment or over its socket, and streams pnl and trades per combo as a
// table, JSON lines (the contract scripts depend on) or CSV. A bad combo is a row with its error;
// the others still run. Over a socket the combos run on the server's preloaded series unless
// --ship sends this command's own.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/backtest_result.hpp"
#include "data/series_source.hpp"
#include "data/sweep_rows.hpp"

namespace ipcfloor {

struct SweepOptions {
  std::string name;  // set: stream through the engine's shm segment
  std::string socket_path;  // set: sweep through `serve --socket PATH`
  std::string tcp;          // set: sweep through `serve --tcp HOST:PORT`
  std::string socket_dir;   // --name: where the engine's socket lives (default: shm/socket_dir.hpp)
  bool ship = false;        // socket: send our own series instead of using the server's preloaded one
  bool stateful = false;    // socket with ship: load the series once, then combos only
  bool gbm_given = false;   // --bars, --seed, ... appeared
  bool timeout_given = false;
  std::string wait;  // shm client wait mode; empty = the engine's
  std::string client_cpu;  // --name: a cpu index or "near" (the engine's nearest cpu); empty: off the workers' cpus
  double timeout_s = 5.0;
  bool fee_given = false;
  SeriesSource source;                 // the generator's parameters (and the one --data, if one)
  std::vector<std::string> data_paths;  // every --data, in order
  std::string series;                  // --series NAME|INDEX|all: name the series each row ran on
  ComboSpec combos;                    // --combos, --lengths or --grid
  // --strategy: a name the engine or server serves, or (--inproc) a strategy's FILE.so; empty:
  // the built-in one.
  std::string strategy;
  bool json = false;
  bool csv = false;
  bool quiet = false;          // no progress bar
  double fee = kDefaultFee;
  unsigned threads = 0;
  bool stats = false;          // each row with its statistics (STATS; docs/STATISTICS.md)
  double bars_per_year = 0.0;  // for the annualised figures; 0: the engine's (--inproc: 252)
  std::uint64_t from_bar = 0;  // the bars [from_bar, to_bar) of each series; to_bar 0: to its end
  std::uint64_t to_bar = 0;
  std::string sort_by;         // set: rows sorted by this figure (best first), written at the end
  std::size_t top = 0;         // with sort_by: keep only the best `top` rows (O(top) memory)
  std::string out;             // --out FILE.csv|.jsonl|.npz: the rows with their provenance
  std::string replay;          // --replay FILE: compute a results file's rows again and compare
  std::string search;          // "random": --trials combos drawn from the --param ranges
  std::uint64_t trials = 0;
  std::uint64_t seed = 0;      // the random search's (with --search, --seed is this one)
  std::vector<std::string> params;  // --param NAME=LO:HI, in order
  std::string where;           // --where: constraints between the parameters
  std::string command_line;    // as typed, for the results file's provenance
};

// Adds the `sweep` subcommand, bound to `options`.
CLI::App* add_sweep_subcommand(CLI::App& app, SweepOptions& options);

// Runs the sweep the parsed options describe. Returns the exit code; errors go to stderr.
[[nodiscard]] int run_sweep_command(SweepOptions& options);

// Runs the sweep `options` describe and hands every row to `row`, in plan order, instead of
// writing it (no table, no progress line, no results file): walkforward's in-sample sweeps.
// Returns the exit code run_sweep_command would; errors go to stderr.
[[nodiscard]] int sweep_rows(SweepOptions& options, const std::function<void(const SweepRow&)>& row);

}  // namespace ipcfloor
