#include "cluster/mpi_sweep.hpp"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <list>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cluster/mpi_share.hpp"
#include "cluster/mpi_wire.hpp"
#include "cluster/row_sink.hpp"
#include "cluster/work_split.hpp"
#include "common/atomic_file.hpp"
#include "common/checksum.hpp"
#include "common/exit_codes.hpp"
#include "data/gbm.hpp"
#include "data/series_set.hpp"
#include "kernel/cost.hpp"
#include "kernel/isa.hpp"
#include "kernel/strategy_loader.hpp"
#include "shm/segment.hpp"

namespace ipcfloor {
namespace {

using namespace ipcfloor::mpi;
using Clock = std::chrono::steady_clock;

// What rank 0 keeps per planned row besides the plan, for one series: the broadcast row, its item,
// the split's cost, group and owner, the rank's share, and the sink's index, result and flag.
// plan_rows counts it with the plan before either is allocated.
constexpr std::size_t kRank0BytesPerRow = sizeof(RowWire) + sizeof(Item) + sizeof(std::uint64_t) +
                                          2 * sizeof(std::uint32_t) + 2 * sizeof(std::size_t) + sizeof(ResultWire) + 1;

// Rank 0's plan: rows, the catalog's series names, the selected ones, their bar counts and
// checksums (which every row names, as `ipcfloor sweep` does).
struct Plan {
  SweepPlan rows;
  std::vector<std::string> names;  // every series of the catalog, by index
  std::vector<std::size_t> selected;
  std::vector<std::size_t> n_bars;        // per selected series
  std::vector<std::uint64_t> checksums;   // per selected series: fnv1a64 of its bars
};

std::uint64_t checksum_of(std::span<const double> close) { return fnv1a64(std::as_bytes(close)); }

// The engine's own series table: names, bar counts and checksums (a live main series: the bars
// published).
Expected<void> read_engine_catalog(const std::string& name, std::vector<std::string>& names,
                                   std::vector<std::size_t>& bars, std::vector<std::uint64_t>& checksums) {
  AttachOptions observe;
  observe.role = HandoffRole::observer;
  auto observer = Attachment::attach(name, observe);
  if (!observer) return std::unexpected(observer.error());
  for (std::uint32_t i = 0; i < observer->series_count(); ++i) {
    names.emplace_back(observer->series_key(i));
    const std::span<const double> close = i == 0 ? observer->published_series() : observer->series_at(i);
    bars.push_back(close.size());
    checksums.push_back(checksum_of(close));
  }
  return {};
}

// The parameter names a combo file uses for the resolved strategy.
ComboColumns columns_for(const MpiSweepOptions& options) {
  ComboColumns columns;
  columns.count = std::min<std::size_t>(options.strategy_params.size(), 6);
  for (std::size_t c = 0; c < columns.count; ++c) columns.names[c] = options.strategy_params[c];
  return columns;
}

bool names_a_file(std::string_view strategy) {
  return strategy.find('/') != std::string_view::npos || strategy.ends_with(".so");
}

// Resolves --strategy on this rank: the built-in one, a FILE.so loaded into `catalog`, or (with
// --name) one the engine serves, by name.
Expected<void> resolve_strategy(MpiSweepOptions& options, StrategyCatalog& catalog) {
  const Strategy* local = &builtin();
  if (names_a_file(options.strategy)) {
    if (!options.name.empty())
      return fail(ErrorCode::invalid_argument, "--strategy FILE.so runs in this process; with --name, name a strategy "
                  "the engine serves");
    const auto check_close = strategy_check_series();
    if (!check_close) return std::unexpected(check_close.error());
    auto loaded = catalog.load(options.strategy, *check_close);
    if (!loaded) return std::unexpected(loaded.error());
    local = *loaded;
  } else if (!options.strategy.empty() && options.strategy != builtin().name()) {
    if (options.name.empty())
      return fail(ErrorCode::invalid_argument, "--strategy {} names a strategy an engine serves: add --name ENGINE, or "
                  "give its FILE.so", options.strategy);
    AttachOptions observe;
    observe.role = HandoffRole::observer;
    auto observer = Attachment::attach(options.name, observe);
    if (!observer) return std::unexpected(observer.error());
    const auto index = observer->find_strategy(options.strategy);
    if (!index) return fail(ErrorCode::invalid_argument, "engine {} serves no strategy named '{}'", options.name, options.strategy);
    const StrategyEntry& entry = observer->strategy_at(*index);
    options.resolved = nullptr;
    options.strategy_index = *index;
    options.strategy_name = entry.name;
    for (std::uint32_t k = 0; k < entry.param_count; ++k) options.strategy_params.emplace_back(entry.param_names[k]);
    return {};
  }
  options.resolved = local;
  options.strategy_index = local->index();
  options.strategy_name = std::string(local->name());
  for (std::uint32_t k = 0; k < local->param_count(); ++k) options.strategy_params.emplace_back(local->param_name(k));
  return {};
}

Expected<Plan> make_plan(const MpiSweepOptions& options, const SeriesSet& set) {
  Plan plan;
  auto rows = plan_rows(options.combos, columns_for(options), options.resolved == &builtin(), kRank0BytesPerRow);
  if (!rows) return std::unexpected(rows.error());
  plan.rows = std::move(*rows);
  std::vector<std::size_t> engine_bars;
  std::vector<std::uint64_t> engine_checksums;
  if (options.name.empty()) {
    plan.names = set.names();
  } else if (auto read = read_engine_catalog(options.name, plan.names, engine_bars, engine_checksums); !read) {
    return std::unexpected(read.error());
  }
  auto selected = select_series(plan.names, options.series);
  if (!selected) return std::unexpected(selected.error());
  plan.selected = *selected;
  for (const std::size_t s : plan.selected) {
    if (!options.name.empty()) {
      plan.n_bars.push_back(engine_bars[s]);
      plan.checksums.push_back(engine_checksums[s]);
      continue;
    }
    auto series = set.load(s);  // validates the file; its bars weigh the split
    if (!series) return std::unexpected(series.error());
    plan.n_bars.push_back(series->close.size());
    plan.checksums.push_back(checksum_of(series->close));
  }
  return plan;
}

// Every runnable (series, combo), series by series in the order selected, each series' rows in
// plan order: what rank 0 writes, in that order.
std::vector<Item> build_items(const Strategy* strategy, std::span<const RowWire> rows,
                              std::span<const std::uint64_t> selected, std::span<const std::uint64_t> n_bars) {
  std::vector<Item> items;
  for (std::size_t s = 0; s < selected.size(); ++s)
    for (std::size_t k = 0; k < rows.size(); ++k) {
      // Admitted here when this process has the strategy; an engine's own admits on its side.
      if (rows[k].runnable == 0 || (strategy != nullptr && !strategy->accepts(rows[k].params, n_bars[s]))) continue;
      const std::uint64_t cost = strategy != nullptr ? strategy->cost(rows[k].params, n_bars[s]) : n_bars[s];
      items.push_back(Item{static_cast<std::uint32_t>(selected[s]), static_cast<std::uint32_t>(k), cost});
    }
  return items;
}

// This rank's items: the same split on every rank, by estimated cost, in tiles of one series each
// (so a rank reads a few series files rather than every one), series-major so that each of its
// series is loaded once.
std::vector<std::size_t> my_share(std::span<const Item> items, int rank, int ranks) {
  std::vector<std::uint64_t> costs;
  std::vector<std::uint32_t> groups;
  for (const Item& item : items) {
    costs.push_back(item.cost);
    groups.push_back(item.series);
  }
  const std::vector<std::uint32_t> owner = split_in_tiles(costs, groups, static_cast<std::uint32_t>(ranks));
  std::vector<std::size_t> mine;
  for (std::size_t i = 0; i < owner.size(); ++i)
    if (owner[i] == static_cast<std::uint32_t>(rank)) mine.push_back(i);
  std::stable_sort(mine.begin(), mine.end(),
                   [&](std::size_t a, std::size_t b) { return items[a].series < items[b].series; });
  return mine;
}

// What every rank needs once rank 0 planned: the rows, the selected series and their bars.
struct Shared {
  std::vector<RowWire> rows;
  std::vector<std::uint64_t> selected;
  std::vector<std::uint64_t> n_bars;
};

Shared broadcast_plan(const Plan& plan) {
  Shared shared;
  shared.selected.assign(plan.selected.begin(), plan.selected.end());
  shared.n_bars.assign(plan.n_bars.begin(), plan.n_bars.end());
  shared.rows.reserve(plan.rows.size());
  for (std::size_t i = 0; i < plan.rows.size(); ++i)
    shared.rows.push_back(RowWire{plan.rows.combo(i), plan.rows.parsed(i) ? 1u : 0u});
  broadcast_vector(shared.rows);
  broadcast_vector(shared.selected);
  broadcast_vector(shared.n_bars);
  return shared;
}

// One rank's work and how it went.
struct Share {
  std::vector<std::size_t> mine;
  std::uint64_t cost = 0;
  Clock::time_point start = Clock::now();
  [[nodiscard]] RankReport report() const {
    return RankReport{std::chrono::duration<double>(Clock::now() - start).count(), mine.size(), cost};
  }
};

// A rank other than 0: computes its share and streams it to rank 0, then says how it went.
int run_worker_rank(const MpiSweepOptions& options, const SeriesSet& set, const Shared& shared,
                    std::span<const Item> items, const Share& share) {
  // Non-blocking sends: rank 0 receives only between its own batches, and a blocking send would
  // wait for it there (with Open MPI's shared-memory transport, rank 1 spent 0.3 s of 1.3 s in
  // MPI_Send). Each batch's buffer lives until its send completes.
  std::list<std::vector<ResultWire>> in_transit;
  std::vector<MPI_Request> requests;
  const auto reap = [&](bool all) {
    if (requests.empty()) return;
    int done = 1;
    if (all) {
      MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
    } else {
      MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    }
    if (done == 0) return;
    requests.clear();
    in_transit.clear();
  };
  const auto send = [&](std::span<const ResultWire> batch) {
    const auto& buffer = in_transit.emplace_back(batch.begin(), batch.end());
    MPI_Isend(buffer.data(), static_cast<int>(buffer.size() * sizeof(ResultWire)), MPI_BYTE, kRoot, kTagResults,
              MPI_COMM_WORLD, &requests.emplace_back());
  };
  auto computed = compute_share(options, set, shared.rows, items, share.mine, send, [&] { reap(false); });
  reap(true);
  if (!computed) {
    const std::string message =
        fmt::format("{} (its share: {} of {} items)", computed.error().message, share.mine.size(), items.size());
    MPI_Send(message.data(), static_cast<int>(message.size()), MPI_CHAR, kRoot, kTagFailed, MPI_COMM_WORLD);
    return exit_code_for(computed.error().code);
  }
  const RankReport report = share.report();
  MPI_Send(&report, sizeof report, MPI_BYTE, kRoot, kTagDone, MPI_COMM_WORLD);
  return 0;
}

// Rank 0's receiving end: results into the sink, each other rank's end (done or failed).
class Receiver {
 public:
  Receiver(RowSink& sink, int ranks) : sink_(sink), running_(ranks - 1), reports_(static_cast<std::size_t>(ranks)) {}

  // Takes what has arrived (block: waits for one message first).
  void receive(bool block) {
    for (;;) {
      MPI_Status status{};
      int ready = 1;
      if (block) {
        MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &status);
      } else {
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &ready, &status);
      }
      if (ready == 0) return;
      take(status);
      if (block) return;
    }
  }
  void wait_for_all() {
    while (running_ > 0) receive(true);
  }
  [[nodiscard]] std::vector<std::string>& failures() noexcept { return failures_; }
  [[nodiscard]] std::vector<RankReport>& reports() noexcept { return reports_; }

 private:
  void take(const MPI_Status& status) {
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    buffer_.resize(static_cast<std::size_t>(std::max(bytes, 1)));
    MPI_Recv(buffer_.data(), bytes, MPI_BYTE, status.MPI_SOURCE, status.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (status.MPI_TAG == kTagResults) {
      std::vector<ResultWire> batch(static_cast<std::size_t>(bytes) / sizeof(ResultWire));
      std::memcpy(batch.data(), buffer_.data(), batch.size() * sizeof(ResultWire));
      sink_.take(batch);
      return;
    }
    --running_;
    if (status.MPI_TAG == kTagDone && static_cast<std::size_t>(bytes) == sizeof(RankReport))
      std::memcpy(&reports_[static_cast<std::size_t>(status.MPI_SOURCE)], buffer_.data(), sizeof(RankReport));
    if (status.MPI_TAG == kTagFailed)
      failures_.push_back(fmt::format("rank {} failed: {}", status.MPI_SOURCE,
                                      std::string(buffer_.data(), static_cast<std::size_t>(bytes))));
  }

  RowSink& sink_;
  int running_;
  std::vector<RankReport> reports_;
  std::vector<std::string> failures_;
  std::vector<char> buffer_;
};

void print_timings(std::span<const RankReport> reports, std::size_t items, const Clock::time_point start) {
  const double all = std::chrono::duration<double>(Clock::now() - start).count();
  std::uint64_t total_cost = 0;
  for (const RankReport& r : reports) total_cost += r.cost;
  fmt::print(stderr, "ipcfloor-mpi: {} items over {} ranks; rank 0 wrote the last row {:.3f} s after the split\n", items,
             reports.size(), all);
  for (std::size_t r = 0; r < reports.size(); ++r)
    fmt::print(stderr, "  rank {:>4}: {:>7} items, {:>5.1f}% of the cost, computed in {:.3f} s\n", r, reports[r].items,
               total_cost == 0 ? 0.0 : 100.0 * static_cast<double>(reports[r].cost) / static_cast<double>(total_cost),
               reports[r].seconds);
}

// Where rank 0 writes: stdout, or a new file renamed over -o once the run is complete (made so
// that nothing planted at any name can redirect it: common/atomic_file.hpp).
class Output {
 public:
  explicit Output(const std::string& out) {
    if (out.empty()) return;
    auto file = AtomicFile::create(out, "the output");
    const int fd = file ? ::dup(file->fd()) : -1;
    file_ = fd >= 0 ? ::fdopen(fd, "w") : nullptr;
    if (file_ == nullptr) {
      if (fd >= 0) ::close(fd);
      fmt::print(stderr, "ipcfloor-mpi: {}\n", file ? fmt::format("cannot write {}: {}", out, std::strerror(errno))
                                                     : file.error().message);
      MPI_Abort(MPI_COMM_WORLD, kExitEnvironment);
    }
    atomic_.emplace(std::move(*file));
  }
  [[nodiscard]] std::FILE* file() const noexcept { return file_; }
  // Closes the file, and renames it over -o when `complete`, else removes it. False (said on
  // stderr) when the rename fails.
  [[nodiscard]] bool finish(bool complete) {
    if (file_ == stdout) return true;
    const bool closed = std::fclose(file_) == 0;
    if (!complete || !closed) {
      atomic_->abandon();
      return true;
    }
    if (auto committed = atomic_->commit(); !committed) {
      fmt::print(stderr, "ipcfloor-mpi: {}\n", committed.error().message);
      return false;
    }
    return true;
  }

 private:
  std::optional<AtomicFile> atomic_;
  std::FILE* file_ = stdout;
};

// Rank 0: the output, its own share, and everyone else's results as they come.
int run_root_rank(const MpiSweepOptions& options, const SeriesSet& set, Plan plan, const Shared& shared,
                  std::span<const Item> items, Share& share, int ranks) {
  Output output(options.out);
  SweepWriter writer(output.file(), options.json ? SweepFormat::json : SweepFormat::csv, !options.series.empty(),
                     SweepShape{columns_for(options), options.resolved == &builtin()});
  writer.header();
  RowSink sink(std::move(plan.rows), std::move(plan.names), std::move(plan.selected), std::move(plan.n_bars),
               std::move(plan.checksums), items, writer, options.resolved, options.strategy_name);
  Receiver receiver(sink, ranks);
  auto computed = compute_share(
      options, set, shared.rows, items, share.mine, [&](std::span<const ResultWire> batch) { sink.take(batch); },
      [&] { receiver.receive(false); });
  if (!computed)
    receiver.failures().push_back(fmt::format("rank 0 failed: {} (its share: {} of {} items)",
                                              computed.error().message, share.mine.size(), items.size()));
  receiver.reports()[0] = share.report();
  receiver.wait_for_all();
  if (options.timings) print_timings(receiver.reports(), items.size(), share.start);
  const bool complete = receiver.failures().empty() && sink.written() == sink.total();
  if (!output.finish(complete)) return kExitEnvironment;
  for (const std::string& failure : receiver.failures()) fmt::print(stderr, "ipcfloor-mpi: {}\n", failure);
  if (!complete) {
    fmt::print(stderr, "ipcfloor-mpi: {} of {} rows written{}; the run is incomplete\n", sink.written(), sink.total(),
               options.out.empty() ? "" : fmt::format(", {} not written", options.out));
    return kExitFailure;
  }
  if (sink.failed_rows() != 0) {
    fmt::print(stderr, "ipcfloor-mpi: {} of {} rows did not run (they say why)\n", sink.failed_rows(), sink.total());
    return kExitInput;
  }
  return 0;
}

}  // namespace

int run_mpi_sweep(const MpiSweepOptions& given) {
  const int rank = rank_of(MPI_COMM_WORLD);
  const int ranks = size_of(MPI_COMM_WORLD);
  // Every rank resolves --strategy itself (a FILE.so is loaded into each process); the first to
  // fail ends the run with the strategy's exit code.
  MpiSweepOptions options = given;
  StrategyCatalog catalog;
  if (auto resolved = resolve_strategy(options, catalog); !resolved) {
    fmt::print(stderr, "ipcfloor-mpi rank {}: {}\n", rank, resolved.error().message);
    MPI_Abort(MPI_COMM_WORLD, exit_code_for(resolved.error().code));
  }
  const auto fail_all = [&](const Error& error) {
    fmt::print(stderr, "ipcfloor-mpi: {}\n", error.message);
    return exit_code_for(error.code);
  };
  if (auto isa = select_kernel_isa(); !isa) {
    fmt::print(stderr, "ipcfloor-mpi rank {}: {}\n", rank, isa.error().message);
    MPI_Abort(MPI_COMM_WORLD, kExitInput);
  }
  auto set = SeriesSet::make(options.data_paths, options.gbm);
  // Rank 0 plans; the verdict (0, or the exit code) and the plan go to everyone.
  Plan plan;
  int verdict = 0;
  if (rank == kRoot) {
    if (!set) {
      verdict = fail_all(set.error());
    } else if (auto made = make_plan(options, *set); !made) {
      verdict = fail_all(made.error());
    } else {
      plan = std::move(*made);
    }
  }
  MPI_Bcast(&verdict, 1, MPI_INT, kRoot, MPI_COMM_WORLD);
  if (verdict != 0) return verdict;
  if (!set) return fail_all(set.error());
  const Shared shared = broadcast_plan(plan);
  const std::vector<Item> items = build_items(options.resolved, shared.rows, shared.selected, shared.n_bars);
  Share share;
  share.mine = my_share(items, rank, ranks);
  for (const std::size_t i : share.mine) share.cost += items[i].cost;
  share.start = Clock::now();
  if (rank != kRoot) return run_worker_rank(options, *set, shared, items, share);
  return run_root_rank(options, *set, std::move(plan), shared, items, share, ranks);
}

void add_mpi_sweep_options(CLI::App& app, MpiSweepOptions& options) {
  app.add_option("--data", options.data_paths, "close series: .csv, .f64 or .npy; repeat for several")
      ->check(CLI::ExistingFile);
  app.add_option("--bars", options.gbm.bars, "bars to generate when no --data is given")->capture_default_str();
  app.add_option("--seed", options.gbm.seed, "numpy default_rng seed")->capture_default_str();
  app.add_option("--series", options.series,
                 "a series by name, or 'all'; each row then names its series (with --name: the engine's names)");
  auto* lengths = app.add_option("--lengths", options.combos.lengths, "comma-separated lengths")
                      ->each([&options](const std::string&) { options.combos.lengths_given = true; });
  auto* grid = app.add_option("--grid", options.combos.grid, "FIRST:LAST:COUNT")->capture_default_str()->excludes(lengths);
  app.add_option("--strategy", options.strategy,
                 "the strategy: a FILE.so every rank loads, or with --name one the engine serves (default: hma)");
  app.add_option("--combos", options.combos.combos_path,
                 "a combo file (CSV whose header names the strategy's parameters, or JSON lines)")
      ->excludes(lengths)
      ->excludes(grid);
  auto* json = app.add_flag("--json", options.json, "JSON lines (the default is CSV)");
  app.add_flag("--csv", options.csv, "CSV rows")->excludes(json);
  app.add_option("-o,--out", options.out, "write the rows here (temporary name, renamed when complete)");
  app.add_option("--fee", options.fee, "fee per round trip, percentage points")->capture_default_str();
  app.add_option("--threads", options.threads, "kernel threads per rank")->capture_default_str();
  app.add_option("--name", options.name, "compute through the engine NAME on each rank's host, on its series");
  app.add_option("--timeout", options.timeout_s, "seconds to wait for any one answer from the engine")
      ->capture_default_str();
  app.add_flag("--timings", options.timings, "print each rank's share and compute time on stderr");
}

}  // namespace ipcfloor
