#pragma once
// Computing an admitted BACKTEST, STATS or TRADES: the one place the engine calls a strategy for a
// request, on whichever thread computes it (the serving thread for a cheap one, a worker for a
// dear one, the serving thread again for a job taken back from a stalled worker). The job is what
// admission decided (engine/admission.hpp), as plain data a worker's mailbox can hold; the answer
// is the response's payload and, for STATS and TRADES, the answer record.
//
// Hot path: noexcept, no allocation, no syscall, no lock.

#include <cstdint>
#include <span>

#include "common/bars.hpp"
#include "common/combo.hpp"
#include "engine/admission.hpp"
#include "kernel/strategy.hpp"
#include "kernel/workspace.hpp"
#include "shm/frames.hpp"

namespace ipcfloor {

// An admitted computation, copied out of the verdict and the request (the one copy a worker's
// mailbox holds).
struct ComputeJob {
  const Strategy* strategy = nullptr;
  Verdict::Work work = Verdict::Work::backtest;
  Combo params{};
  Bars bars;
  double fee = 0.0;
  double bars_per_year = 0.0;
  std::uint64_t first_trade = 0;

  [[nodiscard]] static ComputeJob of(const Verdict& verdict, const RequestSlot& request) noexcept {
    return ComputeJob{verdict.strategy, verdict.work,          request.params,      verdict.bars,
                      verdict.fee,      verdict.bars_per_year, verdict.first_trade};
  }
};

// What a computation answers.
struct Computed {
  Status status = Status::ok;
  double pnl = 0.0;
  std::int64_t trades = 0;
  std::uint64_t page_trades = 0;  // TRADES: how many trades the page holds (from first_trade)
  bool has_record = false;        // STATS, TRADES answered ok: `record` holds the figures
  AnswerRecord record{};
};

// Computes `job` in `workspace`. TRADES writes its page into `page` (the lane's bulk region on the
// serving thread, a worker's own page buffer at a worker; as many trades as fit).
void compute(const ComputeJob& job, KernelWorkspace& workspace, std::span<ipcfloor_trade> page, Computed& out) noexcept;

// Writes `computed` into `response` (seq and opcode already set) and, when it has one, its record
// into `record`; for TRADES the page's count and first index into extra[0], extra[1].
void write_computed(const Computed& computed, std::uint64_t first_trade, ResponseSlot& response,
                    AnswerRecord& record) noexcept;

// The lane's bulk region as a page of trades (as many whole records as fit).
[[nodiscard]] inline std::span<ipcfloor_trade> trade_page(std::span<std::byte> bulk) noexcept {
  return {reinterpret_cast<ipcfloor_trade*>(bulk.data()), bulk.size() / sizeof(ipcfloor_trade)};
}

}  // namespace ipcfloor
