#include "bench/echo_bench.hpp"

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

namespace ipcfloor {
namespace {

constexpr std::size_t kSizes[] = {1, 8, 64, 512, 4'096, 32'768, 150'000};

// Fewer samples for big payloads: each 1.2 MB round trip costs about a millisecond.
std::size_t samples_for(std::size_t floats, std::size_t max_samples) {
  return std::clamp<std::size_t>(40'000'000 / (floats * 8 + 1'000), 50, max_samples);
}

nlohmann::json fit_json(const nlohmann::json& points) {
  std::vector<double> x, y;
  for (const auto& p : points) {
    x.push_back(p["bytes"].get<double>());
    y.push_back(p["p50"].get<double>());
  }
  const FloorBandwidthFit fit = fit_floor_bandwidth(x, y);
  return nlohmann::json{{"floor_ns", fit.floor_ns}, {"bytes_per_ns", fit.bytes_per_ns}, {"gb_per_s", fit.bytes_per_ns}};
}

}  // namespace

FloorBandwidthFit fit_floor_bandwidth(const std::vector<double>& bytes, const std::vector<double>& ns) {
  // y = a + s*x with s = 1/b, least squares on relative error (weights 1/y^2): the sizes span
  // five decades, and plain least squares lets the megabyte points alone set the line, which
  // can put the floor below zero. Relative weights let the small payloads pin the floor and the
  // large ones the bandwidth, as the study's model means them.
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    const double w = ns[i] > 0 ? 1.0 / (ns[i] * ns[i]) : 0.0;
    sw += w;
    sx += w * bytes[i];
    sy += w * ns[i];
    sxx += w * bytes[i] * bytes[i];
    sxy += w * bytes[i] * ns[i];
  }
  const double denominator = sw * sxx - sx * sx;
  const double slope = denominator != 0 ? (sw * sxy - sx * sy) / denominator : 0.0;
  const double intercept = sw != 0 ? (sy - slope * sx) / sw : 0.0;
  // bytes per ns is numerically GB/s.
  return FloorBandwidthFit{intercept, slope > 0 ? 1.0 / slope : 0.0};
}

Expected<nlohmann::json> run_echo(const EchoOptions& options) {
  const auto [client_cpu, server_cpu, binary] = place_suite(options.client_cpu, options.server_cpu, options.binary);
  const TscClock clock = TscClock::calibrate();
  auto series = generate_gbm(GbmParams{});
  if (!series) return std::unexpected(series.error());
  if (auto pinned = pin_current_thread(client_cpu); !pinned) return std::unexpected(pinned.error());

  // One curve: every size, each round trip timed on its own after a tenth as warm-up, and the
  // last answer compared with what was sent. `echo(payload, out)` is one round trip.
  std::vector<double> back(series->size());
  const auto measure = [&](const std::string& transport, auto&& echo) -> Expected<nlohmann::json> {
    nlohmann::json points = nlohmann::json::array();
    for (const std::size_t floats : kSizes) {
      const std::span<const double> payload(series->data(), floats);
      const std::span<double> out(back.data(), floats);
      std::fill(out.begin(), out.end(), 0.0);
      const std::size_t samples = samples_for(floats, options.max_samples);
      std::vector<double> ns;
      for (std::size_t i = 0; i < samples + samples / 10 + 1; ++i) {
        const std::uint64_t t0 = TscClock::now();
        Expected<void> echoed = echo(payload, out);
        const std::uint64_t t1 = TscClock::now();
        if (!echoed) return std::unexpected(echoed.error());
        if (i > samples / 10) ns.push_back(clock.to_ns(t1 - t0));
      }
      if (!std::equal(payload.begin(), payload.end(), out.begin()))
        return fail(ErrorCode::bad_data, "{}: the echo of {} floats came back changed", transport, floats);
      auto point = to_json(summarize(transport, "rtt", ns));
      point["floats"] = floats;
      point["bytes"] = floats * sizeof(double);
      points.push_back(point);
    }
    return nlohmann::json{{"transport", transport}, {"points", points}, {"fit", fit_json(points)}};
  };

  nlohmann::json all_series = nlohmann::json::array();
  {
    auto server = start_socket_server(binary, server_cpu, false);
    if (!server) return std::unexpected(server.error());
    auto client = connect_to(*server);
    if (!client) return std::unexpected(client.error());
    auto curve = measure("uds (opcode 1 echo)", [&](std::span<const double> payload, std::span<double> out) {
      return client->echo_into(payload, out);
    });
    if (!curve) return std::unexpected(curve.error());
    all_series.push_back(std::move(*curve));
  }
  {
    // The segment: the client copies the payload into its lane's bulk region, one 64-byte frame
    // asks the engine to copy it across, the client copies the answer out. Both copies are in
    // the timed call, as the socket's kernel copies are in its.
    EngineChild engine(binary, unique_segment_name("echo"), {"--wait", "spin", "--cpu", std::to_string(server_cpu), "--workers", "0"});
    if (!engine.up()) return fail(ErrorCode::io, "echo: the engine did not come up");
    ShmClientOptions client_options;
    client_options.wait = WaitMode::spin;
    auto client = ShmClient::connect(engine.name(), client_options);
    if (!client) return std::unexpected(client.error());
    ResponseSlot response{};
    auto curve = measure("shm-call-spin (ECHO_BULK via the lane's bulk region)",
                         [&](std::span<const double> payload, std::span<double> out) -> Expected<void> {
                           const CallStatus status =
                               client->echo_bulk(std::as_bytes(payload), std::as_writable_bytes(out), response);
                           if (status != CallStatus::ok) return fail(ErrorCode::io, "echo: {}", client->describe(status));
                           if (response.status != static_cast<std::uint16_t>(Status::ok))
                             return fail(ErrorCode::protocol, "echo: the engine answered ECHO_BULK of {} bytes with {}",
                                         payload.size_bytes(), to_string(static_cast<Status>(response.status)));
                           return {};
                         });
    if (!curve) return std::unexpected(curve.error());
    all_series.push_back(std::move(*curve));
  }
  return nlohmann::json{
      {"suite", "echo"},
      {"host", collect_host_info()},
      {"config", {{"client_cpu", client_cpu}, {"server_cpu", server_cpu}, {"model", "RTT = floor + bytes / bandwidth"},
                  {"bytes", "payload bytes each way"}}},
      {"series", all_series},
  };
}

void print_echo(const nlohmann::json& report) {
  fmt::print("echo: RTT against payload size (us at p50; bytes each way)\n");
  for (const auto& s : report["series"]) {
    fmt::print("  {}\n", s["transport"].get<std::string>());
    for (const auto& p : s["points"])
      fmt::print("    {:>9} B  p50 {:>10.1f}  p99 {:>10.1f}  ({} samples)\n", p["bytes"].get<std::size_t>(),
                 p["p50"].get<double>() / 1e3, p["p99"].get<double>() / 1e3, p["samples"].get<std::size_t>());
    const auto& f = s["fit"];
    fmt::print("    fit: floor {:.1f} us + bytes / {:.2f} GB/s\n", f["floor_ns"].get<double>() / 1e3,
               f["gb_per_s"].get<double>());
  }
}

}  // namespace ipcfloor
