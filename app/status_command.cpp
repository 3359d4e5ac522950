#include "app/status_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/cli_common.hpp"
#include "shm/liveness.hpp"
#include "shm/service_histogram.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {
namespace {

// Whether the process that took `lane` still runs. Its pid comes from SO_PEERCRED at the
// hand-off, so it goes stale when that process forked and exited and a child holds the lane
// now; a pid recycled since (a process started after the claim) is not the owner either.
bool owner_alive(const LaneStatus& lane) {
  const pid_t pid = lane.owner_pid;
  if (pid <= 0 || !process_alive(pid, 0)) return false;
  const std::uint64_t ticks = process_start_ticks(pid);
  const long hz = ::sysconf(_SC_CLK_TCK);
  timespec boot{};
  if (ticks == 0 || hz <= 0 || ::clock_gettime(CLOCK_BOOTTIME, &boot) != 0) return true;  // cannot tell: as kill() says
  const std::uint64_t since_boot_ns = static_cast<std::uint64_t>(boot.tv_sec) * 1'000'000'000u + boot.tv_nsec;
  // relaxed: a timestamp for people, read on its own.
  const std::uint64_t claim_age_ns = unix_ns() - std::min(unix_ns(), lane.claimed_unix_ns.load(std::memory_order_relaxed));
  const std::uint64_t claimed_ns = since_boot_ns - std::min(since_boot_ns, claim_age_ns);
  const std::uint64_t started_ns = ticks * (1'000'000'000u / static_cast<std::uint64_t>(hz));
  return started_ns <= claimed_ns + 1'000'000'000u;  // a second of slack for clock steps and tick rounding
}

// The owner column: the pid, in parentheses once that process is gone (a fork's child holds the
// lane), "-" for none.
std::string owner_text(const nlohmann::json& lane) {
  const int pid = lane["owner_pid"].get<int>();
  if (pid == 0) return "-";
  return lane["owner_alive"].get<bool>() ? std::to_string(pid) : fmt::format("({})", pid);
}


std::string_view lane_state_name(std::uint32_t state) noexcept {
  switch (static_cast<LaneState>(state)) {
    case LaneState::free: return "free";
    case LaneState::claimed: return "claimed";
    case LaneState::draining: return "draining";
    case LaneState::quarantined: return "quarantined";
  }
  return "unknown";
}

using Histogram = std::vector<std::uint64_t>;

Histogram read_histogram(const LaneStatus& lane) {
  Histogram counts(kServiceBuckets);
  // relaxed: a snapshot; each bucket is read on its own while the engine adds to it.
  for (std::size_t b = 0; b < kServiceBuckets; ++b) counts[b] = lane.service_ns[b].load(std::memory_order_relaxed);
  return counts;
}

std::uint64_t total_of(const Histogram& counts) {
  std::uint64_t total = 0;
  for (const std::uint64_t c : counts) total += c;
  return total;
}

// The smallest bucket bound at or below which `q` of the samples lie: "at most this many ns".
std::uint64_t quantile_bound(const Histogram& counts, double q) {
  const std::uint64_t total = total_of(counts);
  if (total == 0) return 0;
  const auto rank = static_cast<std::uint64_t>(q * static_cast<double>(total) + 0.999999);
  std::uint64_t seen = 0;
  for (std::size_t b = 0; b < counts.size(); ++b) {
    seen += counts[b];
    if (seen >= rank) return service_bucket_upper_ns(b);
  }
  return service_bucket_upper_ns(counts.size() - 1);
}

nlohmann::json histogram_json(const Histogram& counts, std::uint64_t sum_ns) {
  nlohmann::json buckets = nlohmann::json::array();
  for (std::size_t b = 0; b < counts.size(); ++b)
    if (counts[b] != 0)
      buckets.push_back({{"from_ns", service_bucket_lower_ns(b)}, {"to_ns", service_bucket_upper_ns(b)}, {"count", counts[b]}});
  return nlohmann::json{{"count", total_of(counts)},
                        {"sum_ns", sum_ns},
                        {"p50_at_most_ns", quantile_bound(counts, 0.50)},
                        {"p99_at_most_ns", quantile_bound(counts, 0.99)},
                        {"p999_at_most_ns", quantile_bound(counts, 0.999)},
                        {"buckets", buckets}};
}

std::string duration_text(double seconds) {
  if (seconds < 120) return fmt::format("{:.0f} s", seconds);
  if (seconds < 7200) return fmt::format("{:.0f} min", seconds / 60);
  return fmt::format("{:.1f} h", seconds / 3600);
}

std::string ns_text(std::uint64_t ns) {
  if (ns < 10'000) return fmt::format("{} ns", ns);
  if (ns < 10'000'000) return fmt::format("{} us", ns / 1000);
  return fmt::format("{} ms", ns / 1'000'000);
}

// One observation of the engine, for rates between two of them.
struct Snapshot {
  std::chrono::steady_clock::time_point at;
  std::uint64_t bars = 0, signals_sent = 0, signals_dropped = 0;  // live mode's counters
  std::vector<std::uint64_t> requests, bad_frames;
  std::vector<Histogram> histograms;
};

Snapshot take_snapshot(const Attachment& segment) {
  Snapshot s;
  s.at = std::chrono::steady_clock::now();
  const DataHeader& h = segment.header();
  // relaxed: counters for people.
  s.bars = h.bars_published.load(std::memory_order_relaxed);
  s.signals_sent = h.signals_sent.load(std::memory_order_relaxed);
  s.signals_dropped = h.signals_dropped.load(std::memory_order_relaxed);
  for (std::uint32_t i = 0; i < segment.lane_count(); ++i) {
    const LaneStatus& lane = segment.lane_status(i);
    // relaxed: counters for people.
    s.requests.push_back(lane.requests.load(std::memory_order_relaxed));
    s.bad_frames.push_back(lane.bad_frames.load(std::memory_order_relaxed));
    s.histograms.push_back(read_histogram(lane));
  }
  return s;
}

void print_watch_screen(const Attachment& segment, const Snapshot& before, const Snapshot& after, bool clear) {
  const DataHeader& h = segment.header();
  const nlohmann::json status = describe_segment(segment);
  const double seconds = std::chrono::duration<double>(after.at - before.at).count();
  std::string screen;
  if (clear) screen += "\x1b[H\x1b[2J";
  const auto& engine = status["engine"];
  screen += fmt::format("ipcfloor {}  pid {}  up {}  heartbeat {:.1f} ms ago  {} mode  {} lanes  {}\n",
                        segment.name(), engine["pid"].get<int>(), duration_text(engine["uptime_s"].get<double>()),
                        engine["heartbeat_age_ms"].get<double>(), status["wait_mode"].get<std::string>(),
                        segment.lane_count(), engine["alive"].get<bool>() ? "serving" : "GONE");
  screen += fmt::format("series {} ({} bars, checksum {})  requests {}  rejected {}  lanes released {} reclaimed {} "
                        "corrupt {}\n",
                        status["series"]["source"].get<std::string>(), h.n_bars,
                        status["series"]["checksum"].get<std::string>(), status["counters"]["requests"].get<std::uint64_t>(),
                        status["counters"]["bad_frames"].get<std::uint64_t>(),
                        status["counters"]["lanes_released"].get<std::uint64_t>(),
                        status["counters"]["lanes_reclaimed"].get<std::uint64_t>(),
                        status["counters"]["lanes_corrupt"].get<std::uint64_t>());
  if (h.live != 0) {
    const auto per_second = [seconds](std::uint64_t from, std::uint64_t to) {
      return static_cast<double>(to - from) / seconds;
    };
    screen += fmt::format("live {} of {} bars ({:.0f} bars/s)  signals {:.0f}/s ({} sent)  dropped {} ({:.0f}/s)\n",
                          after.bars, h.capacity_bars, per_second(before.bars, after.bars),
                          per_second(before.signals_sent, after.signals_sent), after.signals_sent,
                          after.signals_dropped, per_second(before.signals_dropped, after.signals_dropped));
  }
  screen += "\n";
  screen += fmt::format("{:>4}  {:<11} {:>8} {:>12} {:>10} {:>5} {:>10} {:>10} {:>10}\n", "lane", "state", "owner",
                        "req/s", "err/s", "fill", "p50", "p99", "max");
  for (std::uint32_t i = 0; i < segment.lane_count(); ++i) {
    const auto& lane = status["lanes"][i];
    Histogram delta(kServiceBuckets);
    for (std::size_t b = 0; b < kServiceBuckets; ++b) delta[b] = after.histograms[i][b] - before.histograms[i][b];
    std::uint64_t max_bound = 0;
    for (std::size_t b = 0; b < kServiceBuckets; ++b)
      if (delta[b] != 0) max_bound = service_bucket_upper_ns(b);
    const bool any = total_of(delta) != 0;
    screen += fmt::format("{:>4}  {:<11} {:>8} {:>12.0f} {:>10.0f} {:>5} {:>10} {:>10} {:>10}\n", i,
                          lane["state"].get<std::string>(), owner_text(lane),
                          static_cast<double>(after.requests[i] - before.requests[i]) / seconds,
                          static_cast<double>(after.bad_frames[i] - before.bad_frames[i]) / seconds,
                          lane["ring_fill"].get<std::uint64_t>(),
                          any ? "<=" + ns_text(quantile_bound(delta, 0.5)) : "-",
                          any ? "<=" + ns_text(quantile_bound(delta, 0.99)) : "-", any ? "<=" + ns_text(max_bound) : "-");
  }
  screen += fmt::format("\nservice time over the last {:.1f} s, per request, as bucket bounds (4 per power of two)\n",
                        seconds);
  fmt::print("{}", screen);
  std::fflush(stdout);
}

}  // namespace

// The names of the columns IPCFLOOR_COLUMN_* bits `columns` name, close first.
nlohmann::json column_names_json(std::uint32_t columns) {
  nlohmann::json names = nlohmann::json::array();
  for (std::size_t k = 0; k < kColumnCount; ++k)
    if ((columns >> k) & 1U) names.push_back(kColumnNames[k]);
  return names;
}

// Every series the engine holds, by index (a BACKTEST's flags name one), with its columns.
nlohmann::json series_table_json(const DataHeader& h) {
  nlohmann::json table = nlohmann::json::array();
  for (std::uint32_t i = 0; i < h.series_count && i < kMaxSeries; ++i) {
    const SeriesEntry& entry = h.series_table[i];
    const char* end = static_cast<const char*>(std::memchr(entry.name, '\0', sizeof entry.name));
    table.push_back({{"index", i},
                     {"name", std::string(entry.name, end ? end : entry.name + sizeof entry.name)},
                     {"bars", entry.bars},
                     {"first", entry.first},
                     {"last", entry.last},
                     {"checksum", fmt::format("{:016x}", entry.checksum)},
                     {"columns", column_names_json(entry.columns)}});
  }
  return table;
}

// Every strategy the engine serves, by index (a request's flags' high byte names one).
nlohmann::json strategy_table_json(const Attachment& segment) {
  nlohmann::json table = nlohmann::json::array();
  for (std::uint32_t i = 0; i < segment.strategy_count(); ++i) {  // names checked at attach
    const StrategyEntry& entry = segment.strategy_at(i);
    nlohmann::json params = nlohmann::json::array();
    for (std::uint32_t k = 0; k < entry.param_count; ++k) params.push_back(std::string(entry.param_names[k]));
    nlohmann::json example = nlohmann::json::array();
    for (std::uint32_t k = 0; k < entry.param_count; ++k) example.push_back(entry.example[k]);
    const DataHeader& h = segment.header();
    // relaxed: written once at start, for people.
    const bool at_workers = i < 32 && ((h.strategies_at_workers.load(std::memory_order_relaxed) >> i) & 1U) != 0;
    nlohmann::json item{{"index", i}, {"name", std::string(entry.name)}, {"params", params}, {"example", example},
                        {"live", entry.live != 0}, {"workers_only", at_workers},
                        {"slowdown_at_load", i < kMaxStrategies ? h.strategy_slowdown[i] : 0U}};
    if (entry.live != 0)
      item["values"] = nlohmann::json::array({std::string(entry.value_names[0]), std::string(entry.value_names[1])});
    table.push_back(std::move(item));
  }
  return table;
}

// The journal (serve --journal): where it is, how it writes, what it holds and did.
nlohmann::json journal_json(const DataHeader& h) {
  // relaxed (all): figures for people; the writer thread stores them one by one.
  const auto state = h.journal_state.load(std::memory_order_relaxed);
  if (state == 0) return nlohmann::json{{"enabled", false}};
  const char* path_end = static_cast<const char*>(std::memchr(h.journal_path, '\0', sizeof h.journal_path));
  const std::uint64_t fsynced = h.journal_last_fsync_unix_ns.load(std::memory_order_relaxed);
  const std::uint64_t wall = unix_ns();
  const std::string fsync = h.journal_fsync == 0   ? std::string("every")
                            : h.journal_fsync == 1 ? fmt::format("interval:{}", h.journal_interval_ms)
                                                   : std::string("none");
  return nlohmann::json{
      {"enabled", true},
      {"path", std::string(h.journal_path, path_end ? path_end : h.journal_path + sizeof h.journal_path)},
      {"state", state == 1 ? "ok" : state == 2 ? "disk_full" : "failed"},
      {"fsync", fsync},
      {"records", h.journal_records.load(std::memory_order_relaxed)},
      {"bytes", h.journal_bytes.load(std::memory_order_relaxed)},
      {"last_fsync_unix_ns", fsynced},
      {"last_fsync_age_s", fsynced == 0 || wall < fsynced ? nlohmann::json(nullptr)
                                                          : nlohmann::json(static_cast<double>(wall - fsynced) / 1e9)},
      {"appends_refused", h.journal_refused.load(std::memory_order_relaxed)},
      {"replayed_at_start", h.journal_replayed},
      {"torn_bytes_dropped_at_start", h.journal_torn_bytes},
      {"engine_starts", h.journal_starts},
  };
}

// How many of the engine's lane objects are locked in RAM (LaneStatus::object_locked).
std::uint32_t lane_objects_locked(const Attachment& segment) {
  std::uint32_t locked = 0;
  for (std::uint32_t i = 0; i < segment.lane_count(); ++i)
    // relaxed: a report for people.
    locked += segment.lane_status(i).object_locked.load(std::memory_order_relaxed) != 0 ? 1 : 0;
  return locked;
}

// Every degraded state the engine can be in, each with its count (0: not degraded so).
nlohmann::json degraded_json(const DataHeader& h, const Attachment& segment) {
  std::uint64_t quarantined = 0;
  for (std::uint32_t i = 0; i < segment.lane_count(); ++i)
    // relaxed: a report for people.
    if (segment.lane_status(i).state.load(std::memory_order_relaxed) == static_cast<std::uint32_t>(LaneState::quarantined))
      ++quarantined;
  // relaxed (all): counters and flags for people.
  return nlohmann::json{
      {"workers_stalled", h.workers_stalled.load(std::memory_order_relaxed)},
      {"live_bar_waiting_on_stalled_worker", h.live_bar_waiting.load(std::memory_order_relaxed)},
      {"lanes_quarantined", quarantined},
      {"not_locked_in_ram", h.locked == 0 ? 1 : 0},
      {"serving_thread_stuck_ms", h.serving_stuck_ns.load(std::memory_order_relaxed) / 1'000'000},
      {"journal_disk_full", h.journal_state.load(std::memory_order_relaxed) == 2 ? 1 : 0},
      {"journal_failed", h.journal_state.load(std::memory_order_relaxed) == 3 ? 1 : 0},
      {"lane_objects_not_locked", segment.lane_count() - lane_objects_locked(segment)},
      {"jobs_taken_back_total", h.jobs_reclaimed.load(std::memory_order_relaxed)},
      {"serving_thread_stalls_total", h.serving_stalls.load(std::memory_order_relaxed)},
  };
}

nlohmann::json describe_segment(const Attachment& segment) {
  const DataHeader& h = segment.header();
  // relaxed (all loads below): a snapshot for people; each counter is read on its own.
  const std::uint64_t beat = h.heartbeat_ns.load(std::memory_order_relaxed);
  const std::uint64_t now = monotonic_ns();
  const std::uint64_t wall = unix_ns();
  nlohmann::json lanes = nlohmann::json::array();
  Histogram all(kServiceBuckets);
  std::uint64_t all_sum_ns = 0;
  for (std::uint32_t i = 0; i < segment.lane_count(); ++i) {  // checked against the object's size
    const LaneStatus& lane = segment.lane_status(i);
    const Histogram counts = read_histogram(lane);
    const std::uint64_t sum_ns = lane.service_ns_sum.load(std::memory_order_relaxed);
    all_sum_ns += sum_ns;
    for (std::size_t b = 0; b < kServiceBuckets; ++b) all[b] += counts[b];
    lanes.push_back({
        {"lane", i},
        {"state", lane_state_name(lane.state.load(std::memory_order_relaxed))},
        {"owner_pid", lane.owner_pid},
        {"owner_uid", lane.owner_uid},
        {"owner_alive", owner_alive(lane)},
        {"reattaches", lane.reattaches},
        {"claims", lane.generation.load(std::memory_order_relaxed)},
        {"requests", lane.requests.load(std::memory_order_relaxed)},
        {"bad_frames", lane.bad_frames.load(std::memory_order_relaxed)},
        {"ring_fill", lane.ring_fill.load(std::memory_order_relaxed)},
        {"locked", lane.object_locked.load(std::memory_order_relaxed) != 0},
        {"service_ns", histogram_json(counts, sum_ns)},
    });
  }
  const char* name_end = static_cast<const char*>(std::memchr(h.series_name, '\0', sizeof h.series_name));
  // relaxed: the keeper wrote the count and cpus before any client attached; the rest is for people.
  const std::uint32_t workers = h.workers.load(std::memory_order_relaxed);
  std::vector<int> worker_cpus;
  for (std::uint32_t i = 0; i < workers && i < kMaxWorkerCpus; ++i) worker_cpus.push_back(h.worker_cpus[i]);
  return nlohmann::json{
      {"schema", kStatusSchemaVersion},
      {"time_unix_ns", wall},
      {"name", segment.name()},
      {"socket", segment.socket_path()},
      {"layout_version", h.layout_version},
      {"data_bytes", h.data_bytes},
      {"backing", backing_name(static_cast<Backing>(h.backing))},
      {"locked", h.locked != 0},
      {"lane_objects_locked", lane_objects_locked(segment)},
      {"memory_locked", memory_lock_text(h.locked != 0, static_cast<Backing>(h.backing), lane_objects_locked(segment),
                                         segment.lane_count())},
      {"wait_mode", to_string(static_cast<WaitMode>(h.wait_mode))},
      {"lane_count", segment.lane_count()},
      {"ring_capacity", segment.ring_capacity()},
      {"bulk_bytes_per_lane", h.lane_bulk_bytes},
      {"max_frame_cost", h.max_frame_cost},
      {"workers", {{"count", workers}, {"cpus", worker_cpus},
                   {"stalled", h.workers_stalled.load(std::memory_order_relaxed)},
                   {"jobs", h.worker_jobs.load(std::memory_order_relaxed)},
                   {"inline_cost", h.inline_cost.load(std::memory_order_relaxed)},
                   {"max_bar_cost", h.max_bar_cost.load(std::memory_order_relaxed)}}},
      {"placement", {{"serving_cpu", h.serving_cpu}, {"near_cpus", near_cpus_of(h)}}},
      {"engine", {{"pid", segment.engine_pid()}, {"uid", h.engine_uid}, {"alive", !segment.engine_hung_up()},
                  {"uptime_s", wall > h.engine_start_unix_ns ? static_cast<double>(wall - h.engine_start_unix_ns) / 1e9 : 0.0},
                  {"heartbeat_age_ms", now > beat ? static_cast<double>(now - beat) / 1e6 : 0.0},
                  {"heartbeat_interval_ms", static_cast<double>(h.heartbeat_interval_ns) / 1e6}}},
      {"series", {{"source", std::string(h.series_name, name_end ? name_end : h.series_name + sizeof h.series_name)},
                  {"bars", h.n_bars}, {"first", h.series_first}, {"last", h.series_last},
                  {"checksum", fmt::format("{:016x}", h.series_checksum)},
                  {"columns", column_names_json(h.series_table[0].columns)}}},
      {"series_table", series_table_json(h)},
      {"strategies", strategy_table_json(segment)},
      {"degraded", degraded_json(h, segment)},
      {"fee", h.fee},
      // relaxed: counters and the bar count for people; a stale value is only a moment old.
      {"live", {{"enabled", h.live != 0}, {"capacity_bars", h.capacity_bars},
                {"bars_published", h.bars_published.load(std::memory_order_relaxed)},
                {"signal_capacity", h.signal_capacity},
                {"signals_sent", h.signals_sent.load(std::memory_order_relaxed)},
                {"signals_dropped", h.signals_dropped.load(std::memory_order_relaxed)}}},
      {"journal", journal_json(h)},
      {"counters", {{"requests", h.requests.load(std::memory_order_relaxed)},
                    {"bad_frames", h.bad_frames.load(std::memory_order_relaxed)},
                    {"lanes_released", h.lanes_released.load(std::memory_order_relaxed)},
                    {"lanes_reclaimed", h.lanes_reclaimed.load(std::memory_order_relaxed)},
                    {"lanes_corrupt", h.lanes_corrupt.load(std::memory_order_relaxed)}}},
      {"service_ns", histogram_json(all, all_sum_ns)},
      {"lanes", lanes},
  };
}

namespace {

// The exposition's histogram layout, the same at every scrape and for every lane: one bucket per
// power of two of the service time, 64 ns (2^6) to 8.6 s (2^33). The segment's buckets (four per
// power of two) tile these bounds exactly, so each cumulative count is exact.
constexpr int kFirstPowerNs = 6;
constexpr int kLastPowerNs = 33;
static_assert(service_bucket_upper_ns(1 + 4 * (kLastPowerNs - kFirstPowerNs) - 1) == std::uint64_t{1} << kLastPowerNs,
              "the last bound ends a bucket of the segment's histogram");

// The engine's health as `status` read it: the rule every reader applies (judge_engine_health).
EngineHealth health_of(const nlohmann::json& status) {
  const auto& engine = status["engine"];
  EngineHealth health;
  health.process_alive = engine["alive"].get<bool>();
  health.heartbeat_age_ns = static_cast<std::uint64_t>(engine["heartbeat_age_ms"].get<double>() * 1e6);
  health.limit_ns = heartbeat_limit_ns(static_cast<std::uint64_t>(engine["heartbeat_interval_ms"].get<double>() * 1e6));
  return health;
}

bool engine_up(const nlohmann::json& status) { return health_of(status).up(); }

class Exposition {
 public:
  explicit Exposition(std::string_view engine) : engine_(engine) {}
  void family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  // One sample; `labels` are the ones after engine="...", already formatted (`lane="0"`).
  template <class Value>
  void sample(std::string_view name, const Value& value, std::string_view labels = {}) {
    out_ += fmt::format("{}{{engine=\"{}\"{}{}}} {}\n", name, engine_, labels.empty() ? "" : ",", labels, value);
  }
  [[nodiscard]] std::string take() { return std::move(out_); }

 private:
  std::string_view engine_;
  std::string out_;
};

// Each lane's service-time histogram in the fixed layout, with its _sum and _count.
void service_histograms(Exposition& out, const nlohmann::json& lanes) {
  out.family("ipcfloor_service_seconds", "histogram",
             "time from a request's detection to its answer, per lane (buckets: powers of two from 64 ns)");
  for (const auto& lane : lanes) {
    const std::string label = fmt::format("lane=\"{}\"", lane["lane"].get<unsigned>());
    const auto& service = lane["service_ns"];
    for (int power = kFirstPowerNs; power <= kLastPowerNs; ++power) {
      const std::uint64_t bound = std::uint64_t{1} << power;
      std::uint64_t at_or_below = 0;
      for (const auto& bucket : service["buckets"])
        if (bucket["to_ns"].get<std::uint64_t>() <= bound) at_or_below += bucket["count"].get<std::uint64_t>();
      out.sample("ipcfloor_service_seconds_bucket", at_or_below,
                 fmt::format("{},le=\"{:.9f}\"", label, static_cast<double>(bound) / 1e9));
    }
    const auto count = service["count"].get<std::uint64_t>();
    out.sample("ipcfloor_service_seconds_bucket", count, label + ",le=\"+Inf\"");
    out.sample("ipcfloor_service_seconds_sum", fmt::format("{:.9f}", service["sum_ns"].get<double>() / 1e9), label);
    out.sample("ipcfloor_service_seconds_count", count, label);
  }
}

// One sample per lane of a lane's counter or gauge.
void per_lane(Exposition& out, const nlohmann::json& lanes, std::string_view name, std::string_view type,
              std::string_view help, const char* field) {
  out.family(name, type, help);
  for (const auto& lane : lanes)
    out.sample(name, lane[field].get<std::uint64_t>(), fmt::format("lane=\"{}\"", lane["lane"].get<unsigned>()));
}

}  // namespace

std::optional<std::string> why_not_up(const nlohmann::json& status) {
  const EngineHealth health = health_of(status);
  if (health.up()) return std::nullopt;
  const auto& engine = status["engine"];
  const std::string name = status["name"].get<std::string>();
  const int pid = engine["pid"].get<int>();
  if (!health.process_alive)
    return fmt::format("engine {} is not up (ipcfloor_up 0): its process (pid {}) has exited since it answered; its "
                       "socket and segment are left for the next `ipcfloor serve --name {}`", name, pid, name);
  return fmt::format("engine {} is not up (ipcfloor_up 0): its process (pid {}) runs, but its heartbeat is {:.1f} s "
                     "old, past the {:.1f} s an engine that serves keeps it within (3 heartbeats of {:.0f} ms, at least "
                     "1 s): it is stopped (SIGSTOP, a debugger) or starved of cpu time",
                     name, pid, static_cast<double>(health.heartbeat_age_ns) / 1e9,
                     static_cast<double>(health.limit_ns) / 1e9, engine["heartbeat_interval_ms"].get<double>());
}

std::string prometheus_exposition(std::string_view engine, const nlohmann::json* status) {
  Exposition out(engine);
  out.family("ipcfloor_up", "gauge",
             "1 while the engine is attached and its heartbeat is fresh (3 intervals, at least 1 s), else 0");
  out.sample("ipcfloor_up", status != nullptr && engine_up(*status) ? 1 : 0);
  if (status == nullptr) return out.take();
  const nlohmann::json& s = *status;
  const auto scalar = [&](std::string_view name, std::string_view type, std::string_view help, const auto& value) {
    out.family(name, type, help);
    out.sample(name, value);
  };
  scalar("ipcfloor_heartbeat_age_seconds", "gauge", "age of the engine's last heartbeat",
         fmt::format("{:.6f}", s["engine"]["heartbeat_age_ms"].get<double>() / 1e3));
  scalar("ipcfloor_uptime_seconds", "gauge", "seconds since the engine started",
         fmt::format("{:.3f}", s["engine"]["uptime_s"].get<double>()));
  scalar("ipcfloor_lanes_released_total", "counter", "lanes handed back by their clients",
         s["counters"]["lanes_released"].get<std::uint64_t>());
  scalar("ipcfloor_lanes_reclaimed_total", "counter", "lanes taken back from clients that died",
         s["counters"]["lanes_reclaimed"].get<std::uint64_t>());
  scalar("ipcfloor_lanes_corrupt_total", "counter", "lanes quarantined after impossible positions or stamps",
         s["counters"]["lanes_corrupt"].get<std::uint64_t>());
  scalar("ipcfloor_bars_published", "gauge", "bars of the series readers see (preloaded and appended)",
         s["live"]["bars_published"].get<std::uint64_t>());
  scalar("ipcfloor_signals_sent_total", "counter", "live signals delivered to subscribers",
         s["live"]["signals_sent"].get<std::uint64_t>());
  scalar("ipcfloor_signals_dropped_total", "counter", "live signals dropped on full signal rings",
         s["live"]["signals_dropped"].get<std::uint64_t>());
  scalar("ipcfloor_workers", "gauge", "compute workers the engine started", s["workers"]["count"].get<std::uint32_t>());
  scalar("ipcfloor_workers_stalled", "gauge", "workers stuck on one job past its bound, at the last heartbeat",
         s["workers"]["stalled"].get<std::uint32_t>());
  scalar("ipcfloor_worker_jobs_total", "counter", "BACKTESTs the workers finished",
         s["workers"]["jobs"].get<std::uint64_t>());
  // Every degraded state the engine can be in, always present (0: not in it), so that an alert
  // on one needs no absent() rule.
  out.family("ipcfloor_degraded", "gauge", "a degraded state the engine is in now (the count of what it concerns)");
  for (const auto& [state, value] : s["degraded"].items())
    if (!state.ends_with("_total"))
      out.sample("ipcfloor_degraded", value.get<std::uint64_t>(), fmt::format("state=\"{}\"", state));
  scalar("ipcfloor_jobs_taken_back_total", "counter", "jobs taken back from stalled workers and computed elsewhere",
         s["degraded"]["jobs_taken_back_total"].get<std::uint64_t>());
  scalar("ipcfloor_serving_thread_stalls_total", "counter",
         "BACKTESTs that held the serving thread past the limit their cost allows",
         s["degraded"]["serving_thread_stalls_total"].get<std::uint64_t>());
  const auto& journal = s["journal"];
  const bool journaled = journal["enabled"].get<bool>();
  const auto journal_value = [&](const char* field) { return journaled ? journal[field].get<std::uint64_t>() : 0; };
  scalar("ipcfloor_journal_records", "gauge", "bars in the engine's journal (serve --journal; 0 without one)",
         journal_value("records"));
  scalar("ipcfloor_journal_bytes", "gauge", "size of the engine's journal", journal_value("bytes"));
  scalar("ipcfloor_journal_last_fsync_timestamp_seconds", "gauge",
         "wall clock of the journal's last fdatasync (0: none yet)",
         fmt::format("{:.3f}", static_cast<double>(journal_value("last_fsync_unix_ns")) / 1e9));
  scalar("ipcfloor_journal_appends_refused_total", "counter",
         "APPENDs answered journal_full or journal_failed: their bars were not added", journal_value("appends_refused"));
  scalar("ipcfloor_journal_replayed_bars", "gauge", "bars replayed from the journal when this engine started",
         journal_value("replayed_at_start"));
  scalar("ipcfloor_engine_starts_total", "counter", "engine starts the journal records, this one included",
         journal_value("engine_starts"));
  per_lane(out, s["lanes"], "ipcfloor_lane_reattaches", "gauge",
           "times the lane's client re-attached after an engine it used went away (its own word)", "reattaches");
  per_lane(out, s["lanes"], "ipcfloor_requests_total", "counter", "requests answered, per lane", "requests");
  per_lane(out, s["lanes"], "ipcfloor_rejected_total", "counter", "requests answered with an error status, per lane",
           "bad_frames");
  per_lane(out, s["lanes"], "ipcfloor_ring_fill", "gauge", "request frames waiting in the lane's ring, sampled",
           "ring_fill");
  service_histograms(out, s["lanes"]);
  return out.take();
}

namespace {

// status --watch: the live figures every --interval, until --count screens or the engine goes.
int run_status_watch(const StatusOptions& options, const Attachment& segment) {
  if (!(options.interval_s > 0))
    return report_error("status", Error{ErrorCode::invalid_argument,
                                        fmt::format("--interval {} is not a positive number of seconds", options.interval_s)});
  const bool clear = ::isatty(STDOUT_FILENO) == 1;
  Snapshot before = take_snapshot(segment);
  for (std::uint64_t shown = 0; options.count == 0 || shown < options.count; ++shown) {
    std::this_thread::sleep_for(std::chrono::duration<double>(options.interval_s));
    Snapshot after = take_snapshot(segment);
    print_watch_screen(segment, before, after, clear);
    if (segment.engine_hung_up())
      return report_error("status", Error{ErrorCode::peer_gone, fmt::format("engine {} is gone", options.name)});
    before = std::move(after);
  }
  return 0;
}

// The text form's first lines: the engine, its series, live mode, lanes and workers.
void print_engine_text(const nlohmann::json& s) {
  const auto& e = s["engine"];
  fmt::print("engine    {} on {} (layout v{}, {} bytes of data, {})\n", s["name"].get<std::string>(),
             s["socket"].get<std::string>(), s["layout_version"].get<unsigned>(), s["data_bytes"].get<std::uint64_t>(),
             s["backing"].get<std::string>());
  fmt::print("memory    {}\n", s["memory_locked"].get<std::string>());
  fmt::print("          pid {} {}, up {}, heartbeat {:.1f} ms ago (every {:.0f} ms), {} mode\n", e["pid"].get<int>(),
             e["alive"].get<bool>() ? "alive" : "GONE", duration_text(e["uptime_s"].get<double>()),
             e["heartbeat_age_ms"].get<double>(), e["heartbeat_interval_ms"].get<double>(),
             s["wait_mode"].get<std::string>());
  const auto& series = s["series"];
  const auto columns_text = [](const nlohmann::json& names) {
    std::string text;
    for (const auto& name : names) text += (text.empty() ? "" : ", ") + name.get<std::string>();
    return text;
  };
  fmt::print("series    {} ({} bars, first {}, last {}, checksum {}; columns {}), fee {}\n",
             series["source"].get<std::string>(), series["bars"].get<std::uint64_t>(), series["first"].get<double>(),
             series["last"].get<double>(), series["checksum"].get<std::string>(), columns_text(series["columns"]),
             s["fee"].get<double>());
  if (s["series_table"].size() > 1)
    for (const auto& entry : s["series_table"])
      fmt::print("          series {} {}: {} bars, first {}, last {}, checksum {}; columns {}\n",
                 entry["index"].get<unsigned>(), entry["name"].get<std::string>(), entry["bars"].get<std::uint64_t>(),
                 entry["first"].get<double>(), entry["last"].get<double>(), entry["checksum"].get<std::string>(),
                 columns_text(entry["columns"]));
  if (const auto& live = s["live"]; live["enabled"].get<bool>())
    fmt::print("live      {} of {} bars published; {} signals sent, {} dropped; {} signal slots per lane\n",
               live["bars_published"].get<std::uint64_t>(), live["capacity_bars"].get<std::uint64_t>(),
               live["signals_sent"].get<std::uint64_t>(), live["signals_dropped"].get<std::uint64_t>(),
               live["signal_capacity"].get<unsigned>());
  fmt::print("lanes     {} x {} slots per ring, {} bulk bytes each; a BACKTEST may cost at most {}\n",
             s["lane_count"].get<unsigned>(), s["ring_capacity"].get<unsigned>(),
             s["bulk_bytes_per_lane"].get<std::uint64_t>(),
             s["max_frame_cost"].get<std::uint64_t>() == 0 ? std::string("anything")
                                                           : fmt::format("{:.3g}", s["max_frame_cost"].get<double>()));
  if (const auto& j = s["journal"]; j["enabled"].get<bool>()) {
    const auto& age = j["last_fsync_age_s"];
    fmt::print("journal   {}: {} bars, {} bytes, fsync {}, last fsync {}; {} appends refused\n",
               j["path"].get<std::string>(), j["records"].get<std::uint64_t>(), j["bytes"].get<std::uint64_t>(),
               j["fsync"].get<std::string>(), age.is_null() ? std::string("none yet")
                                                             : fmt::format("{:.1f} s ago", age.get<double>()),
               j["appends_refused"].get<std::uint64_t>());
    fmt::print("          this start (engine start {} on it) replayed {} bars{}\n",
               j["engine_starts"].get<std::uint64_t>(), j["replayed_at_start"].get<std::uint64_t>(),
               j["torn_bytes_dropped_at_start"].get<std::uint64_t>() == 0
                   ? std::string()
                   : fmt::format(" and dropped a torn last record ({} bytes)",
                                 j["torn_bytes_dropped_at_start"].get<std::uint64_t>()));
  }
  const auto& w = s["workers"];
  const auto worker_count = w["count"].get<std::uint32_t>();
  if (worker_count == 0)
    fmt::print("workers   none: the serving thread computes every BACKTEST\n");
  else
    fmt::print("workers   {} on {}, {} stalled, {} jobs done; BACKTESTs of {} work units or more go to them\n",
               worker_count, cpu_list(w["cpus"].get<std::vector<int>>()), w["stalled"].get<std::uint32_t>(),
               w["jobs"].get<std::uint64_t>(), w["inline_cost"].get<std::uint64_t>());
}

// The strategies, every degraded state and where the serving thread runs.
void print_health_text(const nlohmann::json& s) {
  for (const auto& strategy : s["strategies"])
    fmt::print("strategy  {} {} ({}){}{}\n", strategy["index"].get<unsigned>(), strategy["name"].get<std::string>(),
               fmt::join(strategy["params"].get<std::vector<std::string>>(), ", "),
               strategy["live"].get<bool>() ? "; streams signals" : "",
               strategy["workers_only"].get<bool>()
                   ? fmt::format("; runs at a worker only (at load its run() took {}x the built-in's time per work "
                                 "unit)", strategy["slowdown_at_load"].get<std::uint32_t>())
                   : std::string());
  std::string degraded;
  const auto& d = s["degraded"];
  if (d["workers_stalled"].get<std::uint64_t>() != 0)
    degraded += fmt::format("; {} worker(s) not run by the host past their job's limit (their jobs are computed "
                            "elsewhere)", d["workers_stalled"].get<std::uint64_t>());
  if (d["live_bar_waiting_on_stalled_worker"].get<std::uint64_t>() != 0)
    degraded += "; a live bar waits for a stalled worker (live requests wait; nothing is lost)";
  if (d["lanes_quarantined"].get<std::uint64_t>() != 0)
    degraded += fmt::format("; {} lane(s) quarantined", d["lanes_quarantined"].get<std::uint64_t>());
  if (d["not_locked_in_ram"].get<std::uint64_t>() != 0) degraded += "; the data is not locked in RAM";
  if (d["serving_thread_stuck_ms"].get<std::uint64_t>() != 0)
    degraded += fmt::format("; the serving thread has been inside one BACKTEST for {} ms, past what its cost allows "
                            "(every client waits)", d["serving_thread_stuck_ms"].get<std::uint64_t>());
  if (d["journal_disk_full"].get<std::uint64_t>() != 0)
    degraded += "; the journal's disk is full: APPENDs are refused journal_full until it has room";
  if (d["journal_failed"].get<std::uint64_t>() != 0)
    degraded += "; the journal failed (a write or fdatasync): APPENDs are refused journal_failed; restart the engine";
  if (const auto unlocked = d["lane_objects_not_locked"].get<std::uint64_t>(); unlocked != 0)
    degraded += fmt::format("; {} lane object(s) not locked in RAM", unlocked);
  fmt::print("health    {}{}; {} job(s) taken back from stalled workers so far\n", degraded.empty() ? "ok" : "DEGRADED",
             degraded, d["jobs_taken_back_total"].get<std::uint64_t>());
  const auto& placement = s["placement"];
  const auto near = placement["near_cpus"].get<std::vector<int>>();
  fmt::print("placement serving thread on cpu {}; nearest it for clients: {}\n", placement["serving_cpu"].get<int>(),
             near.empty() ? std::string("no other cpu") : cpu_list(near));
}

// The counters and one line per lane.
void print_lanes_text(const nlohmann::json& s) {
  const auto& c = s["counters"];
  fmt::print("counters  {} requests, {} rejected, {} lanes released, {} reclaimed, {} corrupt\n",
             c["requests"].get<std::uint64_t>(), c["bad_frames"].get<std::uint64_t>(),
             c["lanes_released"].get<std::uint64_t>(), c["lanes_reclaimed"].get<std::uint64_t>(),
             c["lanes_corrupt"].get<std::uint64_t>());
  fmt::print("{:>5}  {:<11}  {:>8}  {:>7}  {:>12}  {:>10}  {:>12}  {:>12}\n", "lane", "state", "owner", "claims",
             "requests", "rejected", "p50 service", "p99 service");
  for (const auto& lane : s["lanes"]) {
    const auto& service = lane["service_ns"];
    const bool any = service["count"].get<std::uint64_t>() != 0;
    fmt::print("{:>5}  {:<11}  {:>8}  {:>7}  {:>12}  {:>10}  {:>12}  {:>12}\n", lane["lane"].get<unsigned>(),
               lane["state"].get<std::string>(), owner_text(lane),
               lane["claims"].get<std::uint64_t>(), lane["requests"].get<std::uint64_t>(),
               lane["bad_frames"].get<std::uint64_t>(),
               any ? "<=" + ns_text(service["p50_at_most_ns"].get<std::uint64_t>()) : "-",
               any ? "<=" + ns_text(service["p99_at_most_ns"].get<std::uint64_t>()) : "-");
  }
  for (const auto& lane : s["lanes"])
    if (lane["reattaches"].get<std::uint64_t>() != 0)
      fmt::print("lane {}: its client re-attached {} time(s) after an engine it used went away\n",
                 lane["lane"].get<unsigned>(), lane["reattaches"].get<std::uint64_t>());
  for (const auto& lane : s["lanes"])
    if (lane["owner_pid"].get<int>() != 0 && !lane["owner_alive"].get<bool>()) {
      fmt::print("(pid): the process that took the lane has exited; one that inherited its connection (a fork's "
                 "child) holds it\n");
      break;
    }
}

}  // namespace

int run_status(const StatusOptions& options) {
  AttachOptions attach;
  attach.socket_dir = options.socket_dir;
  attach.role = HandoffRole::observer;
  attach.verify_series = false;  // status reads no series: it must not read (or fault in) all of them
  auto segment = Attachment::attach(options.name, attach);
  if (!segment) {
    // A scraper (a textfile collector, a cron job) still gets a well-formed exposition: up 0.
    // Every path that says up 0 exits non-zero and says why on stderr.
    if (options.prometheus) fmt::print("{}", prometheus_exposition(options.name, nullptr));
    Error error = std::move(segment.error());
    if (!options.name_given)
      error.message += fmt::format(" (no --name: status looked for the default name '{}')", options.name);
    return report_error("status", error);
  }
  if (options.watch) return run_status_watch(options, *segment);
  const nlohmann::json s = describe_segment(*segment);
  if (options.json) {
    fmt::print("{}\n", s.dump(2));
  } else if (options.prometheus) {
    fmt::print("{}", prometheus_exposition(options.name, &s));
  } else {
    print_engine_text(s);
    print_health_text(s);
    print_lanes_text(s);
  }
  // What was read is printed either way (the figures of a stopped engine help to find out why);
  // the exit code and stderr say that the engine does not serve.
  std::fflush(stdout);
  if (const auto down = why_not_up(s)) return report_error("status", Error{ErrorCode::peer_gone, *down});
  return 0;
}

CLI::App* add_status_subcommand(CLI::App& app, StatusOptions& options) {
  auto* status = app.add_subcommand("status", "Show what a live engine holds and does: engine, series, lanes, counters");
  status->add_option("--name", options.name, "engine name")
      ->check(engine_name())
      ->capture_default_str()
      ->each([&options](const std::string&) { options.name_given = true; });
  options.socket_dir = socket_dir_default();
  add_socket_dir_option(*status, options.socket_dir);
  auto* json = status->add_flag("--json", options.json, "print JSON (with a timestamp, schema version and histograms)");
  status->add_flag("--prometheus", options.prometheus, "print a Prometheus text exposition")->excludes(json);
  status->add_flag("--watch", options.watch, "refresh like aeron-stat: rates, ring fill, service-time percentiles");
  status->add_option("--interval", options.interval_s, "seconds between --watch refreshes")
      ->check(in_range(0.01, 3600.0))
      ->capture_default_str();
  status->add_option("--count", options.count, "--watch refreshes before stopping (0: until Ctrl-C)")
      ->check(in_range<std::uint64_t>(0, ~std::uint64_t{0}))
      ->capture_default_str();
  return status;
}

}  // namespace ipcfloor
