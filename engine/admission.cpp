#include "engine/admission.hpp"

#include <algorithm>
#include <cmath>

namespace ipcfloor {

void Admission::set_series(std::span<const Bars> series) noexcept {
  series_count_ = static_cast<std::uint32_t>(std::min<std::size_t>(series.size(), kMaxSeries));
  for (std::uint32_t i = 0; i < series_count_; ++i) series_[i] = series[i];
}

Verdict Admission::admit(const RequestSlot& request, const RequestOptions& options) const noexcept {
  Verdict verdict;
  const auto refuse = [&verdict](Status status) noexcept {
    verdict.route = Verdict::Route::refused;
    verdict.status = status;
    return verdict;
  };
  const bool with_options = has_options(request.opcode);
  // Only the options bit is defined in the opcode's high byte, and only computations take it.
  if ((request.opcode & ~(kOpcodeMask | kOpcodeWithOptions)) != 0) return refuse(Status::unknown_opcode);
  const RequestOptions* given = with_options ? &options : nullptr;
  switch (static_cast<Opcode>(operation_of(request.opcode))) {
    case Opcode::backtest: return admit_compute(request, Verdict::Work::backtest, given);
    case Opcode::stats: return admit_compute(request, Verdict::Work::stats, given);
    case Opcode::trades: return admit_compute(request, Verdict::Work::trades, given);
    case Opcode::append:
    case Opcode::subscribe:
    case Opcode::snapshot:
      if (with_options) return refuse(Status::reserved_bits_set);
      // The live server judges their flags (a SUBSCRIBE names its strategy there).
      if (!config_.live) return refuse(Status::not_live);
      verdict.route = Verdict::Route::live;
      return verdict;
    case Opcode::echo:
    case Opcode::echo_bulk:
      break;
  }
  // Flags first, for every other opcode the engine knows or not: no bits are defined there.
  if (request.flags != 0 || with_options) return refuse(Status::reserved_bits_set);
  if (request.opcode == static_cast<std::uint16_t>(Opcode::echo)) {
    verdict.route = Verdict::Route::echo;
  } else if (request.opcode == static_cast<std::uint16_t>(Opcode::echo_bulk)) {
    verdict.route = Verdict::Route::echo_bulk;
  } else {
    return refuse(Status::unknown_opcode);
  }
  return verdict;
}

Status Admission::apply_options(const RequestOptions& options, const Bars& series, Verdict& verdict) const noexcept {
  if ((options.present & ~kOptionsDefined) != 0 || options.reserved != 0 || options.unused[0] != 0 ||
      options.unused[1] != 0)
    return Status::reserved_bits_set;
  // Fields the present bits do not name must be 0, so that a client cannot mean something the
  // engine ignores.
  if (((options.present & kOptionRange) == 0 && (options.from_bar != 0 || options.to_bar != 0)) ||
      ((options.present & kOptionFee) == 0 && options.fee != 0.0) ||
      ((options.present & kOptionBarsPerYear) == 0 && options.bars_per_year != 0.0) ||
      ((options.present & kOptionFirstTrade) == 0 && options.first_trade != 0))
    return Status::reserved_bits_set;
  if ((options.present & kOptionRange) != 0) {
    // Subtractions only: no sum can wrap past a bound a client chose.
    if (options.to_bar > series.size() || options.from_bar > options.to_bar || options.to_bar - options.from_bar < 2)
      return Status::bad_range;
    verdict.bars = series.slice(options.from_bar, options.to_bar);
  }
  if ((options.present & kOptionFee) != 0) {
    if (!std::isfinite(options.fee) || options.fee < 0.0 || options.fee > kMaxFee) return Status::bad_option;
    verdict.fee = options.fee;
  }
  if ((options.present & kOptionBarsPerYear) != 0) {
    if (!std::isfinite(options.bars_per_year) || !(options.bars_per_year > 0.0) ||
        options.bars_per_year > kMaxBarsPerYear)
      return Status::bad_option;
    verdict.bars_per_year = options.bars_per_year;
  }
  if ((options.present & kOptionFirstTrade) != 0) {
    if (verdict.work != Verdict::Work::trades) return Status::bad_option;
    verdict.first_trade = options.first_trade;
  }
  return Status::ok;
}

Verdict Admission::admit_compute(const RequestSlot& request, Verdict::Work work,
                                 const RequestOptions* options) const noexcept {
  Verdict verdict;
  verdict.route = Verdict::Route::refused;
  verdict.work = work;
  verdict.fee = config_.fee;
  verdict.bars_per_year = config_.bars_per_year;
  const Strategy* strategy = strategies_->at(strategy_of(request.flags));
  const std::uint32_t series = series_of(request.flags);
  const auto refuse = [&verdict](Status status) noexcept {
    verdict.status = status;
    return verdict;
  };
  if (strategy == nullptr) return refuse(Status::no_such_strategy);
  if (series >= series_count_) return refuse(Status::no_such_series);
  verdict.bars = series_[series];
  verdict.judged_bars = verdict.bars.size();
  if (options != nullptr) {
    if (const Status status = apply_options(*options, series_[series], verdict); status != Status::ok) {
      verdict.judged_bars = series_[series].size();
      return refuse(status);
    }
    verdict.judged_bars = verdict.bars.size();
  }
  if (work != Verdict::Work::backtest && !strategy->reports_trades()) return refuse(Status::no_trade_report);
  if (const std::uint32_t missing = strategy->required_columns() & ~verdict.bars.columns(); missing != 0) {
    verdict.refused_param = column_bit(first_missing(missing, 0));
    return refuse(Status::missing_column);
  }
  if (const std::uint32_t refused = strategy->refusal(request.params, verdict.bars.size()); refused != 0) {
    verdict.refused_param = refused;
    verdict.strategy = strategy;  // its own sentence goes into the answer record (answer_here)
    return refuse(Status::window_out_of_range);
  }
  verdict.cost = strategy->cost(request.params, verdict.bars.size());
  if (work != Verdict::Work::backtest) {
    const std::uint64_t stats = stats_cost(verdict.bars.size());
    verdict.cost = verdict.cost > ~std::uint64_t{0} - stats ? ~std::uint64_t{0} : verdict.cost + stats;
  }
  if (config_.max_frame_cost != 0 && verdict.cost > config_.max_frame_cost) return refuse(Status::too_costly);
  verdict.route = Verdict::Route::backtest;
  verdict.strategy = strategy;
  // A strategy timed at load far slower than its cost says is never computed on the serving
  // thread (kernel/strategy_timing.hpp): where it runs, not whether or what.
  verdict.heavy = verdict.cost >= config_.inline_cost || strategy->workers_only();
  return verdict;
}

}  // namespace ipcfloor
