// ipcfloor-mpi: `ipcfloor sweep --inproc` across MPI ranks, for (series x combo) studies that
// outgrow one host. The same options and the same rows, row for row and in the same order:
//
//   mpirun -np 64 ipcfloor-mpi --data a.npy --data b.npy --series all --combos study.csv --csv -o out.csv
//
// Rank 0 plans the rows (reads the combo file, names the series and counts their bars), and
// broadcasts the runnable (series, combo) items. Every rank splits them the same way by
// estimated cost, in tiles of one series each (kernel/work_split.hpp), computes its share with the in-process kernel, or
// through the engine on its own host with --name (one engine per host, the series preloaded
// once), and streams its results to rank 0 in batches. Rank 0 computes its own share between
// receives and writes the rows in order as soon as they are complete. With -o, it writes a
// temporary file and renames it over the output only when every rank succeeded: no partial file
// is ever presented as complete. A rank that fails reports why and what its share was; the run
// then exits non-zero.

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "clients/shm_client.hpp"
#include "common/exit_codes.hpp"
#include "kernel/cost.hpp"
#include "kernel/isa.hpp"
#include "kernel/kernel.hpp"
#include "kernel/series_set.hpp"
#include "kernel/sweep_rows.hpp"
#include "kernel/work_split.hpp"
#include "shm/segment.hpp"

namespace ipcfloor {
namespace {

constexpr int kRoot = 0;
constexpr int kTagResults = 1;  // a batch of ResultWire
constexpr int kTagDone = 2;     // a rank finished its share: the payload is its RankReport
constexpr int kTagFailed = 3;   // a rank failed: the payload is its message
constexpr std::size_t kBatch = 32;  // results per message: streams rows without a message per combo

struct Options {
  std::vector<std::string> data_paths;
  GbmParams gbm;
  std::string series;
  ComboSpec combos;
  bool json = false;
  bool csv = false;
  std::string out;
  double fee = kDefaultFee;
  unsigned threads = 1;
  std::string name;  // set: compute through this host's engine
  double timeout_s = 30.0;
  bool timings = false;  // rank 0 prints each rank's share and compute time on stderr
};

// One plan row as rank 0 broadcasts it: its windows, and whether it can run at all (a bad line of
// a combo file cannot). O(combos) bytes, not O(series x combos).
struct RowWire {
  Combo params;
  std::uint64_t runnable;  // 0 or 1
};
static_assert(std::is_trivially_copyable_v<RowWire>, "RowWire travels as bytes");

// One runnable (series, combo). Every rank derives the same list from the broadcast rows and bar
// counts (build_items), so the list itself never travels.
struct Item {
  std::uint32_t series;  // index into the SeriesSet
  std::uint32_t row;     // index into the plan's rows
  std::uint64_t cost;    // backtest_cost on the series' bars
};

struct ResultWire {
  std::uint64_t item;
  std::int64_t trades;
  double pnl;
  std::uint32_t status;  // a KernelStatus or Status value; 0 is ok
  std::uint32_t engine;  // 1: status is the engine's Status, 0: the kernel's
};
static_assert(std::is_trivially_copyable_v<ResultWire>, "ResultWire travels as bytes");

// What a rank did, for --timings: its share and how long computing it took.
struct RankReport {
  double seconds;
  std::uint64_t items;
  std::uint64_t cost;
};
static_assert(std::is_trivially_copyable_v<RankReport>, "RankReport travels as bytes");

int rank_of(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}

int size_of(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

// Bytes from rank 0 to every rank: the size first, then the bytes.
void broadcast_bytes(std::vector<char>& bytes) {
  std::uint64_t size = bytes.size();
  MPI_Bcast(&size, 1, MPI_UINT64_T, kRoot, MPI_COMM_WORLD);
  bytes.resize(size);
  if (size != 0) MPI_Bcast(bytes.data(), static_cast<int>(size), MPI_BYTE, kRoot, MPI_COMM_WORLD);
}

template <class T>
void broadcast_vector(std::vector<T>& values) {
  std::vector<char> bytes(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  broadcast_bytes(bytes);
  values.resize(bytes.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), bytes.size());
}

std::string error_text(const ResultWire& result, const SweepRow& row, std::size_t n_bars) {
  if (result.engine == 0) {
    const auto status = static_cast<KernelStatus>(result.status);
    return status == KernelStatus::window_out_of_range ? window_error(row, n_bars) : std::string(to_string(status));
  }
  const auto status = static_cast<Status>(result.status);
  if (status == Status::window_out_of_range) return window_error(row, n_bars);
  return std::string(to_string(status));
}

// Computes `mine` (indices into items, all of one rank) and hands each batch of results to
// `deliver`. Between batches `between` runs (rank 0 receives there). In-process: series by series,
// each loaded once; the combos of a series in chunks over `threads` threads.
Expected<void> compute_share(const Options& options, const SeriesSet& set, std::span<const RowWire> rows,
                             std::span<const Item> items,
                             const std::vector<std::size_t>& mine,
                             const std::function<void(std::span<const ResultWire>)>& deliver,
                             const std::function<void()>& between) {
  if (!options.name.empty()) {
    ShmClientOptions client_options;
    client_options.timeout = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::duration<double>(options.timeout_s));
    client_options.wait = WaitMode::backoff;
    auto client = ShmClient::connect(options.name, client_options);
    if (!client) return std::unexpected(client.error());
    std::vector<ResultWire> batch;
    std::vector<std::size_t> in_flight;
    std::size_t next = 0;
    while (next < mine.size() || !in_flight.empty()) {
      while (next < mine.size() && client->outstanding() < client->capacity()) {
        RequestSlot request{};
        request.opcode = static_cast<std::uint16_t>(Opcode::backtest);
        request.params = rows[items[mine[next]].row].params;
        std::uint64_t seq = 0;
        if (const CallStatus s = client->submit(request, seq); s != CallStatus::ok)
          return fail(s == CallStatus::engine_gone ? ErrorCode::peer_gone : ErrorCode::timeout, "{}", client->describe(s));
        in_flight.push_back(mine[next++]);
      }
      ResponseSlot answer{};
      if (const CallStatus s = client->wait_response(answer); s != CallStatus::ok)
        return fail(s == CallStatus::engine_gone ? ErrorCode::peer_gone : ErrorCode::timeout, "{}", client->describe(s));
      batch.push_back(ResultWire{in_flight.front(), answer.trades, answer.pnl, answer.status, 1});
      in_flight.erase(in_flight.begin());
      if (batch.size() == kBatch || (next == mine.size() && in_flight.empty())) {
        deliver(batch);
        batch.clear();
        between();
      }
    }
    return {};
  }
  std::optional<std::uint32_t> loaded_index;
  LoadedSeries loaded;
  std::optional<KernelWorkspace> workspace;  // one thread: reused for every combo of every series
  std::size_t at = 0;
  while (at < mine.size()) {
    const std::uint32_t series = items[mine[at]].series;
    if (loaded_index != series) {
      auto next_series = set.load(series);
      if (!next_series) return std::unexpected(next_series.error());
      loaded = std::move(*next_series);
      loaded_index = series;
      if (options.threads <= 1) workspace.emplace(loaded.close.size());
    }
    std::vector<ResultWire> batch;
    if (options.threads <= 1) {
      for (; at < mine.size() && items[mine[at]].series == series && batch.size() < kBatch; ++at) {
        BacktestResult result;
        const KernelStatus status = run_backtest(loaded.close, rows[items[mine[at]].row].params, options.fee, *workspace, result);
        batch.push_back(ResultWire{mine[at], result.trades, result.pnl, static_cast<std::uint32_t>(status), 0});
      }
    } else {
      // Several threads: run_sweep over a larger chunk, so that its per-call workspaces pay off.
      std::vector<Combo> combos;
      std::vector<std::size_t> which;
      for (; at < mine.size() && items[mine[at]].series == series && combos.size() < 16 * options.threads; ++at) {
        combos.push_back(rows[items[mine[at]].row].params);
        which.push_back(mine[at]);
      }
      auto results = run_sweep(loaded.close, combos, options.fee, options.threads);
      if (!results) return std::unexpected(results.error());
      for (std::size_t k = 0; k < which.size(); ++k)
        batch.push_back(ResultWire{which[k], (*results)[k].trades, (*results)[k].pnl, 0, 0});
    }
    deliver(batch);
    between();
  }
  return {};
}

// Rank 0's side: the rows in order, written as soon as every row before them is complete.
class RowSink {
 public:
  RowSink(std::vector<PlannedRow> plan, const SeriesSet& set, std::vector<std::size_t> selected,
          std::vector<std::size_t> n_bars, std::span<const Item> items, SweepWriter& writer)
      : plan_(std::move(plan)), set_(set), selected_(std::move(selected)), n_bars_(std::move(n_bars)), items_(items),
        writer_(writer) {
    // Row k of series s is item_of_[s * plan.size() + k] (or none when it cannot run).
    item_of_.assign(selected_.size() * plan_.size(), kNone);
    std::vector<std::size_t> position_of(set_.size(), 0);  // a series' place among the selected
    for (std::size_t p = 0; p < selected_.size(); ++p) position_of[selected_[p]] = p;
    for (std::size_t i = 0; i < items_.size(); ++i)
      item_of_[position_of[items_[i].series] * plan_.size() + items_[i].row] = i;
    results_.resize(items_.size());
    have_.assign(items_.size(), false);
  }

  void take(std::span<const ResultWire> batch) {
    for (const ResultWire& r : batch) {
      if (r.item >= results_.size()) continue;
      results_[r.item] = r;
      have_[r.item] = true;
    }
    flush();
  }

  [[nodiscard]] std::size_t written() const noexcept { return cursor_; }
  [[nodiscard]] std::size_t total() const noexcept { return item_of_.size(); }
  [[nodiscard]] std::size_t failed_rows() const noexcept { return failed_; }

 private:
  static constexpr std::size_t kNone = ~std::size_t{0};

  void flush() {
    while (cursor_ < item_of_.size()) {
      const std::size_t item = item_of_[cursor_];
      if (item != kNone && !have_[item]) return;
      const std::size_t s = cursor_ / plan_.size();
      const std::size_t k = cursor_ % plan_.size();
      SweepRow row = plan_[k].row;
      row.series = set_.names()[selected_[s]];
      if (item == kNone) {
        if (row.error.empty()) row.error = window_error(row, n_bars_[s]);
      } else if (results_[item].status != 0) {
        row.error = error_text(results_[item], row, n_bars_[s]);
      } else {
        row.result = BacktestResult{results_[item].pnl, results_[item].trades};
      }
      if (!row.error.empty()) ++failed_;
      writer_.row(row);
      ++cursor_;
    }
  }

  std::vector<PlannedRow> plan_;
  const SeriesSet& set_;
  std::vector<std::size_t> selected_;
  std::vector<std::size_t> n_bars_;  // per selected series
  std::span<const Item> items_;
  SweepWriter& writer_;
  std::vector<std::size_t> item_of_;
  std::vector<ResultWire> results_;
  std::vector<bool> have_;
  std::size_t cursor_ = 0;
  std::size_t failed_ = 0;
};

// Rank 0's plan: rows, selected series, their bar counts, and the runnable items.
struct Plan {
  std::vector<PlannedRow> rows;
  std::vector<std::size_t> selected;
  std::vector<std::size_t> n_bars;
};

Expected<Plan> make_plan(const Options& options, const SeriesSet& set) {
  Plan plan;
  auto rows = plan_rows(options.combos);
  if (!rows) return std::unexpected(rows.error());
  plan.rows = std::move(*rows);
  auto selected = set.select(options.series);
  if (!selected) return std::unexpected(selected.error());
  plan.selected = *selected;
  if (!options.name.empty() && plan.selected.size() != 1)
    return fail(ErrorCode::invalid_argument, "--name: an engine serves one series; pick it with --series NAME");
  for (const std::size_t s : plan.selected) {
    std::size_t bars = 0;
    if (options.name.empty()) {
      auto series = set.load(s);  // validates the file; its bars weigh the split
      if (!series) return std::unexpected(series.error());
      bars = series->close.size();
    } else {
      AttachOptions observe;
      observe.role = HandoffRole::observer;
      auto observer = Attachment::attach(options.name, observe);
      if (!observer) return std::unexpected(observer.error());
      bars = observer->header().n_bars;
    }
    plan.n_bars.push_back(bars);
  }
  return plan;
}

// Every runnable (series, combo), series by series in the order selected, each series' rows in
// plan order: what rank 0 writes, in that order.
std::vector<Item> build_items(std::span<const RowWire> rows, std::span<const std::uint64_t> selected,
                              std::span<const std::uint64_t> n_bars) {
  std::vector<Item> items;
  for (std::size_t s = 0; s < selected.size(); ++s)
    for (std::size_t k = 0; k < rows.size(); ++k) {
      if (rows[k].runnable == 0 || validate_combo(rows[k].params, n_bars[s]) != KernelStatus::ok) continue;
      items.push_back(Item{static_cast<std::uint32_t>(selected[s]), static_cast<std::uint32_t>(k),
                           backtest_cost(rows[k].params, n_bars[s])});
    }
  return items;
}

int run(const Options& options) {
  const int rank = rank_of(MPI_COMM_WORLD);
  const int ranks = size_of(MPI_COMM_WORLD);
  const auto fail_all = [&](const Error& error) {
    fmt::print(stderr, "ipcfloor-mpi: {}\n", error.message);
    return exit_code_for(error.code);
  };

  if (auto isa = select_kernel_isa(); !isa) {
    fmt::print(stderr, "ipcfloor-mpi rank {}: {}\n", rank, isa.error().message);
    MPI_Abort(MPI_COMM_WORLD, kExitInput);
  }
  auto set = SeriesSet::make(options.data_paths, options.gbm);

  // Rank 0 plans; the verdict (0, or the exit code) and the items go to everyone.
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
  std::vector<RowWire> rows;
  std::vector<std::uint64_t> selected(plan.selected.begin(), plan.selected.end());
  std::vector<std::uint64_t> n_bars(plan.n_bars.begin(), plan.n_bars.end());
  for (const PlannedRow& row : plan.rows) rows.push_back(RowWire{row.row.params, row.runnable ? 1u : 0u});
  broadcast_vector(rows);
  broadcast_vector(selected);
  broadcast_vector(n_bars);
  const std::vector<Item> items = build_items(rows, selected, n_bars);

  // Items come series by series; tiles keep a rank's share to a few series, so that a rank reads
  // a few series files rather than every one.
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
  // Series-major, so that a rank loads each of its series once.
  std::stable_sort(mine.begin(), mine.end(),
                   [&](std::size_t a, std::size_t b) { return items[a].series < items[b].series; });

  std::uint64_t share_cost = 0;
  for (const std::size_t i : mine) share_cost += items[i].cost;
  const auto t_start = std::chrono::steady_clock::now();
  if (rank != kRoot) {
    // Non-blocking sends: rank 0 receives only between its own batches, and a blocking send would
    // wait for it there (with Open MPI's shared-memory transport, rank 1 spent 0.3 s of 1.3 s in
    // MPI_Send). Each batch's buffer lives until its send completes.
    std::list<std::vector<ResultWire>> in_transit;
    std::vector<MPI_Request> requests;
    const auto reap = [&](bool all) {
      if (requests.empty()) return;
      if (all) {
        MPI_Waitall(static_cast<int>(requests.size()), requests.data(), MPI_STATUSES_IGNORE);
      } else {
        int done = 0;
        MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
        if (done == 0) return;
      }
      requests.clear();
      in_transit.clear();
    };
    auto computed = compute_share(
        options, *set, rows, items, mine,
        [&](std::span<const ResultWire> batch) {
          in_transit.emplace_back(batch.begin(), batch.end());
          const auto& buffer = in_transit.back();
          requests.emplace_back();
          MPI_Isend(buffer.data(), static_cast<int>(buffer.size() * sizeof(ResultWire)), MPI_BYTE, kRoot, kTagResults,
                    MPI_COMM_WORLD, &requests.back());
        },
        [&] { reap(false); });
    reap(true);
    if (!computed) {
      const std::string message = fmt::format("{} (its share: {} of {} items)", computed.error().message, mine.size(),
                                              items.size());
      MPI_Send(message.data(), static_cast<int>(message.size()), MPI_CHAR, kRoot, kTagFailed, MPI_COMM_WORLD);
      return exit_code_for(computed.error().code);
    }
    const RankReport report{std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(),
                            mine.size(), share_cost};
    MPI_Send(&report, sizeof report, MPI_BYTE, kRoot, kTagDone, MPI_COMM_WORLD);
    return 0;
  }

  // Rank 0: the output, its own share, and everyone else's results as they come.
  std::FILE* out = stdout;
  std::string temp_path;
  if (!options.out.empty()) {
    temp_path = fmt::format("{}.tmp-{}", options.out, ::getpid());
    out = std::fopen(temp_path.c_str(), "w");
    if (out == nullptr) {
      fmt::print(stderr, "ipcfloor-mpi: cannot write {}: {}\n", temp_path, std::strerror(errno));
      MPI_Abort(MPI_COMM_WORLD, kExitEnvironment);
    }
  }
  SweepWriter writer(out, options.json ? SweepFormat::json : SweepFormat::csv, !options.series.empty());
  writer.header();
  RowSink sink(plan.rows, *set, plan.selected, plan.n_bars, items, writer);
  int running = ranks - 1;
  std::vector<std::string> failures;
  std::vector<RankReport> reports(static_cast<std::size_t>(ranks), RankReport{0, 0, 0});
  std::vector<char> buffer;
  const auto receive = [&](bool block) {
    for (;;) {
      MPI_Status status{};
      int ready = 0;
      if (block) {
        MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &status);
        ready = 1;
      } else {
        MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &ready, &status);
      }
      if (ready == 0) return;
      int bytes = 0;
      MPI_Get_count(&status, MPI_BYTE, &bytes);
      buffer.resize(static_cast<std::size_t>(std::max(bytes, 1)));
      MPI_Recv(buffer.data(), bytes, MPI_BYTE, status.MPI_SOURCE, status.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      if (status.MPI_TAG == kTagResults) {
        std::vector<ResultWire> batch(static_cast<std::size_t>(bytes) / sizeof(ResultWire));
        std::memcpy(batch.data(), buffer.data(), batch.size() * sizeof(ResultWire));
        sink.take(batch);
      } else {
        --running;
        if (status.MPI_TAG == kTagDone && static_cast<std::size_t>(bytes) == sizeof(RankReport))
          std::memcpy(&reports[static_cast<std::size_t>(status.MPI_SOURCE)], buffer.data(), sizeof(RankReport));
        if (status.MPI_TAG == kTagFailed)
          failures.push_back(fmt::format("rank {} failed: {}", status.MPI_SOURCE,
                                         std::string(buffer.data(), static_cast<std::size_t>(bytes))));
      }
      if (block) return;
    }
  };
  auto computed = compute_share(
      options, *set, rows, items, mine, [&](std::span<const ResultWire> batch) { sink.take(batch); },
      [&] { receive(false); });
  if (!computed)
    failures.push_back(fmt::format("rank 0 failed: {} (its share: {} of {} items)", computed.error().message,
                                   mine.size(), items.size()));
  reports[0] = RankReport{std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count(),
                          mine.size(), share_cost};
  while (running > 0) receive(true);
  if (options.timings) {
    const double all = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
    std::uint64_t total_cost = 0;
    for (const RankReport& r : reports) total_cost += r.cost;
    fmt::print(stderr, "ipcfloor-mpi: {} items over {} ranks; rank 0 wrote the last row {:.3f} s after the split\n",
               items.size(), ranks, all);
    for (std::size_t r = 0; r < reports.size(); ++r)
      fmt::print(stderr, "  rank {:>4}: {:>7} items, {:>5.1f}% of the cost, computed in {:.3f} s\n", r, reports[r].items,
                 total_cost == 0 ? 0.0 : 100.0 * static_cast<double>(reports[r].cost) / static_cast<double>(total_cost),
                 reports[r].seconds);
  }

  const bool complete = failures.empty() && sink.written() == sink.total();
  if (out != stdout) {
    const bool closed = std::fclose(out) == 0;
    if (!complete || !closed) {
      std::filesystem::remove(temp_path);
    } else if (std::rename(temp_path.c_str(), options.out.c_str()) != 0) {
      fmt::print(stderr, "ipcfloor-mpi: cannot rename {} to {}: {}\n", temp_path, options.out, std::strerror(errno));
      return kExitEnvironment;
    }
  }
  for (const std::string& failure : failures) fmt::print(stderr, "ipcfloor-mpi: {}\n", failure);
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
}  // namespace ipcfloor

int main(int argc, char** argv) {
  using namespace ipcfloor;
  MPI_Init(&argc, &argv);
  Options options;
  CLI::App app{"ipcfloor-mpi: `ipcfloor sweep --inproc` across MPI ranks, the same rows in the same order"};
  app.add_option("--data", options.data_paths, "close series: .csv, .f64 or .npy; repeat for several")
      ->check(CLI::ExistingFile);
  app.add_option("--bars", options.gbm.bars, "bars to generate when no --data is given")->capture_default_str();
  app.add_option("--seed", options.gbm.seed, "numpy default_rng seed")->capture_default_str();
  app.add_option("--series", options.series, "a series by name, or 'all'; each row then names its series");
  auto* lengths = app.add_option("--lengths", options.combos.lengths, "comma-separated lengths")
                      ->each([&options](const std::string&) { options.combos.lengths_given = true; });
  auto* grid = app.add_option("--grid", options.combos.grid, "FIRST:LAST:COUNT")->capture_default_str()->excludes(lengths);
  app.add_option("--combos", options.combos.combos_path, "a combo file (CSV h,L,s,p3,p2,p or JSON lines)")
      ->excludes(lengths)
      ->excludes(grid);
  auto* json = app.add_flag("--json", options.json, "JSON lines (the default is CSV)");
  app.add_flag("--csv", options.csv, "CSV rows")->excludes(json);
  app.add_option("-o,--out", options.out, "write the rows here (temporary name, renamed when complete)");
  app.add_option("--fee", options.fee, "fee per round trip, percentage points")->capture_default_str();
  app.add_option("--threads", options.threads, "kernel threads per rank")->capture_default_str();
  app.add_option("--name", options.name, "compute through the engine NAME on each rank's host");
  app.add_option("--timeout", options.timeout_s, "seconds to wait for any one answer from the engine")
      ->capture_default_str();
  app.add_flag("--timings", options.timings, "print each rank's share and compute time on stderr");
  app.footer(std::string(kExitCodesHelp));
  int code = 0;
  try {
    app.parse(argc, argv);
    code = run(options);
  } catch (const CLI::ParseError& error) {
    code = rank_of(MPI_COMM_WORLD) == 0 ? app.exit(error) : 0;
    if (code != 0) code = kExitUsage;
    if (dynamic_cast<const CLI::CallForHelp*>(&error) != nullptr) code = 0;
  }
  MPI_Finalize();
  return code;
}
