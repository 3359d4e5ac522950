#pragma once
// Turns one request frame into its response: validation, then BACKTEST or ECHO. The single
// place where frames meet the kernel, shared by the shm serve loop and the benchmarks.

#include <span>

#include "engine/kernel.hpp"
#include "shm/frames.hpp"

namespace ipcfloor {

// Validates `request` and fills every field of `response` (seq and opcode echoed, status set).
// Bad frames (unknown opcode, flags or reserved bits set, a window outside [1, n_bars]) get an
// error status and no result; they are never fatal. Hot path: noexcept, no allocation, no
// syscall. `request` must be a private copy: a peer may still be writing the shared slot.
Status dispatch_request(const RequestSlot& request, std::span<const double> close, double fee,
                        KernelWorkspace& workspace, ResponseSlot& response) noexcept;

}  // namespace ipcfloor
