// The AVX-512 path: eight doubles per register. Built with -mavx512f (kernel/CMakeLists.txt);
// run only when the CPU has AVX-512F.
#include <immintrin.h>

#include "kernel/path.hpp"
#include "kernel/path_body.hpp"

namespace ipcfloor::kernel_path {
namespace {

struct CrossMasks {
  static constexpr std::size_t kLanes = 8;
  static CrossBits at(const double* hma, const double* hma3, std::size_t i) noexcept {
    const __m512d before = _mm512_loadu_pd(hma + i - 1);
    const __m512d before3 = _mm512_loadu_pd(hma3 + i - 1);
    const __m512d now = _mm512_loadu_pd(hma + i);
    const __m512d now3 = _mm512_loadu_pd(hma3 + i);
    const unsigned up = _mm512_cmp_pd_mask(before3, before, _CMP_LE_OQ) & _mm512_cmp_pd_mask(now3, now, _CMP_GT_OQ);
    const unsigned down = _mm512_cmp_pd_mask(before3, before, _CMP_GE_OQ) & _mm512_cmp_pd_mask(now3, now, _CMP_LT_OQ);
    return CrossBits{up, down};
  }
};

}  // namespace

constinit const Path kAvx512 = PathOf<8, 4, CrossMasks>::kPath;

}  // namespace ipcfloor::kernel_path
