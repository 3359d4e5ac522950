#pragma once
// What every subcommand of the command line shares: the exit code of a failure and the way an
// error reaches the user, and the GBM options that gen, sweep and serve all take.

#include <string_view>

#include <CLI/CLI.hpp>

#include "common/error.hpp"
#include "kernel/gbm.hpp"

namespace ipcfloor {

// Exit codes, the same for every subcommand (documented in --help and the README):
inline constexpr int kExitFailure = 1;      // the command ran and failed (a sweep that did not match, ...)
inline constexpr int kExitUsage = 2;        // the command line is wrong
inline constexpr int kExitInput = 3;        // a file, series, combo list or value is bad
inline constexpr int kExitEnvironment = 4;  // the host lacks something (huge pages, memlock, a free name)
inline constexpr int kExitEngineGone = 5;   // the engine is not there, died, or stopped answering

// The exit code for an error of this kind: input, environment, engine gone, or failure.
[[nodiscard]] int exit_code_for(ErrorCode code) noexcept;

// Prints "ipcfloor COMMAND: MESSAGE" on stderr and returns exit_code_for(error.code).
int report_error(std::string_view command, const Error& error);

// The help text's epilogue: the exit codes every subcommand shares.
inline constexpr std::string_view kExitCodesHelp =
    "Exit codes: 0 ok, 1 failed (e.g. a result that does not match), 2 usage, 3 bad input (file, series, "
    "combo, value), 4 environment (huge pages, memlock, name in use, permissions), 5 engine gone or not "
    "answering.";

// --bars --seed --mu --sigma --s0 --dt, bound to `gbm`.
void add_gbm_options(CLI::App& command, GbmParams& gbm);

}  // namespace ipcfloor
