#include "common/trade_stats.hpp"

#include <cmath>
#include <cstring>
#include <limits>

namespace ipcfloor {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

bool positive_price(double price) noexcept { return std::isfinite(price) && price > 0.0; }

// A trade open at bar t, marked to close[t], gross of the fee (docs/STATISTICS.md).
double mark(int side, double entry, double close) noexcept {
  return side == 1 ? (close / entry - 1.0) * 100.0 : (entry / close - 1.0) * 100.0;
}

// `numerator / denominator`, NaN when the denominator is 0 (a figure with nothing to average).
double ratio_or_nan(double numerator, double denominator) noexcept {
  return denominator == 0.0 ? kNaN : numerator / denominator;
}

}  // namespace

const char* to_string(TradeCheck check) noexcept {
  switch (check) {
    case TradeCheck::ok: return "ok";
    case TradeCheck::out_of_range: return "a trade's bars lie outside the series, or its entry comes after its exit";
    case TradeCheck::overlapping: return "a trade enters before the previous one's exit (out of order or overlapping)";
    case TradeCheck::bad_side: return "a trade's side is not +1 or -1";
    case TradeCheck::bad_price: return "a trade's entry or exit price is not a finite number > 0";
    case TradeCheck::bad_pnl: return "a trade's pnl is not finite";
    case TradeCheck::count_mismatch: return "the trades reported are not as many as the trades counted";
    case TradeCheck::pnl_mismatch: return "the trades' pnl, summed in order, is not the pnl answered, bit for bit";
  }
  return "unknown";
}

double stats_figure(const TradeStats& s, std::size_t k) noexcept {
  switch (k) {
    case 0: return static_cast<double>(s.wins);
    case 1: return s.win_rate;
    case 2: return s.profit_factor;
    case 3: return s.expectancy;
    case 4: return s.best_trade;
    case 5: return s.worst_trade;
    case 6: return s.avg_win;
    case 7: return s.avg_loss;
    case 8: return s.avg_trade_bars;
    case 9: return s.exposure;
    case 10: return s.max_drawdown;
    case 11: return static_cast<double>(s.max_drawdown_bars);
    case 12: return s.sharpe;
    case 13: return s.sortino;
    case 14: return s.calmar;
    case 15: return static_cast<double>(s.bars);
    default: return kNaN;
  }
}

int stats_figure_index(const char* name) noexcept {
  if (std::strcmp(name, "pnl") == 0) return -2;
  if (std::strcmp(name, "trades") == 0) return -1;
  for (std::size_t k = 0; k < kStatsFigureCount; ++k)
    if (std::strcmp(name, kStatsFigureNames[k]) == 0) return static_cast<int>(k);
  return -3;
}

TradeRecorder::TradeRecorder(std::span<const double> close, std::span<double> equity, std::span<ipcfloor_trade> keep,
                             std::uint64_t first_kept) noexcept
    : close_(close), equity_(equity), keep_(keep), first_kept_(first_kept), sink_{&TradeRecorder::report, this} {}

void TradeRecorder::report(void* context, const ipcfloor_trade* trade) noexcept {
  static_cast<TradeRecorder*>(context)->record(*trade);
}

TradeCheck TradeRecorder::check(const ipcfloor_trade& t) const noexcept {
  if (t.entry_bar > t.exit_bar || t.exit_bar >= close_.size()) return TradeCheck::out_of_range;
  if (count_ != 0 && t.entry_bar < last_exit_) return TradeCheck::overlapping;
  if (t.side != 1 && t.side != -1) return TradeCheck::bad_side;
  if (!positive_price(t.entry_price) || !positive_price(t.exit_price)) return TradeCheck::bad_price;
  if (!std::isfinite(t.pnl)) return TradeCheck::bad_pnl;
  return TradeCheck::ok;
}

void TradeRecorder::record(const ipcfloor_trade& trade) noexcept {
  if (first_problem_ != TradeCheck::ok) return;  // the answer is engine_error whatever follows
  if (const TradeCheck problem = check(trade); problem != TradeCheck::ok) {
    first_problem_ = problem;
    return;
  }
  if (count_ >= first_kept_ && count_ - first_kept_ < keep_.size()) keep_[count_ - first_kept_] = trade;
  mark(trade);
  const double p = trade.pnl;
  if (p > 0.0) {
    ++wins_;
    gains_ += p;
  } else if (p < 0.0) {
    ++losses_;
    losses_sum_ += p;
  }
  if (count_ == 0 || p > best_) best_ = p;
  if (count_ == 0 || p < worst_) worst_ = p;
  bars_held_ += trade.exit_bar - trade.entry_bar;
  last_exit_ = trade.exit_bar;
  ++count_;
}

void TradeRecorder::mark(const ipcfloor_trade& trade) noexcept {
  double* const eq = equity_.data();
  const double* const close = close_.data();
  // Flat up to the entry: the trades closed so far.
  for (std::uint64_t t = next_bar_; t < trade.entry_bar; ++t) eq[t] = realised_;
  // Open from the entry up to the bar before the exit (a reversal's entry bar, already written
  // with the previous trade's exit, is marked again: this trade is open there).
  const double entry = trade.entry_price;
  if (trade.side == 1) {
    for (std::uint64_t t = trade.entry_bar; t < trade.exit_bar; ++t) eq[t] = realised_ + (close[t] / entry - 1.0) * 100.0;
  } else {
    for (std::uint64_t t = trade.entry_bar; t < trade.exit_bar; ++t) eq[t] = realised_ + (entry / close[t] - 1.0) * 100.0;
  }
  realised_ += trade.pnl;
  eq[trade.exit_bar] = realised_;
  next_bar_ = trade.exit_bar + 1;
}

TradeCheck TradeRecorder::finish(double pnl, std::int64_t trades, double bars_per_year, TradeStats& out) noexcept {
  out = TradeStats{};
  out.pnl = realised_;
  out.trades = static_cast<std::int64_t>(count_);
  out.bars = close_.size();
  if (first_problem_ != TradeCheck::ok) return first_problem_;
  if (trades < 0 || static_cast<std::uint64_t>(trades) != count_) return TradeCheck::count_mismatch;
  if (std::memcmp(&pnl, &realised_, sizeof pnl) != 0 && !(pnl == 0.0 && realised_ == 0.0))
    return TradeCheck::pnl_mismatch;
  for (std::uint64_t t = next_bar_; t < close_.size(); ++t) equity_[t] = realised_;
  const double n_trades = static_cast<double>(count_);
  out.wins = wins_;
  out.win_rate = ratio_or_nan(static_cast<double>(wins_), n_trades);
  out.profit_factor = losses_sum_ == 0.0 ? (gains_ > 0.0 ? kInf : kNaN) : gains_ / -losses_sum_;
  out.expectancy = ratio_or_nan(realised_, n_trades);
  out.best_trade = count_ == 0 ? kNaN : best_;
  out.worst_trade = count_ == 0 ? kNaN : worst_;
  out.avg_win = ratio_or_nan(gains_, static_cast<double>(wins_));
  out.avg_loss = ratio_or_nan(losses_sum_, static_cast<double>(losses_));
  out.avg_trade_bars = ratio_or_nan(static_cast<double>(bars_held_), n_trades);
  out.exposure = static_cast<double>(bars_held_) / static_cast<double>(close_.size() - 1);
  equity_figures(bars_per_year, out);
  return TradeCheck::ok;
}

void TradeRecorder::equity_figures(double bars_per_year, TradeStats& out) const noexcept {
  const double* const eq = equity_.data();
  const std::uint64_t n = close_.size();
  const double steps = static_cast<double>(n - 1);
  const double mu = (eq[n - 1] - eq[0]) / steps;
  // One pass: the two sums of squares (two independent add chains) and the running peak.
  double squares = 0.0;
  double downside = 0.0;
  double peak = eq[0];
  double max_drawdown = 0.0;
  std::uint64_t peak_bar = 0;
  std::uint64_t longest = 0;
  for (std::uint64_t t = 1; t < n; ++t) {
    const double r = eq[t] - eq[t - 1];
    const double d = r - mu;
    squares += d * d;
    const double loss = r < 0.0 ? r : 0.0;
    downside += loss * loss;
    if (eq[t] >= peak) {
      peak = eq[t];
      peak_bar = t;
    } else {
      const double drawdown = peak - eq[t];
      if (drawdown > max_drawdown) max_drawdown = drawdown;
      if (t - peak_bar > longest) longest = t - peak_bar;
    }
  }
  out.max_drawdown = max_drawdown;
  out.max_drawdown_bars = static_cast<std::int64_t>(longest);
  const double root_b = std::sqrt(bars_per_year);
  const double sd = n > 2 ? std::sqrt(squares / static_cast<double>(n - 2)) : kNaN;
  const double dd = std::sqrt(downside / steps);
  out.sharpe = sd == 0.0 || std::isnan(sd) ? kNaN : (mu / sd) * root_b;
  out.sortino = dd == 0.0 ? kNaN : (mu / dd) * root_b;
  out.calmar = max_drawdown == 0.0 ? kNaN : (mu * bars_per_year) / max_drawdown;
}

TradeCheck stats_from_trades(std::span<const double> close, std::span<const ipcfloor_trade> trades,
                             double bars_per_year, std::span<double> equity, TradeStats& out) noexcept {
  TradeRecorder recorder(close, equity);
  double pnl = 0.0;
  for (const ipcfloor_trade& trade : trades) {
    recorder.record(trade);
    pnl += trade.pnl;
  }
  return recorder.finish(pnl, static_cast<std::int64_t>(trades.size()), bars_per_year, out);
}

}  // namespace ipcfloor
