#pragma once
// The HMA/HMA3 crossing evaluated one bar at a time, as a live process would ask for it: the
// "bar granularity" request of the benchmarks, and the building block of a per-bar signal
// opcode. Each new bar costs one output of each of the seven WMA passes, summed in the same
// order as kernel/kernel.cpp, so its hma/hma3 values are bit-identical to the batch kernel's.

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

  // Evaluates the bar `history.back()`, where `history` is the whole series up to and including
  // it; call once per bar, in order. Hot-path safe: noexcept, no allocation, no syscall.
  [[nodiscard]] BarSignal on_bar(std::span<const double> history) noexcept;

 private:
  Combo combo_;
  std::vector<double> diff_;   // last s values of 2*WMA(h) - WMA(L), oldest first (ring)
  std::vector<double> diff3_;  // last p values of 3*WMA(p3) - WMA(p2) - WMA(p), oldest first (ring)
  std::size_t bars_ = 0;
  double prev_hma_;
  double prev_hma3_;
};

}  // namespace ipcfloor
