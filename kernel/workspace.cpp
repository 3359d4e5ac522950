#include "kernel/workspace.hpp"

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>

#include "ipcfloor/strategy.h"

namespace ipcfloor {

void KernelWorkspace::Free::operator()(void* block) const noexcept { std::free(block); }

KernelWorkspace::KernelWorkspace(std::uint64_t bytes, std::uint64_t page_trades) : bytes_(bytes) {
  // aligned_alloc wants a size that is a multiple of the alignment, and at least one block.
  constexpr std::uint64_t kAlign = IPCFLOOR_STRATEGY_ALIGN;
  const std::uint64_t rounded = bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign;
  const std::uint64_t page_bytes = (page_trades * sizeof(ipcfloor_trade) + kAlign - 1) / kAlign * kAlign;
  void* block = std::aligned_alloc(kAlign, rounded + page_bytes);
  if (block == nullptr) throw std::bad_alloc();
  // Touched now, so the first backtest takes no page fault (and a memory budget counts it all).
  std::memset(block, 0, rounded + page_bytes);
  storage_.reset(block);
  page_ = std::span<ipcfloor_trade>(reinterpret_cast<ipcfloor_trade*>(static_cast<std::byte*>(block) + rounded),
                                    page_trades);
}

}  // namespace ipcfloor
