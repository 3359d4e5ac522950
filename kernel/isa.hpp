#pragma once
// Which instruction-set path the kernel runs. One binary carries three, each compiled for its own
// target in its own translation unit: AVX-512 (8 doubles per vector), AVX2 (4) and the x86-64
// baseline (SSE2, 2). The CPU decides at start which one runs, so a binary built on one x86-64
// machine runs at full speed on another; IPCFLOOR_ISA=avx512|avx2|scalar forces one. Every path
// sums each output in the same order, so every path gives bit-identical results.
//
// Threads: select_kernel_isa/set_kernel_isa are setup calls for before the kernel runs on other
// threads (they store one pointer). active_kernel_isa is noexcept and safe from any thread.

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/error.hpp"

namespace ipcfloor {

enum class KernelIsa : std::uint8_t { scalar, avx2, avx512 };

// "scalar", "avx2", "avx512".
[[nodiscard]] std::string_view to_string(KernelIsa isa) noexcept;

// True when this CPU can run `isa` (scalar: always).
[[nodiscard]] bool cpu_supports(KernelIsa isa) noexcept;

// Every path this CPU can run, best first.
[[nodiscard]] std::vector<KernelIsa> supported_kernel_isas();

// The path the kernel runs now. Until something selects one, the best the CPU supports.
[[nodiscard]] KernelIsa active_kernel_isa() noexcept;

// Makes `isa` the active path. invalid_argument, naming what the CPU supports, when it cannot
// run it.
[[nodiscard]] Expected<void> set_kernel_isa(KernelIsa isa);

// The path IPCFLOOR_ISA names, or the best the CPU supports when it is unset; made active.
// invalid_argument for an unknown name or a path this CPU lacks, naming both.
[[nodiscard]] Expected<KernelIsa> select_kernel_isa();

}  // namespace ipcfloor
