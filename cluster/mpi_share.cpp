#include "cluster/mpi_share.hpp"

#include <algorithm>
#include <chrono>
#include <optional>
#include <span>

#include <fmt/format.h>

#include "clients/pipelined_sweep.hpp"
#include "clients/shm_client.hpp"
#include "kernel/kernel.hpp"
#include "shm/memory_budget.hpp"

namespace ipcfloor::mpi {
namespace {

// Collects results and hands them over kBatch at a time (and the rest at the end).
class Batcher {
 public:
  Batcher(const Deliver& deliver, const Between& between) : deliver_(deliver), between_(between) {}
  void add(const ResultWire& result) {
    batch_.push_back(result);
    if (batch_.size() == kBatch) flush();
  }
  void flush() {
    if (batch_.empty()) return;
    deliver_(batch_);
    batch_.clear();
    between_();
  }

 private:
  const Deliver& deliver_;
  const Between& between_;
  std::vector<ResultWire> batch_;
};

Expected<void> compute_through_engine(const MpiSweepOptions& options, std::span<const RowWire> rows,
                                      std::span<const Item> items, std::span<const std::size_t> mine, Batcher& out) {
  ShmClientOptions client_options;
  client_options.timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::duration<double>(options.timeout_s));
  client_options.wait = WaitMode::backoff;
  auto client = ShmClient::connect(options.name, client_options);
  if (!client) return std::unexpected(client.error());
  const auto request = [&](std::size_t k) {
    const Item& item = items[mine[k]];
    return SweepRequest{Opcode::backtest, request_flags(item.series, options.strategy_index),
                        payload_of(rows[item.row].params)};
  };
  const auto take = [&](std::size_t k, const ResponseSlot& answer) {
    out.add(ResultWire{mine[k], answer.trades, answer.pnl, answer.status, 1});
  };
  const SweepEnd end = pipelined_sweep(*client, mine.size(), request, take);
  if (end.status != CallStatus::ok) return std::unexpected(client->error_for(end.status));
  out.flush();
  return {};
}

// The combos of one series from mine[at] on, until the series changes or a chunk is full.
Expected<void> compute_series_chunk(const MpiSweepOptions& options, const LoadedSeries& loaded,
                                    std::span<const RowWire> rows, std::span<const Item> items,
                                    std::span<const std::size_t> mine, std::size_t& at,
                                    std::optional<KernelWorkspace>& workspace, Batcher& out) {
  const std::uint32_t series = items[mine[at]].series;
  if (options.threads <= 1) {
    for (std::size_t n = 0; at < mine.size() && items[mine[at]].series == series && n < kBatch; ++at, ++n) {
      BacktestResult result;
      // Admitted when the items were built: the strategy runs it, nothing is checked again.
      const StrategyRun run = options.resolved->run(std::span<const double>(loaded.close), rows[items[mine[at]].row].params, options.fee,
                                                    *workspace, result);
      const KernelStatus status = run == StrategyRun::ok ? KernelStatus::ok : KernelStatus::failed;
      out.add(ResultWire{mine[at], result.trades, result.pnl, static_cast<std::uint32_t>(status), 0});
    }
    return {};
  }
  // Several threads: run_sweep over a larger chunk, so that its per-call workspaces pay off.
  std::vector<Combo> combos;
  std::vector<std::size_t> which;
  for (; at < mine.size() && items[mine[at]].series == series && combos.size() < 16 * options.threads; ++at) {
    combos.push_back(rows[items[mine[at]].row].params);
    which.push_back(mine[at]);
  }
  auto results = run_sweep(*options.resolved, loaded.close, combos, options.fee, options.threads);
  if (!results) return std::unexpected(results.error());
  for (std::size_t k = 0; k < which.size(); ++k) out.add(ResultWire{which[k], (*results)[k].trades, (*results)[k].pnl, 0, 0});
  return {};
}

Expected<void> compute_inproc(const MpiSweepOptions& options, const SeriesSet& set, std::span<const RowWire> rows,
                              std::span<const Item> items, std::span<const std::size_t> mine, Batcher& out) {
  std::optional<std::uint32_t> loaded_index;
  LoadedSeries loaded;
  std::optional<KernelWorkspace> workspace;  // one thread: reused for every combo of a series
  std::size_t at = 0;
  while (at < mine.size()) {
    const std::uint32_t series = items[mine[at]].series;
    if (loaded_index != series) {
      auto next_series = set.load(series);
      if (!next_series) return std::unexpected(next_series.error());
      loaded = std::move(*next_series);
      loaded_index = series;
      // One kernel workspace per thread, each as long as the series: refused when the host
      // cannot back them, not by the OOM killer.
      const std::size_t threads = std::max(1u, options.threads);
      const std::size_t bars = loaded.close.size();
      const MemoryNeed workspaces{
          fmt::format("{} kernel workspace{} of {} bars (one per thread)", threads, threads == 1 ? "" : "s", bars),
          threads * options.resolved->workspace_bytes(bars),
          fmt::format("--threads {} or the series ({} bars)", threads, bars)};
      if (auto fits = check_memory_budget(std::span(&workspaces, 1), read_host_memory()); !fits) return fits;
      if (options.threads <= 1) workspace.emplace(options.resolved->workspace_bytes(loaded.close.size()));
    }
    if (auto chunk = compute_series_chunk(options, loaded, rows, items, mine, at, workspace, out); !chunk) return chunk;
    out.flush();
  }
  return {};
}

}  // namespace

Expected<void> compute_share(const MpiSweepOptions& options, const SeriesSet& set, std::span<const RowWire> rows,
                             std::span<const Item> items, std::span<const std::size_t> mine, const Deliver& deliver,
                             const Between& between) {
  Batcher out(deliver, between);
  if (!options.name.empty()) return compute_through_engine(options, rows, items, mine, out);
  return compute_inproc(options, set, rows, items, mine, out);
}

}  // namespace ipcfloor::mpi
