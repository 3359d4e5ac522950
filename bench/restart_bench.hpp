#pragma once
// `ipcfloor bench restart`: what the journal of appended bars costs and what it buys.
//
//   append       the APPEND round trip, per sample (a writer's blocking append, answered once its
//                bar's record is durable), and the rate of back-to-back appends through the ring,
//                with --journal under each --fsync policy, beside no journal, in one run
//   restart gap  from the SIGKILL of an engine to a re-attached client's first answer (the client
//                attached with reconnect, the next engine spawned at once, as systemd's
//                Restart=always does), per restart, with a preload of `preload_bars` and a journal
//                of `journal_bars`
//   crash        `kills` SIGKILLs at random moments while a writer appends as fast as the engine
//                takes its bars (re-attaching after each, and going on from the bar after the
//                engine's last, as `feed --reconnect` does), once per --fsync policy: after each
//                restart every acknowledged bar must be in the series, and at the end the series
//                must be the source, bar for bar (no gap, no duplicate)
//
// Engines run as child processes (`ipcfloor serve`), their journals in `journal_dir` (by default a
// fresh folder under /var/tmp: a disk, where fdatasync costs what it costs in production).

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/error.hpp"

namespace ipcfloor {

struct RestartBenchOptions {
  std::size_t append_samples = 5'000;   // timed blocking APPENDs per policy
  std::size_t append_warmup = 500;
  std::size_t pipelined_bars = 50'000;  // bars streamed back to back per policy
  std::size_t restarts = 50;            // restart-gap samples
  std::size_t preload_bars = 150'000;   // the restart gap's preload
  std::size_t journal_bars = 1'000'000; // the restart gap's journal
  std::size_t kills = 200;              // SIGKILLs per crash run
  std::vector<std::string> policies = {"every", "interval:50", "none"};
  std::string journal_dir;              // empty: a fresh folder under /var/tmp, removed after
  int client_cpu = -1;
  int server_cpu = -1;
  std::string binary;                   // empty: this executable
};

// Every figure is checked: each APPEND answered ok with the bar count it must have, each restart
// answered by the engine that came back, each crash run's series the source. Setup path:
// allocates, spawns engines, writes journals.
[[nodiscard]] Expected<nlohmann::json> run_restart_bench(const RestartBenchOptions& options);
void print_restart_bench(const nlohmann::json& report);

}  // namespace ipcfloor
