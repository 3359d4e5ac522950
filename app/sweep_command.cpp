#include "app/sweep_command.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <fmt/chrono.h>
#include <fmt/ranges.h>

#include "app/cli_common.hpp"
#include "app/interrupt.hpp"
#include "app/results_file.hpp"
#include "app/sweep_ranking.hpp"
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
#include "data/random_search.hpp"
#include "data/sweep_rows.hpp"
#include "common/build_info.hpp"
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

// The series a sweep's rows ran on, as each row and the table's header line name it.
struct SeriesName {
  std::string name;
  std::size_t bars = 0;
  std::uint64_t checksum = 0;  // fnv1a64 of the bars' bytes, as a segment's header carries it
};

// Where one series' rows run, told before the first of them: the table's header line says it.
struct SeriesStart {
  std::string where;        // "over ... in-process", "through shm segment ...", "on the server's series ..."
  double fee = kDefaultFee;
  std::string computed_on;  // a socket sweep on the server's series: that series, for stderr
  SeriesName series;        // which series (its whole identity), for a results file's provenance
};
using BeginSeries = std::function<void(const SeriesStart&)>;

// The strategy the rows run on, as this command knows it.
struct StrategyChoice {
  std::string name;                 // as the engine, the server or the file names it
  const Strategy* local = nullptr;  // this process has it: the built-in one, or a --strategy FILE.so
  std::uint32_t index = 0;          // its index on the engine or server (0: the built-in one)
  std::vector<std::string> params;  // its parameter names: what a combo file's header names
  std::string sha256;               // of the .so it came from, hex; "builtin" for the built-in one

  [[nodiscard]] bool is_builtin() const noexcept { return local == &builtin(); }
  [[nodiscard]] ComboColumns columns() const noexcept {
    ComboColumns columns;
    columns.count = std::min<std::size_t>(params.size(), columns.names.size());
    for (std::size_t c = 0; c < columns.count; ++c) columns.names[c] = params[c];
    return columns;
  }
  [[nodiscard]] SweepShape shape(bool stats) const noexcept { return SweepShape{columns(), is_builtin(), stats}; }
};

// The hex of a strategy file's digest; an all-zero digest (the built-in one's) is "builtin".
std::string sha256_text(const Sha256& digest) {
  return std::all_of(digest.begin(), digest.end(), [](std::uint8_t b) { return b == 0; }) ? "builtin" : to_hex(digest);
}

StrategyChoice choice_of(const Strategy& strategy, const Sha256& digest = Sha256{}) {
  StrategyChoice choice;
  choice.name = std::string(strategy.name());
  choice.local = &strategy;
  choice.index = strategy.index();
  choice.sha256 = sha256_text(digest);
  for (std::uint32_t k = 0; k < strategy.param_count(); ++k) choice.params.emplace_back(strategy.param_name(k));
  return choice;
}

// --strategy names a file to load (a path, or a name ending in .so) rather than a strategy.
bool names_a_file(std::string_view strategy) {
  return strategy.find('/') != std::string_view::npos || strategy.ends_with(".so");
}

// Whether an engine serves the fingerprint's data.
bool is_default_series(std::uint64_t checksum) { return checksum == kDefaultSeriesChecksum; }

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
  std::uint64_t from_bar = 0;  // the range the rows run on: [from_bar, to_bar) of the series
  std::uint64_t to_bar = 0;

  [[nodiscard]] std::size_t size() const noexcept { return verdicts.size(); }
  [[nodiscard]] bool runnable(std::size_t i) const noexcept { return verdicts[i] == RowVerdict::runnable; }
  [[nodiscard]] std::size_t runnable_count() const noexcept {
    return static_cast<std::size_t>(std::count(verdicts.begin(), verdicts.end(), RowVerdict::runnable));
  }
  // Row i as written, before any result (allocates).
  [[nodiscard]] SweepRow row(std::size_t i) const {
    SweepRow row = planned_row(*plan, i, verdicts[i], to_bar - from_bar, strategy->local, strategy->name);
    row.series = series.name;
    row.series_bars = series.bars;
    row.series_checksum = series.checksum;
    row.from_bar = from_bar;
    row.to_bar = to_bar;
    return row;
  }
};

// The range [from, to) --from/--to name in a series of `bars` (to 0: its end), or an error naming
// the series' bars.
Expected<std::pair<std::uint64_t, std::uint64_t>> range_in(const SweepOptions& options, const SeriesName& series) {
  const std::uint64_t to = options.to_bar == 0 ? series.bars : options.to_bar;
  if (to > series.bars || options.from_bar > to || to - options.from_bar < 2)
    return fail(ErrorCode::invalid_argument, "--from {} --to {} is not a range of series {}: it holds {} bars, and a "
                "range needs at least 2 of them", options.from_bar, options.to_bar, series.name, series.bars);
  return std::pair{options.from_bar, to};
}

// The plan's rows on `series` (on the bars --from/--to name), judged by the strategy where this
// process has it (rows it refuses say why, in place); otherwise the engine or server judges them.
Expected<SeriesRows> rows_on(const SweepPlan& plan, const StrategyChoice& strategy, SeriesName series,
                             const SweepOptions& options) {
  auto range = range_in(options, series);
  if (!range) return std::unexpected(range.error());
  SeriesRows rows;
  rows.plan = &plan;
  rows.from_bar = range->first;
  rows.to_bar = range->second;
  const std::size_t judged = range->second - range->first;
  rows.verdicts = strategy.local != nullptr ? admit_rows(plan, *strategy.local, judged) : verdicts_of(plan);
  rows.series = std::move(series);
  rows.strategy = &strategy;
  return rows;
}

// Runs the rows that can run in chunks of at most `chunk` through `run` and emits every row in
// order as soon as it and the rows before it are done (rows that cannot run at once). A chunk's
// results carry pnl and trades, and the figures when the sweep asked for them.
using RunChunk = std::function<Expected<std::vector<TradeStats>>(const std::vector<Combo>&)>;

// pnl and trades alone, in the shape a chunk's results take.
std::vector<TradeStats> without_figures(const std::vector<BacktestResult>& results) {
  std::vector<TradeStats> out(results.size());
  for (std::size_t i = 0; i < results.size(); ++i) {
    out[i].pnl = results[i].pnl;
    out[i].trades = results[i].trades;
  }
  return out;
}

Expected<void> run_in_chunks(const SeriesRows& rows, std::size_t chunk, const RunChunk& run, const Emit& emit) {
  std::size_t next = 0;
  std::vector<Combo> combos;
  while (next < rows.size()) {
    while (next < rows.size() && !rows.runnable(next)) emit(rows.row(next++));
    combos.clear();
    std::size_t end = next;
    for (; end < rows.size() && combos.size() < chunk; ++end)
      if (rows.runnable(end)) combos.push_back(rows.plan->combo(end));
    if (combos.empty() || Interrupt::requested()) break;  // Ctrl-C: what was computed is out
    auto results = run(combos);
    if (!results) return std::unexpected(results.error());
    for (std::size_t k = 0; next < end; ++next) {
      SweepRow row = rows.row(next);
      if (rows.runnable(next)) {
        row.stats = (*results)[k++];
        row.result = {row.stats.pnl, row.stats.trades};
      }
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
      used * (options.stats ? strategy.stats_workspace_bytes(bars) : strategy.workspace_bytes(bars)),
      fmt::format("--threads {} or the series ({} bars; --bars or --data)", threads, bars)};
  return check_memory_budget(std::span(&workspaces, 1), read_host_memory());
}

Expected<void> run_inproc(const SweepOptions& options, const Strategy& strategy, const LoadedSeries& series,
                          const SeriesRows& rows, const Emit& emit) {
  const unsigned threads = inproc_threads(options);
  const std::size_t chunk = std::max<std::size_t>(1, kInprocChunkPerThread * threads);
  return run_in_chunks(
      rows, chunk,
      [&](const std::vector<Combo>& combos) -> Expected<std::vector<TradeStats>> {
        const Bars bars = series.bars().slice(rows.from_bar, rows.to_bar);
        if (options.stats) {
          const double year = options.bars_per_year != 0.0 ? options.bars_per_year : kDefaultBarsPerYear;
          return run_sweep_stats(strategy, bars, combos, options.fee, year, threads);
        }
        auto results = run_sweep(strategy, bars, combos, options.fee, threads);
        if (!results) return std::unexpected(std::move(results.error()));
        return without_figures(*results);
      },
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
    auto planned = rows_on(plan, strategy, name_of(set.names()[index], series->close), options);
    if (!planned) return std::unexpected(planned.error());
    const SeriesRows& rows = *planned;
    if (auto fits = check_workspace_memory(options, *strategy.local, series->close.size(), rows); !fits) return fits;
    begin_series(SeriesStart{fmt::format("over {} (series {}: {}), in-process", series->description, rows.series.name,
                                         described(rows.series)),
                             options.fee, {}, rows.series});
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
// The options line every request of this sweep carries, or null for none: the fee when --fee
// differs from the engine's, bars per year when --bars-per-year says.
const RequestOptions* sweep_options(const SweepOptions& options, const DataHeader& header, const SeriesRows& rows,
                                    RequestOptions& line) {
  line = RequestOptions{};
  if (rows.from_bar != 0 || rows.to_bar != rows.series.bars) {
    line.present |= kOptionRange;
    line.from_bar = rows.from_bar;
    line.to_bar = rows.to_bar;
  }
  if (options.fee_given && options.fee != header.fee) {
    line.present |= kOptionFee;
    line.fee = options.fee;
  }
  if (options.stats && options.bars_per_year != 0.0) {
    line.present |= kOptionBarsPerYear;
    line.bars_per_year = options.bars_per_year;
  }
  return line.present != 0 ? &line : nullptr;
}

// A refused row's error, as every way of running a sweep words it.
std::string engine_refusal(const SweepOptions& options, const SweepRow& row, const StrategyChoice& strategy,
                           const ResponseSlot& answer, const AnswerRecord& record, std::size_t n_bars) {
  const auto status = static_cast<Status>(answer.status);
  if (status == Status::window_out_of_range) {
    if (strategy.local == nullptr && answer.extra[2] == kRecordWhy) {
      // The strategy lives only in the engine: its own sentence came back with the answer.
      const auto w = row.params.as_array();
      return fmt::format("window_out_of_range: params [{}]: {}",
                         fmt::join(std::span(w).first(strategy.params.size()), ","),
                         std::string_view(record.why, strnlen(record.why, sizeof record.why)));
    }
    return window_error(row, n_bars, strategy.local, strategy.name);
  }
  if (status == Status::too_costly)
    return fmt::format("too_costly: its work exceeds engine {}'s bound per frame (serve --max-frame-cost)", options.name);
  if (status == Status::missing_column)
    return fmt::format("missing_column: strategy {} needs the {} column, which series {} does not have", strategy.name,
                       kColumnNames[std::countr_zero(static_cast<std::uint64_t>(answer.extra[0]) | 32U)], row.series);
  if (status == Status::no_trade_report)
    return fmt::format("no_trade_report: strategy {} is built against version 1 of the strategy ABI and reports no "
                       "trades, so it has no statistics (rebuild it against this ipcfloor's strategy.h)", strategy.name);
  return std::string(to_string(status));
}

Expected<void> stream_through_segment(const SweepOptions& options, ShmClient& client, const StrategyChoice& strategy,
                                      std::uint32_t series_index, const SeriesRows& rows, const Emit& emit) {
  RequestOptions line;
  const RequestOptions* with = sweep_options(options, client.segment().header(), rows, line);
  const Opcode opcode = options.stats ? Opcode::stats : Opcode::backtest;
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
    return SweepRequest{opcode, request_flags(series_index, strategy.index), payload_of(asked), with};
  };
  const auto take = [&](std::size_t, const ResponseSlot& answer, const AnswerRecord& record) {
    const std::size_t at = next_runnable(emitted);
    while (emitted < at) emit(rows.row(emitted++));
    SweepRow row = rows.row(at);
    const std::size_t n_bars = rows.to_bar - rows.from_bar;
    const auto status = static_cast<Status>(answer.status);
    if (status == Status::ok) {
      row.result = {answer.pnl, answer.trades};
      if (options.stats) row.stats = from_wire(answer.pnl, answer.trades, record.stats);
    } else {
      row.error = engine_refusal(options, row, strategy, answer, record, n_bars);
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
  Sha256 digest{};
  std::copy(std::begin(entry.sha256), std::end(entry.sha256), digest.begin());
  choice.sha256 = sha256_text(digest);
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
  // A --fee that differs from the engine's travels with every request (the options line).
  fee = options.fee_given ? options.fee : header.fee;
  for (const std::uint32_t series_index : chosen) {
    // The engine judges windows against the bars it has: for a live main series, those published.
    // Judged here too where this process has the strategy, so a row from a combo file names its line.
    auto planned = rows_on(plan, strategy, name_of(std::string(client.segment().series_key(series_index)),
                                                   engine_bars(client, series_index)), options);
    if (!planned) return std::unexpected(planned.error());
    const SeriesRows& rows = *planned;
    const SeriesName& named = rows.series;
    is_default = series_index == 0 && is_default_series(header.series_checksum);
    begin_series(SeriesStart{fmt::format("through shm segment {} (lane {}, {} mode), series {} ({})", options.name,
                                         client.lane(), to_string(client.wait_mode()), named.name, described(named)),
                             fee, {}, named});
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
  auto planned = rows_on(plan, strategy, SeriesName{series->name, series->n_bars, series->checksum}, options);
  if (!planned) return std::unexpected(planned.error());
  rows = std::move(*planned);
  start.series = rows.series;
  return start;
}

// This command's series, shipped with every chunk or (--stateful) loaded once.
Expected<SeriesStart> ship_series(const SweepOptions& options, SocketClient& client, const StrategyChoice& strategy,
                                  const LoadedSeries& shipped, const std::string& name, const SweepPlan& plan,
                                  SeriesRows& rows, bool& is_default) {
  auto planned = rows_on(plan, strategy, name_of(name, shipped.close), options);
  if (!planned) return std::unexpected(planned.error());
  rows = std::move(*planned);
  const SeriesName& named = rows.series;
  is_default = shipped.is_default;
  SeriesStart start;
  start.fee = options.fee;
  start.series = named;
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
      [&](const std::vector<Combo>& combos) -> Expected<std::vector<TradeStats>> {
        auto results = loaded_on_server ? client->sweep_loaded(combos) : client->sweep(shipped->close, combos);
        if (!results) return std::unexpected(std::move(results.error()));
        return without_figures(*results);
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
  if (!options.search.empty() && (options.trials == 0 || options.params.empty()))
    return "--search random needs --trials N and a --param NAME=LO:HI for each parameter the strategy uses";
  if (!options.search.empty() && (options.combos.lengths_given || !options.combos.combos_path.empty()))
    return "--search random draws its own combos: drop --lengths and --combos";
  if (!options.replay.empty() && (!options.search.empty() || options.combos.lengths_given ||
                                  !options.combos.combos_path.empty()))
    return "--replay runs the combos of its file: drop --search, --lengths and --combos";
  if (!options.replay.empty() && socket)
    return "--replay needs --inproc or --name: it checks the series it computes on against the file's";
  if (socket && (options.stats || options.from_bar != 0 || options.to_bar != 0))
    return "--stats and --from/--to need --inproc or --name for now: the socket baseline does not carry them yet";
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
    target.strategy = choice_of(**loaded, target.catalog.digest((*loaded)->index()));
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
      target.strategy = StrategyChoice{options.strategy, nullptr, chosen->index, chosen->params, "unknown: the socket server does not publish it"};
    }
  }
  return {};
}

}  // namespace

namespace {

// --out, --replay and the random search's options. With --search, --seed seeds the search (the
// generated series keeps its default seed: --data names another series).
void add_research_options(CLI::App& sweep, SweepOptions& options) {
  auto* out = sweep.add_option("--out", options.out,
                               "also write the rows to FILE.csv, FILE.jsonl or FILE.npz, after a header of provenance "
                               "(version, strategy and its sha256, series and checksum, fee, range, seed, command)")
                  ->check(CLI::Validator([](std::string& text) -> std::string {
                    auto format = results_format(text);
                    return format ? std::string() : format.error().message;
                  }, "FILE.csv|.jsonl|.npz"));
  sweep.add_option("--replay", options.replay,
                   "compute the rows of a results file (--out) again, on the same target, and report every row that "
                   "differs; refused when the file's strategy, series or version is not this one")
      ->check(CLI::ExistingFile)
      ->excludes(out);
  auto* search = sweep.add_option("--search", options.search,
                                  "random: draw --trials combos from the --param ranges instead of a grid")
                     ->check(one_of({"random"}));
  sweep.add_option("--trials", options.trials, "with --search random: how many combos to draw")
      ->check(in_range<std::uint64_t>(1, 1'000'000'000))
      ->needs(search);
  sweep.add_option("--param", options.params,
                   "with --search random: NAME=LO:HI, the whole numbers LO..HI both included (NAME=V fixes it); one "
                   "per parameter the strategy uses")
      ->check(CLI::Validator([](std::string& text) -> std::string {
        auto range = parse_param_range(text);
        return range ? std::string() : range.error().message;
      }, "NAME=LO:HI"))
      ->needs(search);
  sweep.add_option("--where", options.where,
                   "with --search random: constraints between parameters, e.g. 'fast < slow' (several joined by "
                   "'and' or ','); a draw that breaks one is drawn again")
      ->check(CLI::Validator([](std::string& text) -> std::string {
        return !text.empty() && text.size() <= 4096 ? "" : "constraints are 1..4096 characters, e.g. 'fast < slow'";
      }, "CONSTRAINTS"))
      ->needs(search);
  sweep.parse_complete_callback([&sweep, &options] {
    if (options.search.empty() || sweep.get_option("--seed")->count() == 0) return;
    options.seed = options.source.gbm.seed;
    options.source.gbm.seed = GbmParams{}.seed;
    options.gbm_given = false;
    for (const char* name : {"--bars", "--mu", "--sigma", "--s0", "--dt"})
      if (sweep.get_option(name)->count() != 0) options.gbm_given = true;
  });
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
      ->check(strategy_name_or_file());
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
  sweep->add_option("--from", options.from_bar, "run every combo on the bars from this one on (0: the first)")
      ->check(in_range<std::uint64_t>(0, std::uint64_t{1} << 40));
  sweep->add_option("--to", options.to_bar, "... up to the bar before this one (0: the end of the series)")
      ->check(in_range<std::uint64_t>(0, std::uint64_t{1} << 40));
  sweep->add_flag("--stats", options.stats,
                  "each row with its statistics (win rate, profit factor, drawdown, Sharpe, ...: docs/STATISTICS.md) "
                  "after pnl and trades");
  sweep->add_option("--bars-per-year", options.bars_per_year,
                    "with --stats: bars in a year for sharpe, sortino and calmar (default: the engine's serve "
                    "--bars-per-year; --inproc: 252)")
      ->check(in_range(1e-9, kMaxBarsPerYear));
  auto* sort_by = sweep->add_option("--sort-by", options.sort_by,
                                    "rank the rows by pnl, trades or (with --stats) a figure, best first (METRIC, or "
                                    "METRIC:asc / METRIC:desc; the drawdowns rank smallest first), written at the end")
                      ->check(CLI::Validator(
                          [](std::string& text) -> std::string {
                            auto by = parse_rank_by(text, true);
                            return by ? std::string() : by.error().message;
                          },
                          "pnl, trades or a figure of docs/STATISTICS.md[:asc|:desc]"));
  sweep->add_option("--top", options.top, "with --sort-by: keep and write only the best K rows (memory stays O(K))")
      ->check(in_range<std::size_t>(1, 100'000'000))
      ->needs(sort_by);
  add_research_options(*sweep, options);
  return sweep;
}

namespace {

// What a run of `sweep` holds while its rows stream: where each row goes (stdout, a ranking, a
// results file, or, replaying, a comparison with the file's row), and what was seen.
class SweepSession {
 public:
  // `sink`, when set, takes every row instead of the writers.
  explicit SweepSession(SweepOptions& options, Emit sink = {}) : options_(options), sink_(std::move(sink)) {}
  int run();

 private:
  // The options' checks, the series, the target and the strategy, the plan (not for a random
  // search), the ranking, the writers: an exit code when one fails, else 0.
  int prepare();
  // Replay: the file's fee, range, statistics and series become this run's.
  void take_replay_settings();
  // The replay's checks of the file against what this run will compute (strategy and its
  // digest, series, bars and checksum), and its plan: the file's rows. An exit code or 0.
  int prepare_replay();
  // The identity of the series this run computes on (the engine's, or the first selected here).
  [[nodiscard]] Expected<SeriesName> target_series() const;
  // One plan's rows through the target: in process, through the engine, over the socket.
  Expected<void> run_plan(const SweepPlan& plan);
  // A random search: its combos drawn a chunk at a time, each chunk run as a plan.
  Expected<void> run_random();
  void emit(const SweepRow& row);
  void begin_series(const SeriesStart& start);
  // The provenance of a results file, once the first series is known.
  [[nodiscard]] Provenance provenance(const SeriesStart& start) const;
  int finish(const Expected<void>& ran);
  // Replay: the row `row` computed now against the file's row of the same position.
  void compare(const SweepRow& row);

  SweepOptions& options_;
  Emit sink_;
  bool socket_ = false;
  std::optional<SeriesSet> series_set_;
  std::vector<std::size_t> selected_;
  SweepTarget target_;
  std::optional<SweepPlan> plan_;
  std::size_t planned_ = 0;  // rows to run, for the progress
  std::optional<RankedRows> ranked_;
  SweepFormat format_ = SweepFormat::table;
  SweepShape shape_;
  std::unique_ptr<SweepWriter> writer_;
  std::unique_ptr<ResultsFile> out_;
  std::optional<SweepProgress> progress_;
  std::optional<ResultsRead> replay_;
  std::size_t replayed_ = 0;
  std::size_t differing_ = 0;
  std::size_t emitted_ = 0;
  std::size_t failed_rows_ = 0;
  std::optional<SweepRow> fingerprint_row_;
  std::set<std::string> begun_;
  bool is_default_ = false;
  double fee_ = 0.0;
  Error out_error_{ErrorCode::io, {}};
};

int SweepSession::prepare() {
  if (const std::string conflict = conflicting_options(options_); !conflict.empty())
    return usage_error("sweep", conflict);
  if (!options_.replay.empty()) {
    auto read = read_results(options_.replay);
    if (!read) return report_error("sweep", read.error());
    replay_.emplace(std::move(*read));
    take_replay_settings();
  }
  socket_ = !options_.socket_path.empty() || !options_.tcp.empty();
  auto series_set = SeriesSet::make(options_.data_paths, options_.source.gbm, options_.source.column);
  if (!series_set) return report_error("sweep", series_set.error());
  series_set_.emplace(std::move(*series_set));
  // Through an engine, --series names the engine's series (checked once attached).
  auto selected = options_.name.empty() ? series_set_->select(options_.series)
                                        : Expected<std::vector<std::size_t>>(std::vector<std::size_t>{0});
  if (!selected) return report_error("sweep", selected.error());
  selected_ = std::move(*selected);
  if (auto chosen = choose_target(options_, socket_, target_); !chosen) return report_error("sweep", chosen.error());
  if (target_.engine && (!options_.data_paths.empty() || options_.gbm_given)) {
    // A series the command line describes besides the engine must be the engine's (exit 2).
    auto mine = series_set_->load(0);
    if (!mine) return report_error("sweep", mine.error());
    auto chosen = engine_series(options_, *target_.engine);
    if (!chosen) return report_error("sweep", chosen.error());
    if (const std::string conflict = described_conflict(options_, &*mine, *target_.engine, *chosen); !conflict.empty())
      return usage_error("sweep", conflict);
  }
  if (!options_.replay.empty()) {
    if (const int code = prepare_replay(); code != 0) return code;
  } else if (options_.search.empty()) {
    auto plan = plan_rows(options_.combos, target_.strategy.columns(), target_.strategy.is_builtin());
    if (!plan) return report_error("sweep", plan.error());
    plan_.emplace(std::move(*plan));
  }
  planned_ = (plan_ ? plan_->size() : options_.trials) * selected_.size();
  if (!options_.sort_by.empty()) {
    auto by = parse_rank_by(options_.sort_by, options_.stats);
    if (!by) return usage_error("sweep", by.error().message);
    ranked_.emplace(std::move(*by), options_.top);
  }
  format_ = options_.json ? SweepFormat::json : options_.csv ? SweepFormat::csv : SweepFormat::table;
  shape_ = target_.strategy.shape(options_.stats);
  shape_.ranged = options_.from_bar != 0 || options_.to_bar != 0;
  writer_ = std::make_unique<SweepWriter>(stdout, format_, !options_.series.empty(), shape_);
  if (!options_.out.empty()) {
    auto out = ResultsFile::create(options_.out, shape_, !options_.series.empty());
    if (!out) return report_error("sweep", out.error());
    out_ = std::move(*out);
  }
  progress_.emplace(planned_, !options_.quiet);
  fee_ = options_.fee;
  return 0;
}

void SweepSession::take_replay_settings() {
  const Provenance& p = replay_->provenance;
  options_.fee = p.fee;
  options_.fee_given = true;
  options_.from_bar = p.from_bar;
  options_.to_bar = p.to_bar;
  options_.stats = p.stats;
  options_.bars_per_year = p.stats ? p.bars_per_year : 0.0;
  if (options_.series.empty() && !p.series.name.empty() && !options_.name.empty()) options_.series = p.series.name;
}

Expected<SeriesName> SweepSession::target_series() const {
  if (target_.engine) {
    auto chosen = engine_series(options_, *target_.engine);
    if (!chosen) return std::unexpected(chosen.error());
    const std::uint32_t index = chosen->front();
    return name_of(std::string(target_.engine->segment().series_key(index)), engine_bars(*target_.engine, index));
  }
  auto series = series_set_->load(selected_.front());
  if (!series) return std::unexpected(series.error());
  return name_of(series_set_->names()[selected_.front()], series->close);
}

int SweepSession::prepare_replay() {
  const Provenance& p = replay_->provenance;
  std::vector<std::string> differ;
  if (p.strategy != target_.strategy.name)
    differ.push_back(fmt::format("strategy: the file's is {}, this run's {}", p.strategy, target_.strategy.name));
  else if (p.strategy_sha256 != target_.strategy.sha256)
    differ.push_back(fmt::format("strategy {}'s sha256: the file's is {}, this run's {}", p.strategy,
                                 p.strategy_sha256, target_.strategy.sha256));
  auto series = target_series();
  if (!series) return report_error("sweep", series.error());
  if (series->bars != p.series.bars || series->checksum != p.series.checksum)
    differ.push_back(fmt::format("series: the file's {} has {} bars, checksum {:016x}; this run's {} has {} bars, "
                                 "checksum {:016x}", p.series.name, p.series.bars, p.series.checksum, series->name,
                                 series->bars, series->checksum));
  if (!differ.empty())
    return report_error("sweep", Error{ErrorCode::invalid_argument,
                                       fmt::format("--replay {}: refused, its provenance is not this run's: {}",
                                                   options_.replay, fmt::join(differ, "; "))});
  if (p.version != kVersion)
    fmt::print(stderr, "ipcfloor sweep: note: {} was written by ipcfloor {}; this is {}\n", options_.replay, p.version,
               kVersion);
  std::vector<Combo> combos;
  combos.reserve(replay_->rows.size());
  for (const SweepRow& row : replay_->rows) combos.push_back(row.params);
  plan_.emplace(SweepPlan::of(std::move(combos)));
  return 0;
}

// Two doubles are the same answer only bit for bit (a NaN equals itself, -0.0 is not 0.0).
bool same_bits(double a, double b) { return std::bit_cast<std::uint64_t>(a) == std::bit_cast<std::uint64_t>(b); }

// The first field two rows differ in, worded; empty when they agree bit for bit.
std::string row_difference(const SweepRow& was, const SweepRow& now, bool stats) {
  if (was.error.empty() != now.error.empty())
    return was.error.empty() ? fmt::format("it ran then, now: {}", now.error)
                             : fmt::format("it did not run then ({}), now it does", was.error);
  if (!was.error.empty()) return {};
  if (!same_bits(was.result.pnl, now.result.pnl))
    return fmt::format("pnl {:.17g} then, {:.17g} now", was.result.pnl, now.result.pnl);
  if (was.result.trades != now.result.trades)
    return fmt::format("trades {} then, {} now", was.result.trades, now.result.trades);
  if (!stats) return {};
  for (std::size_t k = 0; k < kStatsFigureCount; ++k) {
    const double a = stats_figure(was.stats, k);
    const double b = stats_figure(now.stats, k);
    if (!same_bits(a, b)) return fmt::format("{} {:.17g} then, {:.17g} now", kStatsFigureNames[k], a, b);
  }
  return {};
}

void SweepSession::compare(const SweepRow& row) {
  const SweepRow& was = replay_->rows[replayed_++];
  const std::string difference = row_difference(was, row, options_.stats);
  if (difference.empty()) return;
  ++differing_;
  const auto values = row.params.as_array();
  fmt::print("differs: row {} params [{}]: {}\n", replayed_,
             fmt::join(std::span(values).first(target_.strategy.params.size()), ","), difference);
}

void SweepSession::emit(const SweepRow& row) {
  if (sink_) {
    sink_(row);
    progress_->advance(++emitted_);
    return;
  }
  if (replay_) {
    compare(row);
  } else if (!ranked_) {
    writer_->row(row);
  } else if (row.error.empty()) {
    ranked_->add(row);
  } else {
    // Ranked rows are written at the end; a row that did not run says why now, on stderr.
    const auto values = row.params.as_array();
    fmt::print(stderr, "ipcfloor sweep: not ranked: params [{}]: {}\n",
               fmt::join(std::span(values).first(target_.strategy.params.size()), ","), row.error);
  }
  if (out_ && !ranked_) {
    if (auto written = out_->row(row); !written && out_error_.message.empty()) out_error_ = written.error();
  }
  if (!row.error.empty()) ++failed_rows_;
  if (target_.strategy.is_builtin() && options_.combos.combos_path.empty() && options_.series.empty() &&
      options_.search.empty() && row.length == kFingerprintLength && row.error.empty())
    fingerprint_row_ = row;
  progress_->advance(++emitted_);
}

void SweepSession::begin_series(const SeriesStart& start) {
  // A random search runs chunk after chunk on the same series: its header once.
  if (!begun_.insert(start.series.name).second) return;
  fee_ = start.fee;
  if (sink_) return;
  if (out_) {
    if (auto begun = out_->begin(provenance(start)); !begun && out_error_.message.empty()) out_error_ = begun.error();
  }
  if (replay_) return;
  if (format_ == SweepFormat::table) {
    fmt::print("sweep: {} combos {}, fee {}\n", planned_ / std::max<std::size_t>(1, selected_.size()), start.where,
               start.fee);
    writer_->header();
  } else if (!start.computed_on.empty()) {
    fmt::print(stderr, "sweep: computed on {}\n", start.computed_on);
  }
  if (format_ == SweepFormat::csv && begun_.size() == 1) writer_->header();
}

Expected<void> SweepSession::run_plan(const SweepPlan& plan) {
  const SweepOptions& options = options_;
  const Emit emit = [this](const SweepRow& row) { this->emit(row); };
  const BeginSeries begin = [this](const SeriesStart& start) { begin_series(start); };
  const StrategyChoice& strategy = target_.strategy;
  if (target_.engine) {
    ShmClient& engine = *target_.engine;
    auto chosen = engine_series(options, engine);
    if (!chosen) return std::unexpected(chosen.error());
    return run_through_segment(options, engine, strategy, *chosen, plan, emit, begin, is_default_, fee_);
  }
  if (target_.server) {
    std::optional<LoadedSeries> shipped;
    if (options.ship) {
      auto series = series_set_->load(selected_.front());
      if (!series) return std::unexpected(series.error());
      shipped = std::move(*series);
    }
    return run_through_socket(options, *target_.server, strategy, shipped ? &*shipped : nullptr,
                              series_set_->names()[selected_.front()], plan, emit, begin, is_default_, fee_);
  }
  return run_inproc_series(options, strategy, *series_set_, selected_, plan, emit, begin, is_default_);
}

Expected<void> SweepSession::run_random() {
  std::vector<ParamRange> ranges;
  for (const std::string& text : options_.params) {
    auto range = parse_param_range(text);
    if (!range) return std::unexpected(range.error());
    ranges.push_back(std::move(*range));
  }
  auto order = param_order(ranges, target_.strategy.params);
  if (!order) return std::unexpected(order.error());
  auto constraints = parse_where(options_.where, ranges);
  if (!constraints) return std::unexpected(constraints.error());
  RandomCombos draws(options_.seed, ranges, std::move(*constraints), std::move(*order));
  // Chunks of combos, each run as a plan of its own: memory stays one chunk (and, with --top,
  // the rows kept), however many trials.
  constexpr std::uint64_t kChunk = 4096;
  for (std::uint64_t done = 0; done < options_.trials && !Interrupt::requested();) {
    std::vector<Combo> combos;
    combos.reserve(static_cast<std::size_t>(std::min(kChunk, options_.trials - done)));
    while (combos.size() < kChunk && done + combos.size() < options_.trials) {
      auto combo = draws.next();
      if (!combo) return std::unexpected(combo.error());
      combos.push_back(*combo);
    }
    done += combos.size();
    if (auto ran = run_plan(SweepPlan::of(std::move(combos))); !ran) return ran;
  }
  return {};
}

Provenance SweepSession::provenance(const SeriesStart& start) const {
  Provenance p;
  p.version = std::string(kVersion);
  p.command = options_.command_line;
  const auto now = std::chrono::system_clock::now();
  p.created = fmt::format("{:%Y-%m-%dT%H:%M:%SZ}", fmt::gmtime(std::chrono::system_clock::to_time_t(now)));
  p.target = target_.engine ? "engine " + options_.name : target_.server ? "socket " + target_.server->server() : "inproc";
  p.strategy = target_.strategy.name;
  p.strategy_sha256 = target_.strategy.sha256;
  p.params = target_.strategy.params;
  p.series = SeriesIdentity{start.series.name, start.series.bars, start.series.checksum};
  p.fee = start.fee;
  p.from_bar = options_.from_bar;
  p.to_bar = options_.to_bar;
  p.stats = options_.stats;
  p.bars_per_year = !options_.stats ? 0.0
                    : options_.bars_per_year != 0.0 ? options_.bars_per_year
                    : target_.engine ? target_.engine->segment().header().bars_per_year
                                     : kDefaultBarsPerYear;
  if (!options_.search.empty()) {
    p.combos = "random";
    p.seed = options_.seed;
    p.trials = options_.trials;
    p.ranges = options_.params;
    p.where = options_.where;
  } else if (!options_.combos.combos_path.empty()) {
    p.combos = "combos " + options_.combos.combos_path;
  } else if (options_.combos.lengths_given) {
    p.combos = "lengths " + options_.combos.lengths;
  } else {
    p.combos = "grid " + options_.combos.grid;
  }
  return p;
}

int SweepSession::finish(const Expected<void>& ran) {
  progress_->finish();
  const bool interrupted = Interrupt::requested();
  if (ranked_) {
    for (const SweepRow& row : ranked_->take_sorted()) {
      writer_->row(row);
      if (out_) (void)out_->row(row);
    }
  }
  if (out_) {
    if (auto done = out_->finish(); !done && out_error_.message.empty()) out_error_ = done.error();
  }
  const std::size_t written = out_ ? out_->rows() : ranked_ ? std::min(ranked_->seen(), options_.top) : emitted_;
  if (interrupted) {
    fmt::print(stderr, "ipcfloor sweep: interrupted: {} of {} rows computed, {} written{}{}\n", emitted_, planned_,
               written, out_ ? " to " : "", out_ ? out_->path() : "");
    return Interrupt::kExitCode;
  }
  if (!ran) return report_error("sweep", ran.error());
  if (sink_) return 0;
  if (!out_error_.message.empty()) return report_error("sweep", out_error_);
  if (replay_) {
    fmt::print("replay: {} rows of {} computed again: {} differ\n", replayed_, options_.replay, differing_);
    return differing_ != 0 ? kExitFailure : 0;
  }
  if (failed_rows_ != 0)
    fmt::print(stderr, "ipcfloor sweep: {} of {} rows did not run (they say why)\n", failed_rows_, emitted_);
  if (format_ == SweepFormat::table && is_default_ && fee_ == kDefaultFee && fingerprint_row_)
    if (const int code = check_fingerprint(*fingerprint_row_); code != 0) return code;
  return failed_rows_ != 0 ? kExitInput : 0;
}

int SweepSession::run() {
  if (const int code = prepare(); code != 0) return code;
  Interrupt::install();
  if (target_.engine) target_.engine->set_interrupt({Interrupt::check, nullptr, std::chrono::milliseconds(50)});
  const Expected<void> ran = plan_ ? run_plan(*plan_) : run_random();
  return finish(ran);
}

}  // namespace

int run_sweep_command(SweepOptions& options) {
  SweepSession session(options);
  return session.run();
}

int sweep_rows(SweepOptions& options, const std::function<void(const SweepRow&)>& row) {
  options.quiet = true;
  SweepSession session(options, row);
  return session.run();
}

}  // namespace ipcfloor
