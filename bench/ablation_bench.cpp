#include "bench/ablation_bench.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "bench/host_info.hpp"
#include "bench/latency.hpp"
#include "bench/socket_server_child.hpp"
#include "bench/suite_common.hpp"
#include "clients/shm_client.hpp"
#include "common/affinity.hpp"
#include "data/gbm.hpp"
#include "kernel/kernel.hpp"

namespace ipcfloor {
namespace {

double p50_of(std::vector<double>& ns) { return summarize("", "", ns).p50; }

struct Attribution {
  double kernel, transport, full;
};

nlohmann::json attribution_row(const char* transport, std::size_t bars, const Attribution& a) {
  const double plumbing = a.full - a.kernel - a.transport;
  return nlohmann::json{{"transport", transport},           {"bars", bars},
                        {"kernel_ns", a.kernel},           {"transport_ns", a.transport},
                        {"full_ns", a.full},               {"plumbing_ns", plumbing},
                        {"kernel_share", a.kernel / a.full}, {"transport_share", a.transport / a.full},
                        {"plumbing_share", plumbing / a.full}};
}

struct ShmMeasure {
  const std::string& binary;
  int server_cpu;
  std::size_t bars;
  std::size_t samples;
  Combo combo;
  BacktestResult expected;
  const TscClock& clock;
};

struct ShmTimes {
  double echo_p50 = 0, full_p50 = 0;
};

// One engine child with `engine_args`; ECHO then BACKTEST over the exchange line, each timed on
// its own; every BACKTEST is checked against the in-process kernel.
Expected<ShmTimes> measure_shm_call(const ShmMeasure& m, const std::vector<std::string>& engine_args) {
  std::vector<std::string> args{"--wait", "spin", "--cpu", std::to_string(m.server_cpu), "--bars", std::to_string(m.bars)};
  args.insert(args.end(), engine_args.begin(), engine_args.end());
  EngineChild engine(m.binary, unique_segment_name("ablation"), args);
  if (!engine.up()) return fail(ErrorCode::io, "the engine did not come up");
  ShmClientOptions client_options;
  client_options.wait = WaitMode::spin;
  auto client = ShmClient::connect(engine.name(), client_options);
  if (!client) return std::unexpected(client.error());
  std::vector<double> echo, full;
  RequestSlot request{};
  request.params = m.combo;
  ResponseSlot response{};
  for (const Opcode opcode : {Opcode::echo, Opcode::backtest}) {
    request.opcode = static_cast<std::uint16_t>(opcode);
    auto& into = opcode == Opcode::echo ? echo : full;
    for (std::size_t i = 0; i < m.samples + m.samples / 10; ++i) {
      const std::uint64_t t0 = TscClock::now();
      const CallStatus status = client->call(request, response);
      const std::uint64_t t1 = TscClock::now();
      if (status != CallStatus::ok) return fail(ErrorCode::io, "{}", client->describe(status));
      if (opcode == Opcode::backtest && (response.pnl != m.expected.pnl || response.trades != m.expected.trades))
        return fail(ErrorCode::bad_data, "the exchange line's BACKTEST differs from the in-process kernel");
      if (i >= m.samples / 10) into.push_back(m.clock.to_ns(t1 - t0));
    }
  }
  return ShmTimes{p50_of(echo), p50_of(full)};
}

}  // namespace

Expected<nlohmann::json> run_ablation(const AblationOptions& options) {
  const auto [client_cpu, server_cpu, binary] = place_suite(options.client_cpu, options.server_cpu, options.binary);
  const TscClock clock = TscClock::calibrate();
  const Combo combo = combo_from_length(options.length);
  if (auto pinned = pin_current_thread(client_cpu); !pinned) return std::unexpected(pinned.error());

  nlohmann::json rows = nlohmann::json::array();
  for (const std::size_t bars : {options.short_bars, GbmParams{}.bars}) {
    const std::size_t samples = bars == options.short_bars ? options.short_samples : options.default_samples;
    GbmParams params;
    params.bars = bars;
    auto close = generate_gbm(params);
    if (!close) return std::unexpected(close.error());

    // The kernel alone, in this process, on the core the servers will compute on: the two
    // vCPUs of a VM need not run at the same speed, and the attribution must not charge that
    // difference to plumbing.
    if (auto pinned = pin_current_thread(server_cpu); !pinned) return std::unexpected(pinned.error());
    std::vector<double> kernel;
    KernelWorkspace workspace(builtin().workspace_bytes(bars));
    BacktestResult expected;
    for (std::size_t i = 0; i < samples + samples / 10; ++i) {
      const std::uint64_t t0 = TscClock::now();
      (void)run_backtest(*close, combo, kDefaultFee, workspace, expected);
      const std::uint64_t t1 = TscClock::now();
      if (i >= samples / 10) kernel.push_back(clock.to_ns(t1 - t0));
    }
    if (auto pinned = pin_current_thread(client_cpu); !pinned) return std::unexpected(pinned.error());
    const double kernel_p50 = p50_of(kernel);

    // The exchange line: an engine preloaded with the same series. The serving thread computes
    // each combo itself first (what the transport adds to one backtest), then hands each to a
    // worker (--inline-cost 0): the difference is what the hand-over and back costs, the figure
    // behind the default --inline-cost.
    const ShmMeasure measure{binary, server_cpu, bars, samples, combo, expected, clock};
    for (const auto& [label, engine_args] :
         {std::pair<const char*, std::vector<std::string>>{"shm-call-spin", {"--workers", "0"}},
          {"shm-call-worker", {"--workers", "1", "--inline-cost", "0"}}}) {
      auto timed = measure_shm_call(measure, engine_args);
      if (!timed) return std::unexpected(timed.error());
      rows.push_back(attribution_row(label, bars, {kernel_p50, timed->echo_p50, timed->full_p50}));
    }

    // The Unix socket: a socket-only engine, series loaded once on the connection.
    {
      auto server = start_socket_server(binary, server_cpu, false);
      if (!server) return std::unexpected(server.error());
      auto client = connect_to(*server);
      if (!client) return std::unexpected(client.error());
      if (auto loaded = client->load(*close); !loaded) return std::unexpected(loaded.error());
      std::vector<double> echo, full;
      for (std::size_t i = 0; i < samples + samples / 10; ++i) {
        const std::uint64_t t0 = TscClock::now();
        auto echoed = client->echo_params(combo);
        const std::uint64_t t1 = TscClock::now();
        if (!echoed) return std::unexpected(echoed.error());
        if (i >= samples / 10) echo.push_back(clock.to_ns(t1 - t0));
      }
      for (std::size_t i = 0; i < samples + samples / 10; ++i) {
        const std::uint64_t t0 = TscClock::now();
        auto result = client->sweep_loaded(std::span<const Combo>(&combo, 1));
        const std::uint64_t t1 = TscClock::now();
        if (!result) return std::unexpected(result.error());
        if (!(result->front() == expected))
          return fail(ErrorCode::bad_data, "the socket's sweep_loaded differs from the in-process kernel");
        if (i >= samples / 10) full.push_back(clock.to_ns(t1 - t0));
      }
      rows.push_back(attribution_row("uds", bars, {kernel_p50, p50_of(echo), p50_of(full)}));
    }
  }
  return nlohmann::json{
      {"suite", "ablation"},
      {"host", collect_host_info()},
      {"config", {{"combo_length", options.length}, {"short_bars", options.short_bars},
                  {"short_samples", options.short_samples}, {"default_samples", options.default_samples},
                  {"client_cpu", client_cpu}, {"server_cpu", server_cpu},
                  {"method", "p50 of per-sample timings; plumbing = full - kernel - transport (can dip below 0 "
                             "within noise)"}}},
      {"results", rows},
  };
}

void print_ablation(const nlohmann::json& report) {
  fmt::print("ablation: one BACKTEST (L={}) split into kernel, transport and plumbing (ns at p50)\n",
             report["config"]["combo_length"].get<std::int64_t>());
  fmt::print("  {:<15} {:>8} {:>12} {:>12} {:>12} {:>12}   {}\n", "transport", "bars", "full", "kernel", "transport",
             "plumbing", "shares k/t/p");
  for (const auto& r : report["results"])
    fmt::print("  {:<15} {:>8} {:>12.0f} {:>12.0f} {:>12.0f} {:>12.0f}   {:.0f}% / {:.0f}% / {:.0f}%\n",
               r["transport"].get<std::string>(), r["bars"].get<std::size_t>(), r["full_ns"].get<double>(),
               r["kernel_ns"].get<double>(), r["transport_ns"].get<double>(), r["plumbing_ns"].get<double>(),
               100 * r["kernel_share"].get<double>(), 100 * r["transport_share"].get<double>(),
               100 * r["plumbing_share"].get<double>());
}

}  // namespace ipcfloor
