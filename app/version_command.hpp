#pragma once
// `ipcfloor --version`: what this binary is, one fact per line.

#include <nlohmann/json.hpp>

namespace ipcfloor {

// The version, git commit, build type, compiler, and the kernel path this host would run, as
// JSON (for report.json's context block).
[[nodiscard]] nlohmann::json build_context();

// Prints build_context() for people.
void print_version();

}  // namespace ipcfloor
