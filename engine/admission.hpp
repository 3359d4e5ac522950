#pragma once
// The one admission step of every request the engine takes: what it is, whether it may run, on
// which strategy and series (and which bars of it), what it costs, and where it is computed. The
// verdict is made here, once, from the serving thread's private copy of the request (and of its
// options line, when the opcode says it has one), and travels with the request to whatever
// computes it; nothing downstream checks the request again.
//
// A verdict is a pure function of the request and the configuration (the strategies, the series
// as published, the bounds): the same on every host, whatever the load. Only live requests need
// the live book's state as well; LiveServer admits those itself, by the same rule.
//
// Threads: admit() belongs to the serving thread (and to in-process dispatchers); noexcept, no
// allocation, no syscall.

#include <cstdint>
#include <span>

#include "common/bars.hpp"
#include "kernel/strategy.hpp"
#include "shm/frames.hpp"
#include "shm/layout.hpp"

namespace ipcfloor {

struct Verdict {
  enum class Route : std::uint8_t {
    refused,    // answered at once with `status`
    echo,       // ECHO: the payload back
    echo_bulk,  // ECHO_BULK: a copy within the lane's bulk region (its range is checked there)
    backtest,   // an admitted BACKTEST, STATS or TRADES (`work`): `strategy` on `bars`
    live,       // APPEND, SUBSCRIBE or SNAPSHOT: for the live server
  };
  // What an admitted computation answers.
  enum class Work : std::uint8_t {
    backtest,  // pnl and trades
    stats,     // pnl, trades and the figures (the answer record)
    trades,    // as stats, and the trade list from first_trade on into the lane's bulk region
  };
  Route route = Route::refused;
  Work work = Work::backtest;
  Status status = Status::ok;
  const Strategy* strategy = nullptr;  // also set for window_out_of_range: its sentence says why
  Bars bars;                      // the bars it runs on: the series, or the range the options name
  double fee = 0.0;               // the request's, else the engine's
  double bars_per_year = 0.0;     // STATS, TRADES: the request's, else the engine's
  std::uint64_t first_trade = 0;  // TRADES: the first trade of the page
  std::uint64_t cost = 0;         // the strategy's cost on `bars`, plus the stats pass for STATS and TRADES
  bool heavy = false;             // costs at least the inline bound: for a worker
  // window_out_of_range: 1 + the parameter the strategy refused (Strategy::refusal);
  // missing_column: the IPCFLOOR_COLUMN_* bit missing. The answer carries it (extra[0]) and the
  // bars it was judged against (extra[1]) for the client's message.
  std::uint32_t refused_param = 0;
  std::uint64_t judged_bars = 0;
};

struct AdmissionConfig {
  std::uint64_t max_frame_cost = 0;  // a request costing more is refused too_costly (0: unbounded)
  std::uint64_t inline_cost = 0;     // a request costing less is computed by the serving thread
  bool live = false;                 // APPEND, SUBSCRIBE and SNAPSHOT are served
  double fee = 0.0;                  // what a request without a fee option pays (serve --fee)
  double bars_per_year = kDefaultBarsPerYear;  // what a STATS without the option annualises by
};

class Admission {
 public:
  // `strategies` must outlive the admission. The series table starts empty: set_series().
  Admission(const StrategySet& strategies, const AdmissionConfig& config) noexcept
      : strategies_(&strategies), config_(config) {}

  // The series a request may name by index (index 0: the main one). Setup, and the serving
  // thread when a live APPEND grows the main series (set_main_series).
  void set_series(std::span<const Bars> series) noexcept;
  void set_main_series(const Bars& bars) noexcept { series_[0] = bars; }

  // The verdict on `request` (the serving thread's private copy) and, when its opcode has
  // kOpcodeWithOptions, `options` (the private copy of its options line; ignored otherwise).
  // Refusals, in order: an unknown opcode; a live opcode on an engine that is not live; flags,
  // opcode bits or option fields that this version does not define; no_such_strategy;
  // no_such_series; bad_range; bad_option; no_trade_report (STATS, TRADES of a version-1
  // strategy); missing_column; window_out_of_range (the strategy's one check, Strategy::refusal,
  // on the bars it will run on); too_costly.
  [[nodiscard]] Verdict admit(const RequestSlot& request, const RequestOptions& options) const noexcept;
  [[nodiscard]] Verdict admit(const RequestSlot& request) const noexcept { return admit(request, kNoOptions); }

  [[nodiscard]] const StrategySet& strategies() const noexcept { return *strategies_; }
  [[nodiscard]] const Bars& series(std::uint32_t index) const noexcept { return series_[index]; }
  [[nodiscard]] std::uint32_t series_count() const noexcept { return series_count_; }
  [[nodiscard]] const AdmissionConfig& config() const noexcept { return config_; }

  static constexpr RequestOptions kNoOptions{};

 private:
  [[nodiscard]] Verdict admit_compute(const RequestSlot& request, Verdict::Work work,
                                      const RequestOptions* options) const noexcept;
  // The options' bars, fee and bars per year into `verdict`; a refusal status, or ok.
  [[nodiscard]] Status apply_options(const RequestOptions& options, const Bars& series, Verdict& verdict) const noexcept;

  const StrategySet* strategies_;
  AdmissionConfig config_;
  Bars series_[kMaxSeries];
  std::uint32_t series_count_ = 0;
};

// A request's flags: the low byte names the series, the high byte the strategy (0: the built-in).
[[nodiscard]] constexpr std::uint32_t series_of(std::uint16_t flags) noexcept { return flags & kSeriesIndexMask; }
[[nodiscard]] constexpr std::uint32_t strategy_of(std::uint16_t flags) noexcept { return flags >> 8; }
// A request's operation (the opcode's low byte) and whether it has an options line.
[[nodiscard]] constexpr std::uint16_t operation_of(std::uint16_t opcode) noexcept { return opcode & kOpcodeMask; }
[[nodiscard]] constexpr bool has_options(std::uint16_t opcode) noexcept { return (opcode & kOpcodeWithOptions) != 0; }

}  // namespace ipcfloor
