// The AVX2 path: four doubles per register. Built with -mavx2 (kernel/CMakeLists.txt); run only
// when the CPU has AVX2. No FMA: the build keeps multiply and add rounding separately.
#include <immintrin.h>

#include "kernel/path.hpp"
#include "kernel/path_body.hpp"

namespace ipcfloor::kernel_path {
namespace {

struct CrossMasks {
  static constexpr std::size_t kLanes = 4;
  static CrossBits at(const double* hma, const double* hma3, std::size_t i) noexcept {
    const __m256d before = _mm256_loadu_pd(hma + i - 1);
    const __m256d before3 = _mm256_loadu_pd(hma3 + i - 1);
    const __m256d now = _mm256_loadu_pd(hma + i);
    const __m256d now3 = _mm256_loadu_pd(hma3 + i);
    const __m256d up = _mm256_and_pd(_mm256_cmp_pd(before3, before, _CMP_LE_OQ), _mm256_cmp_pd(now3, now, _CMP_GT_OQ));
    const __m256d down = _mm256_and_pd(_mm256_cmp_pd(before3, before, _CMP_GE_OQ), _mm256_cmp_pd(now3, now, _CMP_LT_OQ));
    return CrossBits{static_cast<unsigned>(_mm256_movemask_pd(up)), static_cast<unsigned>(_mm256_movemask_pd(down))};
  }
};

}  // namespace

constinit const Path kAvx2 = PathOf<4, 8, CrossMasks>::kPath;

}  // namespace ipcfloor::kernel_path
