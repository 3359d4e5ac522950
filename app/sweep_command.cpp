#include "app/sweep_command.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "app/cli_common.hpp"
#include "app/sweep_report.hpp"
#include "clients/pipelined_sweep.hpp"
#include "clients/shm_client.hpp"
#include "clients/socket_client.hpp"
#include "common/checksum.hpp"
#include "kernel/combo_io.hpp"
#include "kernel/gbm.hpp"
#include "kernel/grid.hpp"
#include "kernel/kernel.hpp"
#include "kernel/series_set.hpp"
#include "kernel/sweep_rows.hpp"
#include "socket/socket_protocol.hpp"
#include "socket/tcp_endpoint.hpp"

namespace ipcfloor {
namespace {

// Rows run in chunks so that results stream while workers stay busy, and a socket frame stays
// a reasonable size.
constexpr std::size_t kInprocChunkPerThread = 16;
constexpr std::size_t kSocketChunk = 4096;
// A socket sweep is one call per chunk, so without --timeout one chunk may take this long.
constexpr double kSocketSweepTimeoutS = 600.0;

using Planned = PlannedRow;

using Emit = std::function<void(const SweepRow&)>;

// The default data set's checksum, to tell whether an engine serves the fingerprint's data.
bool is_default_series(std::uint64_t checksum) {
  auto close = generate_gbm(GbmParams{});
  return close && fnv1a64(std::as_bytes(std::span<const double>(*close))) == checksum;
}

// Emits, in order, every row up to the next runnable one; returns its index (or plan.size()).
std::size_t emit_until_runnable(std::vector<Planned>& plan, std::size_t from, const Emit& emit) {
  while (from < plan.size() && !plan[from].runnable) emit(plan[from++].row);
  return from;
}

Expected<void> run_inproc(const SweepOptions& options, const LoadedSeries& series, std::vector<Planned>& plan,
                          const Emit& emit) {
  check_windows(plan, series.close.size());
  const unsigned threads = options.threads == 0 ? std::max(1u, std::thread::hardware_concurrency()) : options.threads;
  const std::size_t chunk = std::max<std::size_t>(1, kInprocChunkPerThread * threads);
  std::size_t next = 0;
  while (next < plan.size()) {
    next = emit_until_runnable(plan, next, emit);
    std::vector<std::size_t> indices;
    std::vector<Combo> combos;
    for (std::size_t i = next; i < plan.size() && combos.size() < chunk; ++i) {
      if (!plan[i].runnable) continue;
      indices.push_back(i);
      combos.push_back(plan[i].row.params);
    }
    if (combos.empty()) break;
    auto results = run_sweep(series.close, combos, options.fee, threads);
    if (!results) return std::unexpected(results.error());
    for (std::size_t k = 0; k < indices.size(); ++k) plan[indices[k]].row.result = (*results)[k];
    const std::size_t end = indices.back() + 1;
    for (; next < end; ++next) emit(plan[next].row);
  }
  return {};
}

// One series' rows through the engine's rings (pipelined_sweep), emitted in plan order as their
// answers arrive; rows that never ran (bad windows found here) are emitted in their place.
Expected<void> sweep_series(ShmClient& client, std::uint32_t series_index, std::size_t n_bars, const std::string& name,
                            std::vector<Planned>& plan, const Emit& emit) {
  std::vector<std::size_t> runnable;  // plan indices, in order
  for (std::size_t i = 0; i < plan.size(); ++i)
    if (plan[i].runnable) runnable.push_back(i);
  std::size_t emitted = 0;
  const auto request = [&](std::size_t k) {
    return SweepRequest{Opcode::backtest, series_flags(series_index), payload_of(plan[runnable[k]].row.params)};
  };
  const auto take = [&](std::size_t k, const ResponseSlot& answer) {
    SweepRow& row = plan[runnable[k]].row;
    const auto status = static_cast<Status>(answer.status);
    if (status == Status::ok) {
      row.result = {answer.pnl, answer.trades};
    } else {
      row.error = status == Status::window_out_of_range ? window_error(row.params, n_bars)
                  : status == Status::too_costly
                      ? fmt::format("too_costly: its work exceeds engine {}'s bound per frame (serve --max-frame-cost)", name)
                      : std::string(to_string(status));
    }
    while (emitted <= runnable[k]) emit(plan[emitted++].row);
  };
  const SweepEnd end = pipelined_sweep(client, runnable.size(), request, take);
  if (end.status != CallStatus::ok) return std::unexpected(client.error_for(end.status));
  while (emitted < plan.size()) emit(plan[emitted++].row);
  return {};
}

Expected<void> run_through_segment(const SweepOptions& options, std::vector<Planned>& plan, const Emit& emit,
                                   std::string& where, bool& is_default, double& fee) {
  ShmClientOptions client_options;
  client_options.timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(options.timeout_s));
  // A sweep waits for answers that come a combo's compute apart: it backs off (spins briefly,
  // then yields and naps) unless --wait says otherwise, so that it never holds a core the
  // engine's workers could compute on.
  client_options.wait = WaitMode::backoff;
  if (!options.wait.empty()) {
    auto mode = parse_wait_mode(options.wait);
    if (!mode) return std::unexpected(mode.error());
    client_options.wait = *mode;
  }
  auto client = ShmClient::connect(options.name, client_options);
  if (!client) return std::unexpected(client.error());
  const DataHeader& header = client->segment().header();
  fee = header.fee;
  if (options.fee_given && options.fee != header.fee)
    return fail(ErrorCode::invalid_argument, "--fee {} differs from the fee {} engine {} serves with; restart it with --fee",
                options.fee, header.fee, options.name);
  // The engine's series by name, as `serve --data a --data b` named them; "" is the main one.
  std::vector<std::uint32_t> chosen;
  if (options.series.empty()) {
    chosen.push_back(0);
  } else {
    std::string known;
    for (std::uint32_t i = 0; i < client->segment().series_count(); ++i) {
      const std::string_view key = client->segment().series_key(i);
      if (options.series == "all" || options.series == key) chosen.push_back(i);
      known += fmt::format("{}{}", known.empty() ? "" : ", ", key);
    }
    if (chosen.empty())
      return fail(ErrorCode::invalid_argument, "engine {} holds no series named '{}'; it holds: {} (or say all)",
                  options.name, options.series, known);
  }
  const std::vector<Planned> original = plan;
  for (const std::uint32_t series_index : chosen) {
    // The engine judges windows against the bars it has: for a live main series, those published.
    const std::size_t n_bars = series_index == 0 ? client->segment().published_series().size()
                                                 : client->segment().series_at(series_index).size();
    plan = original;
    if (!options.series.empty())
      for (Planned& p : plan) p.row.series = std::string(client->segment().series_key(series_index));
    where = fmt::format("through shm segment {} (lane {}, {} mode), series {} ({} bars)", options.name, client->lane(),
                        to_string(client->wait_mode()), client->segment().series_key(series_index), n_bars);
    is_default = series_index == 0 && is_default_series(header.series_checksum);
    if (auto swept = sweep_series(*client, series_index, n_bars, options.name, plan, emit); !swept) return swept;
  }
  return {};
}

Expected<SocketClient> connect_socket(const SweepOptions& options) {
  SocketClientOptions client_options;
  client_options.timeout = std::chrono::milliseconds(
      static_cast<std::int64_t>(1000.0 * (options.timeout_given ? options.timeout_s : kSocketSweepTimeoutS)));
  if (!options.socket_path.empty()) return SocketClient::connect_unix(options.socket_path, client_options);
  auto endpoint = parse_tcp_endpoint(options.tcp);
  if (!endpoint) return std::unexpected(endpoint.error());
  return SocketClient::connect_tcp(endpoint->host, endpoint->port, client_options);
}

// Over a socket. By default the combos run on the series the server preloaded (opcode 5 once,
// then opcode 3 per chunk): `shipped` is null. With --ship, this command's own series travels
// with every chunk (stateless) or once (--stateful).
Expected<void> run_through_socket(const SweepOptions& options, const LoadedSeries* shipped, std::vector<Planned>& plan,
                                  const Emit& emit, std::string& where, std::string& series_line, bool& is_default,
                                  double& fee) {
  auto client = connect_socket(options);
  if (!client) return std::unexpected(client.error());
  if (shipped == nullptr) {
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
    check_windows(plan, series->n_bars);
  } else {
    check_windows(plan, shipped->close.size());
    is_default = shipped->is_default;
    if (options.stateful) {
      auto loaded = client->load(shipped->close);
      if (!loaded) return std::unexpected(loaded.error());
      const std::uint64_t checksum = fnv1a64(std::as_bytes(std::span<const double>(shipped->close)));
      if (loaded->checksum != checksum)
        return fail(ErrorCode::protocol, "{} stored the series with checksum {:016x}, but the series sent has {:016x}",
                    client->server(), loaded->checksum, checksum);
      if (options.fee_given && options.fee != loaded->fee)
        return fail(ErrorCode::invalid_argument,
                    "--fee {} differs from the fee {} that {} sweeps with; restart it with --fee", options.fee,
                    loaded->fee, client->server());
      fee = loaded->fee;
      where = fmt::format("over {} ({} bars), through {} (stateful: series loaded once, then combos only)",
                          shipped->description, shipped->close.size(), client->server());
    } else {
      where = fmt::format("over {} ({} bars), through {} (stateless: series and combos in one frame per chunk)",
                          shipped->description, shipped->close.size(), client->server());
    }
  }
  const bool loaded_on_server = shipped == nullptr || options.stateful;
  std::size_t next = 0;
  while (next < plan.size()) {
    next = emit_until_runnable(plan, next, emit);
    std::vector<std::size_t> indices;
    std::vector<Combo> combos;
    for (std::size_t i = next; i < plan.size() && combos.size() < kSocketChunk; ++i) {
      if (!plan[i].runnable) continue;
      indices.push_back(i);
      combos.push_back(plan[i].row.params);
    }
    if (combos.empty()) break;
    auto results = loaded_on_server ? client->sweep_loaded(combos) : client->sweep(shipped->close, combos);
    if (!results) return std::unexpected(results.error());
    for (std::size_t k = 0; k < indices.size(); ++k) plan[indices[k]].row.result = (*results)[k];
    const std::size_t end = indices.back() + 1;
    for (; next < end; ++next) emit(plan[next].row);
  }
  return {};
}

}  // namespace

CLI::App* add_sweep_subcommand(CLI::App& app, SweepOptions& options) {
  auto* sweep = app.add_subcommand("sweep", "Run combos (a grid, lengths or a combo file) and stream pnl and trades per combo");
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
  sweep->add_option("--wait", options.wait, "shm client wait: spin, backoff or block (default: backoff)");
  sweep
      ->add_option("--timeout", options.timeout_s,
                   "seconds to wait for any one answer (a socket sweep is one answer per chunk; there the default is 600)")
      ->capture_default_str()
      ->each([&options](const std::string&) { options.timeout_given = true; });
  sweep->add_option("--data", options.data_paths,
                    "close series: .csv with a close column, .f64 or .npy; repeat it for several (--inproc)")
      ->check(CLI::ExistingFile)
      ->each([&options](const std::string& path) { options.source.data_path = path; });
  sweep->add_option("--series", options.series,
                    "with --inproc: the series to sweep, by name (a --data file's name without its extension, or "
                    "'default'), or 'all'; each row then names its series");
  add_gbm_options(*sweep, options.source.gbm, &options.gbm_given);
  auto* lengths = sweep->add_option("--lengths", options.combos.lengths, "comma-separated lengths, e.g. 6,8,11")
                      ->each([&options](const std::string&) { options.combos.lengths_given = true; });
  auto* grid = sweep->add_option("--grid", options.combos.grid, "FIRST:LAST:COUNT, like round(linspace(...))")
                   ->capture_default_str()
                   ->excludes(lengths);
  sweep->add_option("--combos", options.combos.combos_path,
                    "a combo file, '-' for stdin: CSV with the header h,L,s,p3,p2,p, or JSON lines "
                    "({\"h\":3,\"L\":6,...} or {\"params\":[...]}); a bad row is reported in place, the others run")
      ->excludes(lengths)
      ->excludes(grid);
  auto* json = sweep->add_flag("--json", options.json, "one JSON object per combo and line, streamed");
  sweep->add_flag("--csv", options.csv, "CSV rows (length,h,L,s,p3,p2,p,pnl,trades,error), streamed")->excludes(json);
  sweep->add_flag("--quiet", options.quiet, "no progress bar");
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
  if (socket && !options.ship && (!options.data_paths.empty() || options.gbm_given))
    return report_error("sweep", Error{ErrorCode::invalid_argument,
                                       "--data and --bars/--seed/... describe a series to send: add --ship, or drop "
                                       "them to run on the server's preloaded series"});
  const bool inproc = options.name.empty() && !socket;
  if (!inproc && options.data_paths.size() > 1)
    return report_error("sweep", Error{ErrorCode::invalid_argument,
                                       "several --data need --inproc: through an engine, --series picks among the "
                                       "series it preloaded"});
  if (socket && !options.series.empty())
    return report_error("sweep", Error{ErrorCode::invalid_argument,
                                       "--series needs --inproc or --name: a socket server holds one series"});
  auto series_set = SeriesSet::make(options.data_paths, options.source.gbm);
  if (!series_set) return report_error("sweep", series_set.error());
  // Through an engine, --series names the engine's series (checked once attached).
  auto selected = options.name.empty() ? series_set->select(options.series)
                                       : Expected<std::vector<std::size_t>>(std::vector<std::size_t>{0});
  if (!selected) return report_error("sweep", selected.error());
  auto plan = plan_rows(options.combos);
  if (!plan) return report_error("sweep", plan.error());

  const SweepFormat format = options.json ? SweepFormat::json : options.csv ? SweepFormat::csv : SweepFormat::table;
  SweepWriter writer(stdout, format, !options.series.empty());
  SweepProgress progress(plan->size() * selected->size(), !options.quiet);
  std::size_t emitted = 0;
  std::size_t failed_rows = 0;
  std::optional<SweepRow> fingerprint_row;
  const Emit emit = [&](const SweepRow& row) {
    writer.row(row);
    if (!row.error.empty()) ++failed_rows;
    if (options.combos.combos_path.empty() && options.series.empty() && row.length == kFingerprintLength && row.error.empty()) fingerprint_row = row;
    progress.advance(++emitted);
  };

  std::string where;
  std::string series_line;  // the server's series, when the sweep ran on it
  bool is_default = false;
  double fee = options.fee;
  Expected<void> ran{};
  if (!options.name.empty()) {
    // The header line waits for `where`, which the engine's answer to the attach fills in.
    ran = run_through_segment(options, *plan, [&](const SweepRow& row) {
      if (emitted == 0 && format == SweepFormat::table) {
        fmt::print("sweep: {} combos {}, fee {}\n", plan->size(), where, fee);
        writer.header();
      } else if (emitted == 0 && format == SweepFormat::csv) {
        writer.header();
      }
      emit(row);
    }, where, is_default, fee);
  } else if (socket) {
    std::optional<LoadedSeries> shipped;
    if (options.ship) {
      auto series = series_set->load(selected->front());
      if (!series) return report_error("sweep", series.error());
      shipped = std::move(*series);
    }
    // As through a segment, the header waits for `where`: the server names its own series.
    ran = run_through_socket(options, shipped ? &*shipped : nullptr, *plan, [&](const SweepRow& row) {
      if (emitted == 0) {
        if (format == SweepFormat::table) fmt::print("sweep: {} combos {}, fee {}\n", plan->size(), where, fee);
        // stdout stays rows only; which series they came from goes beside it.
        if (format != SweepFormat::table && !series_line.empty()) fmt::print(stderr, "sweep: computed on {}\n", series_line);
        writer.header();
      }
      emit(row);
    }, where, series_line, is_default, fee);
  } else {
    // Series by series, in the order given: each row of a series before the next series' rows.
    if (format != SweepFormat::table) writer.header();
    for (const std::size_t index : *selected) {
      auto series = series_set->load(index);
      if (!series) return report_error("sweep", series.error());
      is_default = series->is_default;
      if (format == SweepFormat::table) {
        fmt::print("sweep: {} combos over {} ({} bars), in-process, fee {}\n", plan->size(), series->description,
                   series->close.size(), options.fee);
        writer.header();
      }
      std::vector<Planned> rows = *plan;
      for (Planned& p : rows) p.row.series = series_set->names()[index];
      ran = run_inproc(options, *series, rows, emit);
      if (!ran) break;
    }
  }
  progress.finish();
  if (!ran) return report_error("sweep", ran.error());
  if (failed_rows != 0)
    fmt::print(stderr, "ipcfloor sweep: {} of {} rows did not run (they say why)\n", failed_rows, emitted);
  if (format == SweepFormat::table && is_default && fee == kDefaultFee && fingerprint_row) {
    const bool holds = fingerprint_row->result.pnl == kFingerprintPnl && fingerprint_row->result.trades == kFingerprintTrades;
    fmt::print("fingerprint L=6: pnl {:.17g}, trades {}: {}\n", fingerprint_row->result.pnl, fingerprint_row->result.trades,
               holds ? "matches the published -5165.577039790348 / 57029"
                     : "DOES NOT MATCH the published -5165.577039790348 / 57029");
    if (!holds) return kExitFailure;
  }
  return failed_rows != 0 ? kExitInput : 0;
}

}  // namespace ipcfloor
