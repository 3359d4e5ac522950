#include "app/status_command.hpp"

#include <cstring>

#include <fmt/format.h>

#include "app/cli_common.hpp"

#include "shm/liveness.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

std::string_view lane_state_name(std::uint32_t state) noexcept {
  switch (static_cast<LaneState>(state)) {
    case LaneState::free: return "free";
    case LaneState::claimed: return "claimed";
    case LaneState::draining: return "draining";
    case LaneState::quarantined: return "quarantined";
  }
  return "unknown";
}

nlohmann::json describe_segment(const Attachment& segment) {
  const DataHeader& h = segment.header();
  // relaxed (all loads below): a snapshot for people; each counter is read on its own.
  const std::uint64_t beat = h.heartbeat_ns.load(std::memory_order_relaxed);
  const std::uint64_t now = monotonic_ns();
  nlohmann::json lanes = nlohmann::json::array();
  for (std::uint32_t i = 0; i < segment.lane_count(); ++i) {  // checked against the object's size
    const LaneStatus& lane = segment.lane_status(i);
    lanes.push_back({
        {"lane", i},
        {"state", lane_state_name(lane.state.load(std::memory_order_relaxed))},
        {"owner_pid", lane.owner_pid},
        {"owner_uid", lane.owner_uid},
        {"claims", lane.generation.load(std::memory_order_relaxed)},
        {"requests", lane.requests.load(std::memory_order_relaxed)},
        {"bad_frames", lane.bad_frames.load(std::memory_order_relaxed)},
    });
  }
  const char* name_end = static_cast<const char*>(std::memchr(h.series_name, '\0', sizeof h.series_name));
  return nlohmann::json{
      {"name", segment.name()},
      {"socket", segment.socket_path()},
      {"layout_version", h.layout_version},
      {"data_bytes", h.data_bytes},
      {"backing", backing_name(static_cast<Backing>(h.backing))},
      {"locked", h.locked != 0},
      {"wait_mode", to_string(static_cast<WaitMode>(h.wait_mode))},
      {"lane_count", segment.lane_count()},
      {"ring_capacity", segment.ring_capacity()},
      {"bulk_bytes_per_lane", h.lane_bulk_bytes},
      {"max_frame_cost", h.max_frame_cost},
      {"engine", {{"pid", segment.engine_pid()}, {"uid", h.engine_uid}, {"alive", !segment.engine_hung_up()},
                  {"heartbeat_age_ms", now > beat ? static_cast<double>(now - beat) / 1e6 : 0.0},
                  {"heartbeat_interval_ms", static_cast<double>(h.heartbeat_interval_ns) / 1e6}}},
      {"series", {{"source", std::string(h.series_name, name_end ? name_end : h.series_name + sizeof h.series_name)},
                  {"bars", h.n_bars}, {"first", h.series_first}, {"last", h.series_last},
                  {"checksum", fmt::format("{:016x}", h.series_checksum)}}},
      {"fee", h.fee},
      {"counters", {{"requests", h.requests.load(std::memory_order_relaxed)},
                    {"bad_frames", h.bad_frames.load(std::memory_order_relaxed)},
                    {"lanes_released", h.lanes_released.load(std::memory_order_relaxed)},
                    {"lanes_reclaimed", h.lanes_reclaimed.load(std::memory_order_relaxed)},
                    {"lanes_corrupt", h.lanes_corrupt.load(std::memory_order_relaxed)}}},
      {"lanes", lanes},
  };
}

int run_status(const std::string& name, bool json, const std::string& socket_dir) {
  AttachOptions options;
  options.socket_dir = socket_dir;
  options.role = HandoffRole::observer;
  auto segment = Attachment::attach(name, options);
  if (!segment) return report_error("status", segment.error());
  const nlohmann::json s = describe_segment(*segment);
  if (json) {
    fmt::print("{}\n", s.dump(2));
    return 0;
  }
  const auto& e = s["engine"];
  fmt::print("engine    {} on {} (layout v{}, {} bytes of data, {}, {})\n", s["name"].get<std::string>(),
             s["socket"].get<std::string>(), s["layout_version"].get<unsigned>(), s["data_bytes"].get<std::uint64_t>(),
             s["backing"].get<std::string>(), s["locked"].get<bool>() ? "locked" : "not locked");
  fmt::print("          pid {} {}, heartbeat {:.1f} ms ago (every {:.0f} ms), {} mode\n", e["pid"].get<int>(),
             e["alive"].get<bool>() ? "alive" : "DEAD", e["heartbeat_age_ms"].get<double>(),
             e["heartbeat_interval_ms"].get<double>(), s["wait_mode"].get<std::string>());
  const auto& series = s["series"];
  fmt::print("series    {} ({} bars, first {}, last {}, checksum {}), fee {}\n", series["source"].get<std::string>(),
             series["bars"].get<std::uint64_t>(), series["first"].get<double>(), series["last"].get<double>(),
             series["checksum"].get<std::string>(), s["fee"].get<double>());
  fmt::print("lanes     {} x {} slots per ring, {} bulk bytes each\n", s["lane_count"].get<unsigned>(),
             s["ring_capacity"].get<unsigned>(), s["bulk_bytes_per_lane"].get<std::uint64_t>());
  const auto& c = s["counters"];
  fmt::print("counters  {} requests, {} rejected, {} lanes released, {} reclaimed, {} corrupt\n",
             c["requests"].get<std::uint64_t>(), c["bad_frames"].get<std::uint64_t>(),
             c["lanes_released"].get<std::uint64_t>(), c["lanes_reclaimed"].get<std::uint64_t>(),
             c["lanes_corrupt"].get<std::uint64_t>());
  fmt::print("{:>5}  {:<10}  {:>8}  {:>7}  {:>12}  {:>10}\n", "lane", "state", "owner", "claims", "requests", "rejected");
  for (const auto& lane : s["lanes"]) {
    const int pid = lane["owner_pid"].get<int>();
    fmt::print("{:>5}  {:<10}  {:>8}  {:>7}  {:>12}  {:>10}\n", lane["lane"].get<unsigned>(),
               lane["state"].get<std::string>(), pid == 0 ? std::string("-") : std::to_string(pid),
               lane["claims"].get<std::uint64_t>(), lane["requests"].get<std::uint64_t>(),
               lane["bad_frames"].get<std::uint64_t>());
  }
  return 0;
}

CLI::App* add_status_subcommand(CLI::App& app, StatusOptions& options) {
  auto* status = app.add_subcommand("status", "Show what a live segment holds: engine, series, lanes, counters");
  status->add_option("--name", options.name, "segment name")->capture_default_str();
  status->add_option("--socket-dir", options.socket_dir, "the engine's socket directory")->capture_default_str();
  status->add_flag("--json", options.json, "print JSON");
  return status;
}

}  // namespace ipcfloor
