#pragma once
// ipcfloor-mpi: `ipcfloor sweep --inproc` (or `sweep --name`) across MPI ranks, for (series x
// combo) studies that outgrow one host. The same options and the same rows, row for row and in
// the same order:
//
//   mpirun -np 64 ipcfloor-mpi --data a.npy --data b.npy --series all --combos study.csv --csv -o out.csv
//
// Rank 0 plans the rows (reads the combo file, names the series and counts their bars), and
// broadcasts them. Every rank derives the same runnable (series, combo) items, splits them the
// same way by estimated cost, in tiles of one series each (cluster/work_split.hpp), computes its
// share (cluster/mpi_share.hpp) and streams its results to rank 0 in batches. Rank 0 computes its
// own share between receives and writes the rows in order as soon as they are complete
// (cluster/row_sink.hpp). With -o, it writes a temporary file and renames it over the output
// only when every rank succeeded: no partial file is ever presented as complete. A rank that
// fails reports why and what its share was; the run then exits non-zero.
//
// With --name, each rank computes through the engine on its own host (one engine per host, its
// series preloaded once): the series are the engine's own table (`serve --data a --data b`),
// chosen with --series by the names the engine gave them, and each request names its series.

#include <CLI/CLI.hpp>

#include "cluster/mpi_options.hpp"

namespace ipcfloor {

// Declares ipcfloor-mpi's options on `app`, each writing into `options`. Setup path.
void add_mpi_sweep_options(CLI::App& app, MpiSweepOptions& options);

// The sweep, on the calling rank; MPI must be initialised. Every rank calls it with the same
// options. Returns this rank's exit code (common/exit_codes.hpp): rank 0's is the run's.
[[nodiscard]] int run_mpi_sweep(const MpiSweepOptions& options);

}  // namespace ipcfloor
