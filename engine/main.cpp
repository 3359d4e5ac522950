// The ipcfloor command line (SPEC §7). Scripts depend on it: flags and output formats are a
// contract. Errors go to stderr with a non-zero exit code.

#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/bench_command.hpp"
#include "clients/shm_client.hpp"
#include "clients/socket_client.hpp"
#include "engine/gbm.hpp"
#include "engine/kernel.hpp"
#include "engine/series_io.hpp"
#include "engine/serve_command.hpp"
#include "engine/socket_server.hpp"
#include "engine/series_source.hpp"
#include "engine/status_command.hpp"
#include "engine/stdio_command.hpp"
#include "engine/sweep_report.hpp"

namespace {

using namespace ipcfloor;

constexpr int kExitFailure = 1;

int report_error(const Error& error) {
  fmt::print(stderr, "ipcfloor: {}\n", error.message);
  return kExitFailure;
}

void add_gbm_options(CLI::App& command, GbmParams& gbm) {
  command.add_option("--bars", gbm.bars, "number of bars to generate")->capture_default_str();
  command.add_option("--seed", gbm.seed, "numpy default_rng seed")->capture_default_str();
  command.add_option("--mu", gbm.mu, "drift per year")->capture_default_str();
  command.add_option("--sigma", gbm.sigma, "volatility per year")->capture_default_str();
  command.add_option("--s0", gbm.s0, "first close")->capture_default_str();
  command.add_option("--dt", gbm.dt, "bar length in years (default 1/(252*390))");
}

int run_gen(const GbmParams& gbm, const std::string& out_path) {
  auto close = generate_gbm(gbm);
  if (!close) return report_error(close.error());
  if (auto saved = save_series(out_path, *close); !saved) return report_error(saved.error());
  fmt::print(stderr, "ipcfloor gen: wrote {} bars (seed {}) to {}\n", close->size(), gbm.seed, out_path);
  return 0;
}

struct SweepOptions {
  bool inproc = false;
  std::string name;  // set: stream through the engine's shm segment
  std::string socket_path;  // set: ship series and combos to `serve --socket PATH`
  std::string tcp;          // set: ship them to `serve --tcp HOST:PORT`
  bool stateful = false;    // socket: load the series once, then combos only
  bool timeout_given = false;
  std::string wait;  // shm client wait mode; empty = the engine's
  double timeout_s = 5.0;
  bool fee_given = false;
  SeriesSource source;
  std::string lengths;
  std::string grid = "6:200:80";
  bool json = false;
  double fee = kDefaultFee;
  unsigned threads = 0;
};

// The default data set's checksum, to tell whether an engine serves the fingerprint's data.
bool is_default_series(std::uint64_t checksum) {
  auto close = generate_gbm(GbmParams{});
  return close && fnv1a64(std::as_bytes(std::span<const double>(*close))) == checksum;
}

Expected<std::vector<BacktestResult>> sweep_through_segment(const SweepOptions& options,
                                                            std::span<const Combo> combos, std::string& where,
                                                            bool& is_default, double& fee) {
  ShmClientOptions client_options;
  client_options.timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(options.timeout_s));
  if (!options.wait.empty()) {
    auto mode = parse_wait_mode(options.wait);
    if (!mode) return std::unexpected(mode.error());
    client_options.wait = *mode;
  }
  auto client = ShmClient::connect(options.name, client_options);
  if (!client) return std::unexpected(client.error());
  const SegmentHeader& header = client->segment().header();
  fee = header.fee;
  if (options.fee_given && options.fee != header.fee)
    return fail(ErrorCode::invalid_argument, "--fee {} differs from the fee {} engine {} serves with; restart it with --fee",
                options.fee, header.fee, options.name);
  auto answers = client->run_all(combos, Opcode::backtest);
  if (!answers) return std::unexpected(answers.error());
  std::vector<BacktestResult> results;
  for (std::size_t i = 0; i < answers->size(); ++i) {
    const ResponseSlot& answer = (*answers)[i];
    if (answer.status != static_cast<std::uint16_t>(Status::ok)) {
      const auto w = combos[i].as_array();
      return fail(ErrorCode::protocol, "engine {} rejected combo [{}, {}, {}, {}, {}, {}]: {} (the series has {} bars)",
                  options.name, w[0], w[1], w[2], w[3], w[4], w[5], to_string(static_cast<Status>(answer.status)),
                  header.n_bars);
    }
    results.push_back({answer.pnl, answer.trades});
  }
  where = fmt::format("through shm segment {} (lane {}, {} mode), {} bars", options.name, client->lane(),
                      to_string(client->wait_mode()), header.n_bars);
  is_default = is_default_series(header.series_checksum);
  return results;
}

// A socket sweep is one call (the whole batch), so without --timeout it may take this long.
constexpr double kSocketSweepTimeoutS = 600.0;

Expected<std::vector<BacktestResult>> sweep_through_socket(const SweepOptions& options, const LoadedSeries& series,
                                                           std::span<const Combo> combos, std::string& where,
                                                           double& fee) {
  SocketClientOptions client_options;
  client_options.timeout = std::chrono::milliseconds(
      static_cast<std::int64_t>(1000.0 * (options.timeout_given ? options.timeout_s : kSocketSweepTimeoutS)));
  Expected<SocketClient> client = std::unexpected(Error{ErrorCode::invalid_argument, "no socket target"});
  if (!options.socket_path.empty()) {
    client = SocketClient::connect_unix(options.socket_path, client_options);
  } else {
    auto endpoint = parse_tcp_endpoint(options.tcp);
    if (!endpoint) return std::unexpected(endpoint.error());
    client = SocketClient::connect_tcp(endpoint->host, endpoint->port, client_options);
  }
  if (!client) return std::unexpected(client.error());
  if (!options.stateful) {
    where = fmt::format("over {} ({} bars), through {} (stateless: series and combos in one frame)",
                        series.description, series.close.size(), client->server());
    return client->sweep(series.close, combos);
  }
  auto loaded = client->load(series.close);
  if (!loaded) return std::unexpected(loaded.error());
  const std::uint64_t checksum = fnv1a64(std::as_bytes(std::span<const double>(series.close)));
  if (loaded->checksum != checksum)
    return fail(ErrorCode::protocol, "{} stored the series with checksum {:016x}, but the series sent has {:016x}",
                client->server(), loaded->checksum, checksum);
  if (options.fee_given && options.fee != loaded->fee)
    return fail(ErrorCode::invalid_argument, "--fee {} differs from the fee {} that {} sweeps with; restart it with --fee",
                options.fee, loaded->fee, client->server());
  fee = loaded->fee;
  where = fmt::format("over {} ({} bars), through {} (stateful: series loaded once, then combos only)",
                      series.description, series.close.size(), client->server());
  return client->sweep_loaded(combos);
}

int run_sweep_command(const SweepOptions& options) {
  auto lengths = options.lengths.empty() ? parse_grid(options.grid) : parse_lengths(options.lengths);
  if (!lengths) return report_error(lengths.error());
  std::vector<Combo> combos;
  combos.reserve(lengths->size());
  for (const auto length : *lengths) combos.push_back(combo_from_length(length));

  std::string where;
  bool is_default = false;
  double fee = options.fee;
  Expected<std::vector<BacktestResult>> results = std::vector<BacktestResult>{};
  if (!options.name.empty()) {
    results = sweep_through_segment(options, combos, where, is_default, fee);
  } else {
    auto series = load_series_source(options.source);
    if (!series) return report_error(series.error());
    if (!options.socket_path.empty() || !options.tcp.empty()) {
      results = sweep_through_socket(options, *series, combos, where, fee);
    } else {
      results = run_sweep(series->close, combos, options.fee, options.threads);
      where = fmt::format("over {} ({} bars), in-process", series->description, series->close.size());
    }
    is_default = series->is_default;
  }
  if (!results) return report_error(results.error());

  std::vector<SweepRow> rows;
  rows.reserve(combos.size());
  for (std::size_t i = 0; i < combos.size(); ++i) rows.push_back({(*lengths)[i], combos[i], (*results)[i]});
  if (options.json) {
    print_sweep_json(stdout, rows);
    return 0;
  }
  fmt::print("sweep: {} combos {}, fee {}\n", rows.size(), where, fee);
  print_sweep_table(stdout, rows);
  if (is_default && fee == kDefaultFee) {
    for (const SweepRow& row : rows) {
      if (row.length != kFingerprintLength) continue;
      const bool holds = row.result.pnl == kFingerprintPnl && row.result.trades == kFingerprintTrades;
      fmt::print("fingerprint L=6: pnl {:.17g}, trades {}: {}\n", row.result.pnl, row.result.trades,
                 holds ? "matches the published -5165.577039790348 / 57029"
                       : "DOES NOT MATCH the published -5165.577039790348 / 57029");
      if (!holds) return kExitFailure;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ipcfloor: the same-host latency floor for HMA/HMA3 backtests"};
  app.require_subcommand(1);

  GbmParams gen_params;
  std::string gen_out;
  auto* gen = app.add_subcommand("gen", "Write numpy's GBM close series (SPEC §1) without Python");
  add_gbm_options(*gen, gen_params);
  gen->add_option("-o,--out", gen_out, "output file: .f64 (raw little-endian), .csv or .npy")->required();

  SweepOptions sweep_options;
  std::string sweep_data;
  auto* sweep = app.add_subcommand("sweep", "Run a grid of combos and print pnl and trades per combo");
  auto* target = sweep->add_option_group("target", "where the combos run (exactly one)");
  target->add_flag("--inproc", sweep_options.inproc, "run the kernel in this process");
  target->add_option("--name", sweep_options.name, "stream through the engine's shared-memory segment NAME");
  target->add_option("--socket", sweep_options.socket_path,
                     "ship the series and combos to `ipcfloor serve --socket PATH` (Unix-domain socket)");
  target->add_option("--tcp", sweep_options.tcp, "ship them to `ipcfloor serve --tcp HOST:PORT` (host defaults to 127.0.0.1)");
  target->require_option(1);
  sweep->add_flag("--stateful", sweep_options.stateful,
                  "with --socket/--tcp: load the series once (opcode 2), then send the combos only (opcode 3)");
  sweep->add_option("--wait", sweep_options.wait, "shm client wait: spin, backoff or block (default: the engine's)");
  auto* timeout_option = sweep->add_option("--timeout", sweep_options.timeout_s,
                                           "seconds to wait for any one answer (a socket sweep is one answer; "
                                           "there the default is 600)")
                             ->capture_default_str();
  sweep->add_option("--data", sweep_data, "close series: .csv with a close column, .f64 or .npy")
      ->check(CLI::ExistingFile);
  add_gbm_options(*sweep, sweep_options.source.gbm);
  auto* lengths = sweep->add_option("--lengths", sweep_options.lengths, "comma-separated lengths, e.g. 6,8,11");
  sweep->add_option("--grid", sweep_options.grid, "FIRST:LAST:COUNT, like round(linspace(...))")
      ->capture_default_str()
      ->excludes(lengths);
  sweep->add_flag("--json", sweep_options.json, "one JSON object per combo and line");
  auto* fee_option =
      sweep->add_option("--fee", sweep_options.fee, "fee per round trip, percentage points")->capture_default_str();
  sweep->add_option("--threads", sweep_options.threads, "worker threads (0 = one per core)")->capture_default_str();

  BenchOptions bench_options;
  auto* bench = add_bench_subcommand(app, bench_options);

  ServeOptions serve_options;
  std::string serve_data, serve_wait = "spin", serve_hugepages = "auto", serve_mlock = "auto";
  int serve_cpu = -1;
  unsigned heartbeat_ms = 10;
  auto* serve = app.add_subcommand("serve", "Preload the series into a shared-memory segment and serve combos");
  serve->add_option("--name", serve_options.name, "segment name: /dev/shm/NAME or <hugetlbfs>/NAME")->capture_default_str();
  serve->add_option("--data", serve_data, "close series: .csv with a close column, .f64 or .npy")->check(CLI::ExistingFile);
  add_gbm_options(*serve, serve_options.source.gbm);
  serve->add_option("--cpu", serve_cpu, "core for the serving thread (default: the last allowed core)");
  serve->add_flag("--fifo", serve_options.fifo, "run the serving thread under SCHED_FIFO (isolated cores only)");
  serve->add_option("--lanes", serve_options.lanes, "client lanes")->capture_default_str();
  serve->add_option("--ring-capacity", serve_options.ring_capacity, "slots per ring (power of two)")->capture_default_str();
  serve->add_option("--bulk-bytes", serve_options.bulk_bytes,
                    "bytes of each lane's bulk region for ECHO_BULK (rounded up to 4 KiB; 0 for none)")
      ->capture_default_str();
  serve->add_option("--fee", serve_options.fee, "fee per round trip, percentage points")->capture_default_str();
  serve->add_option("--wait", serve_wait, "serving thread when idle: spin, backoff or block")->capture_default_str();
  serve->add_option("--hugepages", serve_hugepages, "auto, require or off")->capture_default_str();
  serve->add_option("--mlock", serve_mlock, "auto, require or off")->capture_default_str();
  serve->add_option("--heartbeat-ms", heartbeat_ms, "heartbeat and liveness-check interval")->capture_default_str();
  serve->add_flag("--quiet", serve_options.quiet, "print only warnings and errors");
  bool serve_no_shm = false;
  int serve_socket_cpu = -1;
  unsigned frame_timeout_ms = 5000;
  serve->add_option("--socket", serve_options.socket_path,
                    "also serve the socket protocol on this Unix-domain socket (mode 0600, own uid only)");
  serve->add_option("--tcp", serve_options.tcp_endpoint,
                    "also serve it on TCP HOST:PORT with TCP_NODELAY (host defaults to 127.0.0.1)");
  serve->add_flag("--no-shm", serve_no_shm, "serve the sockets only: no segment, no pinned spinning thread");
  serve->add_option("--socket-cpu", serve_socket_cpu,
                    "core for the socket threads (default: every allowed core but the shm serving thread's; "
                    "with --no-shm, any)");
  serve->add_option("--socket-threads", serve_options.socket_threads, "socket server threads")->capture_default_str();
  serve->add_option("--sweep-threads", serve_options.sweep_threads, "workers for one socket sweep of many combos")
      ->capture_default_str();
  serve->add_option("--max-frame", serve_options.max_frame_bytes, "largest socket request body, bytes")
      ->capture_default_str();
  serve->add_option("--frame-timeout-ms", frame_timeout_ms,
                    "a socket frame must arrive, and a reply be read, within this long")
      ->capture_default_str();
  serve->add_option("--max-connections", serve_options.max_connections, "socket connections served at once")
      ->capture_default_str();
  serve->add_flag("--socket-any-uid", serve_options.socket_any_uid,
                  "let any uid use the Unix socket (mode 0666, no SO_PEERCRED check)");

  std::string status_name = "ipcfloor";
  bool status_json = false;
  auto* status = app.add_subcommand("status", "Show what a live segment holds: engine, series, lanes, counters");
  status->add_option("--name", status_name, "segment name")->capture_default_str();
  status->add_flag("--json", status_json, "print JSON");

  // Hidden: the engine as a process per call (the ladder's `spawn` rung): 48-byte ECHO frames on
  // stdin, answers on stdout.
  auto* stdio = app.add_subcommand("stdio", "")->group("");

  CLI11_PARSE(app, argc, argv);
  if (*stdio) return run_stdio_echo();
  for (int i = 0; i < argc; ++i) bench_options.command_line += (i == 0 ? "ipcfloor" : std::string(" ") + argv[i]);
  sweep_options.fee_given = fee_option->count() > 0;
  sweep_options.timeout_given = timeout_option->count() > 0;

  if (*serve) {
    if (!serve_data.empty()) serve_options.source.data_path = serve_data;
    if (serve_cpu >= 0) serve_options.cpu = serve_cpu;
    serve_options.heartbeat = std::chrono::milliseconds(heartbeat_ms);
    auto wait = parse_wait_mode(serve_wait);
    if (!wait) return report_error(wait.error());
    auto hugepages = parse_hugepages_mode(serve_hugepages);
    if (!hugepages) return report_error(hugepages.error());
    auto mlock = parse_mlock_mode(serve_mlock);
    if (!mlock) return report_error(mlock.error());
    serve_options.wait = *wait;
    serve_options.hugepages = *hugepages;
    serve_options.mlock = *mlock;
    serve_options.shm = !serve_no_shm;
    if (serve_socket_cpu >= 0) serve_options.socket_cpu = serve_socket_cpu;
    serve_options.frame_timeout = std::chrono::milliseconds(frame_timeout_ms);
    return run_serve(serve_options);
  }
  if (*status) return run_status(status_name, status_json, std::string(kDefaultTmpfsDir));

  if (*gen) return run_gen(gen_params, gen_out);
  if (*sweep) {
    if (!sweep_data.empty()) sweep_options.source.data_path = sweep_data;
    if (sweep_options.stateful && sweep_options.socket_path.empty() && sweep_options.tcp.empty())
      return report_error(Error{ErrorCode::invalid_argument, "--stateful needs --socket PATH or --tcp HOST:PORT"});
    return run_sweep_command(sweep_options);
  }
  if (*bench) return run_bench_command(std::move(bench_options));
  return 0;
}
