#include "data/gbm.hpp"

#include <cmath>
#include <exception>

#include "data/numpy_exp.hpp"
#include "data/numpy_random.hpp"

namespace ipcfloor {

Expected<std::vector<double>> generate_gbm(const GbmParams& params) {
  if (params.bars < 2) {
    return fail(ErrorCode::invalid_argument,
                "GBM bars must be at least 2 (got {}): the series needs a first close and one step",
                params.bars);
  }
  if (!std::isfinite(params.s0) || params.s0 <= 0.0) {
    return fail(ErrorCode::invalid_argument,
                "GBM s0 (the first close) must be finite and > 0 (got {})", params.s0);
  }
  if (!std::isfinite(params.dt) || params.dt <= 0.0) {
    return fail(ErrorCode::invalid_argument,
                "GBM dt (the time step) must be finite and > 0 (got {})", params.dt);
  }
  if (!std::isfinite(params.sigma) || params.sigma < 0.0) {
    return fail(ErrorCode::invalid_argument,
                "GBM sigma (the volatility) must be finite and >= 0 (got {})", params.sigma);
  }
  if (!std::isfinite(params.mu)) {
    return fail(ErrorCode::invalid_argument, "GBM mu (the drift) must be finite (got {})",
                params.mu);
  }

  std::vector<double> close;
  try {
    close.resize(params.bars);
  } catch (const std::exception&) {  // bad_alloc, or length_error beyond max_size()
    return fail(ErrorCode::resource, "cannot allocate {} GBM bars ({} bytes)", params.bars,
                static_cast<double>(params.bars) * static_cast<double>(sizeof(double)));
  }

  // Both factors are rounded exactly where numpy rounds them: mu*dt once, sigma*sqrt(dt) once,
  // then each log-return is drift + (vol * z), and the running sum is sequential like cumsum.
  const double drift = params.mu * params.dt;
  const double vol = params.sigma * std::sqrt(params.dt);
  Pcg64 rng(params.seed);
  double log_sum = 0.0;
  close[0] = params.s0;
  for (std::size_t i = 1; i < params.bars; ++i) {
    log_sum += drift + vol * standard_normal(rng);
    close[i] = params.s0 * numpy_exp(log_sum);  // numpy's exp, not libm's: see numpy_exp.hpp
  }

  // Extreme drift or volatility can push exp() out of range; the engine needs finite, positive
  // bars, so say which parameters did it instead of handing back an unusable series.
  for (std::size_t i = 1; i < params.bars; ++i) {
    if (!std::isfinite(close[i]) || close[i] <= 0.0) {
      return fail(ErrorCode::invalid_argument,
                  "GBM parameters (mu {}, sigma {}, s0 {}, dt {}, seed {}) drive bar {} to {}: "
                  "every close must be finite and > 0",
                  params.mu, params.sigma, params.s0, params.dt, params.seed, i, close[i]);
    }
  }
  return close;
}

Expected<std::vector<double>> strategy_check_series() {
  GbmParams params;
  params.bars = 1000;
  params.seed = 20261205;
  return generate_gbm(params);
}

}  // namespace ipcfloor
