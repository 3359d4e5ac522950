#include "engine/admission.hpp"

#include <algorithm>

namespace ipcfloor {

void Admission::set_series(std::span<const std::span<const double>> series) noexcept {
  series_count_ = static_cast<std::uint32_t>(std::min<std::size_t>(series.size(), kMaxSeries));
  for (std::uint32_t i = 0; i < series_count_; ++i) series_[i] = series[i];
}

Verdict Admission::admit(const RequestSlot& request) const noexcept {
  Verdict verdict;
  const auto refuse = [&verdict](Status status) noexcept {
    verdict.route = Verdict::Route::refused;
    verdict.status = status;
    return verdict;
  };
  switch (static_cast<Opcode>(request.opcode)) {
    case Opcode::backtest: return admit_backtest(request);
    case Opcode::append:
    case Opcode::subscribe:
    case Opcode::snapshot:
      // The live server judges their flags (a SUBSCRIBE names its strategy there).
      if (!config_.live) return refuse(Status::not_live);
      verdict.route = Verdict::Route::live;
      return verdict;
    case Opcode::echo:
    case Opcode::echo_bulk:
      break;
  }
  // Flags first, for every other opcode the engine knows or not: no bits are defined there.
  if (request.flags != 0) return refuse(Status::reserved_bits_set);
  if (request.opcode == static_cast<std::uint16_t>(Opcode::echo)) {
    verdict.route = Verdict::Route::echo;
  } else if (request.opcode == static_cast<std::uint16_t>(Opcode::echo_bulk)) {
    verdict.route = Verdict::Route::echo_bulk;
  } else {
    return refuse(Status::unknown_opcode);
  }
  return verdict;
}

Verdict Admission::admit_backtest(const RequestSlot& request) const noexcept {
  Verdict verdict;
  verdict.route = Verdict::Route::refused;
  const Strategy* strategy = strategies_->at(strategy_of(request.flags));
  const std::uint32_t series = series_of(request.flags);
  if (strategy == nullptr) {
    verdict.status = Status::no_such_strategy;
  } else if (series >= series_count_) {
    verdict.status = Status::no_such_series;
  } else if (const std::uint32_t refused = strategy->refusal(request.params, series_[series].size()); refused != 0) {
    verdict.status = Status::window_out_of_range;
    verdict.refused_param = refused;
    verdict.bars = series_[series].size();
  } else {
    verdict.cost = strategy->cost(request.params, series_[series].size());
    if (config_.max_frame_cost != 0 && verdict.cost > config_.max_frame_cost) {
      verdict.status = Status::too_costly;
    } else {
      verdict.route = Verdict::Route::backtest;
      verdict.strategy = strategy;
      verdict.close = series_[series];
      // A strategy timed at load far slower than its cost says is never computed on the serving
      // thread (kernel/strategy_timing.hpp): where it runs, not whether or what.
      verdict.heavy = verdict.cost >= config_.inline_cost || strategy->workers_only();
    }
  }
  return verdict;
}

}  // namespace ipcfloor
