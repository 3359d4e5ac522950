#pragma once
// `ipcfloor serve`: preload the series, create the segment, pin the serving thread, keep the
// heartbeat, reclaim dead clients' lanes, report telemetry, and stop cleanly on SIGINT/SIGTERM.
// With --socket/--tcp the same process also serves the socket baseline (socket_server/socket_server.hpp)
// on other threads; with --no-shm it serves only that (no segment, no spinning thread).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "common/peer_policy.hpp"
#include "engine/bar_journal.hpp"
#include "kernel/cost.hpp"
#include "kernel/kernel.hpp"
#include "data/series_source.hpp"
#include "socket/socket_protocol.hpp"
#include "socket_server/socket_options.hpp"
#include "shm/segment.hpp"
#include "shm/wait_strategy.hpp"

namespace ipcfloor {

struct ServeOptions {
  std::string name = "ipcfloor";
  SeriesSource source;
  std::optional<int> cpu;  // unset: the last cpu this process may use
  bool cpu_auto = false;   // --cpu auto: placed by the floor matrix (app/topology_command.hpp)
  std::string topology;    // --topology FILE: the saved matrix to place by; empty: the default one
  bool fifo = false;       // SCHED_FIFO for the serving thread
  int fifo_priority = 50;
  std::uint32_t lanes = kDefaultLanes;
  std::uint32_t ring_capacity = kDefaultRingCapacity;
  std::size_t bulk_bytes = kDefaultBulkBytes;  // per lane, for ECHO_BULK
  double fee = kDefaultFee;
  double bars_per_year = kDefaultBarsPerYear;  // annualises STATS that do not say (docs/STATISTICS.md)
  WaitMode wait = WaitMode::spin;
  HugePagesMode hugepages = HugePagesMode::automatic;
  MlockMode mlock = MlockMode::automatic;
  std::chrono::milliseconds heartbeat{10};
  // Where the engine's socket DIR/NAME lives (--socket-dir; default: shm/socket_dir.hpp).
  std::string socket_dir = default_socket_dir();
  // The bound on one BACKTEST's work, in work units (the strategy's cost()) (--max-frame-cost; 0: none): fixed,
  // so a request gets the same verdict on every host.
  std::uint64_t max_frame_cost = kDefaultMaxFrameCost;
  // Opt-in instead: a bound in time (--max-frame-ms), turned into units at start by timing this
  // host's kernel. Zero: not used.
  std::chrono::milliseconds max_frame_time{0};
  // Compute workers (--workers, --worker-cpus): unset, every allowed cpu but the serving one.
  std::optional<std::uint32_t> workers;
  std::vector<int> worker_cpus;
  std::uint64_t inline_cost = kDefaultInlineCost;   // --inline-cost: cheaper BACKTESTs stay on the serving thread
  std::uint64_t max_bar_cost = kDefaultMaxBarCost;  // --max-bar-cost: live, one bar's work over every subscription
  bool ring_capacity_given = false;                 // else sized for the workers (serve_ring_capacity)
  // Live mode (--live): room for `capacity_bars` bars in all (--capacity), a signal ring of
  // `signal_capacity` slots per lane, up to `subscriptions_per_lane` combos per lane.
  bool live = false;
  std::size_t capacity_bars = 0;
  // --data given more than once: the files after the first, preloaded as further series a
  // BACKTEST names by index (1, 2, ...); each is named after its file.
  std::vector<std::string> more_data;
  std::uint32_t signal_capacity = kDefaultSignalCapacity;
  std::uint32_t subscriptions_per_lane = 256;
  // --journal DIR (live): every APPEND is written to DIR/bars.journal before it is answered, and
  // replayed at the next start; --fsync says when a record counts as written. Empty: no journal.
  std::string journal_dir;
  JournalSync fsync;
  bool quiet = false;  // only errors and warnings on stderr
  std::string pidfile;  // --pidfile PATH: written once serving, removed at exit
  // --strategy FILE.so, repeatable: strategies loaded (and checked) before the ready line, served
  // beside the built-in one by the segment and the sockets, in this order (index 1, 2, ...).
  std::vector<std::string> strategies;
  std::string metrics;  // --metrics HOST:PORT: the Prometheus exposition over HTTP (app/metrics_http.hpp); empty: none

  // The socket baseline (docs/SPEC.md §4), served by the same process on its own threads.
  bool shm = true;                  // false (--no-shm): no segment, no pinned serving thread
  // The sockets hold the series too (opcode 5, use_preloaded): always with the segment; with
  // --no-shm only when --data or a GBM option says which series.
  bool socket_series = true;
  std::string socket_path;          // --socket PATH: Unix-domain socket; empty: none
  std::string tcp_endpoint;         // --tcp HOST:PORT (host defaults to loopback); empty: none
  std::optional<int> socket_cpu;    // --socket-cpu K; unset: every allowed cpu but the shm thread's
  unsigned socket_threads = 1;      // --socket-threads N
  unsigned sweep_threads = 1;       // --sweep-threads N: workers for one socket sweep of many combos
  std::uint32_t max_frame_bytes = kDefaultMaxFrameBytes;    // --max-frame BYTES
  std::chrono::milliseconds frame_timeout{5000};            // --frame-timeout-ms MS
  std::size_t max_connections = 64;                         // --max-connections N
  std::size_t owner_reserve = 4;    // --owner-reserve N: of those, slots only the server's own uid may take
  std::size_t max_per_peer = 32;    // --max-per-peer N: of those, what one TCP address (or other uid) may hold
  std::uint64_t min_frame_rate = kDefaultMinFrameRate;      // --min-frame-rate BYTES: a second, or dropped
  std::chrono::milliseconds idle_timeout{60'000};           // --idle-timeout-s S
  std::uint64_t max_loaded_bytes = std::uint64_t{1} << 30;  // --max-loaded-mb MB: what all connections hold (series, frames, replies)
  bool socket_any_uid = false;      // --socket-any-uid: socket file 0666, no SO_PEERCRED check
  // --allow-uid and --allow-group: who besides this user may attach to the segment and use the
  // Unix socket (both sockets 0666 then; each peer admitted by SO_PEERCRED).
  PeerPolicy peers;
};

// The most combos one lane may subscribe in live mode (--subscriptions). Each lane's history
// arena of 65,536 doubles (engine/live_book.hpp) is the tighter bound for long windows.
inline constexpr std::uint32_t kMaxSubscriptionsPerLane = 4096;

// What the command line gives before it becomes ServeOptions: the spellings still to parse.
// Every option carries its range (app/cli_common.hpp); the rules between options are checked
// by run_serve_command, with exit code 2.
struct ServeCli {
  ServeOptions options;
  std::vector<std::string> data;  // --data FILE, repeatable; empty: generate
  std::string wait = "spin";
  std::string hugepages = "auto";
  std::string mlock = "auto";
  unsigned heartbeat_ms = 10;
  unsigned frame_timeout_ms = 5000;
  unsigned max_frame_ms = 0;
  int workers = -1;         // -1: the default
  std::string worker_cpus;  // a cpu list such as "0-6,8"; empty: the default
  unsigned idle_timeout_s = 60;
  std::uint64_t max_loaded_mb = 1024;
  std::string log_level;  // empty: info, or warn with --quiet
  bool no_shm = false;
  bool gbm_given = false;            // --bars, --seed, ... appeared
  bool live_options_given = false;   // --capacity, --signal-capacity or --subscriptions appeared
  std::string fsync;                 // --fsync every|interval:MS|none; empty: not given (every)
  bool owner_reserve_given = false;  // --owner-reserve appeared
  std::vector<std::string> allow_uids;    // --allow-uid USER, repeatable: names or numbers
  std::vector<std::string> allow_groups;  // --allow-group GROUP, repeatable
};

// Adds the `serve` subcommand, bound to `cli`.
CLI::App* add_serve_subcommand(CLI::App& app, ServeCli& cli);

// Checks the rules between options (exit 2), parses what is left in `cli` and runs run_serve.
// Returns the exit code.
[[nodiscard]] int run_serve_command(ServeCli& cli);

// Loads the series, starts an EngineHost (host/engine_host.hpp) and runs its keeper loop
// until SIGINT or SIGTERM. Returns the process exit code; errors are printed to stderr. On the
// way out it removes the segment and the socket file and prints both servers' counters.
[[nodiscard]] int run_serve(const ServeOptions& options);

}  // namespace ipcfloor
