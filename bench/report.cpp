#include "bench/report.hpp"

#include <fmt/format.h>

namespace ipcfloor {
namespace {

std::string latency_table(const nlohmann::json& results, const char* unit_label, double scale) {
  std::string md = fmt::format("| transport | p50 | p90 | p99 | p99.9 | p99.99 | max | samples |\n"
                               "|---|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const auto& r : results)
    md += fmt::format("| {} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {} |\n",
                      r["name"].get<std::string>(), r["p50"].get<double>() / scale, r["p90"].get<double>() / scale,
                      r["p99"].get<double>() / scale, r["p999"].get<double>() / scale,
                      r["p9999"].get<double>() / scale, r["max"].get<double>() / scale,
                      r["samples"].get<std::size_t>());
  md += fmt::format("\nAll figures in {}.\n", unit_label);
  return md;
}

std::string ladder_section(const nlohmann::json& ladder) {
  std::string md = "## Floor ladder: RTT of a 48-byte request and its reply\n\n";
  const auto& c = ladder["config"];
  md += fmt::format("{} samples per transport in {} interleaved rounds ({} warm-up per round), each timed on its own "
                    "(rdtsc at {:.2f} GHz); client on cpu {}, server on cpu {}.\n\n",
                    c["samples"].get<std::size_t>(), c.value("rounds", std::size_t{1}), c["warmup"].get<std::size_t>(),
                    c["tsc_ghz"].get<double>(), c["client_cpu"].get<int>(), c["server_cpu"].get<int>());
  md += latency_table(ladder["results"], "nanoseconds (RTT)", 1.0);
  // Per-round medians: a VM's core-to-core path can change under the guest mid-run, and a
  // pooled p50 then mixes two regimes; the rounds show which.
  md += "\np50 of each round, ns:\n\n| transport | by round |\n|---|---|\n";
  for (const auto& r : ladder["results"]) {
    std::string rounds;
    for (const auto& v : r.value("round_p50", nlohmann::json::array()))
      rounds += fmt::format("{}{:.0f}", rounds.empty() ? "" : ", ", v.get<double>());
    md += fmt::format("| {} | {} |\n", r["name"].get<std::string>(), rounds);
  }
  if (ladder.contains("round_ratios") && !ladder["round_ratios"].empty()) {
    md += "\n| ratio of round p50s (same round) | by round |\n|---|---|\n";
    for (const auto& [name, per_round] : ladder["round_ratios"].items()) {
      std::string values;
      for (const auto& v : per_round) values += fmt::format("{}{:.2f}", values.empty() ? "" : ", ", v.get<double>());
      md += fmt::format("| {} | {} |\n", name, values);
    }
  }
  if (!ladder["ratios"].empty()) {
    md += "\n| ratio (p50 / p50, same run) | value |\n|---|---:|\n";
    for (const auto& [name, value] : ladder["ratios"].items())
      md += fmt::format("| {} | {:.2f} |\n", name, value.get<double>());
  }
  for (const auto& s : ladder["skipped"])
    md += fmt::format("\n- skipped `{}`: {}", s["name"].get<std::string>(), s["reason"].get<std::string>());
  if (const auto check = ladder.value("floor_check", nlohmann::json::object()); check.value("checked", false)) {
    if (check["trustworthy"].get<bool>())
      md += fmt::format("\n\nFloor check: no rung fell below the physical floor by more than the floor's round-to-round "
                        "spread ({:.0f}%).", 100.0 * check["round_spread"].get<double>());
    else
      md += fmt::format("\n\n**Floor check: {}.**", check["note"].get<std::string>());
  }
  return md + "\n";
}

// The caveat every verdict measured against the physical floor carries when the ladder found the
// floor is not a lower bound in this run; empty otherwise.
std::string floor_caveat(const nlohmann::json& suites) {
  if (!suites.contains("ladder")) return {};
  const auto check = suites["ladder"].value("floor_check", nlohmann::json::object());
  if (!check.value("checked", false) || check["trustworthy"].get<bool>()) return {};
  return " (not trustworthy: the ladder's floor check found rungs below the physical floor in this run, so the floor "
         "this verdict is measured against is not a lower bound here)";
}

std::string hygiene_section(const nlohmann::json& hygiene) {
  std::string md = "## Hygiene: what the serving thread does per request\n\n"
                   "| transport | side | opcode | syscalls / request | page faults / request | context switches / request "
                   "| traced requests | counted requests |\n|---|---|---|---:|---:|---:|---:|---:|\n";
  for (const auto& r : hygiene["results"])
    md += fmt::format("| {} | {} | {} | {:.4g} | {:.4g} | {:.4g} | {} | {} |\n", r["transport"].get<std::string>(),
                      r.value("side", std::string("?")), r["opcode"].get<std::string>(),
                      r["syscalls_per_request"].get<double>(), r["faults_per_request"].get<double>(),
                      r["switches_per_request"].get<double>(), r.value("traced_requests", std::size_t{0}),
                      r["requests"].get<std::size_t>());
  md += fmt::format("\nMethod: {}.\n\n", hygiene["config"]["method"].get<std::string>());
  if (!hygiene.contains("memory")) return md;
  const auto& m = hygiene["memory"];
  md += "### Memory: first write to each page, with and without prefault (each write timed on its own)\n\n"
        "| backing | prefault | MiB | mmap us | first write p50 ns | p99 ns | max ns | all pages us | guest faults "
        "| second write p50 ns |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const auto& r : m["first_touch"])
    md += fmt::format("| {} | {} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {} | {:.0f} |\n",
                      r["backing"].get<std::string>(), r["prefault"].get<bool>() ? "yes" : "no",
                      r["bytes"].get<double>() / (1 << 20), r["map_ns"].get<double>() / 1e3,
                      r["touch_p50_ns"].get<double>(), r["touch_p99_ns"].get<double>(), r["touch_max_ns"].get<double>(),
                      r["touch_total_ns"].get<double>() / 1e3, r["minor_faults"].get<std::uint64_t>(),
                      r.value("retouch_p50_ns", 0.0));
  md += "\n### Memory: full scans (sum of doubles), 2 MiB against 4 KiB pages (each scan timed on its own)\n\n"
        "| backing | what | min us | p50 us | p99 us | samples |\n|---|---|---:|---:|---:|---:|\n";
  for (const auto& r : m["scan"])
    md += fmt::format("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {} |\n", r["backing"].get<std::string>(),
                      r["what"].get<std::string>(), r["min_ns"].get<double>() / 1e3, r["p50_ns"].get<double>() / 1e3,
                      r["p99_ns"].get<double>() / 1e3, r["samples"].get<std::size_t>());
  for (const auto& sk : m["skipped"])
    md += fmt::format("\n- skipped {}: {}", sk["what"].get<std::string>(), sk["reason"].get<std::string>());
  return md + "\n\n";
}

std::string serialization_section(const nlohmann::json& s) {
  std::string md = fmt::format("## Serialization tax: {} floats, raw bytes vs JSON\n\n",
                               s["config"]["bars"].get<std::size_t>());
  md += "| operation | p50 us | p99 us | bytes |\n|---|---:|---:|---:|\n";
  for (const auto& r : s["results"])
    md += fmt::format("| {} | {:.1f} | {:.1f} | {} |\n", r["name"].get<std::string>(), r["p50"].get<double>() / 1e3,
                      r["p99"].get<double>() / 1e3, r["bytes"].get<std::size_t>());
  const auto& q = s["ratios"];
  return md + fmt::format("\nJSON / raw at p50: encode {:.0f}x, decode {:.0f}x, round trip {:.0f}x.\n\n",
                          q["json_encode/raw_encode"].get<double>(), q["json_decode/raw_decode"].get<double>(),
                          q["json_roundtrip/raw_roundtrip"].get<double>());
}

std::string compute_section(const nlohmann::json& c) {
  const unsigned threads = c["config"]["threads"].get<unsigned>();
  std::string md = fmt::format(
      "## Compute: the 80-combo sweep in-process vs numba\n\nKernel path chosen here: {} ({}).\n\n"
      "| implementation | median s, {} threads | median s, 1 thread | vs numba | 1 thread vs numba | parity |\n"
      "|---|---:|---:|---:|---:|---|\n",
      c["kernel_isa"].get<std::string>(), c["kernel_isa_forced"].get<bool>() ? "IPCFLOOR_ISA" : "CPUID", threads);
  for (const auto& path : c["paths"])
    md += fmt::format("| ipcfloor {} path | {:.4f} | {:.4f} | {:.1f}x | {:.1f}x | {} |\n", path["isa"].get<std::string>(),
                      path["median_s"].get<double>(), path["single_thread_median_s"].get<double>(),
                      path["speedup_vs_numba"].get<double>(), path["speedup_single_thread_vs_numba"].get<double>(),
                      path["parity"]["holds"].get<bool>() ? "bit-identical" : "DIFFERS");
  md += fmt::format("| numba {} @njit | | {:.4f} | 1x | 1x | reference |\n", c["numba_version"].get<std::string>(),
                    c["numba_median_s"].get<double>());
  if (c.contains("fingerprint"))
    md += fmt::format("\nFingerprint L=6: pnl {:.17g}, trades {}.\n", c["fingerprint"]["pnl"].get<double>(),
                      c["fingerprint"]["trades"].get<std::int64_t>());
  bool header = false;
  for (const auto& path : c["paths"]) {
    if (!path.contains("short_backtest")) continue;
    const auto& one = path["short_backtest"];
    if (!header) {
      md += fmt::format("\nOne backtest at a time, L={} on {} bars, each call timed on its own (ns):\n\n"
                        "| path | p50 | p99 | calls |\n|---|---:|---:|---:|\n",
                        one["length"].get<std::int64_t>(), one["bars"].get<std::size_t>());
      header = true;
    }
    md += fmt::format("| {} | {:.0f} | {:.0f} | {} |\n", path["isa"].get<std::string>(), one["ns"]["p50"].get<double>(),
                      one["ns"]["p99"].get<double>(), one["ns"]["samples"].get<std::size_t>());
  }
  return md + "\n";
}

std::string live_section(const nlohmann::json& l, const std::string& caveat) {
  std::string md =
      "## Live: tick to signal\n\nOne-way ns from the writer's clock reading before it publishes an APPEND to the "
      "subscriber's receipt of the bar's signals (writer and subscriber in one thread, the engine spinning on its "
      "own cpu), beside the physical floor (RTT) of the same run; p50~ is the median interpolated within the clock's "
      "step.\n\n"
      "| what | p50~ | p99 | p99.9 | max |\n|---|---:|---:|---:|---:|\n";
  const auto row = [&md](const std::string& what, const nlohmann::json& s) {
    md += fmt::format("| {} | {:.0f} | {:.0f} | {:.0f} | {:.0f} |\n", what, s["p50_interp"].get<double>(),
                      s["p99"].get<double>(), s["p999"].get<double>(), s["max"].get<double>());
  };
  row("physical-floor (RTT)", l["physical_floor"]);
  row("one bar of L=6 (compute)", l["one_bar_compute"]);
  for (const auto& run : l["tick_to_signal"]) {
    row(fmt::format("{} combos, first signal", run["combos"].get<std::size_t>()), run["first_signal"]);
    row(fmt::format("{} combos, all signals", run["combos"].get<std::size_t>()), run["all_signals"]);
  }
  const auto& goal = l["goal"];
  md += fmt::format("\nGoal ({}): p50~ {:.0f} ns, bound {:.0f} ns, {:.2f}x floor+compute: **{}**{}.\n\n",
                    goal["what"].get<std::string>(), goal["p50_ns"].get<double>(), goal["bound_ns"].get<double>(),
                    goal["ratio"].get<double>(), goal["met"].get<bool>() ? "met" : "not met", caveat);
  md += "| combos | bars/s back to back | signals received | dropped |\n|---:|---:|---:|---:|\n";
  for (const auto& t : l["throughput"])
    md += fmt::format("| {} | {:.0f} | {} | {} |\n", t["combos"].get<std::size_t>(), t["bars_per_s"].get<double>(),
                      t["signals_received"].get<std::uint64_t>(), t["signals_dropped"].get<std::uint64_t>());
  return md + "\n";
}

std::string throughput_section(const nlohmann::json& t) {
  const auto& config = t["config"];
  std::string md = fmt::format(
      "## Throughput: requests per second, one client thread, one serving thread\n\n48-byte ECHO frames; "
      "{}-slot rings; rates are p10/p50/p90 over {} windows of {} answers, RTT over every answer.\n\n"
      "| scenario | lanes | in flight | req/s p10 | req/s p50 | req/s p90 | RTT p50 ns | RTT p99 ns |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|\n",
      config["ring_capacity"].get<unsigned>(), config["windows"].get<std::size_t>(),
      config["window_requests"].get<std::size_t>());
  for (const auto& s : t["scenarios"])
    md += fmt::format("| {} | {} | {} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f} |\n", s["name"].get<std::string>(),
                      s["lanes"].get<std::size_t>(), s["in_flight"].get<std::size_t>(), s["rate_p10"].get<double>(),
                      s["rate_p50"].get<double>(), s["rate_p90"].get<double>(), s["rtt"]["p50"].get<double>(),
                      s["rtt"]["p99"].get<double>());
  md += "\nThe 80-combo grid on 150,000 bars, one computing thread each way, interleaved:\n\n"
        "| way | p50 ms | min ms | max ms | combos/s | vs in-process |\n|---|---:|---:|---:|---:|---:|\n";
  for (const auto& g : t["grid"])
    md += fmt::format("| {} | {:.2f} | {:.2f} | {:.2f} | {:.0f} | {:+.2f}% |\n", g["name"].get<std::string>(),
                      g["p50_ms"].get<double>(), g["min_ms"].get<double>(), g["max_ms"].get<double>(),
                      g["combos_per_s"].get<double>(), g["overhead_vs_inproc"].get<double>() * 100.0);
  return md + "\n";
}

std::string granularity_section(const nlohmann::json& g) {
  std::string md = "## Granularity: the 80-combo sweep, six ways\n\n| way | p50 ms | min ms | max ms | what crosses |\n"
                   "|---|---:|---:|---:|---|\n";
  for (const auto& r : g["results"])
    md += fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} | {} |\n", r["name"].get<std::string>(), r["p50"].get<double>() / 1e6,
                      r["min"].get<double>() / 1e6, r["max"].get<double>() / 1e6, r["description"].get<std::string>());
  md += "\nBreak-even G = compute per call / transport floor (ECHO RTT p50, this run):\n\n"
        "| granularity | compute ns | G shm-call-spin | G uds | G tcp |\n|---|---:|---:|---:|---:|\n";
  for (const auto& r : g["break_even"])
    md += fmt::format("| {} | {:.0f} | {:.1f} | {:.1f} | {:.1f} |\n", r["granularity"].get<std::string>(),
                      r["compute_ns"].get<double>(), r["G_shm-call-spin"].get<double>(), r["G_uds"].get<double>(),
                      r["G_tcp"].get<double>());
  return md + "\n";
}

std::string ablation_section(const nlohmann::json& a) {
  std::string md = fmt::format("## Ablation: one BACKTEST (L={}) split into kernel, transport and plumbing\n\n",
                               a["config"]["combo_length"].get<std::int64_t>());
  md += "| transport | bars | full ns | kernel ns | transport ns | plumbing ns | kernel / transport / plumbing |\n"
        "|---|---:|---:|---:|---:|---:|---|\n";
  for (const auto& r : a["results"])
    md += fmt::format("| {} | {} | {:.0f} | {:.0f} | {:.0f} | {:.0f} | {:.0f}% / {:.0f}% / {:.0f}% |\n",
                      r["transport"].get<std::string>(), r["bars"].get<std::size_t>(), r["full_ns"].get<double>(),
                      r["kernel_ns"].get<double>(), r["transport_ns"].get<double>(), r["plumbing_ns"].get<double>(),
                      100 * r["kernel_share"].get<double>(), 100 * r["transport_share"].get<double>(),
                      100 * r["plumbing_share"].get<double>());
  return md + "\n";
}

std::string echo_section(const nlohmann::json& e) {
  std::string md = "## Echo curve: RTT against payload size\n\n";
  for (const auto& s : e["series"]) {
    md += fmt::format("**{}** — fit: floor {:.1f} us + bytes / {:.2f} GB/s\n\n| bytes each way | p50 us | p99 us | samples |\n"
                      "|---:|---:|---:|---:|\n",
                      s["transport"].get<std::string>(), s["fit"]["floor_ns"].get<double>() / 1e3,
                      s["fit"]["gb_per_s"].get<double>());
    for (const auto& p : s["points"])
      md += fmt::format("| {} | {:.1f} | {:.1f} | {} |\n", p["bytes"].get<std::size_t>(), p["p50"].get<double>() / 1e3,
                        p["p99"].get<double>() / 1e3, p["samples"].get<std::size_t>());
    md += "\n";
  }
  return md;
}

}  // namespace

std::string render_markdown(const nlohmann::json& combined) {
  std::string md = "# ipcfloor benchmark report\n\n";
  const auto& h = combined["host"];
  md += fmt::format("Command: `{}`\n\nHost: {}, {} online cpus, kernel {}, isolated cpus: {}, huge pages {} (free {}), "
                    "THP {}, governor {}, memlock {}.\n\n",
                    combined.value("command", "?"), h.value("cpu", "?"), h.value("online_cpus", 0), h.value("kernel", "?"),
                    h.value("isolated_cpus", "?"), h.value("hugepages_total", "?"), h.value("hugepages_free", "?"),
                    h.value("thp", "?"), h.value("governor", "?"), h.value("memlock", "?"));
  const auto& suites = combined["suites"];
  if (const std::string caveat = floor_caveat(suites); !caveat.empty())
    md += fmt::format("**Floor check failed**: {}. Every ratio to the physical floor below, and every verdict measured "
                      "against it, is not trustworthy.\n\n",
                      suites["ladder"]["floor_check"]["note"].get<std::string>());
  if (suites.contains("ladder")) md += ladder_section(suites["ladder"]);
  if (suites.contains("echo")) md += echo_section(suites["echo"]);
  if (suites.contains("hygiene")) md += hygiene_section(suites["hygiene"]);
  if (suites.contains("serialization")) md += serialization_section(suites["serialization"]);
  if (suites.contains("granularity")) md += granularity_section(suites["granularity"]);
  if (suites.contains("ablation")) md += ablation_section(suites["ablation"]);
  if (suites.contains("compute")) md += compute_section(suites["compute"]);
  if (suites.contains("throughput")) md += throughput_section(suites["throughput"]);
  if (suites.contains("live")) md += live_section(suites["live"], floor_caveat(suites));
  if (combined.contains("plots")) {
    md += "## Plots\n\n";
    for (const auto& plot : combined["plots"]) md += fmt::format("![{0}]({0})\n\n", plot.get<std::string>());
  }
  return md;
}

}  // namespace ipcfloor
