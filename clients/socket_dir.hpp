#pragma once
// Where a client looks for an engine's socket when it is not told: $IPCFLOOR_SOCKET_DIR when it is
// set and not empty (a systemd unit's RuntimeDirectory, say), else /dev/shm, where `ipcfloor serve`
// puts it by default. The C ABI, the C++ facade, Python (through the C ABI) and every command of
// the ipcfloor CLI follow this one rule, so one environment variable moves them all.
//
// Setup path: reads the environment (not safe against a concurrent setenv); allocates.

#include <cstdlib>
#include <string>

#include "shm/segment.hpp"

namespace ipcfloor {

inline constexpr const char* kSocketDirVariable = "IPCFLOOR_SOCKET_DIR";

[[nodiscard]] inline std::string default_socket_dir() {
  const char* dir = std::getenv(kSocketDirVariable);
  return dir != nullptr && dir[0] != '\0' ? std::string(dir) : std::string(kDefaultSocketDir);
}

}  // namespace ipcfloor
