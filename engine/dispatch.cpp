#include "engine/dispatch.hpp"

#include <cstring>

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

Status status_of(StrategyRun run) noexcept { return run == StrategyRun::ok ? Status::ok : Status::engine_error; }

Status answer_here(const Verdict& verdict, const RequestSlot& request, double fee, KernelWorkspace& workspace,
                   std::span<std::byte> bulk, ResponseSlot& response) noexcept {
  Status status = answer_status(response, request, Status::ok);
  switch (verdict.route) {
    case Verdict::Route::refused:
      status = verdict.status;
      // Which parameter, against how many bars: for the client's sentence.
      response.extra[0] = verdict.refused_param;
      response.extra[1] = static_cast<std::int64_t>(verdict.bars);
      break;
    case Verdict::Route::live: status = Status::engine_error; break;  // not answered here: the live server's
    case Verdict::Route::echo: response.set_echo(request.params); break;
    case Verdict::Route::echo_bulk: {
      const BulkEcho echo = BulkEcho::from_params(request.params);
      if (!valid_bulk_echo(echo, bulk.size())) {
        status = Status::bulk_out_of_range;
        break;
      }
      // The client's bytes may change under us (it owns the region); memcpy copies whatever is
      // there, within bounds checked above against this process's own region size.
      std::memcpy(bulk.data() + echo.out_offset, bulk.data() + echo.in_offset, echo.bytes);
      response.trades = static_cast<std::int64_t>(echo.bytes);
      break;
    }
    case Verdict::Route::backtest: {
      BacktestResult result;
      status = status_of(verdict.strategy->run(verdict.close, request.params, fee, workspace, result));
      if (status == Status::ok) {
        response.pnl = result.pnl;
        response.trades = result.trades;
      }
      break;
    }
  }
  response.status = static_cast<std::uint16_t>(status);
  return status;
}

Status dispatch_request(const RequestSlot& request, std::span<const double> close, double fee,
                        KernelWorkspace& workspace, ResponseSlot& response, std::span<std::byte> bulk,
                        std::uint64_t max_frame_cost) noexcept {
  static const StrategySet builtin;  // the built-in strategy alone; constant once made
  Admission admission(builtin, AdmissionConfig{max_frame_cost, 0, false});
  const std::span<const double> series[] = {close};
  admission.set_series(series);
  return answer_here(admission.admit(request), request, fee, workspace, bulk, response);
}

}  // namespace ipcfloor
