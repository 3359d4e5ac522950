#pragma once
// `sweep --out FILE` (and `walkforward --out`): a results file that says, a month later, exactly
// what produced it. Its provenance comes first (the ipcfloor version, the command line, the
// strategy's name and the SHA-256 of its .so, the series' name, bars and checksum, the fee, the
// range, bars per year, how the combos were chosen and the search's seed), then the rows:
//   FILE.csv    `# key: value` lines, then the CSV rows of `--csv` (pandas: read_csv(comment="#"))
//   FILE.jsonl  a {"provenance": {...}} line, then the JSON rows of `--json`
//   FILE.npz    provenance.npy (a one-element string array holding the same JSON) and rows.npy, a
//               structured array (the parameters by name, pnl, trades, the figures with --stats),
//               plus failed.jsonl's rows that did not run (numpy.load(FILE)["rows"])
// CSV and JSON lines stream, each row flushed, so a sweep stopped by Ctrl-C leaves a valid file of
// every row computed; a .npz is written whole when the sweep ends, stopped or not.
// `sweep --replay FILE` reads the provenance and rows back (read_results).
//
// Threads: the command's thread. Setup path: allocates, does I/O.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "data/sweep_rows.hpp"

namespace ipcfloor {

struct SeriesIdentity {
  std::string name;
  std::uint64_t bars = 0;
  std::uint64_t checksum = 0;
};

struct Provenance {
  std::string version;           // ipcfloor's
  std::string command;           // the command line, as typed
  std::string created;           // UTC, ISO 8601
  std::string target;            // "inproc", "engine NAME", "socket PATH"
  std::string strategy;          // its name
  std::string strategy_sha256;   // of its .so; "builtin" for the built-in one
  std::vector<std::string> params;  // its parameter names
  SeriesIdentity series;         // the first series the rows ran on (each row names its own)
  double fee = 0.0;
  std::uint64_t from_bar = 0;    // the range, when one was named (to_bar 0: none)
  std::uint64_t to_bar = 0;
  bool stats = false;
  double bars_per_year = 0.0;    // with stats
  std::string combos;            // "grid 6:200:80", "lengths 6,8", "combos FILE", "random"
  std::uint64_t seed = 0;        // random search
  std::uint64_t trials = 0;
  std::vector<std::string> ranges;  // random search: its --param values
  std::string where;
};

enum class ResultsFormat : std::uint8_t { csv, jsonl, npz };
// The format a results path's extension names; invalid_argument otherwise.
[[nodiscard]] Expected<ResultsFormat> results_format(const std::string& path);

class ResultsFile {
 public:
  // Creates `path` (replacing a regular file there, never following a link at it). The
  // provenance is written once the first series is known: begin().
  [[nodiscard]] static Expected<std::unique_ptr<ResultsFile>> create(const std::string& path, SweepShape shape,
                                                                     bool with_series);
  ~ResultsFile();
  ResultsFile(const ResultsFile&) = delete;
  ResultsFile& operator=(const ResultsFile&) = delete;

  // Writes the provenance (the first call only).
  [[nodiscard]] Expected<void> begin(const Provenance& provenance);
  // One row; CSV and JSON lines are flushed at once.
  [[nodiscard]] Expected<void> row(const SweepRow& row);
  // Completes the file (a .npz is assembled here). Rows written: `rows()`.
  [[nodiscard]] Expected<void> finish();
  [[nodiscard]] std::size_t rows() const noexcept { return rows_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  ResultsFile(std::string path, ResultsFormat format, SweepShape shape, bool with_series);
  [[nodiscard]] Expected<void> npz_row(const SweepRow& row);

  std::string path_;
  ResultsFormat format_;
  SweepShape shape_;
  bool with_series_;
  std::FILE* out_ = nullptr;              // CSV and JSON lines: the file; npz: the records' scratch
  std::unique_ptr<SweepWriter> writer_;   // CSV and JSON lines
  std::string provenance_json_;
  std::string failed_;                    // npz: the rows that did not run, as JSON lines
  std::string scratch_path_;              // npz: where the records wait
  bool begun_ = false;
  bool finished_ = false;
  std::size_t rows_ = 0;
  std::size_t records_ = 0;
};

// What a results file holds, read back for --replay.
struct ResultsRead {
  Provenance provenance;
  std::vector<SweepRow> rows;  // with their params, pnl, trades, figures (stats), error
};
[[nodiscard]] Expected<ResultsRead> read_results(const std::string& path);

// The provenance as one JSON object (the .jsonl's first line, the .npz's provenance.json).
[[nodiscard]] std::string provenance_json(const Provenance& provenance);

}  // namespace ipcfloor
