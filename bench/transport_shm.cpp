// The ipcfloor segment on the ladder: a 48-byte ECHO to an engine in another process, whose
// serving thread is pinned to the other core. The client thread is pinned here and times each
// round trip on its own.
//
// shm-call-{spin,backoff,block}: ShmClient::call, the single-flight exchange: the request and its
//   answer share one cache line (shm/exchange.hpp). What a blocking caller gets.
// shm-ring-{spin,backoff,block}: one frame in flight through the lane's request and response
//   rings (submit, then wait_response): what each frame of a pipelining client costs when the
//   pipeline is one deep, on two lines that move through the ring's slots.
// shm-backtest-spin, shm-stats-spin: ShmClient::call with one combo of the built-in strategy
//   (L = 6 on the engine's 1,000 bars: under the inline bound, so the serving thread computes it)
//   as a BACKTEST, and the same combo as a STATS, whose answer brings its statistics in the answer
//   record (two cache lines more): the round trip with the work, and what the statistics add.

#include "bench/engine_child.hpp"
#include "bench/rung_timing.hpp"
#include "bench/transports.hpp"
#include "clients/shm_client.hpp"
#include "common/affinity.hpp"

#include <cstring>

namespace ipcfloor {
namespace {

enum class ShmPath { call, ring };

// One combo's BACKTEST or STATS through the exchange line, each answer checked against the first
// (the same combo on the same bars gives the same bits every time).
Expected<std::vector<double>> time_combo_calls(const TransportContext& context, ShmClient& client, Opcode opcode) {
  const Combo combo = combo_from_length(6);
  double first_pnl = 0.0;
  std::int64_t first_trades = -1;
  double first_sharpe = 0.0;
  return time_round_trips(context, RoundTrip{
      .prepare = [](std::size_t) {},
      .exchange = [&](std::size_t) { return client.call(opcode, 0, payload_of(combo)); },
      .check = [&](std::size_t, CallStatus status) -> Expected<Answer> {
        if (status != CallStatus::ok) return fail(ErrorCode::io, "{}", client.describe(status));
        const ResponseSlot& answer = client.answer();
        if (answer.status != static_cast<std::uint16_t>(Status::ok))
          return fail(ErrorCode::protocol, "the engine answered {} to {}", to_string(static_cast<Status>(answer.status)),
                      to_string(opcode));
        const double sharpe = opcode == Opcode::stats ? client.answer_record().stats.sharpe : 0.0;
        if (first_trades < 0) {
          first_pnl = answer.pnl;
          first_trades = answer.trades;
          first_sharpe = sharpe;
        } else if (answer.pnl != first_pnl || answer.trades != first_trades ||
                   std::memcmp(&sharpe, &first_sharpe, sizeof sharpe) != 0) {
          return fail(ErrorCode::protocol, "{} of the same combo answered differently", to_string(opcode));
        }
        return Answer::answered;
      },
  });
}

Expected<std::vector<double>> run_shm(const TransportContext& context, const char* wait_mode, ShmPath path,
                                      Opcode opcode = Opcode::echo) {
  auto mode = parse_wait_mode(wait_mode);
  if (!mode) return std::unexpected(mode.error());
  const char* what = path == ShmPath::call ? "ladder-call-" : "ladder-ring-";
  // The engine as users run it, with workers, on the cores neither side of the ladder uses (an
  // ECHO never reaches them; a host with no such core runs it without: --workers 0).
  std::vector<std::string> args{"--wait", wait_mode, "--cpu", std::to_string(context.server_cpu), "--bars", "1000",
                                "--ring-capacity", std::to_string(context.ring_capacity)};
  std::string spare;
  for (const int cpu : allowed_cpus()) {
    if (cpu == context.client_cpu || cpu == context.server_cpu) continue;
    if (!spare.empty()) spare += ',';
    spare += std::to_string(cpu);
  }
  if (spare.empty()) {
    args.insert(args.end(), {"--workers", "0"});
  } else {
    args.insert(args.end(), {"--worker-cpus", spare});
  }
  for (const std::string& strategy : context.engine_strategies) args.insert(args.end(), {"--strategy", strategy});
  EngineChild engine(context.binary, unique_segment_name(std::string(what) + wait_mode), args);
  if (!engine.up())
    return fail(ErrorCode::io, "the engine ({} serve --wait {}) did not come up", context.binary, wait_mode);
  ShmClientOptions options;
  options.wait = *mode;
  auto client = ShmClient::connect(engine.name(), options);
  if (!client) return std::unexpected(client.error());

  if (opcode != Opcode::echo) return time_combo_calls(context, *client, opcode);
  RequestSlot request = ladder_echo_request();
  ResponseSlot response{};
  const auto prepare = [&](std::size_t i) { request.params = ladder_payload(i); };
  const auto check = [&](std::size_t i, CallStatus status) -> Expected<Answer> {
    if (status != CallStatus::ok) return fail(ErrorCode::io, "{}", client->describe(status));
    if (response.echo() != ladder_payload(i))
      return fail(ErrorCode::protocol, "ECHO {} came back as {}", i, response.echo().h);
    return Answer::answered;
  };
  if (path == ShmPath::call)
    return time_round_trips(context, RoundTrip{
        .prepare = prepare,
        .exchange = [&](std::size_t) { return client->call(request, response); },
        .check = check,
    });
  return time_round_trips(context, RoundTrip{
      .prepare = prepare,
      .exchange = [&](std::size_t) {
        std::uint64_t seq = 0;
        const CallStatus submitted = client->submit(request, seq);
        return submitted == CallStatus::ok ? client->wait_response(response) : submitted;
      },
      .check = check,
  });
}

}  // namespace

Expected<std::vector<double>> run_shm_call(const TransportContext& context, const char* wait_mode) {
  return run_shm(context, wait_mode, ShmPath::call);
}

Expected<std::vector<double>> run_shm_ring(const TransportContext& context, const char* wait_mode) {
  return run_shm(context, wait_mode, ShmPath::ring);
}

Expected<std::vector<double>> run_shm_combo(const TransportContext& context, bool stats) {
  return run_shm(context, "spin", ShmPath::call, stats ? Opcode::stats : Opcode::backtest);
}

}  // namespace ipcfloor
