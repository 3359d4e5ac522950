#pragma once
// The default data set of docs/SPEC.md §1: a geometric Brownian motion close-price series that equals,
// to the last bit of every log-return, what numpy builds with
//
//   rng = numpy.random.default_rng(seed)
//   lr = mu*dt + sigma*np.sqrt(dt)*rng.standard_normal(bars - 1)
//   close[0] = s0;  close[1:] = s0*np.exp(np.cumsum(lr))
//
// The log-returns and their running sum are bit-identical to numpy's; each close may differ
// from numpy's in the last bit only, because np.exp may use its own vectorised exp where this
// code calls the C library's (a relative difference of ~1e-16, far inside the 1e-14 contract).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "common/error.hpp"

namespace ipcfloor {

struct GbmParams {
  std::size_t bars = 150000;            // length of the series, close[0] = s0 included
  std::uint64_t seed = 42;              // numpy.random.default_rng(seed)
  double mu = 0.05;                     // drift per unit of time
  double sigma = 0.30;                  // volatility per sqrt(unit of time)
  double s0 = 100.0;                    // first close
  double dt = 1.0 / (252.0 * 390.0);    // one minute bar of a 252-day, 390-minute year
};

// Generates the series. Allocates the result (8 bytes per bar) and nothing else; reentrant,
// callable from any thread. The default 150,000 bars take about 2 ms (Release, one core).
//
// Fails with ErrorCode::invalid_argument, naming the parameter and its value, when bars < 2,
// s0 or dt is not finite or not > 0, sigma is negative or not finite, mu is not finite, or the
// parameters drive a bar to overflow or underflow (a close that is not finite and > 0); with
// ErrorCode::resource when the bars cannot be allocated.
[[nodiscard]] Expected<std::vector<double>> generate_gbm(const GbmParams& params);

// The series a strategy's self-check runs on when it is loaded (kernel/strategy_loader.hpp): this
// generator's 1,000 bars of seed 20261205, long enough for a few hundred bars of warm-up, short
// enough to check in a millisecond or two. The same on every call and every host; allocates 8 KB.
[[nodiscard]] Expected<std::vector<double>> strategy_check_series();

}  // namespace ipcfloor
