#include "engine/dispatch.hpp"

namespace ipcfloor {

Status dispatch_request(const RequestSlot& request, std::span<const double> close, double fee,
                        KernelWorkspace& workspace, ResponseSlot& response) noexcept {
  response = ResponseSlot{};
  response.seq = request.seq;
  response.opcode = request.opcode;
  Status status = Status::ok;
  if (request.flags != 0 || request.reserved != 0) {
    status = Status::reserved_bits_set;
  } else if (request.opcode == static_cast<std::uint16_t>(Opcode::echo)) {
    response.set_echo(request.params);
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
