#pragma once
// What every subcommand of the command line shares: the exit code of a failure and the way an
// error reaches the user, and the GBM options that gen, sweep and serve all take.

#include <string_view>

#include <CLI/CLI.hpp>

#include "common/error.hpp"
#include "common/exit_codes.hpp"
#include "kernel/gbm.hpp"

namespace ipcfloor {

// Prints "ipcfloor COMMAND: MESSAGE" on stderr and returns exit_code_for(error.code).
int report_error(std::string_view command, const Error& error);

// --bars --seed --mu --sigma --s0 --dt, bound to `gbm`. When `given` is set, it turns true if
// the command line names any of them.
void add_gbm_options(CLI::App& command, GbmParams& gbm, bool* given = nullptr);

}  // namespace ipcfloor
