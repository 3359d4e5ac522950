#include "socket_server/socket_request_handler.hpp"

#include <algorithm>
#include <cstring>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "common/checksum.hpp"

namespace ipcfloor::socket_detail {
namespace {

// A workspace larger than this is released after its sweep, so a connection that swept one huge
// series does not leave its thread holding the memory.
constexpr std::uint64_t kRetainedWorkspaceBytes = std::uint64_t{80} << 20;
constexpr std::uint64_t kReplyBytesPerCombo = 16;  // pnl and trades

Combo combo_at(std::span<const std::byte> params, std::uint32_t i) noexcept {
  Combo combo;
  std::memcpy(&combo, params.data() + std::size_t{i} * kComboWireBytes, sizeof combo);
  return combo;
}

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept { return b > ~a ? ~std::uint64_t{0} : a + b; }

// The bytes a valid request needs besides its frame: its reply, and a sweep's results and
// aligned close. A load's series is counted on its own (Session::series_bytes).
std::uint64_t working_bytes(const RequestView& r) noexcept {
  const std::uint64_t combos = r.n_combos;
  const std::uint64_t sweep_reply = kLengthPrefixBytes + kReplyBytesPerCombo * combos;
  const std::uint64_t results = sizeof(BacktestResult) * combos;
  switch (r.opcode) {
    case SocketOpcode::sweep: return sizeof(double) * std::uint64_t{r.n_bars} + results + sweep_reply;
    case SocketOpcode::sweep_loaded: return results + sweep_reply;
    case SocketOpcode::echo: return kLengthPrefixBytes + sizeof(double) * std::uint64_t{r.n_bars};
    case SocketOpcode::load: return kLengthPrefixBytes + kLoadReplyBodyBytes;
    case SocketOpcode::echo_params: return kEchoParamsReplyBytes;
    case SocketOpcode::use_preloaded: return kLengthPrefixBytes + kPreloadedReplyFixedBytes + kMaxSeriesNameBytes;
    case SocketOpcode::use_strategy: return kLengthPrefixBytes + kMaxUseStrategyReplyBodyBytes;
  }
  return 0;
}

template <class T>
void release_if_large(std::vector<T>& v) noexcept {
  if (v.capacity() * sizeof(T) > kRetainedBufferBytes) std::vector<T>().swap(v);
}

SocketFault fault_of(SocketError error, SocketOpcode opcode) noexcept {
  SocketFault fault;
  fault.error = error;
  fault.opcode = static_cast<std::uint8_t>(opcode);
  return fault;
}

}  // namespace

Rejection rejection_for(const SocketFault& fault) { return {fault.error, ipcfloor::describe(fault)}; }

std::optional<SocketFault> MemoryCap::resize(std::uint64_t& held, std::uint64_t bytes, std::uint32_t what) noexcept {
  if (bytes <= held) {
    // relaxed: a count compared against the cap; no memory is published through it, and RMWs on
    // one atomic stay exact without ordering, whichever server thread makes them.
    total_.fetch_sub(held - bytes, std::memory_order_relaxed);
    held = bytes;
    return std::nullopt;
  }
  const std::uint64_t more = bytes - held;
  // relaxed: as above; the RMW's own result decides, so no ordering is needed.
  const std::uint64_t before = total_.fetch_add(more, std::memory_order_relaxed);
  if (before + more > cap_) {
    total_.fetch_sub(more, std::memory_order_relaxed);  // relaxed: as above
    SocketFault fault;
    fault.error = SocketError::over_memory_cap;
    fault.field = what;
    fault.actual = bytes;
    fault.expected = cap_;
    fault.limit = before - held;
    return fault;
  }
  held = bytes;
  return std::nullopt;
}

std::optional<SocketFault> RequestHandler::admit_frame(Session& session, std::uint64_t frame_bytes) noexcept {
  return budget_.memory.resize(session.request_bytes, frame_bytes, kMemoryForFrame);
}

void RequestHandler::request_done(Session& session) noexcept {
  (void)budget_.memory.resize(session.request_bytes, 0, kMemoryForRequest);  // shrinking: never refused
}

void RequestHandler::forget(Session& session) noexcept {
  request_done(session);
  (void)budget_.memory.resize(session.series_bytes, 0, kMemoryForSeries);  // shrinking: never refused
}

std::expected<SocketOpcode, Rejection> RequestHandler::serve(std::span<const std::byte> body, Session& session,
                                                             SweepJob& job, std::vector<std::byte>& out) {
  auto request = decode_request(body);
  if (!request) return std::unexpected(rejection_for(request.error()));
  const RequestView& r = *request;
  const std::uint64_t frame_bytes = kLengthPrefixBytes + body.size();
  if (auto fault = budget_.memory.resize(session.request_bytes, frame_bytes + working_bytes(r), kMemoryForRequest))
    return std::unexpected(rejection_for(*fault));
  const Strategy& strategy = strategy_of(session);
  switch (r.opcode) {
    case SocketOpcode::sweep:
      if (auto refused = admit(strategy, r.params, r.n_combos, r.n_bars)) return std::unexpected(std::move(*refused));
      job.own_close.resize(r.n_bars);
      copy_close(r.close, job.own_close);
      start_sweep(r.opcode, strategy, job.own_close, r.params, r.n_combos, job);
      break;
    case SocketOpcode::echo: append_echo_reply(r.close, out); break;
    case SocketOpcode::load: return serve_load(r, session, out);
    case SocketOpcode::use_preloaded: return serve_preloaded(r, session, out);
    case SocketOpcode::use_strategy: return serve_use_strategy(r, session, out);
    case SocketOpcode::sweep_loaded:
      if (!session.loaded) return std::unexpected(rejection_for(fault_of(SocketError::no_series_loaded, r.opcode)));
      if (auto refused = admit(strategy, r.params, r.n_combos, session.active.size()))
        return std::unexpected(std::move(*refused));
      start_sweep(r.opcode, strategy, session.active, r.params, r.n_combos, job);
      break;
    case SocketOpcode::echo_params: append_echo_params_reply(r.params, out); break;
  }
  return r.opcode;
}

std::expected<SocketOpcode, Rejection> RequestHandler::serve_load(const RequestView& r, Session& session,
                                                                  std::vector<std::byte>& out) {
  const std::uint64_t bytes = std::uint64_t{r.n_bars} * sizeof(double);
  if (auto fault = budget_.memory.resize(session.series_bytes, bytes, kMemoryForSeries))
    return std::unexpected(rejection_for(*fault));
  session.series.resize(r.n_bars);
  copy_close(r.close, session.series);
  session.active = session.series;
  session.loaded = true;
  append_load_reply(fnv1a64(r.close), options_.fee, out);
  return r.opcode;
}

std::expected<SocketOpcode, Rejection> RequestHandler::serve_preloaded(const RequestView& r, Session& session,
                                                                       std::vector<std::byte>& out) {
  if (!options_.preloaded) return std::unexpected(rejection_for(fault_of(SocketError::no_preloaded_series, r.opcode)));
  std::vector<double>().swap(session.series);  // a series it loaded before is not needed any more
  (void)budget_.memory.resize(session.series_bytes, 0, kMemoryForSeries);  // shrinking: never refused
  session.active = options_.preloaded->close;
  session.loaded = true;
  append_preloaded_reply(options_.preloaded->checksum, options_.fee, session.active.size(), options_.preloaded->name,
                         out);
  return r.opcode;
}

std::expected<SocketOpcode, Rejection> RequestHandler::serve_use_strategy(const RequestView& r, Session& session,
                                                                          std::vector<std::byte>& out) {
  const auto name = strategy_name_of(r);
  const Strategy* strategy = name ? strategies_.find(*name) : nullptr;
  if (strategy == nullptr) {
    std::string known;
    for (const Strategy& s : strategies_.all()) known += fmt::format("{}{}", known.empty() ? "" : ", ", s.name());
    return std::unexpected(Rejection{SocketError::no_such_strategy,
                                     fmt::format("this server holds no strategy named '{}'; it holds: {}",
                                                 name.value_or("(no NUL-terminated name)"), known)});
  }
  session.strategy = strategy;
  std::array<std::string_view, 6> params{};
  for (std::uint32_t k = 0; k < strategy->param_count(); ++k) params[k] = strategy->param_name(k);
  append_use_strategy_reply(strategy->index(), std::span(params).first(strategy->param_count()), out);
  return r.opcode;
}

std::optional<Rejection> RequestHandler::admit(const Strategy& strategy, std::span<const std::byte> params,
                                               std::uint32_t n, std::size_t n_bars) const {
  for (std::uint32_t i = 0; i < n; ++i) {
    const Combo combo = combo_at(params, i);
    char why[IPCFLOOR_STRATEGY_WHY_BYTES];
    if (!strategy.accepts(combo, n_bars, why))
      return Rejection{SocketError::window_out_of_range, fmt::format("combo {}: {}", i, std::string_view(why))};
    const std::uint64_t cost = strategy.cost(combo, n_bars);
    if (options_.max_combo_cost == 0 || cost <= options_.max_combo_cost) continue;
    SocketFault fault;
    fault.error = SocketError::too_costly;
    fault.index = i;
    fault.actual = cost;
    fault.expected = options_.max_combo_cost;
    return rejection_for(fault);
  }
  return std::nullopt;
}

void RequestHandler::start_sweep(SocketOpcode opcode, const Strategy& strategy, std::span<const double> close,
                                 std::span<const std::byte> params, std::uint32_t n, SweepJob& job) {
  job.opcode = opcode;
  job.strategy = &strategy;
  job.close = close;
  job.params = params;
  job.results.resize(n);
  job.next = 0;
  job.running = true;
}

std::expected<bool, Rejection> RequestHandler::run_chunk(SweepJob& job) {
  const auto n = static_cast<std::uint32_t>(job.results.size());
  const unsigned threads = std::max(1u, options_.sweep_threads);
  const std::uint64_t bound = options_.sweep_chunk_cost * threads;  // both bounded: no overflow
  std::uint32_t end = job.next;
  std::uint64_t work = 0;
  // A strategy timed at load far slower than its cost says (kernel/strategy_timing.hpp) runs one
  // combo per sweep thread a chunk: its cost cannot bound a chunk's time.
  const std::uint32_t most = job.strategy->workers_only() ? threads : n;
  while (end < n && end - job.next < most) {
    const std::uint64_t cost = job.strategy->cost(combo_at(job.params, end), job.close.size());
    if (end > job.next && cost > bound - std::min(work, bound)) break;
    work = saturating_add(work, cost);
    ++end;
  }
  const auto workers = static_cast<unsigned>(std::min<std::uint32_t>(threads, end - job.next));
  if (auto refused = run_combos(job, job.next, end, workers)) return std::unexpected(std::move(*refused));
  job.next = end;
  return end == n;
}

std::optional<Rejection> RequestHandler::run_combos(SweepJob& job, std::uint32_t begin, std::uint32_t end,
                                                    unsigned workers) {
  const std::uint64_t bytes = job.strategy->workspace_bytes(job.close.size());
  for (unsigned k = 0; k < workers; ++k) (void)workspace(k, bytes);  // made before any worker starts
  struct Outcome {
    bool stopped = false;
    std::uint32_t bad = ~std::uint32_t{0};  // the first combo whose run failed
  };
  std::vector<Outcome> outcomes(workers);
  std::atomic<std::uint32_t> cursor{begin};
  const auto work = [&](unsigned k) noexcept {
    Outcome& outcome = outcomes[k];
    // relaxed: the cursor only hands out distinct combos; results are published by the join below.
    for (std::uint32_t i = cursor.fetch_add(1, std::memory_order_relaxed); i < end;
         i = cursor.fetch_add(1, std::memory_order_relaxed)) {
      // relaxed: a plain flag that publishes no memory; seeing it one combo late only delays
      // shutdown by that combo, and the join in SocketServer::stop orders everything after it.
      if (budget_.stopping.load(std::memory_order_relaxed)) {
        outcome.stopped = true;
        return;
      }
      // Admitted with the request (admit): nothing is checked again here.
      const StrategyRun run = job.strategy->run(job.close, combo_at(job.params, i), options_.fee, *workspaces_[k],
                                                job.results[i]);
      if (run != StrategyRun::ok && i < outcome.bad) outcome.bad = i;
    }
  };
  {
    std::vector<std::jthread> helpers;
    try {
      helpers.reserve(workers - 1);
      for (unsigned k = 1; k < workers; ++k) helpers.emplace_back(work, k);
    } catch (const std::exception&) {
      // Fewer helpers than asked: the combos they would have taken run on the others.
    }
    work(0);
  }  // the helpers join here
  Outcome first;
  for (const Outcome& outcome : outcomes) {
    first.stopped = first.stopped || outcome.stopped;
    if (outcome.bad < first.bad) first.bad = outcome.bad;
  }
  if (first.stopped) return Rejection{SocketError::internal, "the server is stopping"};
  if (first.bad != ~std::uint32_t{0})
    return Rejection{SocketError::internal,
                     fmt::format("combo {}: strategy {} failed on it (no finite pnl with trades >= 0)", first.bad,
                                 job.strategy->name())};
  return std::nullopt;
}

KernelWorkspace& RequestHandler::workspace(std::size_t k, std::uint64_t bytes) {
  if (workspaces_.size() <= k) workspaces_.resize(k + 1);
  auto& slot = workspaces_[k];
  if (!slot || slot->bytes() < bytes) {
    slot.reset();
    slot = std::make_unique<KernelWorkspace>(bytes);
  }
  return *slot;
}

void RequestHandler::finish(SweepJob& job, std::vector<std::byte>& out) {
  append_sweep_reply(job.results, out);
  abandon(job);
}

void RequestHandler::abandon(SweepJob& job) noexcept {
  job.running = false;
  job.close = {};
  job.params = {};
  release_if_large(job.results);
  release_if_large(job.own_close);
  for (auto& slot : workspaces_)
    if (slot && slot->bytes() > kRetainedWorkspaceBytes) slot.reset();
}

}  // namespace ipcfloor::socket_detail
