#pragma once
// What one ipcfloor-mpi run is told (cluster/mpi_sweep.hpp declares the options and runs the
// sweep; cluster/mpi_share.hpp computes a rank's share of it). Every rank holds the same.

#include <string>
#include <vector>

#include "data/gbm.hpp"
#include "data/sweep_rows.hpp"
#include "kernel/kernel.hpp"

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
  // --strategy: a strategy's FILE.so every rank loads (in-process), or the name of one the engine
  // serves (--name); empty: the built-in one.
  std::string strategy;
  // What --strategy resolved to, the same on every rank: the strategy this process runs (null
  // when only the engine has it), its index on the engine, and its parameter names.
  const Strategy* resolved = nullptr;
  std::uint32_t strategy_index = 0;
  std::string strategy_name;
  std::vector<std::string> strategy_params;
};

}  // namespace ipcfloor
