// numpy_exp against values printed once by numpy 1.24 (np.exp on an AVX-512 host). Each pair
// below is one where glibc's exp rounds differently, so a libm fallback cannot pass this.

#include <doctest/doctest.h>

#include <cmath>
#include <utility>

#include "data/numpy_exp.hpp"

namespace {

constexpr std::pair<double, double> kNumpyExp[] = {
    {-0x1.b6adc41af5480p-2, 0x1.4d984b6c732e4p-1},   {0x1.ff2806049862ep-1, 0x1.5b5e02317b1aep+1},
    {-0x1.0a746f7b7bf50p-3, 0x1.c189a6f256ef1p-1},   {-0x1.c93e525f39700p-7, 0x1.f8e7ba507a5ecp-1},
    {-0x1.3fac6f1c6dac8p+2, 0x1.bbd60aadce1a3p-8},   {-0x1.1008e963778c4p+3, 0x1.aa3d7b0f55158p-13},
    {0x1.a7457088c6a8cp+4, 0x1.1f28d12b4aeaep+38},   {0x1.61336d518b888p+2, 0x1.f2a73dc458ddep+7},
    {0x1.40c14809b9a40p+9, 0x1.6adee0f0a7f99p+925},  {-0x1.0740df48d4857p+8, 0x1.2736ab7976eb5p-380},
    {-0x1.2e07447d2d835p+9, 0x1.71b7e058ca513p-872}, {0x1.0f42f18e6b7f0p+8, 0x1.45bfd5045b1a4p+391},
};

}  // namespace

TEST_CASE("numpy_exp reproduces numpy's exp bit for bit where glibc's differs") {
  for (const auto& [x, expected] : kNumpyExp) {
    CAPTURE(x);
    CHECK(ipcfloor::numpy_exp(x) == expected);
    CHECK(std::exp(x) != expected);  // the pair really tells the two apart
  }
}

TEST_CASE("numpy_exp is exact at zero and stays within an ulp or so of libm elsewhere") {
  CHECK(ipcfloor::numpy_exp(0.0) == 1.0);
  CHECK(ipcfloor::numpy_exp(-0.0) == 1.0);
  for (double x = -700.0; x <= 700.0; x += 0.37) {
    const double ours = ipcfloor::numpy_exp(x);
    const double libm = std::exp(x);
    CHECK(std::fabs(ours - libm) <= 4 * std::fabs(std::nextafter(libm, INFINITY) - libm));
  }
}

TEST_CASE("numpy_exp leaves infinities, NaN and huge arguments to libm") {
  CHECK(ipcfloor::numpy_exp(INFINITY) == INFINITY);
  CHECK(ipcfloor::numpy_exp(-INFINITY) == 0.0);
  CHECK(std::isnan(ipcfloor::numpy_exp(NAN)));
  CHECK(ipcfloor::numpy_exp(800.0) == INFINITY);
  CHECK(ipcfloor::numpy_exp(-800.0) == 0.0);
}
