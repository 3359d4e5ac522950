#pragma once
// Turns one request frame into its response: validation, then BACKTEST or ECHO. The single
// place where frames meet the kernel, shared by the shm serve loop and the benchmarks.

#include <span>

#include "common/combo.hpp"
#include "kernel/kernel.hpp"
#include "shm/frames.hpp"

namespace ipcfloor {

// Validates `request` and fills every field of `response` (seq and opcode echoed, status set).
// Bad frames (unknown opcode, flags set, a window outside [1, n_bars], an ECHO_BULK range
// outside `bulk`, a BACKTEST whose backtest_cost exceeds `max_frame_cost`) get an error status
// and no result; they are never fatal. Hot path: noexcept, no allocation, no syscall. `request`
// must be a private copy: a peer may still be writing the shared slot. `bulk` is the requesting
// lane's bulk region (empty where there is none); its bytes are the client's, so an ECHO_BULK
// copies whatever they hold and trusts none of it. `max_frame_cost` 0 means unbounded.
Status dispatch_request(const RequestSlot& request, std::span<const double> close, double fee,
                        KernelWorkspace& workspace, ResponseSlot& response, std::span<std::byte> bulk,
                        std::uint64_t max_frame_cost = 0) noexcept;

// The same without a bulk region or a bound (benchmark peers that only ECHO or BACKTEST).
inline Status dispatch_request(const RequestSlot& request, std::span<const double> close, double fee,
                               KernelWorkspace& workspace, ResponseSlot& response) noexcept {
  return dispatch_request(request, close, fee, workspace, response, {});
}

// Fills `response` as the answer to `request` with `status` and a zero payload (seq and opcode
// echoed), field by field: `response` may be a claimed ring slot or the exchange line, whose stamp
// is not ours. Returns `status`.
Status answer_status(ResponseSlot& response, const RequestSlot& request, Status status) noexcept;

// The verdict on a BACKTEST before it runs: ok, window_out_of_range (a window outside
// [1, n_bars]) or too_costly (its backtest_cost exceeds `max_frame_cost`; 0: unbounded). A pure
// function of the combo, the bars and the bound: the same on every host, whoever computes it.
[[nodiscard]] Status admit_backtest(const Combo& params, std::size_t n_bars, std::uint64_t max_frame_cost) noexcept;

// The answer's status for what the kernel said (the engine validated the combo first, so anything
// but ok or window_out_of_range is engine_error).
[[nodiscard]] Status status_of(KernelStatus status) noexcept;

// Checks an ECHO_BULK payload against a bulk region of `region_bytes`: both ranges inside it,
// not overlapping, unused words zero. Pure; for the engine and for tests.
[[nodiscard]] bool valid_bulk_echo(const BulkEcho& bulk, std::size_t region_bytes) noexcept;

}  // namespace ipcfloor
