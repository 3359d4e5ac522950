#include "app/walkforward_command.hpp"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <span>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/cli_common.hpp"
#include "app/interrupt.hpp"
#include "app/sweep_ranking.hpp"
#include "app/sweep_report.hpp"
#include "app/trades_command.hpp"
#include "clients/shm_client.hpp"
#include "common/exit_codes.hpp"
#include "common/trade_stats.hpp"
#include "data/gbm.hpp"
#include "data/series_set.hpp"
#include "kernel/strategy_loader.hpp"
#include "data/sweep_rows.hpp"

namespace ipcfloor {
namespace {

// The most folds one run makes: a step that would make more is a mistake.
constexpr std::uint64_t kMaxFolds = 100'000;

struct Fold {
  std::uint64_t train_from = 0, train_to = 0, test_from = 0, test_to = 0;
};

// The folds of a series of `n` bars, in order; an error when none fits or there are too many.
Expected<std::vector<Fold>> folds_of(const WalkForwardOptions& o, std::uint64_t n) {
  const std::uint64_t step = o.step == 0 ? o.test : o.step;
  std::vector<Fold> folds;
  for (std::uint64_t s = 0; s + o.train + o.test <= n; s += step) {
    if (folds.size() == kMaxFolds)
      return fail(ErrorCode::invalid_argument, "--train {} --test {} --step {} make more than {} folds of {} bars: take a "
                  "larger --step", o.train, o.test, step, kMaxFolds, n);
    folds.push_back(Fold{o.anchored ? 0 : s, s + o.train, s + o.train, s + o.train + o.test});
  }
  if (folds.empty())
    return fail(ErrorCode::invalid_argument, "--train {} plus --test {} bars is more than the series holds ({} bars): "
                "no fold fits", o.train, o.test, n);
  return folds;
}

// What the folds are cut from: the series' length, and the bars per year its figures use.
struct SeriesFacts {
  std::uint64_t bars = 0;
  double bars_per_year = kDefaultBarsPerYear;
  std::size_t params = 0;  // how many parameters the strategy takes
};

// The parameters of --strategy (the built-in's, or a FILE.so's) in this process.
Expected<std::size_t> local_param_count(const std::string& strategy) {
  if (strategy.empty() || strategy == builtin().name()) return builtin().param_count();
  const auto check_close = strategy_check_series();
  if (!check_close) return std::unexpected(check_close.error());
  StrategyCatalog catalog;
  auto loaded = catalog.load(strategy, *check_close);
  if (!loaded) return std::unexpected(loaded.error());
  return (*loaded)->param_count();
}

Expected<SeriesFacts> series_facts(const SweepOptions& o) {
  SeriesFacts facts;
  if (o.bars_per_year != 0.0) facts.bars_per_year = o.bars_per_year;
  if (o.name.empty()) {
    auto set = SeriesSet::make(o.data_paths, o.source.gbm, o.source.column);
    if (!set) return std::unexpected(set.error());
    auto chosen = set->select(o.series);
    if (!chosen) return std::unexpected(chosen.error());
    auto loaded = set->load(chosen->front());
    if (!loaded) return std::unexpected(loaded.error());
    facts.bars = loaded->close.size();
    auto params = local_param_count(o.strategy);
    if (!params) return std::unexpected(params.error());
    facts.params = *params;
    return facts;
  }
  ShmClientOptions client_options;
  client_options.socket_dir = o.socket_dir;
  client_options.wait = WaitMode::backoff;
  auto client = ShmClient::connect(o.name, client_options);
  if (!client) return std::unexpected(client.error());
  const Attachment& segment = client->segment();
  std::vector<std::string> names;
  for (std::uint32_t i = 0; i < segment.series_count(); ++i) names.emplace_back(segment.series_key(i));
  auto chosen = select_series(names, o.series.empty() ? names.front() : o.series);
  if (!chosen) return std::unexpected(chosen.error());
  const auto index = static_cast<std::uint32_t>(chosen->front());
  facts.bars = index == 0 ? segment.published_series().size() : segment.series_at(index).size();
  if (o.bars_per_year == 0.0) facts.bars_per_year = segment.header().bars_per_year;
  std::uint32_t strategy = 0;
  if (!o.strategy.empty()) {
    const auto found = segment.find_strategy(o.strategy);
    if (!found) return std::unexpected(unknown_strategy(o.name, o.strategy, segment));
    strategy = *found;
  }
  facts.params = segment.strategy_at(strategy).param_count;
  return facts;
}

// The combo's parameters as `trades --params` takes them.
std::string params_text(const Combo& combo, std::size_t count) {
  const auto values = combo.as_array();
  return fmt::format("{}", fmt::join(std::span(values).first(count), ","));
}

// The out-of-sample run of fold `fold`: the chosen combo on its test bars, with its trade list.
Expected<FullCombo> test_run(const SweepOptions& o, const Fold& fold, const std::string& params) {
  TradesOptions t;
  t.name = o.name;
  t.socket_dir = o.socket_dir;
  t.data_paths = o.data_paths;
  t.source = o.source;
  t.series = o.series;
  t.strategy = o.strategy;
  t.params = params;
  t.from_bar = fold.test_from;
  t.to_bar = fold.test_to;
  t.fee_given = o.fee_given;
  t.fee = o.fee;
  t.bars_per_year = o.bars_per_year;
  return full_combo(t);
}

// The figures with a prefix, as JSON members, CSV fields, or their CSV header.
std::string json_figures(const std::string& prefix, const TradeStats& s) {
  std::string out = fmt::format("\"{}pnl\":{},\"{}trades\":{}", prefix, json_number(s.pnl), prefix, s.trades);
  for (std::size_t k = 0; k < kStatsFigureCount; ++k)
    out += fmt::format(",\"{}{}\":{}", prefix, kStatsFigureNames[k], json_number(stats_figure(s, k)));
  return out;
}
std::string csv_figures(const TradeStats* s) {
  std::string out = s != nullptr ? fmt::format("{},{}", text_number(s->pnl), s->trades) : std::string(",");
  for (std::size_t k = 0; k < kStatsFigureCount; ++k) out += "," + (s != nullptr ? text_number(stats_figure(*s, k)) : "");
  return out;
}
std::string csv_figure_names(const std::string& prefix) {
  std::string out = fmt::format("{}pnl,{}trades", prefix, prefix);
  for (std::size_t k = 0; k < kStatsFigureCount; ++k) out += fmt::format(",{}{}", prefix, kStatsFigureNames[k]);
  return out;
}

// A figure by its rank index (stats_figure_index: -2 pnl, -1 trades), for the table.
double figure_of(const TradeStats& s, int figure) {
  if (figure == -2) return s.pnl;
  if (figure == -1) return static_cast<double>(s.trades);
  return stats_figure(s, static_cast<std::size_t>(figure));
}

// Writes the folds as they finish, then the stitched line.
class FoldWriter {
 public:
  FoldWriter(const SweepOptions& o, RankBy by, std::vector<std::string> params)
      : json_(o.json), csv_(o.csv), by_(std::move(by)), params_(std::move(params)) {}

  void header(std::size_t folds, const std::string& strategy) const {
    if (csv_) {
      fmt::print("fold,train_from,train_to,test_from,test_to,{},{},{}\n", fmt::join(params_, ","),
                 csv_figure_names("is_"), csv_figure_names("oos_"));
    } else if (!json_) {
      fmt::print("walkforward: {} folds of strategy {}, best by {}\n", folds, strategy, by_.name);
      fmt::print("{:>4}  {:>21}  {:>21}  {:<24} {:>12} {:>18} {:>7} {:>12}\n", "fold", "train", "test",
                 fmt::format("params [{}]", fmt::join(params_, ",")), "is_" + by_.name, "oos_pnl", "trades",
                 "oos_" + by_.name);
    }
    std::fflush(stdout);
  }
  void fold(std::size_t k, const Fold& f, const Combo& chosen, const TradeStats& in, const TradeStats& out) const {
    const auto values = chosen.as_array();
    const auto used = std::span(values).first(params_.size());
    if (json_) {
      std::string named;
      for (std::size_t p = 0; p < params_.size(); ++p) named += fmt::format(",\"{}\":{}", params_[p], used[p]);
      fmt::print("{{\"fold\":{},\"train_from\":{},\"train_to\":{},\"test_from\":{},\"test_to\":{},\"params\":[{}]{},{},{}}}\n",
                 k, f.train_from, f.train_to, f.test_from, f.test_to, fmt::join(used, ","), named,
                 json_figures("is_", in), json_figures("oos_", out));
    } else if (csv_) {
      fmt::print("{},{},{},{},{},{},{},{}\n", k, f.train_from, f.train_to, f.test_from, f.test_to, fmt::join(used, ","),
                 csv_figures(&in), csv_figures(&out));
    } else {
      fmt::print("{:>4}  {:>21}  {:>21}  {:<24} {:>12.6g} {:>18.12f} {:>7} {:>12.6g}\n", k,
                 fmt::format("[{}, {})", f.train_from, f.train_to), fmt::format("[{}, {})", f.test_from, f.test_to),
                 fmt::format("[{}]", fmt::join(used, ",")), figure_of(in, by_.figure), out.pnl, out.trades,
                 figure_of(out, by_.figure));
    }
    std::fflush(stdout);
  }
  void stitched(std::size_t folds, std::size_t bars, const TradeStats& s) const {
    if (json_) {
      fmt::print("{{\"stitched\":true,\"folds\":{},\"test_bars\":{},{}}}\n", folds, bars, json_figures("oos_", s));
    } else if (csv_) {
      fmt::print("stitched,,,,,{},{},{}\n", std::string(params_.empty() ? 0 : params_.size() - 1, ','),
                 csv_figures(nullptr), csv_figures(&s));
    } else {
      fmt::print("stitched out-of-sample ({} folds, {} bars): pnl {:.12f}, trades {}, win_rate {:.4f}, max_drawdown "
                 "{:.4f}, sharpe {:.4f}, {} {:.6g}\n", folds, bars, s.pnl, s.trades, s.win_rate, s.max_drawdown,
                 s.sharpe, by_.name, figure_of(s, by_.figure));
    }
    std::fflush(stdout);
  }

 private:
  bool json_;
  bool csv_;
  RankBy by_;
  std::vector<std::string> params_;
};

// The test ranges laid end to end, and every fold's trades moved into those coordinates.
struct Stitched {
  std::vector<double> close;
  std::vector<ipcfloor_trade> trades;

  void add(const FullCombo& run) {
    const std::uint64_t offset = close.size();
    close.insert(close.end(), run.close.begin(), run.close.end());
    for (ipcfloor_trade t : run.trades) {
      t.entry_bar += offset;
      t.exit_bar += offset;
      trades.push_back(t);
    }
  }
};

// One fold: the in-sample sweep's best row, or an exit code.
struct InSample {
  int code = 0;
  std::optional<SweepRow> best;
};

InSample train(const WalkForwardOptions& o, const RankBy& by, const Fold& fold) {
  SweepOptions sweep = o.sweep;
  sweep.stats = true;
  sweep.from_bar = fold.train_from;
  sweep.to_bar = fold.train_to;
  RankedRows ranked(by, 1);
  InSample result;
  result.code = sweep_rows(sweep, [&ranked](const SweepRow& row) {
    if (row.error.empty()) ranked.add(row);
  });
  if (result.code != 0) return result;
  auto best = ranked.take_sorted();
  if (!best.empty()) result.best = std::move(best.front());
  return result;
}

}  // namespace

CLI::App* add_walkforward_subcommand(CLI::App& app, WalkForwardOptions& options) {
  auto* wf = app.add_subcommand("walkforward",
                                "Walk-forward: per fold, sweep the training bars, pick the best combo by a figure, run it "
                                "on the test bars; then the stitched out-of-sample result");
  SweepOptions& s = options.sweep;
  auto* target = wf->add_option_group("target", "where the combos run (exactly one)");
  target->add_flag("--inproc")->description("run the kernel in this process");
  target->add_option("--name", s.name, "through the engine's shared-memory segment NAME")->check(engine_name());
  target->require_option(1);
  s.socket_dir = socket_dir_default();
  add_socket_dir_option(*wf, s.socket_dir);
  wf->add_option("--data", s.data_paths, "--inproc: the series (.csv, .f64, .npy)")->check(file_path())->expected(1);
  add_column_option(*wf, s.source.column);
  wf->add_option("--series", s.series, "which series, by name or index (default: the first)")
      ->check(series_name_or_index());
  add_gbm_options(*wf, s.source.gbm, &s.gbm_given);
  wf->add_option("--strategy", s.strategy,
                 "a strategy the engine serves, or with --inproc its FILE.so (default: the built-in hma)")
      ->check(strategy_name_or_file());
  auto* lengths = wf->add_option("--lengths", s.combos.lengths, "the built-in's lengths, e.g. 6,8,11")
                      ->check(length_list())
                      ->each([&s](const std::string&) { s.combos.lengths_given = true; });
  auto* grid = wf->add_option("--grid", s.combos.grid, "the built-in's grid FIRST:LAST:COUNT")
                   ->check(grid_spec())
                   ->capture_default_str()
                   ->excludes(lengths);
  wf->add_option("--combos", s.combos.combos_path, "a combo file (CSV with the strategy's parameter names, or JSON lines)")
      ->check(CLI::ExistingFile)
      ->excludes(lengths)
      ->excludes(grid);
  wf->add_option("--train", options.train, "bars each fold trains on")
      ->check(in_range<std::uint64_t>(2, std::uint64_t{1} << 40))
      ->required();
  wf->add_option("--test", options.test, "bars each fold tests on")
      ->check(in_range<std::uint64_t>(2, std::uint64_t{1} << 40))
      ->required();
  wf->add_option("--step", options.step, "bars from one fold to the next (default: --test)")
      ->check(in_range<std::uint64_t>(1, std::uint64_t{1} << 40));
  wf->add_flag("--anchored", options.anchored, "every fold trains from bar 0 (an expanding window)");
  wf->add_option("--by", options.by,
                 "the figure that picks each fold's combo: pnl, trades or a figure of docs/STATISTICS.md "
                 "[:asc|:desc] (ties: the earlier combo)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            auto by = parse_rank_by(text, true);
            return by ? std::string() : by.error().message;
          },
          "METRIC[:asc|:desc]"))
      ->capture_default_str();
  wf->add_option("--fee", s.fee, "fee per round trip, percentage points (default: the engine's; --inproc 0.09)")
      ->check(in_range(0.0, 100.0))
      ->each([&s](const std::string&) { s.fee_given = true; });
  wf->add_option("--bars-per-year", s.bars_per_year, "for sharpe, sortino and calmar (default: the engine's; 252)")
      ->check(in_range(1e-9, kMaxBarsPerYear));
  wf->add_option("--threads", s.threads, "--inproc: worker threads (0 = one per core)")->check(in_range(0u, 1024u));
  auto* json = wf->add_flag("--json", s.json, "one JSON object per fold, then the stitched line");
  wf->add_flag("--csv", s.csv, "CSV rows, then the stitched row")->excludes(json);
  wf->add_flag("--quiet", s.quiet, "no progress line");
  return wf;
}

int run_walkforward_command(WalkForwardOptions& options) {
  SweepOptions& s = options.sweep;
  if (s.combos.combos_path == "-") return usage_error("walkforward", "--combos - : every fold reads the combos again; give a file");
  auto by = parse_rank_by(options.by, true);
  if (!by) return usage_error("walkforward", by.error().message);
  auto facts = series_facts(s);
  if (!facts) return report_error("walkforward", facts.error());
  auto folds = folds_of(options, facts->bars);
  if (!folds) return report_error("walkforward", folds.error());
  SweepProgress progress(folds->size(), !s.quiet, "folds");
  std::optional<FoldWriter> writer;
  Stitched stitched;
  for (std::size_t k = 0; k < folds->size(); ++k) {
    const Fold& fold = (*folds)[k];
    const InSample in = train(options, *by, fold);
    if (in.code == Interrupt::kExitCode)
      fmt::print(stderr, "ipcfloor walkforward: interrupted: {} of {} folds written\n", k, folds->size());
    if (in.code != 0) return in.code;
    if (!in.best)
      return report_error("walkforward", Error{ErrorCode::invalid_argument,
                                               fmt::format("fold {}: no combo runs on the training bars [{}, {}) (each "
                                                           "was refused; `sweep --from {} --to {}` says why)", k,
                                                           fold.train_from, fold.train_to, fold.train_from, fold.train_to)});
    const SweepRow& best = *in.best;
    auto out = test_run(s, fold, params_text(best.params, facts->params));
    if (!out) return report_error("walkforward", out.error());
    if (!writer) {
      writer.emplace(s, *by, out->param_names);
      writer->header(folds->size(), out->strategy);
    }
    writer->fold(k, fold, best.params, best.stats, out->stats);
    stitched.add(*out);
    progress.advance(k + 1);
  }
  progress.finish();
  std::vector<double> equity(stitched.close.size());
  TradeStats total;
  if (stats_from_trades(stitched.close, stitched.trades, facts->bars_per_year, equity, total) != TradeCheck::ok)
    return report_error("walkforward", Error{ErrorCode::strategy, "the folds' trades do not make one valid list"});
  writer->stitched(folds->size(), stitched.close.size(), total);
  return 0;
}

}  // namespace ipcfloor
