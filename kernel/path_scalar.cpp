// The x86-64 baseline path: SSE2, two doubles per register, built with no extra target flags.
#include <emmintrin.h>

#include "kernel/path.hpp"
#include "kernel/path_body.hpp"

namespace ipcfloor::kernel_path {
namespace {

struct CrossMasks {
  static constexpr std::size_t kLanes = 2;
  static CrossBits at(const double* hma, const double* hma3, std::size_t i) noexcept {
    const __m128d before = _mm_loadu_pd(hma + i - 1);
    const __m128d before3 = _mm_loadu_pd(hma3 + i - 1);
    const __m128d now = _mm_loadu_pd(hma + i);
    const __m128d now3 = _mm_loadu_pd(hma3 + i);
    // SSE2's ordered predicates: every compare with a NaN is false, as in C.
    const __m128d up = _mm_and_pd(_mm_cmple_pd(before3, before), _mm_cmpgt_pd(now3, now));
    const __m128d down = _mm_and_pd(_mm_cmpge_pd(before3, before), _mm_cmplt_pd(now3, now));
    return CrossBits{static_cast<unsigned>(_mm_movemask_pd(up)), static_cast<unsigned>(_mm_movemask_pd(down))};
  }
};

}  // namespace

constinit const Path kScalar = PathOf<2, 8, CrossMasks>::kPath;

}  // namespace ipcfloor::kernel_path
