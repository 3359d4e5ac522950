#pragma once
// The series checksum: FNV-1a 64 over the bytes of the close series. The segment records it in
// its header, the socket server answers it after a LOAD, and sweeps print it, so one series has
// one name wherever it travels. Not a defence against a hostile writer, only a fingerprint.

#include <cstddef>
#include <cstdint>
#include <span>

namespace ipcfloor {

// FNV-1a 64 over `bytes`. Pure, noexcept, no allocation; callable from any thread.
[[nodiscard]] std::uint64_t fnv1a64(std::span<const std::byte> bytes) noexcept;

}  // namespace ipcfloor
