#pragma once
// `ipcfloor journal inspect DIR` shows what a live engine's journal (serve --journal DIR) holds:
// the series it continues, its bars, the engine starts it recorded, a torn last record; every
// record's CRC is checked. It reads the file without the engine's lock, so it works while the
// engine runs.
// `ipcfloor journal compact DIR --data FILE -o OUT` folds the journal into a new data file: OUT
// is FILE's bars and then the journal's (written atomically, in OUT's format), and DIR's journal
// starts over, continuing OUT with no bars, so that `serve --data OUT --journal DIR` preloads
// everything and replays nothing. It takes the engine's lock: refused while an engine runs on DIR.

#include <string>

#include <CLI/CLI.hpp>

#include "data/series_source.hpp"

namespace ipcfloor {

struct JournalOptions {
  std::string dir;
  bool json = false;     // inspect --json
  SeriesSource source;   // compact: the data the journal continues (--data FILE, or --bars/--seed ...)
  std::string out_path;  // compact -o OUT: .f64, .csv or .npy
};

// Adds `journal` with its `inspect` and `compact` subcommands, bound to `options`.
CLI::App* add_journal_subcommand(CLI::App& app, JournalOptions& options);

// Runs the subcommand `journal` was given. Returns the exit code; errors go to stderr.
[[nodiscard]] int run_journal_command(const CLI::App& journal, JournalOptions& options);

}  // namespace ipcfloor
