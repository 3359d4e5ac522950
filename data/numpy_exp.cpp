#include "data/numpy_exp.hpp"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace ipcfloor {
namespace {

// 2^(j/16), correctly rounded.
constexpr double kTwoToSixteenths[16] = {
    0x1p+0,
    0x1.0b5586cf9890fp+0,
    0x1.172b83c7d517bp+0,
    0x1.2387a6e756238p+0,
    0x1.306fe0a31b715p+0,
    0x1.3dea64c123422p+0,
    0x1.4bfdad5362a27p+0,
    0x1.5ab07dd485429p+0,
    0x1.6a09e667f3bcdp+0,
    0x1.7a11473eb0187p+0,
    0x1.8ace5422aa0dbp+0,
    0x1.9c49182a3f090p+0,
    0x1.ae89f995ad3adp+0,
    0x1.c199bdd85529cp+0,
    0x1.d5818dcfba487p+0,
    0x1.ea4afa2a490dap+0,
};

constexpr double kLog2E = 0x1.71547652b82fep+0;
// 1.5 * 2^48 puts the binary point of the sum at 1/16; the low bits carry the exponent bias
// (1023 in sixteenths), which leaves the table index (the low 4 bits) untouched.
constexpr double kShifter = 0x1.8000000003ff0p+48;
constexpr double kLn2High = 0x1.62e42fefa39efp-1;
constexpr double kLn2Low = 0x1.abc9e3b39803fp-56;
constexpr double kC2 = 0x1.0000000002622p-1;
constexpr double kC3 = 0x1.5555554b508a2p-3;
constexpr double kC4 = 0x1.555564bb4f5f0p-5;
constexpr double kC5 = 0x1.1106603d97c00p-7;
constexpr double kC6 = 0x1.72eb5ef0d213dp-10;
constexpr double kFastPathLimit = 700.0;

// x * log2(e) + kShifter, rounded toward zero (the vector code's one directed-rounding FMA).
// Computed exactly without touching the FPU's rounding mode: round to nearest, then step
// down one ulp when the exact sum lies below the rounded one. The sum is always positive here.
double shifted_log2_toward_zero(double x) noexcept {
  const double product = x * kLog2E;
  const double product_error = std::fma(x, kLog2E, -product);  // exact: x*log2e = product + error
  double sum = product + kShifter;
  // sum - kShifter is exact (both lie on the 1/16 grid), so this is the sum's exact shortfall.
  const double residual = (product - (sum - kShifter)) + product_error;
  if (residual < 0.0) sum = std::nextafter(sum, 0.0);
  return sum;
}

}  // namespace

double numpy_exp(double x) noexcept {
  if (!(std::fabs(x) <= kFastPathLimit)) return std::exp(x);
  const double shifted = shifted_log2_toward_zero(x);
  const double n = shifted - kShifter;  // x*log2(e) on the 1/16 grid
  std::uint64_t bits;
  std::memcpy(&bits, &shifted, sizeof bits);
  const double table = kTwoToSixteenths[bits & 15U];

  double r = std::fma(-n, kLn2High, x);
  r = std::fma(-n, kLn2Low, r);
  const double r2 = r * r;
  const double p56 = std::fma(r, kC6, kC5);
  const double p34 = std::fma(r, kC4, kC3);
  const double r3 = r2 * r;
  const double p12 = std::fma(r2, kC2, r);
  const double p36 = std::fma(r2, p56, p34);
  const double expm1_r = std::fma(r3, p36, p12);
  const double scaled = std::fma(table, expm1_r, table);
  return std::ldexp(scaled, static_cast<int>(std::floor(n)));
}

}  // namespace ipcfloor
