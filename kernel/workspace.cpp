#include "kernel/workspace.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

#include "ipcfloor/strategy.h"

namespace ipcfloor {

void KernelWorkspace::Free::operator()(void* block) const noexcept { std::free(block); }

KernelWorkspace::KernelWorkspace(std::uint64_t bytes) : bytes_(bytes) {
  // aligned_alloc wants a size that is a multiple of the alignment, and at least one block.
  constexpr std::uint64_t kAlign = IPCFLOOR_STRATEGY_ALIGN;
  const std::uint64_t rounded = bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign;
  void* block = std::aligned_alloc(kAlign, rounded);
  if (block == nullptr) throw std::bad_alloc();
  // Touched now, so the first backtest takes no page fault (and a memory budget counts it all).
  std::memset(block, 0, rounded);
  storage_.reset(block);
}

}  // namespace ipcfloor
