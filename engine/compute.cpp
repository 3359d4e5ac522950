#include "engine/compute.hpp"

namespace ipcfloor {

void compute(const ComputeJob& job, KernelWorkspace& workspace, std::span<ipcfloor_trade> page, Computed& out) noexcept {
  out = Computed{};
  if (job.work == Verdict::Work::backtest) {
    BacktestResult result;
    if (job.strategy->run(job.bars, job.params, job.fee, workspace, result) != StrategyRun::ok) {
      out.status = Status::engine_error;
      return;
    }
    out.pnl = result.pnl;
    out.trades = result.trades;
    return;
  }
  TradeStats stats;
  Strategy::StatsRun extras;
  if (job.work == Verdict::Work::trades) {
    extras.keep = page;
    extras.first_kept = job.first_trade;
  }
  const StrategyRun ran = job.strategy->run_stats(job.bars, job.params, job.fee, job.bars_per_year, workspace, stats, extras);
  if (ran != StrategyRun::ok) {
    out.status = ran == StrategyRun::no_trade_report ? Status::no_trade_report : Status::engine_error;
    return;
  }
  out.pnl = stats.pnl;
  out.trades = stats.trades;
  out.page_trades = extras.kept;
  out.has_record = true;
  out.record.stats = to_wire(stats);
}

void write_computed(const Computed& computed, std::uint64_t first_trade, ResponseSlot& response,
                    AnswerRecord& record) noexcept {
  response.status = static_cast<std::uint16_t>(computed.status);
  response.pnl = computed.pnl;
  response.trades = computed.trades;
  for (std::int64_t& word : response.extra) word = 0;
  if (computed.status != Status::ok) return;
  if (computed.page_trades != 0 || first_trade != 0) {
    response.extra[0] = static_cast<std::int64_t>(computed.page_trades);
    response.extra[1] = static_cast<std::int64_t>(first_trade);
  }
  if (computed.has_record) record = computed.record;
}

}  // namespace ipcfloor
