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

Status dispatch_request(const RequestSlot& request, std::span<const double> close, double fee,
                        KernelWorkspace& workspace, ResponseSlot& response, std::span<std::byte> bulk,
                        std::uint64_t max_frame_cost) noexcept {
  // Field by field, never the whole struct: `response` may be a claimed ring slot, whose stamp
  // belongs to the ring and is being read by the consumer right now.
  response.pnl = 0.0;
  response.trades = 0;
  for (std::int64_t& word : response.extra) word = 0;
  response.seq = request.seq;
  response.opcode = request.opcode;
  Status status = Status::ok;
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
  } else if (request.opcode == static_cast<std::uint16_t>(Opcode::backtest) && max_frame_cost != 0 &&
             validate_combo(request.params, close.size()) == KernelStatus::ok &&
             backtest_cost(request.params, close.size()) > max_frame_cost) {
    status = Status::too_costly;
  } else if (request.opcode == static_cast<std::uint16_t>(Opcode::backtest)) {
    BacktestResult result;
    switch (run_backtest(close, request.params, fee, workspace, result)) {
      case KernelStatus::ok:
        response.pnl = result.pnl;
        response.trades = result.trades;
        break;
      case KernelStatus::window_out_of_range: status = Status::window_out_of_range; break;
      case KernelStatus::too_few_bars:
      case KernelStatus::workspace_too_small: status = Status::engine_error; break;
    }
  } else {
    status = Status::unknown_opcode;
  }
  response.status = static_cast<std::uint16_t>(status);
  return status;
}

}  // namespace ipcfloor
