// The AVX2 path: four doubles per register. Built with -mavx2 (kernel/CMakeLists.txt); called
// only when the CPU has AVX2. No FMA: the build keeps multiply and add rounding separately.
#include "kernel/wma_body.hpp"
#include "kernel/wma_paths.hpp"

namespace ipcfloor::wma {

void avx2(const double* x, std::size_t len, std::size_t n, double* out) noexcept { body<4, 8>(x, len, n, out); }

}  // namespace ipcfloor::wma
