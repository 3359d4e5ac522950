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
#include "common/affinity.hpp"
#include "common/checksum.hpp"
#include "data/combo_io.hpp"
#include "data/gbm.hpp"
#include "data/grid.hpp"
#include "data/series_set.hpp"
#include "data/sweep_rows.hpp"
#include "kernel/kernel.hpp"
#include "kernel/strategy_loader.hpp"
#include "shm/memory_budget.hpp"
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

using Emit = std::function<void(const SweepRow&)>;

// Where one series' rows run, told before the first of them: the table's header line says it.
struct SeriesStart {
  std::string where;        // "over ... in-process", "through shm segment ...", "on the server's series ..."
  double fee = kDefaultFee;
  std::string computed_on;  // a socket sweep on the server's series: that series, for stderr
};
using BeginSeries = std::function<void(const SeriesStart&)>;

// The strategy the rows run on, as this command knows it.
struct StrategyChoice {
  std::string name;                 // as the engine, the server or the file names it
  const Strategy* local = nullptr;  // this process has it: the built-in one, or a --strategy FILE.so
  std::uint32_t index = 0;          // its index on the engine or server (0: the built-in one)
  std::vector<std::string> params;  // its parameter names: what a combo file's header names

  [[nodiscard]] bool is_builtin() const noexcept { return local == &builtin(); }
  [[nodiscard]] ComboColumns columns() const noexcept {
    ComboColumns columns;
    columns.count = std::min<std::size_t>(params.size(), columns.names.size());
    for (std::size_t c = 0; c < columns.count; ++c) columns.names[c] = params[c];
    return columns;
  }
  [[nodiscard]] SweepShape shape() const noexcept { return SweepShape{columns(), is_builtin()}; }
};

StrategyChoice choice_of(const Strategy& strategy) {
  StrategyChoice choice;
  choice.name = std::string(strategy.name());
  choice.local = &strategy;
  choice.index = strategy.index();
  for (std::uint32_t k = 0; k < strategy.param_count(); ++k) choice.params.emplace_back(strategy.param_name(k));
  return choice;
}

// --strategy names a file to load (a path, or a name ending in .so) rather than a strategy.
bool names_a_file(std::string_view strategy) {
  return strategy.find('/') != std::string_view::npos || strategy.ends_with(".so");
}

// Whether an engine serves the fingerprint's data.
bool is_default_series(std::uint64_t checksum) { return checksum == kDefaultSeriesChecksum; }

// The series a sweep's rows ran on, as each row and the table's header line name it.
struct SeriesName {
  std::string name;
  std::size_t bars = 0;
  std::uint64_t checksum = 0;  // fnv1a64 of the bars' bytes, as a segment's header carries it
};

SeriesName name_of(std::string name, std::span<const double> close) {
  return SeriesName{std::move(name), close.size(), fnv1a64(std::as_bytes(close))};
}

std::string described(const SeriesName& series) {
  return fmt::format("{} bars, checksum {:016x}", series.bars, series.checksum);
}

// One series' rows: the plan (shared by every series, never copied), each row's verdict on this
// series (1 byte a row) and the series every row names. A row becomes a SweepRow, with its
// strings, only as it is written.
struct SeriesRows {
  const SweepPlan* plan = nullptr;
  std::vector<RowVerdict> verdicts;
  SeriesName series;
  const StrategyChoice* strategy = nullptr;

  [[nodiscard]] std::size_t size() const noexcept { return verdicts.size(); }
  [[nodiscard]] bool runnable(std::size_t i) const noexcept { return verdicts[i] == RowVerdict::runnable; }
  [[nodiscard]] std::size_t runnable_count() const noexcept {
    return static_cast<std::size_t>(std::count(verdicts.begin(), verdicts.end(), RowVerdict::runnable));
  }
  // Row i as written, before any result (allocates).
  [[nodiscard]] SweepRow row(std::size_t i) const {
    SweepRow row = planned_row(*plan, i, verdicts[i], series.bars, strategy->local, strategy->name);
    row.series = series.name;
    row.series_bars = series.bars;
    row.series_checksum = series.checksum;
    return row;
  }
};

// The plan's rows on `series`, judged by the strategy where this process has it (rows it refuses
// say why, in place); otherwise the engine or server judges them.
SeriesRows rows_on(const SweepPlan& plan, const StrategyChoice& strategy, SeriesName series) {
  SeriesRows rows;
  rows.plan = &plan;
  rows.verdicts = strategy.local != nullptr ? admit_rows(plan, *strategy.local, series.bars) : verdicts_of(plan);
  rows.series = std::move(series);
  rows.strategy = &strategy;
  return rows;
}

// Runs the rows that can run in chunks of at most `chunk` through `run` and emits every row in
// order as soon as it and the rows before it are done (rows that cannot run at once).
using RunChunk = std::function<Expected<std::vector<BacktestResult>>(const std::vector<Combo>&)>;

Expected<void> run_in_chunks(const SeriesRows& rows, std::size_t chunk, const RunChunk& run, const Emit& emit) {
  std::size_t next = 0;
  std::vector<Combo> combos;
  while (next < rows.size()) {
    while (next < rows.size() && !rows.runnable(next)) emit(rows.row(next++));
    combos.clear();
    std::size_t end = next;
    for (; end < rows.size() && combos.size() < chunk; ++end)
      if (rows.runnable(end)) combos.push_back(rows.plan->combo(end));
    if (combos.empty()) break;
    auto results = run(combos);
    if (!results) return std::unexpected(results.error());
    for (std::size_t k = 0; next < end; ++next) {
      SweepRow row = rows.row(next);
      if (rows.runnable(next)) row.result = (*results)[k++];
      emit(row);
    }
  }
  return {};
}

unsigned inproc_threads(const SweepOptions& options) {
  return options.threads == 0 ? std::max(1u, std::thread::hardware_concurrency()) : options.threads;
}

// run_sweep makes one kernel workspace per thread it starts, each as long as the series: refused
// when the host cannot back them, before the series' table begins, not by the OOM killer.
Expected<void> check_workspace_memory(const SweepOptions& options, const Strategy& strategy, std::size_t bars,
                                      const SeriesRows& rows) {
  const unsigned threads = inproc_threads(options);
  const std::size_t used = std::clamp<std::size_t>(rows.runnable_count(), 1, threads);
  const MemoryNeed workspaces{
      fmt::format("{} kernel workspace{} of {} bars (one per thread)", used, used == 1 ? "" : "s", bars),
      used * strategy.workspace_bytes(bars),
      fmt::format("--threads {} or the series ({} bars; --bars or --data)", threads, bars)};
  return check_memory_budget(std::span(&workspaces, 1), read_host_memory());
}

Expected<void> run_inproc(const SweepOptions& options, const Strategy& strategy, const LoadedSeries& series,
                          const SeriesRows& rows, const Emit& emit) {
  const unsigned threads = inproc_threads(options);
  const std::size_t chunk = std::max<std::size_t>(1, kInprocChunkPerThread * threads);
  return run_in_chunks(
      rows, chunk,
      [&](const std::vector<Combo>& combos) { return run_sweep(strategy, series.close, combos, options.fee, threads); },
      emit);
}

// Series by series, in the order given: each row of a series before the next series' rows.
Expected<void> run_inproc_series(const SweepOptions& options, const StrategyChoice& strategy, const SeriesSet& set,
                                 const std::vector<std::size_t>& selected, const SweepPlan& plan,
                                 const Emit& emit, const BeginSeries& begin_series, bool& is_default) {
  for (const std::size_t index : selected) {
    auto series = set.load(index);
    if (!series) return std::unexpected(series.error());
    is_default = series->is_default;
    const SeriesRows rows = rows_on(plan, strategy, name_of(set.names()[index], series->close));
    if (auto fits = check_workspace_memory(options, *strategy.local, series->close.size(), rows); !fits) return fits;
    begin_series(SeriesStart{fmt::format("over {} (series {}: {}), in-process", series->description, rows.series.name,
                                         described(rows.series)),
                             options.fee, {}});
    if (auto ran = run_inproc(options, *strategy.local, *series, rows, emit); !ran) return ran;
  }
  return {};
}

// The engine's series that --series names: by name, by index (as a BACKTEST, the C ABI and
// Python name them; a name wins), or all; without --series, the main one.
Expected<std::vector<std::uint32_t>> engine_series(const SweepOptions& options, const ShmClient& client) {
  const std::uint32_t count = client.segment().series_count();
  if (options.series.empty()) return std::vector<std::uint32_t>{0};
  std::vector<std::uint32_t> chosen;
  std::string known;
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::string_view key = client.segment().series_key(i);
    if (options.series == "all" || options.series == key) chosen.push_back(i);
    known += fmt::format("{}{}", known.empty() ? "" : ", ", key);
  }
  if (chosen.empty())
    if (const auto index = series_index_of(options.series, count)) chosen.push_back(static_cast<std::uint32_t>(*index));
  if (chosen.empty())
    return fail(ErrorCode::invalid_argument,
                "engine {} holds no series named '{}'; it holds: {} (or say an index 0..{}, or all)", options.name,
                options.series, known, count - 1);
  return chosen;
}

// The sweep keeps off the cores the engine's workers compute on, where it has others: it wakes for
// every answer, and each wake on a worker's core takes that core from the combos. On a host the
// workers fill but for the serving core, it shares that one (the serving thread only polls).
void keep_off_worker_cpus(const DataHeader& header) {
  // relaxed: the keeper wrote these before any client could attach.
  const std::uint32_t workers = std::min<std::uint32_t>(header.workers.load(std::memory_order_relaxed),
                                                        static_cast<std::uint32_t>(kMaxWorkerCpus));
  std::vector<int> cpus = allowed_cpus();
  std::erase_if(cpus, [&](int cpu) {
    return std::find(header.worker_cpus, header.worker_cpus + workers, cpu) != header.worker_cpus + workers;
  });
  if (workers == 0 || cpus.empty()) return;
  (void)restrict_current_thread(cpus);  // best effort: a sweep that stays where it is still runs
}

// --client-cpu N pins the sweep's thread there, --client-cpu near to the first cpu the engine
// publishes as nearest its serving thread that this process may use; without it, off the workers.
Expected<void> place_sweep_thread(const SweepOptions& options, const DataHeader& header) {
  if (options.client_cpu.empty()) {
    keep_off_worker_cpus(header);
    return {};
  }
  if (options.client_cpu != "near") return pin_current_thread(std::stoi(options.client_cpu));
  auto pinned = pin_current_thread_to_first(near_cpus_of(header));
  if (!pinned)
    return fail(ErrorCode::resource, "--client-cpu near: engine {} serves on cpu {}; {}", options.name,
                header.serving_cpu, pinned.error().message);
  return {};
}

// One series' rows through the engine's rings (pipelined_sweep), emitted in plan order as their
// answers arrive; rows that never ran (bad windows found here) are emitted in their place.
Expected<void> stream_through_segment(const SweepOptions& options, ShmClient& client, const StrategyChoice& strategy,
                                      std::uint32_t series_index, const SeriesRows& rows, const Emit& emit) {
  // pipelined_sweep asks for requests and hands answers over in order, so a cursor each finds the
  // next row that runs (no index of them is kept).
  std::size_t requested = 0;  // the row after the last one requested
  std::size_t emitted = 0;
  const auto next_runnable = [&rows](std::size_t from) {
    while (!rows.runnable(from)) ++from;
    return from;
  };
  Combo asked{};  // the request's combo: its payload must outlive the request's packing
  const auto request = [&](std::size_t) {
    const std::size_t at = next_runnable(requested);
    requested = at + 1;
    asked = rows.plan->combo(at);
    return SweepRequest{Opcode::backtest, request_flags(series_index, strategy.index), payload_of(asked)};
  };
  const auto take = [&](std::size_t, const ResponseSlot& answer) {
    const std::size_t at = next_runnable(emitted);
    while (emitted < at) emit(rows.row(emitted++));
    SweepRow row = rows.row(at);
    const std::size_t n_bars = rows.series.bars;
    const auto status = static_cast<Status>(answer.status);
    if (status == Status::ok) {
      row.result = {answer.pnl, answer.trades};
    } else {
      row.error = status == Status::window_out_of_range ? window_error(row, n_bars, strategy.local, strategy.name)
                  : status == Status::too_costly
                      ? fmt::format("too_costly: its work exceeds engine {}'s bound per frame (serve --max-frame-cost)",
                                    options.name)
                      : std::string(to_string(status));
    }
    emit(row);
    emitted = at + 1;
  };
  const SweepEnd end = pipelined_sweep(client, rows.runnable_count(), request, take);
  if (end.status != CallStatus::ok) return std::unexpected(client.error_for(end.status));
  while (emitted < rows.size()) emit(rows.row(emitted++));
  return {};
}

Expected<ShmClient> connect_engine(const SweepOptions& options) {
  ShmClientOptions client_options;
  client_options.timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::duration<double>(options.timeout_s));
  client_options.socket_dir = options.socket_dir;
  // A sweep waits for answers that come a combo's compute apart: it backs off (spins briefly,
  // then yields and naps) unless --wait says otherwise, so that it never holds a core the
  // engine's workers could compute on.
  client_options.wait = parse_wait_mode(options.wait.empty() ? "backoff" : options.wait).value_or(WaitMode::backoff);
  return ShmClient::connect(options.name, client_options);
}

// A strategy the engine serves, by name, from its table.
Expected<StrategyChoice> engine_strategy(const SweepOptions& options, const ShmClient& client) {
  const Attachment& segment = client.segment();
  const auto index = segment.find_strategy(options.strategy);
  if (!index) return std::unexpected(unknown_strategy(options.name, options.strategy, segment));
  StrategyChoice choice;
  const StrategyEntry& entry = segment.strategy_at(*index);
  choice.name = entry.name;
  choice.index = *index;
  for (std::uint32_t k = 0; k < entry.param_count; ++k) choice.params.emplace_back(entry.param_names[k]);
  if (*index == 0) choice.local = &builtin();
  return choice;
}

// The bars the engine judges series `index`'s windows against: for a live main series, those
// published now.
std::span<const double> engine_bars(const ShmClient& client, std::uint32_t index) {
  return index == 0 ? client.segment().published_series() : client.segment().series_at(index);
}

// Through an engine the combos run on the engine's series. A series this command describes too
// (--data, --bars/--seed/...) must be that series, byte for byte: otherwise the rows would be
// results for data the user did not mean. Empty when it is (or none is described).
std::string described_conflict(const SweepOptions& options, const LoadedSeries* mine, const ShmClient& client,
                               const std::vector<std::uint32_t>& chosen) {
  if (mine == nullptr) return {};
  const SeriesName ours = name_of(mine->description, mine->close);
  for (const std::uint32_t index : chosen) {
    const SeriesName theirs = name_of(std::string(client.segment().series_key(index)), engine_bars(client, index));
    if (theirs.bars == ours.bars && theirs.checksum == ours.checksum) continue;
    return fmt::format("{} {} ({}) is not the series engine {} serves (series {}: {}); through --name the combos run "
                       "on the engine's own series: drop {}, or start the engine with that series",
                       options.data_paths.empty() ? "--bars/--seed/... describe" : "--data", ours.name,
                       described(ours), options.name, theirs.name, described(theirs),
                       options.data_paths.empty() ? "those options" : "--data");
  }
  return {};
}

Expected<void> run_through_segment(const SweepOptions& options, ShmClient& client, const StrategyChoice& strategy,
                                   const std::vector<std::uint32_t>& chosen, const SweepPlan& plan,
                                   const Emit& emit, const BeginSeries& begin_series, bool& is_default, double& fee) {
  const DataHeader& header = client.segment().header();
  if (auto placed = place_sweep_thread(options, header); !placed) return std::unexpected(placed.error());
  fee = header.fee;
  if (options.fee_given && options.fee != header.fee)
    return fail(ErrorCode::invalid_argument, "--fee {} differs from the fee {} engine {} serves with; restart it with --fee",
                options.fee, header.fee, options.name);
  for (const std::uint32_t series_index : chosen) {
    // The engine judges windows against the bars it has: for a live main series, those published.
    // Judged here too where this process has the strategy, so a row from a combo file names its line.
    const SeriesRows rows = rows_on(plan, strategy, name_of(std::string(client.segment().series_key(series_index)),
                                                             engine_bars(client, series_index)));
    const SeriesName& named = rows.series;
    is_default = series_index == 0 && is_default_series(header.series_checksum);
    begin_series(SeriesStart{fmt::format("through shm segment {} (lane {}, {} mode), series {} ({})", options.name,
                                         client.lane(), to_string(client.wait_mode()), named.name, described(named)),
                             fee, {}});
    if (auto streamed = stream_through_segment(options, client, strategy, series_index, rows, emit); !streamed)
      return streamed;
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

// The server's own series (opcode 5): what the rows run on, where the header says they ran.
Expected<SeriesStart> use_server_series(const SweepOptions& options, SocketClient& client,
                                        const StrategyChoice& strategy, const SweepPlan& plan, SeriesRows& rows,
                                        bool& is_default) {
  auto series = client.use_preloaded();
  if (!series) {
    if (client.last_server_error() == static_cast<std::uint32_t>(SocketError::no_preloaded_series))
      return fail(ErrorCode::invalid_argument,
                  "{} holds no series of its own (it runs --no-shm without --data or --bars); add --ship to send "
                  "this command's series (--data FILE or --bars/--seed), or restart the server with one",
                  client.server());
    return std::unexpected(series.error());
  }
  if (options.fee_given && options.fee != series->fee)
    return fail(ErrorCode::invalid_argument, "--fee {} differs from the fee {} that {} sweeps with; restart it with --fee",
                options.fee, series->fee, client.server());
  SeriesStart start;
  start.fee = series->fee;
  start.computed_on = fmt::format("the server's series {} ({} bars, checksum {:016x})", series->name, series->n_bars,
                                  series->checksum);
  start.where = fmt::format("on {}, through {} (its preloaded series: combos only)", start.computed_on, client.server());
  is_default = is_default_series(series->checksum);
  rows = rows_on(plan, strategy, SeriesName{series->name, series->n_bars, series->checksum});
  return start;
}

// This command's series, shipped with every chunk or (--stateful) loaded once.
Expected<SeriesStart> ship_series(const SweepOptions& options, SocketClient& client, const StrategyChoice& strategy,
                                  const LoadedSeries& shipped, const std::string& name, const SweepPlan& plan,
                                  SeriesRows& rows, bool& is_default) {
  rows = rows_on(plan, strategy, name_of(name, shipped.close));
  const SeriesName& named = rows.series;
  is_default = shipped.is_default;
  SeriesStart start;
  start.fee = options.fee;
  if (!options.stateful) {
    start.where = fmt::format("over {} (series {}: {}), through {} (stateless: series and combos in one frame per chunk)",
                              shipped.description, named.name, described(named), client.server());
    return start;
  }
  auto loaded = client.load(shipped.close);
  if (!loaded) return std::unexpected(loaded.error());
  const std::uint64_t checksum = named.checksum;
  if (loaded->checksum != checksum)
    return fail(ErrorCode::protocol, "{} stored the series with checksum {:016x}, but the series sent has {:016x}",
                client.server(), loaded->checksum, checksum);
  if (options.fee_given && options.fee != loaded->fee)
    return fail(ErrorCode::invalid_argument, "--fee {} differs from the fee {} that {} sweeps with; restart it with --fee",
                options.fee, loaded->fee, client.server());
  start.fee = loaded->fee;
  start.where = fmt::format("over {} (series {}: {}), through {} (stateful: series loaded once, then combos only)",
                            shipped.description, named.name, described(named), client.server());
  return start;
}

// Over a socket. By default the combos run on the series the server preloaded (opcode 5 once,
// then opcode 3 per chunk): `shipped` is null. With --ship, this command's own series travels
// with every chunk (stateless) or once (--stateful).
Expected<void> run_through_socket(const SweepOptions& options, SocketClient& client_ref, const StrategyChoice& strategy,
                                  const LoadedSeries* shipped, const std::string& name, const SweepPlan& plan,
                                  const Emit& emit, const BeginSeries& begin_series, bool& is_default, double& fee) {
  SocketClient* client = &client_ref;
  SeriesRows rows;
  auto start = shipped == nullptr ? use_server_series(options, *client, strategy, plan, rows, is_default)
                                  : ship_series(options, *client, strategy, *shipped, name, plan, rows, is_default);
  if (!start) return std::unexpected(start.error());
  fee = start->fee;
  begin_series(*start);
  const bool loaded_on_server = shipped == nullptr || options.stateful;
  return run_in_chunks(
      rows, kSocketChunk,
      [&](const std::vector<Combo>& combos) {
        return loaded_on_server ? client->sweep_loaded(combos) : client->sweep(shipped->close, combos);
      },
      emit);
}

// What --series takes: a name, an index or "all"; which of them exist is known once the series are.
CLI::Validator series_selector() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (!text.empty() && text.size() <= 255) return {};
        return "a series is named by 1..255 characters: its name, its index or 'all'";
      },
      "NAME, INDEX or all");
}

// The rules between sweep's options (exit 2); empty when they hold.
std::string conflicting_options(const SweepOptions& options) {
  const bool socket = !options.socket_path.empty() || !options.tcp.empty();
  if (options.ship && !socket) return "--ship needs --socket PATH or --tcp HOST:PORT";
  if (options.stateful && !options.ship)
    return "--stateful loads this command's series into the server, which needs --ship (without --ship the combos "
           "run on the server's preloaded series)";
  if (socket && !options.ship && (!options.data_paths.empty() || options.gbm_given))
    return "--data and --bars/--seed/... describe a series to send: add --ship, or drop them to run on the server's "
           "preloaded series";
  const bool inproc = options.name.empty() && !socket;
  if (!inproc && options.data_paths.size() > 1)
    return "several --data need --inproc: through an engine, --series picks among the series it preloaded";
  if (socket && !options.series.empty()) return "--series needs --inproc or --name: a socket server holds one series";
  if (!inproc && names_a_file(options.strategy))
    return "--strategy FILE.so loads a strategy into this process, which needs --inproc: through an engine or a "
           "server, name a strategy it serves (its `status` lists them)";
  if (!options.client_cpu.empty() && options.name.empty())
    return "--client-cpu needs --name: it places the thread that talks to an engine's segment (the engine publishes "
           "which cpus are near it)";
  const auto from_stdin = std::count(options.data_paths.begin(), options.data_paths.end(), "-") +
                          (options.combos.combos_path == "-" ? 1 : 0);
  if (from_stdin > 1) return "only one of --data and --combos may read standard input ('-')";
  return {};
}

// The fingerprint line of a table over the default data: the published L=6 result, checked.
int check_fingerprint(const SweepRow& row) {
  const bool holds = row.result.pnl == kFingerprintPnl && row.result.trades == kFingerprintTrades;
  fmt::print("fingerprint L=6: pnl {:.17g}, trades {}: {}\n", row.result.pnl, row.result.trades,
             holds ? "matches the published -5165.577039790348 / 57029"
                   : "DOES NOT MATCH the published -5165.577039790348 / 57029");
  return holds ? 0 : kExitFailure;
}

// Where a sweep runs and on which strategy: the built-in one, a file loaded here (--inproc), or
// one the engine or server serves (known once connected). Filled in place: `strategy` may point
// into `catalog`.
struct SweepTarget {
  StrategyCatalog catalog;
  StrategyChoice strategy = choice_of(builtin());
  std::optional<ShmClient> engine;
  std::optional<SocketClient> server;
};

// Loads --strategy FILE.so, or connects to the engine or server and finds --strategy NAME there:
// each connection is made here, before the rows are planned with the strategy's parameter names.
Expected<void> choose_target(const SweepOptions& options, bool socket, SweepTarget& target) {
  if (names_a_file(options.strategy)) {
    const auto check_close = strategy_check_series();
    if (!check_close) return std::unexpected(check_close.error());
    auto loaded = target.catalog.load(options.strategy, *check_close);
    if (!loaded) return std::unexpected(loaded.error());
    target.strategy = choice_of(**loaded);
  } else if (!options.strategy.empty() && options.strategy != builtin().name() && options.name.empty() && !socket) {
    return fail(ErrorCode::invalid_argument,
                "--inproc runs a strategy this process loads: give its FILE.so (--strategy path/to/{}.so); a name "
                "picks one an engine serves",
                options.strategy);
  }
  if (!options.name.empty()) {
    auto connected = connect_engine(options);
    if (!connected) return std::unexpected(connected.error());
    target.engine.emplace(std::move(*connected));
    if (!options.strategy.empty()) {
      auto chosen = engine_strategy(options, *target.engine);
      if (!chosen) return std::unexpected(chosen.error());
      target.strategy = std::move(*chosen);
    }
  } else if (socket) {
    auto connected = connect_socket(options);
    if (!connected) return std::unexpected(connected.error());
    target.server.emplace(std::move(*connected));
    if (!options.strategy.empty() && options.strategy != builtin().name()) {
      auto chosen = target.server->use_strategy(options.strategy);
      if (!chosen) return std::unexpected(chosen.error());
      target.strategy = StrategyChoice{options.strategy, nullptr, chosen->index, chosen->params};
    }
  }
  return {};
}

}  // namespace

CLI::App* add_sweep_subcommand(CLI::App& app, SweepOptions& options) {
  auto* sweep = app.add_subcommand("sweep", "Run combos (a grid, lengths or a combo file) and stream pnl and trades per combo");
  auto* target = sweep->add_option_group("target", "where the combos run (exactly one)");
  target->add_flag("--inproc")->description("run the kernel in this process");
  target->add_option("--name", options.name, "stream through the engine's shared-memory segment NAME")
      ->check(engine_name());
  target->add_option("--socket", options.socket_path,
                     "run the combos on the series `ipcfloor serve --socket PATH` preloaded (Unix-domain socket)")
      ->check(file_path());
  target->add_option("--tcp", options.tcp, "the same through `ipcfloor serve --tcp HOST:PORT` (host defaults to 127.0.0.1)")
      ->check(tcp_endpoint());
  target->require_option(1);
  options.socket_dir = socket_dir_default();
  add_socket_dir_option(*sweep, options.socket_dir);
  sweep->add_flag("--ship", options.ship,
                  "with --socket/--tcp: send this command's own series (--data, or --bars/--seed) instead");
  sweep->add_flag("--stateful", options.stateful,
                  "with --ship: load the series once (opcode 2), then send the combos only (opcode 3)");
  sweep->add_option("--client-cpu", options.client_cpu,
                    "with --name: pin the sweep's thread to this cpu, or near: the first cpu the engine publishes as "
                    "nearest its serving thread (default: any cpu but the engine's workers')")
      ->check(cpu_index_or("near"));
  sweep->add_option("--wait", options.wait, "shm client wait (default: backoff)")
      ->check(one_of({"spin", "backoff", "block"}));
  sweep
      ->add_option("--timeout", options.timeout_s,
                   "seconds to wait for any one answer (a socket sweep is one answer per chunk; there the default is 600)")
      ->check(in_range(0.001, 86'400.0))
      ->capture_default_str()
      ->each([&options](const std::string&) { options.timeout_given = true; });
  sweep->add_option("--data", options.data_paths,
                    "close series: .csv with a close column, .f64 or .npy, or '-' for standard input; repeat it for "
                    "several (--inproc)")
      ->check(file_path())
      ->each([&options](const std::string& path) { options.source.data_path = path; });
  add_column_option(*sweep, options.source.column);
  sweep->add_option("--series", options.series,
                    "with --inproc or --name: the series to sweep, by name (a --data file's name without its "
                    "extension, or 'default'), by index (0 is the first), or 'all'; each row then names its series")
      ->check(series_selector());
  add_gbm_options(*sweep, options.source.gbm, &options.gbm_given);
  auto* lengths = sweep->add_option("--lengths", options.combos.lengths, "comma-separated lengths, e.g. 6,8,11")
                      ->check(length_list())
                      ->each([&options](const std::string&) { options.combos.lengths_given = true; });
  auto* grid = sweep->add_option("--grid", options.combos.grid, "FIRST:LAST:COUNT, like round(linspace(...))")
                   ->check(grid_spec())
                   ->capture_default_str()
                   ->excludes(lengths);
  sweep->add_option("--strategy", options.strategy,
                    "the strategy the combos run on: a name the engine or server serves, or with --inproc a "
                    "strategy's FILE.so (default: the built-in hma)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (names_a_file(text)) return text.size() < 4096 ? "" : "the path is too long";
            return strategy_name()(text);
          },
          "NAME or FILE.so"));
  sweep->add_option("--combos", options.combos.combos_path,
                    "a combo file, '-' for stdin: CSV whose header names the strategy's parameters (the built-in's: "
                    "h,L,s,p3,p2,p), or JSON lines ({\"h\":3,\"L\":6,...} or {\"params\":[...]}); a bad row is "
                    "reported in place, the others run")
      ->check(file_path())
      ->excludes(lengths)
      ->excludes(grid);
  auto* json = sweep->add_flag("--json", options.json, "one JSON object per combo and line, streamed");
  sweep->add_flag("--csv", options.csv, "CSV rows (h,L,s,p3,p2,p,pnl,trades,error,raw), streamed")->excludes(json);
  sweep->add_flag("--quiet", options.quiet, "no progress bar");
  sweep->add_option("--fee", options.fee, "fee per round trip, percentage points")
      ->check(in_range(0.0, 100.0))
      ->capture_default_str()
      ->each([&options](const std::string&) { options.fee_given = true; });
  sweep->add_option("--threads", options.threads, "worker threads (0 = one per core)")
      ->check(in_range(0u, 1024u))
      ->capture_default_str();
  return sweep;
}

int run_sweep_command(SweepOptions& options) {
  if (const std::string conflict = conflicting_options(options); !conflict.empty())
    return usage_error("sweep", conflict);
  const bool socket = !options.socket_path.empty() || !options.tcp.empty();
  auto series_set = SeriesSet::make(options.data_paths, options.source.gbm, options.source.column);
  if (!series_set) return report_error("sweep", series_set.error());
  // Through an engine, --series names the engine's series (checked once attached).
  auto selected = options.name.empty() ? series_set->select(options.series)
                                       : Expected<std::vector<std::size_t>>(std::vector<std::size_t>{0});
  if (!selected) return report_error("sweep", selected.error());
  SweepTarget target;
  if (auto chosen = choose_target(options, socket, target); !chosen) return report_error("sweep", chosen.error());
  const StrategyChoice& strategy = target.strategy;
  std::optional<ShmClient>& engine = target.engine;
  std::optional<SocketClient>& server = target.server;
  auto plan = plan_rows(options.combos, strategy.columns(), strategy.is_builtin());
  if (!plan) return report_error("sweep", plan.error());

  const SweepFormat format = options.json ? SweepFormat::json : options.csv ? SweepFormat::csv : SweepFormat::table;
  SweepWriter writer(stdout, format, !options.series.empty(), strategy.shape());
  SweepProgress progress(plan->size() * selected->size(), !options.quiet);
  std::size_t emitted = 0;
  std::size_t failed_rows = 0;
  std::optional<SweepRow> fingerprint_row;
  const Emit emit = [&](const SweepRow& row) {
    writer.row(row);
    if (!row.error.empty()) ++failed_rows;
    if (strategy.is_builtin() && options.combos.combos_path.empty() && options.series.empty() &&
        row.length == kFingerprintLength && row.error.empty())
      fingerprint_row = row;
    progress.advance(++emitted);
  };
  // Each series' rows start with the table's header line naming where they run; CSV has one
  // header for all; JSON lines none. Which series a socket sweep ran on goes beside stdout.
  bool csv_header = false;
  const BeginSeries begin_series = [&](const SeriesStart& start) {
    if (format == SweepFormat::table) {
      fmt::print("sweep: {} combos {}, fee {}\n", plan->size(), start.where, start.fee);
      writer.header();
    } else if (!start.computed_on.empty()) {
      fmt::print(stderr, "sweep: computed on {}\n", start.computed_on);
    }
    if (format == SweepFormat::csv && !csv_header) writer.header();
    csv_header = true;
  };

  bool is_default = false;
  double fee = options.fee;
  Expected<void> ran{};
  if (engine) {
    // A series the command line describes besides the engine is checked against the engine's.
    std::optional<LoadedSeries> mine;
    if (!options.data_paths.empty() || options.gbm_given) {
      auto series = series_set->load(0);
      if (!series) return report_error("sweep", series.error());
      mine = std::move(*series);
    }
    auto chosen = engine_series(options, *engine);
    if (!chosen) return report_error("sweep", chosen.error());
    if (const std::string conflict = described_conflict(options, mine ? &*mine : nullptr, *engine, *chosen);
        !conflict.empty())
      return usage_error("sweep", conflict);
    ran = run_through_segment(options, *engine, strategy, *chosen, *plan, emit, begin_series, is_default, fee);
  } else if (server) {
    std::optional<LoadedSeries> shipped;
    if (options.ship) {
      auto series = series_set->load(selected->front());
      if (!series) return report_error("sweep", series.error());
      shipped = std::move(*series);
    }
    ran = run_through_socket(options, *server, strategy, shipped ? &*shipped : nullptr,
                             series_set->names()[selected->front()], *plan, emit, begin_series, is_default, fee);
  } else {
    ran = run_inproc_series(options, strategy, *series_set, *selected, *plan, emit, begin_series, is_default);
  }
  progress.finish();
  if (!ran) return report_error("sweep", ran.error());
  if (failed_rows != 0)
    fmt::print(stderr, "ipcfloor sweep: {} of {} rows did not run (they say why)\n", failed_rows, emitted);
  if (format == SweepFormat::table && is_default && fee == kDefaultFee && fingerprint_row)
    if (const int code = check_fingerprint(*fingerprint_row); code != 0) return code;
  return failed_rows != 0 ? kExitInput : 0;
}

}  // namespace ipcfloor
