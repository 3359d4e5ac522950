#pragma once
// Exit codes, the same for every ipcfloor program and subcommand (documented in --help, the
// README and docs/OPERATIONS.md). Scripts branch on them, so they never change meaning.

#include <string_view>

#include "common/error.hpp"

namespace ipcfloor {

inline constexpr int kExitFailure = 1;      // the command ran and failed (a sweep that did not match, ...)
inline constexpr int kExitUsage = 2;        // the command line is wrong: an option, its value or its range
inline constexpr int kExitInput = 3;        // a file (missing, not a regular file, malformed), series or combo is bad
inline constexpr int kExitEnvironment = 4;  // the host lacks something (huge pages, memlock, a free name)
inline constexpr int kExitEngineGone = 5;   // the engine is not there, died, or stopped answering
inline constexpr int kExitStrategy = 6;     // a strategy was refused at load (file, ABI, checks) or failed

// The exit code for an error of this kind: input, environment, engine gone, or failure.
[[nodiscard]] constexpr int exit_code_for(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::invalid_argument:
    case ErrorCode::bad_data: return kExitInput;
    case ErrorCode::resource:
    case ErrorCode::permission:
    case ErrorCode::busy:
    case ErrorCode::version_mismatch: return kExitEnvironment;
    case ErrorCode::peer_gone:
    case ErrorCode::timeout: return kExitEngineGone;
    case ErrorCode::strategy: return kExitStrategy;
    case ErrorCode::io:
    case ErrorCode::protocol: break;
  }
  return kExitFailure;
}

// The help text's epilogue: the exit codes every subcommand shares.
inline constexpr std::string_view kExitCodesHelp =
    "Exit codes: 0 ok, 1 failed (e.g. a result that does not match), 2 usage (an option, a value outside its "
    "range), 3 bad input (a file, series or combo), 4 environment (huge pages, memlock, name in use, "
    "permissions), 5 engine gone or not answering, 6 a strategy refused at load or failed.";

}  // namespace ipcfloor
