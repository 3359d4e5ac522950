// ipcfloor-mpi's entry point: MPI up, the options parsed (rank 0 prints parse errors), the sweep
// (cluster/mpi_sweep.hpp), MPI down.

#include <mpi.h>

#include <CLI/CLI.hpp>

#include "cluster/mpi_sweep.hpp"
#include "cluster/mpi_wire.hpp"
#include "common/exit_codes.hpp"

int main(int argc, char** argv) {
  using namespace ipcfloor;
  MPI_Init(&argc, &argv);
  MpiSweepOptions options;
  CLI::App app{"ipcfloor-mpi: `ipcfloor sweep --inproc` across MPI ranks, the same rows in the same order"};
  add_mpi_sweep_options(app, options);
  app.footer(std::string(kExitCodesHelp));
  int code = 0;
  try {
    app.parse(argc, argv);
    code = run_mpi_sweep(options);
  } catch (const CLI::ParseError& error) {
    code = mpi::rank_of(MPI_COMM_WORLD) == mpi::kRoot ? app.exit(error) : 0;
    if (code != 0) code = kExitUsage;
    if (dynamic_cast<const CLI::CallForHelp*>(&error) != nullptr) code = 0;
  }
  MPI_Finalize();
  return code;
}
