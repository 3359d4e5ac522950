#include "bench/ladder.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "bench/engine_child.hpp"
#include "bench/host_info.hpp"
#include "bench/latency.hpp"
#include "bench/pair_place.hpp"
#include "bench/suite_common.hpp"
#include "bench/transport_socket.hpp"
#include "bench/transports.hpp"
#include "common/affinity.hpp"

namespace ipcfloor {

const std::vector<Transport>& all_transports() {
  static const std::vector<Transport> transports = {
      {"physical-floor",
       "a cache line bounced between the two pinned cores, the lowest of the styles the call and the rings use (one "
       "line, two lines, a ring's rotating lines; the answering side polling every 1, 4 or 16 PAUSEs); no software",
       run_physical_floor},
      {"physical-floor-again",
       "physical-floor again in the same round, on another line: its ratio to physical-floor is the noise of a "
       "per-round ratio",
       run_physical_floor_again},
      {"physical-floor-2line",
       "request on one cache line, answer on another, between the two pinned cores, the lowest of the answering "
       "side's polls (no software)",
       run_physical_floor_two_lines},
      {"physical-floor-ring",
       "request and answer on two arrays of --ring-capacity lines, the next line of each per round trip, as a ring's "
       "slots, the lowest of the answering side's polls (no software)",
       run_physical_floor_ring},
      {"inproc-call", "dispatch_request ECHO as an opaque function call on one thread (both sides on the client core)",
       run_inproc_call},
      {"moodycamel-thread", "two moodycamel::ReaderWriterQueue between two pinned threads of one process, both spinning",
       run_moodycamel_thread},
      {"shm-call-spin",
       "ipcfloor segment, ShmClient::call: ECHO and its answer in one exchange line, engine in another process, "
       "both sides PAUSE-spin",
       [](const TransportContext& c) { return run_shm_call(c, "spin"); }},
      {"shm-call-backoff", "ipcfloor segment, ShmClient::call, spin then yield then sleep",
       [](const TransportContext& c) { return run_shm_call(c, "backoff"); }},
      {"shm-call-block", "ipcfloor segment, ShmClient::call, futex sleep and wake on both sides",
       [](const TransportContext& c) { return run_shm_call(c, "block"); }},
      {"shm-backtest-spin",
       "ipcfloor segment, ShmClient::call: one BACKTEST (L = 6 on 1,000 bars, computed by the serving thread) and its "
       "answer in the exchange line, PAUSE-spin",
       [](const TransportContext& c) { return run_shm_combo(c, false); }},
      {"shm-stats-spin",
       "the same combo as a STATS: its statistics come back in the answer record, two cache lines beside the line",
       [](const TransportContext& c) { return run_shm_combo(c, true); }},
      {"shm-ring-spin", "ipcfloor segment, one ECHO in flight through the request and response rings, PAUSE-spin",
       [](const TransportContext& c) { return run_shm_ring(c, "spin"); }},
      {"shm-ring-backoff", "ipcfloor segment, one frame in flight through the rings, spin then yield then sleep",
       [](const TransportContext& c) { return run_shm_ring(c, "backoff"); }},
      {"shm-ring-block", "ipcfloor segment, one frame in flight through the rings, futex sleep and wake",
       [](const TransportContext& c) { return run_shm_ring(c, "block"); }},
      {"iceoryx", "iceoryx 2.0 request/response (popo::Client/Server) across processes, both busy-polling; own RouDi",
       run_iceoryx},
      {"boost-message-queue", "Boost.Interprocess message_queue pair to a forked process (shared mutex + condvar)",
       run_boost_message_queue},
      {"zeromq-ipc", "libzmq REQ/REP over ipc:// to a forked process", run_zeromq_ipc},
      {"uds", "the socket server over a Unix-domain socket: 48-byte echo_params frame (opcode 4)", run_uds_echo},
      {"tcp", "the socket server over TCP loopback, TCP_NODELAY: 48-byte echo_params frame (opcode 4)", run_tcp_echo},
      {"spawn", "a process per call: `ipcfloor stdio` on stdin/stdout, spawn to reap; at most 2000 samples, 50 warm-up",
       run_spawn, false},
  };
  return transports;
}

namespace {

// One rung of the ladder as it runs: its samples pooled over rounds and its p50 per round.
struct Rung {
  const Transport* transport;
  std::vector<double> samples;    // pooled over rounds
  std::vector<double> round_p50;  // one per round it ran in
  std::vector<RoundNote> notes;   // per round, when the rung says something (the floor's styles)
  std::string skipped;            // the reason, once it failed
};

// The transports named in `options` (all of them when none is), or an error naming the unknown one.
Expected<std::vector<const Transport*>> chosen_transports(const LadderOptions& options) {
  const auto& registry = all_transports();
  std::vector<const Transport*> chosen;
  if (options.transports.empty()) {
    for (const Transport& t : registry) chosen.push_back(&t);
    return chosen;
  }
  for (const std::string& name : options.transports) {
    const auto it = std::find_if(registry.begin(), registry.end(), [&](const Transport& t) { return t.name == name; });
    if (it == registry.end()) {
      std::string known;
      for (const Transport& t : registry) known += (known.empty() ? "" : ", ") + t.name;
      return fail(ErrorCode::invalid_argument, "unknown transport '{}'; known: {}", name, known);
    }
    chosen.push_back(&*it);
  }
  return chosen;
}

// Every rung once per round, in turn (a rung that is not interleaved runs its whole share in the
// first round); a rung that fails is skipped from then on with its reason.
void run_rounds(std::vector<Rung>& rungs, const TransportContext& context, std::size_t rounds) {
  for (std::size_t round = 0; round < rounds; ++round) {
    for (Rung& rung : rungs) {
      if (!rung.skipped.empty() || (round > 0 && !rung.transport->interleaved)) continue;
      TransportContext share = context;
      if (rung.transport->interleaved) share.samples = (context.samples + rounds - 1) / rounds;
      RoundNote note;
      share.note = &note;
      auto samples = rung.transport->run(share);
      if (!samples) {
        rung.skipped = samples.error().message;
        continue;
      }
      if (!note.best.empty()) rung.notes.push_back(std::move(note));
      rung.round_p50.push_back(summarize(rung.transport->name, "rtt", *samples, context.clock->step_ns()).p50_interp);
      rung.samples.insert(rung.samples.end(), samples->begin(), samples->end());
    }
  }
}

// A floor rung's styles: which was the lowest in each round ("best_style") and every style's p50~
// by round ("styles"), so that a report shows how this host moves a line best.
void add_style_notes(nlohmann::json& row, const std::vector<RoundNote>& notes) {
  if (notes.empty()) return;
  nlohmann::json best = nlohmann::json::array();
  nlohmann::json styles = nlohmann::json::array();  // in the order the rung tries them
  for (const RoundNote& note : notes) {
    best.push_back(note.best);
    for (std::size_t i = 0; i < note.styles.size(); ++i) {
      if (styles.size() <= i) styles.push_back({{"style", note.styles[i].first}, {"p50_by_round", nlohmann::json::array()}});
      styles[i]["p50_by_round"].push_back(note.styles[i].second);
    }
  }
  row["best_style"] = best;
  row["styles"] = styles;
}

// The floor and the ring, round by round: the spread a reader should expect between runs.
nlohmann::json round_ratios_json(const std::vector<Rung>& rungs) {
  nlohmann::json round_ratios = nlohmann::json::object();
  const auto rung_named = [&](const std::string& name) {
    return std::find_if(rungs.begin(), rungs.end(),
                        [&](const Rung& r) { return r.transport->name == name && r.skipped.empty(); });
  };
  const auto floor = rung_named("physical-floor");
  if (floor == rungs.end()) return round_ratios;
  for (const char* name : {"physical-floor-again", "physical-floor-2line", "physical-floor-ring", "shm-call-spin",
                           "shm-ring-spin", "shm-call-backoff", "moodycamel-thread"}) {
    const auto rung = rung_named(name);
    if (rung == rungs.end() || rung->round_p50.size() != floor->round_p50.size()) continue;
    nlohmann::json per_round = nlohmann::json::array();
    for (std::size_t i = 0; i < floor->round_p50.size(); ++i) per_round.push_back(rung->round_p50[i] / floor->round_p50[i]);
    round_ratios[std::string(name) + "/physical-floor"] = per_round;
  }
  return round_ratios;
}

// Ratios within this run, of the interpolated medians: on a host whose counter moves in steps the
// nearest-rank p50 of two rungs can differ only by whole steps (see LatencySummary::p50_interp).
nlohmann::json ratios_json(const nlohmann::json& results) {
  nlohmann::json ratios = nlohmann::json::object();
  const auto result_named = [&](const char* name) {
    return std::find_if(results.begin(), results.end(), [&](const auto& r) { return r["name"] == name; });
  };
  const auto p50 = [](const nlohmann::json& row) { return row["p50_interp"].get<double>(); };
  // Each rung over the physical floor.
  if (const auto floor = result_named("physical-floor"); floor != results.end())
    for (const auto& r : results)
      if (r["name"] != "physical-floor") ratios[r["name"].get<std::string>() + "/physical-floor"] = p50(r) / p50(*floor);
  // The rings against the two-line and the rotating-line floors: what the rings' software adds
  // to the hardware cost of a request line and an answer line, fixed or moving every round trip.
  const auto ring = result_named("shm-ring-spin");
  for (const char* hardware : {"physical-floor-2line", "physical-floor-ring"}) {
    const auto rung = result_named(hardware);
    if (rung != results.end() && ring != results.end())
      ratios[std::string("shm-ring-spin/") + hardware] = p50(*ring) / p50(*rung);
  }
  // Every software transport against the product's blocking call: how much each alternative costs.
  if (const auto call = result_named("shm-call-spin"); call != results.end())
    for (const auto& r : results)
      if (const auto name = r["name"].get<std::string>(); name != "shm-call-spin" && !name.starts_with("physical-floor"))
        ratios[name + "/shm-call-spin"] = p50(r) / p50(*call);
  return ratios;
}

}  // namespace

// The physical floor claims to be a lower bound, so a rung measured below it by more than the
// floor's own round-to-round spread says the floor missed how this host moves a line, and every
// ratio to the floor is then suspect.
nlohmann::json check_floor(const nlohmann::json& results) {
  nlohmann::json check{{"checked", false}, {"trustworthy", true}, {"below", nlohmann::json::array()}};
  const auto floor = std::find_if(results.begin(), results.end(), [](const auto& r) { return r["name"] == "physical-floor"; });
  if (floor == results.end()) return check;
  std::vector<double> rounds = (*floor)["round_p50"].get<std::vector<double>>();
  if (rounds.empty()) return check;
  std::sort(rounds.begin(), rounds.end());
  const double median = rounds[rounds.size() / 2];
  const double spread = median > 0 ? (rounds.back() - rounds.front()) / median : 0.0;
  const double p50 = (*floor)["p50_interp"].get<double>();
  check = {{"checked", true}, {"trustworthy", true}, {"floor_p50", p50}, {"round_spread", spread},
           {"below", nlohmann::json::array()}};
  for (const auto& r : results) {
    if (r["name"] == "physical-floor") continue;
    const double ratio = r["p50_interp"].get<double>() / p50;
    if (ratio < 1.0 - spread) check["below"].push_back({{"name", r["name"]}, {"ratio", ratio}});
  }
  check["trustworthy"] = check["below"].empty();
  if (!check["below"].empty()) {
    std::string names;
    for (const auto& b : check["below"])
      names += fmt::format("{}{} ({:.2f}x)", names.empty() ? "" : ", ", b["name"].get<std::string>(), b["ratio"].get<double>());
    check["note"] = fmt::format(
        "ratios to the floor are not trustworthy in this run: {} fell below the physical floor (p50~ {:.1f} ns) by more "
        "than the floor's own round-to-round spread ({:.0f}%), so the floor is not the lower bound it claims to be "
        "between these cpus",
        names, p50, 100.0 * spread);
  }
  return check;
}

Expected<nlohmann::json> run_ladder(const LadderOptions& options) {
  auto chosen = chosen_transports(options);
  if (!chosen) return std::unexpected(chosen.error());
  if (allowed_cpus().size() < 2 && (options.client_cpu < 0 || options.server_cpu < 0))
    return fail(ErrorCode::resource, "the ladder needs two cores (one per side); this process may use {}",
                allowed_cpus().size());
  const TscClock clock = TscClock::calibrate();
  const SuitePlacement where = place_suite(options.client_cpu, options.server_cpu, options.binary);
  auto matrix = find_saved_matrix(options.topology);
  if (!matrix) return std::unexpected(matrix.error());
  TransportContext context = transport_context(where, options.samples, options.warmup, clock);
  context.engine_strategies = options.strategies;
  context.ring_capacity = options.ring_capacity;

  const std::size_t rounds = std::max<std::size_t>(options.rounds, 1);
  std::vector<Rung> rungs;
  for (const Transport* transport : *chosen) rungs.push_back(Rung{transport, {}, {}, {}});
  run_rounds(rungs, context, rounds);
  nlohmann::json results = nlohmann::json::array();
  nlohmann::json skipped = nlohmann::json::array();
  for (Rung& rung : rungs) {
    if (!rung.skipped.empty()) {
      skipped.push_back({{"name", rung.transport->name}, {"reason", rung.skipped}});
      continue;
    }
    auto row = to_json(summarize(rung.transport->name, "rtt", rung.samples, clock.step_ns()));
    row["description"] = rung.transport->description;
    row["round_p50"] = rung.round_p50;
    add_style_notes(row, rung.notes);
    results.push_back(row);
  }
  return nlohmann::json{
      {"suite", "ladder"},
      {"host", collect_host_info()},
      {"config",
       {{"payload_bytes", 48}, {"samples", options.samples}, {"warmup", options.warmup}, {"rounds", rounds},
        {"client_cpu", context.client_cpu}, {"server_cpu", context.server_cpu}, {"tsc_ghz", clock.ghz()},
        {"ring_capacity", context.ring_capacity}, {"clock_step_ns", clock.step_ns()},
        {"timer", "rdtsc (lfence-ordered), calibrated against steady_clock"},
        {"ratios_from", "p50_interp: the grouped median, linear within the clock step holding the middle sample"}}},
      {"pair", describe_pair(context.client_cpu, context.server_cpu, *matrix)},
      {"results", results},
      {"skipped", skipped},
      {"ratios", ratios_json(results)},
      {"round_ratios", round_ratios_json(rungs)},
      {"floor_check", check_floor(results)},
  };
}

namespace {

// The physical floor's bounce styles: which one was the floor in how many rounds, and each
// style's p50~ by round.
void print_floor_styles(const nlohmann::json& report) {
  const auto& results = report["results"];
  const auto floor = std::find_if(results.begin(), results.end(), [](const auto& r) { return r["name"] == "physical-floor"; });
  if (floor == results.end() || !floor->contains("best_style")) return;
  std::map<std::string, int> wins;
  for (const auto& best : (*floor)["best_style"]) ++wins[best.get<std::string>()];
  std::string won;
  for (const auto& [style, count] : wins) won += fmt::format("{}{} ({} of {} rounds)", won.empty() ? "" : "; ", style,
                                                             count, (*floor)["best_style"].size());
  fmt::print("  physical-floor is the lowest of its bounce styles in each round: {}\n", won);
  for (const auto& style : (*floor)["styles"]) {
    std::string values;
    for (const auto& v : style["p50_by_round"]) values += fmt::format(" {:.0f}", v.get<double>());
    fmt::print("    {:<42} p50~ by round:{}\n", style["style"].get<std::string>(), values);
  }
}

}  // namespace

void print_ladder(const nlohmann::json& report) {
  const auto& config = report["config"];
  fmt::print("ladder: RTT of a 48-byte request and its reply, ns; {} samples each in {} interleaved rounds, {} warm-up "
             "per round; client cpu {}, server cpu {}\n",
             config["samples"].get<std::size_t>(), config["rounds"].get<std::size_t>(), config["warmup"].get<std::size_t>(),
             config["client_cpu"].get<int>(), config["server_cpu"].get<int>());
  if (report.contains("pair")) fmt::print("  {}\n", pair_text(report["pair"]));
  const double step = config.value("clock_step_ns", 0.0);
  if (step > 0)
    fmt::print("  (this host's TSC moves in steps of {:.1f} ns: percentiles are multiples of it; p50~ is the median "
               "interpolated within its step, and the ratios use it)\n", step);
  fmt::print("  {:<22} {:>7} {:>9} {:>9} {:>9} {:>9} {:>10} {:>10} {:>9}\n", "transport", "p50~", "p50", "p90", "p99",
             "p99.9", "p99.99", "max", "p50~/floor");
  double floor = 0;
  for (const auto& r : report["results"])
    if (r["name"] == "physical-floor") floor = r["p50_interp"].get<double>();
  for (const auto& r : report["results"]) {
    const std::string ratio = floor > 0 ? fmt::format("{:.2f}x", r["p50_interp"].get<double>() / floor) : "-";
    fmt::print("  {:<22} {:>7.1f} {:>9.0f} {:>9.0f} {:>9.0f} {:>9.0f} {:>10.0f} {:>10.0f} {:>9}\n",
               r["name"].get<std::string>(), r["p50_interp"].get<double>(), r["p50"].get<double>(),
               r["p90"].get<double>(), r["p99"].get<double>(), r["p999"].get<double>(), r["p9999"].get<double>(),
               r["max"].get<double>(), ratio);
  }
  for (const auto& s : report["skipped"])
    fmt::print("  {:<22} skipped: {}\n", s["name"].get<std::string>(), s["reason"].get<std::string>());
  for (const auto& [name, per_round] : report["round_ratios"].items()) {
    std::string values;
    for (const auto& v : per_round) values += fmt::format("{}{:.2f}", values.empty() ? "" : " ", v.get<double>());
    fmt::print("  {} p50~ by round: {}\n", name, values);
  }
  print_floor_styles(report);
  if (const auto check = report.value("floor_check", nlohmann::json::object()); check.value("checked", false)) {
    if (check["trustworthy"].get<bool>())
      fmt::print("  floor check: no rung below the physical floor by more than its round-to-round spread ({:.0f}%)\n",
                 100.0 * check["round_spread"].get<double>());
    else
      fmt::print("  WARNING: {}\n", check["note"].get<std::string>());
  }
}

}  // namespace ipcfloor
