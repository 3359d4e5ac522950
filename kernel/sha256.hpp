#pragma once
// SHA-256 of a file's bytes (OpenSSL's EVP digest), for provenance: the strategy file a result
// came from is named by its digest, so a results file says exactly which code produced it.
//
// Threads: any. Setup path: allocates, reads the file.

#include <array>
#include <cstdint>
#include <string>

#include "common/error.hpp"

namespace ipcfloor {

using Sha256 = std::array<std::uint8_t, 32>;

// The digest of everything `fd` holds, read with pread from offset 0 (the descriptor's offset is
// not moved). Errors: io, naming `what`.
[[nodiscard]] Expected<Sha256> sha256_of_fd(int fd, const std::string& what);
// Lower-case hex, 64 characters.
[[nodiscard]] std::string to_hex(const Sha256& digest);

}  // namespace ipcfloor
