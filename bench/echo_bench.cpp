#include "bench/echo_bench.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "bench/host_info.hpp"
#include "bench/latency.hpp"
#include "bench/socket_server_child.hpp"
#include "engine/affinity.hpp"
#include "engine/gbm.hpp"
#include "bench/engine_child.hpp"

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
  // y = a + s*x with s = 1/b: ordinary least squares on the points as measured.
  const double n = static_cast<double>(bytes.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    sx += bytes[i];
    sy += ns[i];
    sxx += bytes[i] * bytes[i];
    sxy += bytes[i] * ns[i];
  }
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
  const double intercept = (sy - slope * sx) / n;
  return FloorBandwidthFit{intercept, slope > 0 ? 1.0 / slope : 0.0};
}

Expected<nlohmann::json> run_echo(const EchoOptions& options) {
  const auto cpus = allowed_cpus();
  const int client_cpu = options.client_cpu >= 0 ? options.client_cpu : cpus.front();
  const int server_cpu = options.server_cpu >= 0 ? options.server_cpu : cpus.back();
  const std::string binary = options.binary.empty() ? self_executable() : options.binary;
  const TscClock clock = TscClock::calibrate();
  auto series = generate_gbm(GbmParams{});
  if (!series) return std::unexpected(series.error());
  if (auto pinned = pin_current_thread(client_cpu); !pinned) return std::unexpected(pinned.error());

  nlohmann::json all_series = nlohmann::json::array();
  {
    auto server = start_socket_server(binary, server_cpu, false);
    if (!server) return std::unexpected(server.error());
    auto client = connect_to(*server);
    if (!client) return std::unexpected(client.error());
    nlohmann::json points = nlohmann::json::array();
    std::vector<double> back(series->size());
    for (const std::size_t floats : kSizes) {
      const std::span<const double> payload(series->data(), floats);
      const std::span<double> out(back.data(), floats);
      const std::size_t samples = samples_for(floats, options.max_samples);
      std::vector<double> ns;
      for (std::size_t i = 0; i < samples + samples / 10 + 1; ++i) {
        const std::uint64_t t0 = TscClock::now();
        auto echoed = client->echo_into(payload, out);
        const std::uint64_t t1 = TscClock::now();
        if (!echoed) return std::unexpected(echoed.error());
        if (i > samples / 10) ns.push_back(clock.to_ns(t1 - t0));
      }
      if (!std::equal(payload.begin(), payload.end(), out.begin()))
        return fail(ErrorCode::bad_data, "the socket echo of {} floats came back changed", floats);
      auto point = to_json(summarize("uds", "rtt", ns));
      point["floats"] = floats;
      point["bytes"] = floats * sizeof(double);
      points.push_back(point);
    }
    all_series.push_back({{"transport", "uds (opcode 1 echo)"}, {"points", points}, {"fit", fit_json(points)}});
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
