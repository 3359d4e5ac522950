// The AVX-512 path: eight doubles per register. Built with -mavx512f (kernel/CMakeLists.txt);
// called only when the CPU has AVX-512F.
#include "kernel/wma_body.hpp"
#include "kernel/wma_paths.hpp"

namespace ipcfloor::wma {

void avx512(const double* x, std::size_t len, std::size_t n, double* out) noexcept { body<8, 4>(x, len, n, out); }

}  // namespace ipcfloor::wma
