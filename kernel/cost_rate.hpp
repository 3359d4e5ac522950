#pragma once
// How fast this host runs the backtest, in backtest_cost units (kernel/cost.hpp) per microsecond:
// the servers turn `serve --max-frame-ms` into a bound on one combo's cost with it.

#include <chrono>
#include <cstdint>
#include <span>

namespace ipcfloor {

// The best of a few timed runs (at least three, for about `budget`) of one mid-sized combo on
// `close`, on the kernel path this process dispatches to. Setup path: allocates a workspace and
// takes a few milliseconds. Returns 0 for fewer than two bars.
[[nodiscard]] double measure_cost_rate(std::span<const double> close,
                                       std::chrono::milliseconds budget = std::chrono::milliseconds{4});

// The cost one combo may have to run within `frame_time` at `units_per_us`; 0 (no bound) when
// either is 0.
[[nodiscard]] std::uint64_t max_cost_for(double units_per_us, std::chrono::milliseconds frame_time) noexcept;

}  // namespace ipcfloor
