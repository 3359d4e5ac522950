#include "engine/socket_request_handler.hpp"

#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "common/checksum.hpp"
#include "kernel/cost.hpp"

namespace ipcfloor::socket_detail {
namespace {

// A workspace for series longer than this is released after its sweep, so a connection that
// swept one huge series does not hold its memory forever.
constexpr std::size_t kRetainedWorkspaceBars = std::size_t{1} << 21;

}  // namespace

Rejection rejection_for(const SocketFault& fault) { return {fault.error, ipcfloor::describe(fault)}; }

void RequestHandler::forget(Session& session) noexcept {
  // relaxed: a count compared against the cap (pairs with the fetch_add in charge).
  if (session.charged != 0) budget_.loaded_bytes.fetch_sub(session.charged, std::memory_order_relaxed);
  session.charged = 0;
}

std::expected<SocketOpcode, Rejection> RequestHandler::serve(std::span<const std::byte> body, Session& session,
                                                             std::vector<std::byte>& out) {
  auto request = decode_request(body);
  if (!request) return std::unexpected(rejection_for(request.error()));
  const RequestView& r = *request;
  switch (r.opcode) {
    case SocketOpcode::sweep: {
      if (auto fault = check_costs(r.params, r.n_combos, r.n_bars)) return std::unexpected(rejection_for(*fault));
      close_.resize(r.n_bars);
      copy_close(r.close, close_);
      if (auto swept = sweep(close_, r.params, r.n_combos); !swept) return std::unexpected(std::move(swept.error()));
      append_sweep_reply(results_, out);
      break;
    }
    case SocketOpcode::echo: append_echo_reply(r.close, out); break;
    case SocketOpcode::load: {
      if (auto refused = charge(session, std::uint64_t{r.n_bars} * sizeof(double)); !refused)
        return std::unexpected(std::move(refused.error()));
      session.series.resize(r.n_bars);
      copy_close(r.close, session.series);
      session.active = session.series;
      session.loaded = true;
      append_load_reply(fnv1a64(r.close), options_.fee, out);
      break;
    }
    case SocketOpcode::use_preloaded: {
      if (!options_.preloaded) {
        SocketFault fault;
        fault.error = SocketError::no_preloaded_series;
        fault.opcode = static_cast<std::uint8_t>(r.opcode);
        return std::unexpected(rejection_for(fault));
      }
      std::vector<double>().swap(session.series);  // a series it loaded before is not needed any more
      forget(session);
      session.active = options_.preloaded->close;
      session.loaded = true;
      append_preloaded_reply(options_.preloaded->checksum, options_.fee, session.active.size(),
                             options_.preloaded->name, out);
      break;
    }
    case SocketOpcode::sweep_loaded: {
      if (!session.loaded) {
        SocketFault fault;
        fault.error = SocketError::no_series_loaded;
        fault.opcode = static_cast<std::uint8_t>(r.opcode);
        return std::unexpected(rejection_for(fault));
      }
      if (auto fault = check_windows(r.params, session.active.size())) return std::unexpected(rejection_for(*fault));
      if (auto fault = check_costs(r.params, r.n_combos, session.active.size()))
        return std::unexpected(rejection_for(*fault));
      if (auto swept = sweep(session.active, r.params, r.n_combos); !swept)
        return std::unexpected(std::move(swept.error()));
      append_sweep_reply(results_, out);
      break;
    }
    case SocketOpcode::echo_params: append_echo_params_reply(r.params, out); break;
  }
  return r.opcode;
}

std::expected<void, Rejection> RequestHandler::charge(Session& session, std::uint64_t bytes) {
  // relaxed: a count compared against the cap; no data is published through it.
  const std::uint64_t held = budget_.loaded_bytes.fetch_add(bytes, std::memory_order_relaxed) - session.charged;
  if (bytes > session.charged && held + bytes > options_.max_loaded_bytes) {
    budget_.loaded_bytes.fetch_sub(bytes, std::memory_order_relaxed);  // relaxed: as above
    SocketFault fault;
    fault.error = SocketError::over_memory_cap;
    fault.actual = bytes;
    fault.expected = options_.max_loaded_bytes;
    fault.limit = held;
    return std::unexpected(rejection_for(fault));
  }
  forget(session);
  session.charged = bytes;
  return {};
}

std::optional<SocketFault> RequestHandler::check_costs(std::span<const std::byte> params, std::uint32_t n,
                                                       std::size_t n_bars) const {
  if (options_.max_combo_cost == 0) return std::nullopt;
  for (std::uint32_t i = 0; i < n; ++i) {
    Combo combo;
    std::memcpy(&combo, params.data() + std::size_t{i} * kComboWireBytes, sizeof combo);
    const std::uint64_t cost = backtest_cost(combo, n_bars);
    if (cost <= options_.max_combo_cost) continue;
    SocketFault fault;
    fault.error = SocketError::too_costly;
    fault.index = i;
    fault.actual = cost;
    fault.expected = options_.max_combo_cost;
    return fault;
  }
  return std::nullopt;
}

std::expected<void, Rejection> RequestHandler::sweep(std::span<const double> close,
                                                     std::span<const std::byte> params, std::uint32_t n) {
  results_.resize(n);
  if (options_.sweep_threads > 1 && n > 1) {
    combos_.resize(n);
    std::memcpy(combos_.data(), params.data(), std::size_t{n} * kComboWireBytes);
    auto results = run_sweep(close, combos_, options_.fee, options_.sweep_threads);
    if (!results) return std::unexpected(Rejection{SocketError::internal, results.error().message});
    results_ = std::move(*results);
    return {};
  }
  if (!workspace_ || workspace_->capacity() < close.size()) {
    workspace_.reset();
    workspace_ = std::make_unique<KernelWorkspace>(close.size());
  }
  for (std::uint32_t i = 0; i < n; ++i) {
    // relaxed: a plain flag; stop() joins the threads afterwards. Shutdown waits for one combo.
    if (budget_.stopping.load(std::memory_order_relaxed))
      return std::unexpected(Rejection{SocketError::internal, "the server is stopping"});
    Combo combo;
    std::memcpy(&combo, params.data() + std::size_t{i} * kComboWireBytes, sizeof combo);
    const KernelStatus status = run_backtest(close, combo, options_.fee, *workspace_, results_[i]);
    if (status != KernelStatus::ok)
      return std::unexpected(
          Rejection{SocketError::internal, fmt::format("combo {}: the kernel refused it: {}", i, to_string(status))});
  }
  if (workspace_->capacity() > kRetainedWorkspaceBars) workspace_.reset();
  return {};
}

}  // namespace ipcfloor::socket_detail
