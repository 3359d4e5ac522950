#pragma once
// The one admission step of every request the engine takes: what it is, whether it may run, on
// which strategy and series, what it costs, and where it is computed. The verdict is made here,
// once, from the serving thread's private copy of the request, and travels with the request to
// whatever computes it; nothing downstream checks the request again.
//
// A verdict is a pure function of the request and the configuration (the strategies, the series
// as published, the bounds): the same on every host, whatever the load. Only live requests need
// the live book's state as well; LiveServer admits those itself, by the same rule.
//
// Threads: admit() belongs to the serving thread (and to in-process dispatchers); noexcept, no
// allocation, no syscall.

#include <cstdint>
#include <span>

#include "kernel/strategy.hpp"
#include "shm/frames.hpp"
#include "shm/layout.hpp"

namespace ipcfloor {

struct Verdict {
  enum class Route : std::uint8_t {
    refused,    // answered at once with `status`
    echo,       // ECHO: the payload back
    echo_bulk,  // ECHO_BULK: a copy within the lane's bulk region (its range is checked there)
    backtest,   // an admitted BACKTEST: `strategy` on `close`
    live,       // APPEND, SUBSCRIBE or SNAPSHOT: for the live server
  };
  Route route = Route::refused;
  Status status = Status::ok;
  const Strategy* strategy = nullptr;
  std::span<const double> close;
  std::uint64_t cost = 0;
  bool heavy = false;  // a BACKTEST that costs at least the inline bound, or of a strategy that runs
                       // at a worker only: for a worker
  // window_out_of_range: 1 + the parameter the strategy refused (Strategy::refusal), and the bars
  // it was judged against; the answer carries both (extra[0], extra[1]) for the client's message.
  std::uint32_t refused_param = 0;
  std::uint64_t bars = 0;
};

struct AdmissionConfig {
  std::uint64_t max_frame_cost = 0;  // a BACKTEST costing more is refused too_costly (0: unbounded)
  std::uint64_t inline_cost = 0;     // a BACKTEST costing less is computed by the serving thread
  bool live = false;                 // APPEND, SUBSCRIBE and SNAPSHOT are served
};

class Admission {
 public:
  // `strategies` must outlive the admission. The series table starts empty: set_series().
  Admission(const StrategySet& strategies, const AdmissionConfig& config) noexcept
      : strategies_(&strategies), config_(config) {}

  // The series a BACKTEST may name by index (index 0: the main one). Setup, and the serving
  // thread when a live APPEND grows the main series (set_main_series).
  void set_series(std::span<const std::span<const double>> series) noexcept;
  void set_main_series(std::span<const double> close) noexcept { series_[0] = close; }

  // The verdict on `request` (the serving thread's private copy). Refusals, in order: an unknown
  // opcode; a live opcode on an engine that is not live; flags or reserved bits that this
  // version does not define; no_such_strategy; no_such_series; window_out_of_range (the
  // strategy's one check, Strategy::refusal); too_costly.
  [[nodiscard]] Verdict admit(const RequestSlot& request) const noexcept;

  [[nodiscard]] const StrategySet& strategies() const noexcept { return *strategies_; }
  [[nodiscard]] std::span<const double> series(std::uint32_t index) const noexcept { return series_[index]; }
  [[nodiscard]] std::uint32_t series_count() const noexcept { return series_count_; }

 private:
  [[nodiscard]] Verdict admit_backtest(const RequestSlot& request) const noexcept;

  const StrategySet* strategies_;
  AdmissionConfig config_;
  std::span<const double> series_[kMaxSeries];
  std::uint32_t series_count_ = 0;
};

// A request's flags: the low byte names the series, the high byte the strategy (0: the built-in).
[[nodiscard]] constexpr std::uint32_t series_of(std::uint16_t flags) noexcept { return flags & kSeriesIndexMask; }
[[nodiscard]] constexpr std::uint32_t strategy_of(std::uint16_t flags) noexcept { return flags >> 8; }

}  // namespace ipcfloor
