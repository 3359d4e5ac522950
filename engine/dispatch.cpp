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

Status answer_here(const Verdict& verdict, const RequestSlot& request, KernelWorkspace& workspace,
                   std::span<std::byte> bulk, ResponseSlot& response, AnswerRecord& record) noexcept {
  Status status = answer_status(response, request, Status::ok);
  switch (verdict.route) {
    case Verdict::Route::refused:
      status = verdict.status;
      // Which parameter (or column), against how many bars: for the client's sentence.
      response.extra[0] = verdict.refused_param;
      response.extra[1] = static_cast<std::int64_t>(verdict.judged_bars);
      if (status == Status::window_out_of_range && verdict.strategy != nullptr) {
        // The strategy's own words (a refused request is rare: the sentence costs only those).
        (void)verdict.strategy->refusal(request.params, verdict.bars.size(), record.why);
        response.extra[2] = kRecordWhy;
      }
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
      Computed computed;
      compute(ComputeJob::of(verdict, request), workspace, trade_page(bulk), computed);
      write_computed(computed, verdict.first_trade, response, record);
      status = computed.status;
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
  AdmissionConfig config;
  config.max_frame_cost = max_frame_cost;
  config.fee = fee;
  Admission admission(builtin, config);
  const Bars series[] = {Bars(close)};
  admission.set_series(series);
  AnswerRecord record;
  return answer_here(admission.admit(request), request, workspace, bulk, response, record);
}

}  // namespace ipcfloor
