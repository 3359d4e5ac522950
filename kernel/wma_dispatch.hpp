#pragma once
// The weighted moving average path the kernel calls now (kernel/isa.hpp chooses it). Internal to
// the kernel. Noexcept, one relaxed load: safe on the hot path.

#include "kernel/wma_paths.hpp"

namespace ipcfloor::wma {

[[nodiscard]] Path active_path() noexcept;

}  // namespace ipcfloor::wma
