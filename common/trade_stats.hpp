#pragma once
// The statistics of one backtest, computed the same way for every strategy from the trades it
// reported and the closes it ran on: docs/STATISTICS.md is their one definition (formula,
// operation order, the empty and zero-variance cases), and tools/reference/stats.py its numpy
// twin, equal bit for bit.
//
// A TradeRecorder is the engine's trade sink (ipcfloor_trade_sink in include/ipcfloor/strategy.h):
// a strategy's run() reports each closed trade to it; the recorder checks the trade, marks the
// equity curve up to its exit and keeps the per-trade sums. finish() completes the curve and the
// figures. Used wherever a backtest runs (engine workers, the serving thread, `sweep --inproc`)
// and by clients that rebuild an equity curve from a trade list (`ipcfloor trades --name`).
//
// Threads: one recorder per backtest, on the thread that runs it. Hot path: noexcept, no
// allocation, no syscall; the equity buffer and the optional trade buffer are the caller's.

#include <cstddef>
#include <cstdint>
#include <span>

#include "ipcfloor/strategy.h"

namespace ipcfloor {

// The stats pass's work per bar, in admission's work units: one pass to mark the equity, one over
// the returns and peaks (docs/STATISTICS.md, "Cost").
inline constexpr std::uint64_t kStatsUnitsPerBar = 8;
[[nodiscard]] constexpr std::uint64_t stats_cost(std::uint64_t n_bars) noexcept {
  return n_bars > ~std::uint64_t{0} / kStatsUnitsPerBar ? ~std::uint64_t{0} : n_bars * kStatsUnitsPerBar;
}
// Bars per year when neither the request nor `serve --bars-per-year` says: daily bars.
inline constexpr double kDefaultBarsPerYear = 252.0;

// The figures of docs/STATISTICS.md, in its order.
struct TradeStats {
  double pnl = 0.0;
  std::int64_t trades = 0;
  std::int64_t wins = 0;
  double win_rate = 0.0;
  double profit_factor = 0.0;
  double expectancy = 0.0;
  double best_trade = 0.0;
  double worst_trade = 0.0;
  double avg_win = 0.0;
  double avg_loss = 0.0;
  double avg_trade_bars = 0.0;
  double exposure = 0.0;
  double max_drawdown = 0.0;
  std::int64_t max_drawdown_bars = 0;
  double sharpe = 0.0;
  double sortino = 0.0;
  double calmar = 0.0;
  std::uint64_t bars = 0;
};

// The figures' names, in TradeStats order after pnl and trades: the columns of every output.
inline constexpr std::size_t kStatsFigureCount = 16;
inline constexpr const char* kStatsFigureNames[kStatsFigureCount] = {
    "wins",        "win_rate", "profit_factor",  "expectancy", "best_trade",   "worst_trade",
    "avg_win",     "avg_loss", "avg_trade_bars", "exposure",   "max_drawdown", "max_drawdown_bars",
    "sharpe",      "sortino",  "calmar",         "bars"};
// Figure `k` (0 .. kStatsFigureCount) of `stats` as a double (the integer ones exactly).
[[nodiscard]] double stats_figure(const TradeStats& stats, std::size_t k) noexcept;
// The index of the figure named `name` ("pnl" and "trades" are -2 and -1), or -3 when none is.
[[nodiscard]] int stats_figure_index(const char* name) noexcept;

// What was wrong with a strategy's trade reports (the request is then answered engine_error).
enum class TradeCheck : std::uint8_t {
  ok,
  out_of_range,     // a bar outside [0, n), or entry after exit
  overlapping,      // an entry before the previous trade's exit (reported out of order)
  bad_side,         // side not +1 or -1
  bad_price,        // a price not finite and > 0
  bad_pnl,          // a pnl not finite
  count_mismatch,   // as many reports as the strategy counted trades, no more, no fewer
  pnl_mismatch,     // the reports' pnl, summed in order, is not the strategy's pnl bit for bit
};
[[nodiscard]] const char* to_string(TradeCheck check) noexcept;

class TradeRecorder {
 public:
  // `close` is the bars the backtest runs on (n >= 2); `equity` must hold close.size() doubles.
  // `keep`, when not empty, receives keep.size() trades as reported from trade `first_kept` on
  // (the others are counted, not kept): a page of the trade list.
  TradeRecorder(std::span<const double> close, std::span<double> equity, std::span<ipcfloor_trade> keep = {},
                std::uint64_t first_kept = 0) noexcept;
  TradeRecorder(const TradeRecorder&) = delete;
  TradeRecorder& operator=(const TradeRecorder&) = delete;

  // The sink to hand the strategy's run(); it points at this recorder.
  [[nodiscard]] const ipcfloor_trade_sink* sink() const noexcept { return &sink_; }
  // One trade, as run() reports it (the sink's callback calls it).
  void record(const ipcfloor_trade& trade) noexcept;

  // After run() returned `result`: completes the equity curve and fills `out` (with B =
  // `bars_per_year`, finite and > 0). Returns the first thing wrong with the reports (then `out`
  // holds only what was counted), else ok.
  [[nodiscard]] TradeCheck finish(double pnl, std::int64_t trades, double bars_per_year, TradeStats& out) noexcept;

  // Trades reported so far, and how many of them are in `keep`.
  [[nodiscard]] std::uint64_t reported() const noexcept { return count_; }
  [[nodiscard]] std::uint64_t kept() const noexcept {
    if (count_ <= first_kept_) return 0;
    return count_ - first_kept_ < keep_.size() ? count_ - first_kept_ : keep_.size();
  }

 private:
  static void report(void* context, const ipcfloor_trade* trade) noexcept;
  [[nodiscard]] TradeCheck check(const ipcfloor_trade& trade) const noexcept;
  void mark(const ipcfloor_trade& trade) noexcept;
  void equity_figures(double bars_per_year, TradeStats& out) const noexcept;

  std::span<const double> close_;
  std::span<double> equity_;
  std::span<ipcfloor_trade> keep_;
  std::uint64_t first_kept_;
  ipcfloor_trade_sink sink_;
  TradeCheck first_problem_ = TradeCheck::ok;
  std::uint64_t count_ = 0;
  std::uint64_t next_bar_ = 0;     // the first bar whose equity is not written yet
  std::uint64_t last_exit_ = 0;    // the previous trade's exit bar
  std::uint64_t bars_held_ = 0;    // D: the sum of exit - entry
  std::int64_t wins_ = 0;
  std::int64_t losses_ = 0;
  double realised_ = 0.0;          // R: the pnl of the trades closed so far, summed in order
  double gains_ = 0.0;             // G
  double losses_sum_ = 0.0;        // L
  double best_ = 0.0;
  double worst_ = 0.0;
};

// The equity curve and the figures of one backtest whose trades are already known (a client that
// received a trade list): the same code and order as the recorder the engine used, with the pnl
// and trade count the list itself sums to. Returns what was wrong with the trades, else ok.
[[nodiscard]] TradeCheck stats_from_trades(std::span<const double> close, std::span<const ipcfloor_trade> trades,
                                           double bars_per_year, std::span<double> equity, TradeStats& out) noexcept;

}  // namespace ipcfloor
