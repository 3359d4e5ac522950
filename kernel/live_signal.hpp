#pragma once
// The HMA/HMA3 crossing evaluated one bar at a time, as a live process would ask for it: the
// "bar granularity" request of the benchmarks, and the building block of live mode's signals
// (LiveBacktest below, which the engine runs for every subscribed combo on every new bar). Each
// new bar costs one output of each of the seven WMA passes, O(sum of the windows), summed in the
// same order as kernel/kernel.cpp, so its hma/hma3 values are bit-identical to the batch kernel's.

#include <cstdint>
#include <span>
#include <vector>

#include "common/combo.hpp"

namespace ipcfloor {

struct BarSignal {
  double hma;      // NaN until its windows have filled
  double hma3;     // NaN until its windows have filled
  int cross;       // +1: HMA3 crossed above HMA at this bar, -1: below, 0: neither
};

class LiveSignal {
 public:
  // Allocates two small histories (s and p values). Windows must be >= 1 (validate_combo).
  explicit LiveSignal(const Combo& combo);
  // The same over caller-owned storage of storage_doubles(combo) values, which must outlive
  // it: no allocation, so a serving thread can make one from a preallocated arena.
  LiveSignal(const Combo& combo, std::span<double> storage) noexcept;
  [[nodiscard]] static std::size_t storage_doubles(const Combo& combo) noexcept {
    return static_cast<std::size_t>(combo.s) + static_cast<std::size_t>(combo.p);
  }
  // Moves keep the histories where they are (owned storage moves with its buffer), so the spans
  // stay valid; copies would alias them and are not allowed.
  LiveSignal(LiveSignal&&) noexcept = default;
  LiveSignal& operator=(LiveSignal&&) noexcept = default;
  LiveSignal(const LiveSignal&) = delete;
  LiveSignal& operator=(const LiveSignal&) = delete;

  // Evaluates the bar `history.back()`, where `history` is the whole series up to and including
  // it; call once per bar, in order. Hot-path safe: noexcept, no allocation, no syscall.
  [[nodiscard]] BarSignal on_bar(std::span<const double> history) noexcept;

 private:
  Combo combo_;
  std::vector<double> owned_;  // the storage, when this object allocated it
  std::span<double> diff_;     // last s values of 2*WMA(h) - WMA(L) (a ring)
  std::span<double> diff3_;    // last p values of 3*WMA(p3) - WMA(p2) - WMA(p) (a ring)
  std::size_t bars_ = 0;
  double prev_hma_;
  double prev_hma3_;
};

// One bar of a combo's live backtest: the crossing, and the stop-and-reverse state it leaves.
struct LiveBar {
  BarSignal signal;
  int position;         // +1 long, -1 short, 0 flat
  double pnl;           // running, in percentage points net of fees
  std::int64_t trades;  // round trips closed so far
};

// LiveSignal plus the batch kernel's stop-and-reverse bookkeeping, bar by bar: after bar i its
// pnl and trades equal run_backtest's over close[0..i], bit for bit (same operations, same order).
class LiveBacktest {
 public:
  // Over caller-owned storage of LiveSignal::storage_doubles(combo) values. No allocation.
  LiveBacktest(const Combo& combo, double fee, std::span<double> storage) noexcept;

  // As LiveSignal::on_bar; call once per bar, in order, from the first bar of the series.
  // noexcept, no allocation, no syscall.
  [[nodiscard]] LiveBar on_bar(std::span<const double> history) noexcept;

  // The state after the last bar given (all zero before the first).
  [[nodiscard]] const LiveBar& last() const noexcept { return last_; }

 private:
  LiveSignal signal_;
  double fee_;
  double entry_ = 0.0;
  LiveBar last_{};
};

}  // namespace ipcfloor
