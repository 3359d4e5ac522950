#pragma once
// How a loaded strategy's run() spends its time against what its cost() says, measured once when
// it loads: its time per work unit on the self-check's short generated series, set against the built-in
// strategy's on the same series. cost() is what admission trusts: it decides which requests the
// serving thread computes itself (cheap ones) and which go to a worker. A strategy whose run()
// takes far more time per unit than the built-in's would hold the serving thread (and every
// other client) far longer than its cost says; such a strategy is flagged to run at a worker
// only. The flag is decided once, at load, and shown in `status`: the verdict on a request (its
// admission, its answer) never depends on the timing, only where it is computed does.
//
// Threads: setup path only (runs the strategy's code, reads the clock, allocates).

#include <cstdint>
#include <span>

#include "ipcfloor/strategy.h"
#include "kernel/strategy.hpp"

namespace ipcfloor {

// A strategy whose time per work unit is more than this many times the built-in's runs at a
// worker only. Honest strategies (sma_cross, donchian) measure within a few times the built-in's;
// one whose cost understates its run a thousandfold is not a matter of noise.
inline constexpr double kWorkersOnlyFactor = 1000.0;

// The timing of `table` (checked already: check_strategy) on the self-check's series `close`
// (data/gbm.hpp's strategy_check_series(), which the loader's caller gives), with the best of a
// few runs of each side.
[[nodiscard]] StrategyTiming time_strategy(const StrategyTable& table, const Bars& close);

}  // namespace ipcfloor
