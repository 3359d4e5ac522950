#pragma once
// Answers one admitted request where it is: ECHO, ECHO_BULK, a BACKTEST, STATS or TRADES (through
// engine/compute.hpp, checking nothing again: the verdict says it may run), or a refusal. The
// serving thread answers cheap requests with it; the workers compute heavy ones through the same
// compute() (engine/worker_dispatch.hpp); in-process peers (the ladder's in-process rungs, tests)
// admit and answer a frame in one call with dispatch_request.
//
// Hot path: noexcept, no allocation, no syscall, no lock. `request` is a private copy: a peer may
// still be writing the shared slot.

#include <cstdint>
#include <span>

#include "engine/admission.hpp"
#include "engine/compute.hpp"
#include "kernel/strategy.hpp"
#include "kernel/workspace.hpp"
#include "shm/frames.hpp"

namespace ipcfloor {

// Fills every field of `response` (seq and opcode echoed, status set) for `request` as `verdict`
// routed it, and `record` where the answer has one: a refusal gets its status (and, refused by
// its strategy, the strategy's own sentence in `record`, extra[2] = kRecordWhy); a computation
// its result, or engine_error when the strategy fails or answers something that cannot be right.
// `bulk` is the requesting lane's bulk region (empty where there is none); its bytes are the
// client's: an ECHO_BULK copies whatever they hold and trusts none of it, and a TRADES writes its
// page there. A live verdict is not answered here.
Status answer_here(const Verdict& verdict, const RequestSlot& request, KernelWorkspace& workspace,
                   std::span<std::byte> bulk, ResponseSlot& response, AnswerRecord& record) noexcept;

// Admits `request` against the built-in strategy on `close` (bounded by `max_frame_cost`, 0:
// unbounded; `fee` for a request without the option) and answers it here: one frame in process,
// for benchmark peers and tests.
Status dispatch_request(const RequestSlot& request, std::span<const double> close, double fee,
                        KernelWorkspace& workspace, ResponseSlot& response, std::span<std::byte> bulk = {},
                        std::uint64_t max_frame_cost = 0) noexcept;

// Fills `response` as the answer to `request` with `status` and a zero payload (seq and opcode
// echoed), field by field: `response` may be a claimed ring slot or the exchange line, whose stamp
// is not ours. Returns `status`.
Status answer_status(ResponseSlot& response, const RequestSlot& request, Status status) noexcept;

// Checks an ECHO_BULK payload against a bulk region of `region_bytes`: both ranges inside it,
// not overlapping, unused words zero. Pure; for the engine and for tests.
[[nodiscard]] bool valid_bulk_echo(const BulkEcho& bulk, std::size_t region_bytes) noexcept;

}  // namespace ipcfloor
