// The x86-64 baseline path: SSE2, two doubles per register, built with no extra target flags.
#include "kernel/wma_body.hpp"
#include "kernel/wma_paths.hpp"

namespace ipcfloor::wma {

void scalar(const double* x, std::size_t len, std::size_t n, double* out) noexcept { body<2, 8>(x, len, n, out); }

}  // namespace ipcfloor::wma
