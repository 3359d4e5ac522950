#pragma once
// Scratch memory for one backtest at a time: whichever strategy runs, it gets this block
// (aligned to IPCFLOOR_STRATEGY_ALIGN) and sizes its arrays from it. Allocates only in the
// constructor, every byte touched there, so a thread that owns one runs any number of backtests
// without touching the heap. Not shareable between threads while in use.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "ipcfloor/strategy.h"

namespace ipcfloor {

class KernelWorkspace {
 public:
  // `bytes`: what the strategies the thread may run need (StrategySet::workspace_bytes);
  // `page_trades`: room for a page of that many trades (a TRADES answer computed here before its
  // copy into the lane), 0 for none. Setup.
  explicit KernelWorkspace(std::uint64_t bytes, std::uint64_t page_trades = 0);
  KernelWorkspace(KernelWorkspace&&) noexcept = default;
  KernelWorkspace& operator=(KernelWorkspace&&) noexcept = default;

  [[nodiscard]] void* data() noexcept { return storage_.get(); }
  [[nodiscard]] std::uint64_t bytes() const noexcept { return bytes_; }
  // The page of trades, after the workspace proper (empty when none was asked for).
  [[nodiscard]] std::span<ipcfloor_trade> trade_page() noexcept { return page_; }

 private:
  struct Free {
    void operator()(void* block) const noexcept;
  };
  std::unique_ptr<void, Free> storage_;
  std::uint64_t bytes_ = 0;
  std::span<ipcfloor_trade> page_;
};

}  // namespace ipcfloor
