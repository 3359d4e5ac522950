#pragma once
// What one ipcfloor-mpi run is told (cluster/mpi_sweep.hpp declares the options and runs the
// sweep; cluster/mpi_share.hpp computes a rank's share of it). Every rank holds the same.

#include <string>
#include <vector>

#include "kernel/gbm.hpp"
#include "kernel/kernel.hpp"
#include "kernel/sweep_rows.hpp"

namespace ipcfloor {

struct MpiSweepOptions {
  std::vector<std::string> data_paths;
  GbmParams gbm;
  std::string series;  // a name, "all", or "" (the one series)
  ComboSpec combos;
  bool json = false;
  bool csv = false;
  std::string out;  // "" : stdout
  double fee = kDefaultFee;
  unsigned threads = 1;  // kernel threads per rank (in-process)
  std::string name;      // set: compute through this host's engine
  double timeout_s = 30.0;
  bool timings = false;  // rank 0 prints each rank's share and compute time on stderr
};

}  // namespace ipcfloor
