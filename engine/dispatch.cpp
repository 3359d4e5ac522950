#include "engine/dispatch.hpp"

#include <cstring>

#include "kernel/cost.hpp"

namespace ipcfloor {

bool valid_bulk_echo(const BulkEcho& bulk, std::size_t region_bytes) noexcept {
  if (bulk.unused[0] != 0 || bulk.unused[1] != 0 || bulk.unused[2] != 0) return false;
  // Subtractions only, so no sum can wrap past a huge offset a hostile client chose.
  if (bulk.bytes > region_bytes) return false;
  if (bulk.in_offset > region_bytes - bulk.bytes || bulk.out_offset > region_bytes - bulk.bytes) return false;
  const std::uint64_t low = bulk.in_offset < bulk.out_offset ? bulk.in_offset : bulk.out_offset;
  const std::uint64_t high = bulk.in_offset < bulk.out_offset ? bulk.out_offset : bulk.in_offset;
  return bulk.bytes == 0 || high - low >= bulk.bytes;
}

Status answer_status(ResponseSlot& response, const RequestSlot& request, Status status) noexcept {
  response.seq = request.seq;
  response.opcode = request.opcode;
  response.status = static_cast<std::uint16_t>(status);
  response.pnl = 0.0;
  response.trades = 0;
  for (std::int64_t& word : response.extra) word = 0;
  return status;
}

Status admit_backtest(const Combo& params, std::size_t n_bars, std::uint64_t max_frame_cost) noexcept {
  if (validate_combo(params, n_bars) != KernelStatus::ok) return Status::window_out_of_range;
  if (max_frame_cost != 0 && backtest_cost(params, n_bars) > max_frame_cost) return Status::too_costly;
  return Status::ok;
}

Status status_of(KernelStatus status) noexcept {
  switch (status) {
    case KernelStatus::ok: return Status::ok;
    case KernelStatus::window_out_of_range: return Status::window_out_of_range;
    case KernelStatus::too_few_bars:
    case KernelStatus::workspace_too_small: break;
  }
  return Status::engine_error;
}

Status dispatch_request(const RequestSlot& request, std::span<const double> close, double fee,
                        KernelWorkspace& workspace, ResponseSlot& response, std::span<std::byte> bulk,
                        std::uint64_t max_frame_cost) noexcept {
  Status status = answer_status(response, request, Status::ok);
  if (request.flags != 0) {
    status = Status::reserved_bits_set;
  } else if (request.opcode == static_cast<std::uint16_t>(Opcode::echo)) {
    response.set_echo(request.params);
  } else if (request.opcode == static_cast<std::uint16_t>(Opcode::echo_bulk)) {
    const BulkEcho echo = BulkEcho::from_params(request.params);
    if (valid_bulk_echo(echo, bulk.size())) {
      // The client's bytes may change under us (it owns the region); memcpy copies whatever
      // is there, within bounds checked above against this process's own region size.
      std::memcpy(bulk.data() + echo.out_offset, bulk.data() + echo.in_offset, echo.bytes);
      response.trades = static_cast<std::int64_t>(echo.bytes);
    } else {
      status = Status::bulk_out_of_range;
    }
  } else if (request.opcode == static_cast<std::uint16_t>(Opcode::backtest)) {
    status = admit_backtest(request.params, close.size(), max_frame_cost);
    BacktestResult result;
    if (status == Status::ok) status = status_of(run_backtest(close, request.params, fee, workspace, result));
    if (status == Status::ok) {
      response.pnl = result.pnl;
      response.trades = result.trades;
    }
  } else {
    status = Status::unknown_opcode;
  }
  response.status = static_cast<std::uint16_t>(status);
  return status;
}

}  // namespace ipcfloor
