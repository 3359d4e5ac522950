#include "app/sweep_command.hpp"

#include <chrono>
#include <cstdio>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "app/cli_common.hpp"
#include "app/sweep_report.hpp"
#include "kernel/grid.hpp"
#include "clients/shm_client.hpp"
#include "clients/socket_client.hpp"
#include "common/checksum.hpp"
#include "kernel/gbm.hpp"
#include "kernel/kernel.hpp"
#include "socket/tcp_endpoint.hpp"

namespace ipcfloor {
namespace {

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

Expected<SocketClient> connect_socket(const SweepOptions& options) {
  SocketClientOptions client_options;
  client_options.timeout = std::chrono::milliseconds(
      static_cast<std::int64_t>(1000.0 * (options.timeout_given ? options.timeout_s : kSocketSweepTimeoutS)));
  if (!options.socket_path.empty()) return SocketClient::connect_unix(options.socket_path, client_options);
  auto endpoint = parse_tcp_endpoint(options.tcp);
  if (!endpoint) return std::unexpected(endpoint.error());
  return SocketClient::connect_tcp(endpoint->host, endpoint->port, client_options);
}

// The default: the combos run on the series the server preloaded (opcode 5, then opcode 3).
Expected<std::vector<BacktestResult>> sweep_on_server_series(const SweepOptions& options, std::span<const Combo> combos,
                                                             std::string& where, std::string& series_line,
                                                             bool& is_default, double& fee) {
  auto client = connect_socket(options);
  if (!client) return std::unexpected(client.error());
  auto series = client->use_preloaded();
  if (!series) {
    if (client->last_server_error() == static_cast<std::uint32_t>(SocketError::no_preloaded_series))
      return fail(ErrorCode::invalid_argument,
                  "{} holds no series of its own (it runs --no-shm without --data or --bars); add --ship to send "
                  "this command's series (--data FILE or --bars/--seed), or restart the server with one",
                  client->server());
    return std::unexpected(series.error());
  }
  if (options.fee_given && options.fee != series->fee)
    return fail(ErrorCode::invalid_argument, "--fee {} differs from the fee {} that {} sweeps with; restart it with --fee",
                options.fee, series->fee, client->server());
  fee = series->fee;
  series_line = fmt::format("the server's series {} ({} bars, checksum {:016x})", series->name, series->n_bars,
                            series->checksum);
  where = fmt::format("on {}, through {} (its preloaded series: combos only)", series_line, client->server());
  is_default = is_default_series(series->checksum);
  return client->sweep_loaded(combos);
}

// --ship: this command's own series travels, with every call (stateless) or once (--stateful).
Expected<std::vector<BacktestResult>> sweep_shipping_series(const SweepOptions& options, const LoadedSeries& series,
                                                            std::span<const Combo> combos, std::string& where,
                                                            double& fee) {
  auto client = connect_socket(options);
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

}  // namespace

CLI::App* add_sweep_subcommand(CLI::App& app, SweepOptions& options) {
  auto* sweep = app.add_subcommand("sweep", "Run a grid of combos and print pnl and trades per combo");
  auto* target = sweep->add_option_group("target", "where the combos run (exactly one)");
  target->add_flag("--inproc")->description("run the kernel in this process");
  target->add_option("--name", options.name, "stream through the engine's shared-memory segment NAME");
  target->add_option("--socket", options.socket_path,
                     "run the combos on the series `ipcfloor serve --socket PATH` preloaded (Unix-domain socket)");
  target->add_option("--tcp", options.tcp,
                     "the same through `ipcfloor serve --tcp HOST:PORT` (host defaults to 127.0.0.1)");
  target->require_option(1);
  sweep->add_flag("--ship", options.ship,
                  "with --socket/--tcp: send this command's own series (--data, or --bars/--seed) instead");
  sweep->add_flag("--stateful", options.stateful,
                  "with --ship: load the series once (opcode 2), then send the combos only (opcode 3)");
  sweep->add_option("--wait", options.wait, "shm client wait: spin, backoff or block (default: the engine's)");
  sweep
      ->add_option("--timeout", options.timeout_s,
                   "seconds to wait for any one answer (a socket sweep is one answer; there the default is 600)")
      ->capture_default_str()
      ->each([&options](const std::string&) { options.timeout_given = true; });
  sweep->add_option("--data", "close series: .csv with a close column, .f64 or .npy")
      ->check(CLI::ExistingFile)
      ->each([&options](const std::string& path) { options.source.data_path = path; });
  add_gbm_options(*sweep, options.source.gbm, &options.gbm_given);
  auto* lengths = sweep->add_option("--lengths", options.lengths, "comma-separated lengths, e.g. 6,8,11");
  sweep->add_option("--grid", options.grid, "FIRST:LAST:COUNT, like round(linspace(...))")
      ->capture_default_str()
      ->excludes(lengths);
  sweep->add_flag("--json", options.json, "one JSON object per combo and line");
  sweep->add_option("--fee", options.fee, "fee per round trip, percentage points")
      ->capture_default_str()
      ->each([&options](const std::string&) { options.fee_given = true; });
  sweep->add_option("--threads", options.threads, "worker threads (0 = one per core)")->capture_default_str();
  return sweep;
}

int run_sweep_command(SweepOptions& options) {
  const bool socket = !options.socket_path.empty() || !options.tcp.empty();
  if (options.ship && !socket)
    return report_error("sweep", Error{ErrorCode::invalid_argument, "--ship needs --socket PATH or --tcp HOST:PORT"});
  if (options.stateful && !options.ship)
    return report_error("sweep", Error{ErrorCode::invalid_argument,
                                       "--stateful loads this command's series into the server, which needs --ship "
                                       "(without --ship the combos run on the server's preloaded series)"});
  if (socket && !options.ship && (options.source.data_path || options.gbm_given))
    return report_error("sweep", Error{ErrorCode::invalid_argument,
                                       "--data and --bars/--seed/... describe a series to send: add --ship, or drop "
                                       "them to run on the server's preloaded series"});
  auto lengths = options.lengths.empty() ? parse_grid(options.grid) : parse_lengths(options.lengths);
  if (!lengths) return report_error("sweep", lengths.error());
  std::vector<Combo> combos;
  combos.reserve(lengths->size());
  for (const auto length : *lengths) combos.push_back(combo_from_length(length));

  std::string where;
  std::string series_line;  // the server's series, when the sweep ran on it
  bool is_default = false;
  double fee = options.fee;
  Expected<std::vector<BacktestResult>> results = std::vector<BacktestResult>{};
  if (!options.name.empty()) {
    results = sweep_through_segment(options, combos, where, is_default, fee);
  } else if (socket && !options.ship) {
    results = sweep_on_server_series(options, combos, where, series_line, is_default, fee);
  } else {
    auto series = load_series_source(options.source);
    if (!series) return report_error("sweep", series.error());
    if (socket) {
      results = sweep_shipping_series(options, *series, combos, where, fee);
    } else {
      results = run_sweep(series->close, combos, options.fee, options.threads);
      where = fmt::format("over {} ({} bars), in-process", series->description, series->close.size());
    }
    is_default = series->is_default;
  }
  if (!results) return report_error("sweep", results.error());

  std::vector<SweepRow> rows;
  rows.reserve(combos.size());
  for (std::size_t i = 0; i < combos.size(); ++i) rows.push_back({(*lengths)[i], combos[i], (*results)[i]});
  if (options.json) {
    // stdout stays one JSON object per combo; which series they came from goes beside it.
    if (!series_line.empty()) fmt::print(stderr, "sweep: computed on {}\n", series_line);
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

}  // namespace ipcfloor
