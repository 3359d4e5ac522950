#pragma once
// numpy's float64 exp as it runs on an AVX-512 host (numpy 1.2x links Intel SVML there and
// np.exp takes its 8-lane "exp8" path). That path is within 4 ulp but not correctly rounded:
// it differs from glibc's exp in about a quarter of the default series' bars, and the published
// fingerprint (L=6: pnl -5165.577039790348) was computed on that series. To reproduce numpy's
// series bit for bit, without Python, the generator evaluates the same algorithm in scalar code:
//
//   N  = x * log2(e), truncated toward zero onto a 1/16 grid   (so N = M + j/16)
//   R  = x - N * ln2  (two fused steps, ln2 split high/low)
//   exp(x) = 2^M * T[j] * (1 + p(R)),   T[j] = 2^(j/16),  p a degree-6 polynomial
//
// Every multiply-add that the vector code fuses is a std::fma here and nothing else is fused,
// so the rounding of each step is the same. Checked bit for bit against numpy on 1M inputs
// over [-700, 700] (tests/test_gbm.cpp keeps a sample of them).

namespace ipcfloor {

// Pure, noexcept, allocation-free. Outside [-700, 700], or for NaN/inf, it returns std::exp(x)
// (numpy's vector code also leaves those lanes to a scalar fallback).
[[nodiscard]] double numpy_exp(double x) noexcept;

}  // namespace ipcfloor
