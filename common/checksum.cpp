#include "common/checksum.hpp"

namespace ipcfloor {

std::uint64_t fnv1a64(std::span<const std::byte> bytes) noexcept {
  // The published FNV-1a 64 offset basis and prime.
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const std::byte b : bytes) {
    hash ^= static_cast<std::uint64_t>(b);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace ipcfloor
