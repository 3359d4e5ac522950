#include "app/trades_command.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <optional>
#include <span>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "app/cli_common.hpp"
#include "clients/shm_client.hpp"
#include "clients/trade_pages.hpp"
#include "common/atomic_file.hpp"
#include "data/combo_io.hpp"
#include "data/gbm.hpp"
#include "kernel/kernel.hpp"
#include "data/series_formats.hpp"
#include "data/series_set.hpp"
#include "data/sweep_rows.hpp"
#include "kernel/strategy_loader.hpp"
#include "shm/frames.hpp"

namespace ipcfloor {
namespace {

// "10,40" into the combo of a strategy with `count` parameters (the rest stay 0).
Expected<Combo> parse_params(const std::string& text, const std::vector<std::string>& names) {
  Combo combo{};
  auto* values = reinterpret_cast<std::int64_t*>(&combo);
  std::size_t k = 0;
  std::string_view rest = text;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string item(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    if (k >= names.size())
      return fail(ErrorCode::invalid_argument, "--params {}: the strategy takes {} parameters ({})", text, names.size(),
                  fmt::join(names, ", "));
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno != 0)
      return fail(ErrorCode::invalid_argument, "--params {}: parameter {} ({}) is '{}', not a whole number", text, k,
                  names[k], item);
    values[k++] = value;
  }
  if (k != names.size())
    return fail(ErrorCode::invalid_argument, "--params {}: the strategy takes {} parameters ({}), in that order",
                text, names.size(), fmt::join(names, ", "));
  return combo;
}

// The bars [from, to) of `close`; an error names the series' bars.
Expected<std::span<const double>> range_of(std::span<const double> close, const TradesOptions& o) {
  const std::uint64_t to = o.to_bar == 0 ? close.size() : o.to_bar;
  if (to > close.size() || o.from_bar > to || to - o.from_bar < 2)
    return fail(ErrorCode::invalid_argument, "--from {} --to {} is not a range of the series: it holds {} bars, and a "
                "range needs at least 2", o.from_bar, o.to_bar, close.size());
  return close.subspan(o.from_bar, to - o.from_bar);
}

Expected<FullCombo> run_inproc(const TradesOptions& o) {
  StrategyCatalog catalog;
  const Strategy* strategy = &builtin();
  if (!o.strategy.empty() && o.strategy != builtin().name()) {
    const auto check_close = strategy_check_series();
    if (!check_close) return std::unexpected(check_close.error());
    auto loaded = catalog.load(o.strategy, *check_close);
    if (!loaded) return std::unexpected(loaded.error());
    strategy = *loaded;
  }
  FullCombo full;
  full.strategy = std::string(strategy->name());
  for (std::uint32_t k = 0; k < strategy->param_count(); ++k) full.param_names.emplace_back(strategy->param_name(k));
  auto params = parse_params(o.params, full.param_names);
  if (!params) return std::unexpected(params.error());
  full.params = *params;
  auto set = SeriesSet::make(o.data_paths, o.source.gbm, o.source.column);
  if (!set) return std::unexpected(set.error());
  auto chosen = set->select(o.series);
  if (!chosen) return std::unexpected(chosen.error());
  auto loaded = set->load(chosen->front());
  if (!loaded) return std::unexpected(loaded.error());
  full.series = set->names()[chosen->front()];
  auto range = range_of(loaded->close, o);
  if (!range) return std::unexpected(range.error());
  full.first_bar = o.from_bar;
  const std::size_t to = o.from_bar + range->size();
  const Bars bars = loaded->bars().slice(o.from_bar, to);
  char why[IPCFLOOR_STRATEGY_WHY_BYTES] = {};
  if (const std::uint32_t missing = strategy->required_columns() & ~bars.columns(); missing != 0)
    return fail(ErrorCode::invalid_argument, "strategy {} needs the {} column, which series {} does not have",
                strategy->name(), kColumnNames[static_cast<std::size_t>(first_missing(missing, 0))], full.series);
  if (!strategy->accepts(full.params, bars.size(), why))
    return fail(ErrorCode::invalid_argument, "strategy {} refuses --params {}: {}", strategy->name(), o.params, why);
  const double year = o.bars_per_year != 0.0 ? o.bars_per_year : kDefaultBarsPerYear;
  KernelWorkspace workspace(strategy->stats_workspace_bytes(bars.size()));
  full.close.assign(range->begin(), range->end());
  full.equity.resize(bars.size());
  // Once to count the trades, once to keep them all.
  for (int pass = 0; pass < 2; ++pass) {
    Strategy::StatsRun extras;
    extras.keep = full.trades;
    extras.equity = full.equity;
    const StrategyRun ran = strategy->run_stats(bars, full.params, o.fee, year, workspace, full.stats, extras);
    if (ran == StrategyRun::no_trade_report)
      return fail(ErrorCode::strategy, "strategy {} is built against version 1 of the strategy ABI and reports no "
                  "trades (rebuild it against this ipcfloor's strategy.h)", strategy->name());
    if (ran != StrategyRun::ok)
      return fail(ErrorCode::strategy, "strategy {} failed on --params {}, or reported trades that break the rules of "
                  "strategy.h", strategy->name(), o.params);
    if (pass == 0) full.trades.resize(static_cast<std::size_t>(full.stats.trades));
  }
  return full;
}

Expected<FullCombo> run_through_engine(const TradesOptions& o) {
  ShmClientOptions client_options;
  client_options.socket_dir = o.socket_dir;
  client_options.wait = WaitMode::backoff;
  auto client = ShmClient::connect(o.name, client_options);
  if (!client) return std::unexpected(client.error());
  const Attachment& segment = client->segment();
  FullCombo full;
  std::uint32_t strategy = 0;
  if (!o.strategy.empty()) {
    const auto found = segment.find_strategy(o.strategy);
    if (!found) return std::unexpected(unknown_strategy(o.name, o.strategy, segment));
    strategy = *found;
  }
  const StrategyEntry& entry = segment.strategy_at(strategy);
  full.strategy = entry.name;
  for (std::uint32_t k = 0; k < entry.param_count; ++k) full.param_names.emplace_back(entry.param_names[k]);
  auto params = parse_params(o.params, full.param_names);
  if (!params) return std::unexpected(params.error());
  full.params = *params;
  std::vector<std::string> names;
  for (std::uint32_t i = 0; i < segment.series_count(); ++i) names.emplace_back(segment.series_key(i));
  auto chosen = select_series(names, o.series.empty() ? names.front() : o.series);
  if (!chosen) return std::unexpected(chosen.error());
  const auto index = static_cast<std::uint32_t>(chosen->front());
  full.series = names[index];
  const std::span<const double> whole = index == 0 ? segment.published_series() : segment.series_at(index);
  auto range = range_of(whole, o);
  if (!range) return std::unexpected(range.error());
  full.first_bar = o.from_bar;
  full.close.assign(range->begin(), range->end());
  RequestOptions options{};
  if (o.to_bar != 0 || o.from_bar != 0) {
    options.present |= kOptionRange;
    options.from_bar = o.from_bar;
    options.to_bar = o.from_bar + range->size();
  }
  if (o.fee_given) {
    options.present |= kOptionFee;
    options.fee = o.fee;
  }
  if (o.bars_per_year != 0.0) {
    options.present |= kOptionBarsPerYear;
    options.bars_per_year = o.bars_per_year;
  }
  const auto keep = [&full](std::uint64_t, std::span<const ipcfloor_trade> page) {
    full.trades.insert(full.trades.end(), page.begin(), page.end());
    return true;
  };
  const TradePagesResult got = fetch_trade_pages(*client, request_flags(index, strategy), payload_of(full.params),
                                                 options, keep);
  switch (got.end) {
    case TradePagesEnd::ok: break;
    case TradePagesEnd::refused: {
      const std::string_view why = got.answer.extra[2] == kRecordWhy
                                       ? std::string_view(got.record.why, strnlen(got.record.why, sizeof got.record.why))
                                       : std::string_view(to_string(static_cast<Status>(got.answer.status)));
      return fail(ErrorCode::invalid_argument, "engine {} refused --params {} of strategy {}: {} ({})", o.name, o.params,
                  full.strategy, why, to_string(static_cast<Status>(got.answer.status)));
    }
    case TradePagesEnd::lane_failed: return std::unexpected(client->error_for(got.lane));
    case TradePagesEnd::inconsistent:
      return fail(ErrorCode::protocol, "engine {} sent a trade page that does not fit the request", o.name);
    case TradePagesEnd::no_room:
      return fail(ErrorCode::resource, "engine {} runs with --bulk-bytes 0: no room to send a trade list", o.name);
  }
  // The curve from the list and the engine's own bars, by the code its figures came from; the
  // figures must come out the same.
  full.equity.resize(full.close.size());
  const double year = o.bars_per_year != 0.0 ? o.bars_per_year : segment.header().bars_per_year;
  if (stats_from_trades(full.close, full.trades, year, full.equity, full.stats) != TradeCheck::ok ||
      std::memcmp(&full.stats.pnl, &got.answer.pnl, sizeof(double)) != 0 ||
      full.stats.trades != got.answer.trades)
    return fail(ErrorCode::protocol, "engine {} sent a trade list that does not add up to its own answer", o.name);
  return full;
}

}  // namespace

Expected<FullCombo> full_combo(const TradesOptions& o) { return o.name.empty() ? run_inproc(o) : run_through_engine(o); }

namespace {

// ---- writers -----------------------------------------------------------------------------------

enum class FileKind { csv, json, npy };

Expected<FileKind> kind_of(const std::string& path) {
  if (path.ends_with(".csv")) return FileKind::csv;
  if (path.ends_with(".json") || path.ends_with(".jsonl")) return FileKind::json;
  if (path.ends_with(".npy")) return FileKind::npy;
  return fail(ErrorCode::invalid_argument, "{}: the file's extension says its format: .csv, .json (JSON lines) or .npy",
              path);
}

std::string trades_text(const FullCombo& full, FileKind kind) {
  std::string out;
  if (kind == FileKind::npy) {
    // One record per trade, laid out as ipcfloor_trade (strategy.h), so np.load gives named fields.
    series_formats::append_npy_header(out,
                                      "[('entry_bar', '<u8'), ('exit_bar', '<u8'), ('entry_price', '<f8'), "
                                      "('exit_price', '<f8'), ('pnl', '<f8'), ('side', '<i4'), ('reserved', '<u4')]",
                                      full.trades.size());
    for (ipcfloor_trade trade : full.trades) {
      trade.entry_bar += full.first_bar;
      trade.exit_bar += full.first_bar;
      out.append(reinterpret_cast<const char*>(&trade), sizeof trade);
    }
    return out;
  }
  if (kind == FileKind::csv) out += "entry_bar,exit_bar,side,entry_price,exit_price,pnl\n";
  for (const ipcfloor_trade& t : full.trades) {
    if (kind == FileKind::csv) {
      out += fmt::format("{},{},{},{},{},{}\n", t.entry_bar + full.first_bar, t.exit_bar + full.first_bar, t.side,
                         text_number(t.entry_price), text_number(t.exit_price), text_number(t.pnl));
    } else {
      out += fmt::format("{{\"entry_bar\":{},\"exit_bar\":{},\"side\":{},\"entry_price\":{},\"exit_price\":{},"
                         "\"pnl\":{}}}\n", t.entry_bar + full.first_bar, t.exit_bar + full.first_bar, t.side,
                         json_number(t.entry_price), json_number(t.exit_price), json_number(t.pnl));
    }
  }
  return out;
}

std::string equity_text(const FullCombo& full, FileKind kind) {
  std::string out;
  double peak = full.equity.empty() ? 0.0 : full.equity.front();
  if (kind == FileKind::npy) {
    series_formats::append_npy_header(out, "[('bar', '<u8'), ('close', '<f8'), ('equity', '<f8'), ('drawdown', '<f8')]",
                                      full.equity.size());
  } else if (kind == FileKind::csv) {
    out += "bar,close,equity,drawdown\n";
  }
  for (std::size_t i = 0; i < full.equity.size(); ++i) {
    const double equity = full.equity[i];
    peak = equity > peak ? equity : peak;
    const double drawdown = peak - equity;  // as max_drawdown measures it (docs/STATISTICS.md)
    const std::uint64_t bar = full.first_bar + i;
    if (kind == FileKind::npy) {
      out.append(reinterpret_cast<const char*>(&bar), sizeof bar);
      for (const double value : {full.close[i], equity, drawdown})
        out.append(reinterpret_cast<const char*>(&value), sizeof value);
    } else if (kind == FileKind::csv) {
      out += fmt::format("{},{},{},{}\n", bar, text_number(full.close[i]), text_number(equity), text_number(drawdown));
    } else {
      out += fmt::format("{{\"bar\":{},\"close\":{},\"equity\":{},\"drawdown\":{}}}\n", bar, json_number(full.close[i]),
                         json_number(equity), json_number(drawdown));
    }
  }
  return out;
}

Expected<void> write_out(const std::string& path, const FullCombo& full, bool trades) {
  auto kind = kind_of(path);
  if (!kind) return std::unexpected(kind.error());
  const std::string text = trades ? trades_text(full, *kind) : equity_text(full, *kind);
  auto written = write_file_atomically(path, text, trades ? "trade list" : "equity curve");
  if (!written) return std::unexpected(written.error());
  return {};
}

std::string stats_json(const TradeStats& s) {
  std::string out = fmt::format("\"pnl\":{},\"trades\":{}", json_number(s.pnl), s.trades);
  for (std::size_t k = 0; k < kStatsFigureCount; ++k)
    out += fmt::format(",\"{}\":{}", kStatsFigureNames[k], json_number(stats_figure(s, k)));
  return out;
}

void print_summary(const FullCombo& full, const TradesOptions& o) {
  const auto values = full.params.as_array();
  const auto shown = std::span(values).first(full.param_names.size());
  if (o.json) {
    fmt::print("{{\"strategy\":\"{}\",\"params\":[{}],\"series\":\"{}\",\"from_bar\":{},\"to_bar\":{},{}}}\n",
               full.strategy, fmt::join(shown, ","), full.series, full.first_bar, full.first_bar + full.close.size(),
               stats_json(full.stats));
    return;
  }
  fmt::print("trades: strategy {} [{}] on series {}, bars [{}, {}): {} trades, pnl {} points\n", full.strategy,
             fmt::join(shown, ","), full.series, full.first_bar, full.first_bar + full.close.size(), full.stats.trades,
             text_number(full.stats.pnl));
  for (std::size_t k = 0; k < kStatsFigureCount; ++k)
    fmt::print("  {:<18} {}\n", kStatsFigureNames[k], text_number(stats_figure(full.stats, k)));
  const std::size_t shown_trades = std::min<std::size_t>(full.trades.size(), 10);
  if (shown_trades != 0) fmt::print("  first {} trades: entry_bar exit_bar side entry_price exit_price pnl\n", shown_trades);
  for (std::size_t i = 0; i < shown_trades; ++i) {
    const ipcfloor_trade& t = full.trades[i];
    fmt::print("  {:>9} {:>9} {:>+4} {:>12.6f} {:>12.6f} {:>+12.6f}\n", t.entry_bar + full.first_bar,
               t.exit_bar + full.first_bar, t.side, t.entry_price, t.exit_price, t.pnl);
  }
}

}  // namespace

CLI::App* add_trades_subcommand(CLI::App& app, TradesOptions& o) {
  auto* trades = app.add_subcommand("trades", "One combo in full: its statistics, trade list and equity curve");
  auto* target = trades->add_option_group("target", "where the combo runs (exactly one)");
  target->add_flag("--inproc")->description("run the strategy in this process (--strategy FILE.so, --data FILE)");
  target->add_option("--name", o.name, "through the engine NAME (its strategies and series)")->check(engine_name());
  target->require_option(1);
  o.socket_dir = socket_dir_default();
  add_socket_dir_option(*trades, o.socket_dir);
  trades->add_option("--data", o.data_paths, "--inproc: the series file (.csv, .npy, .f64)")->check(file_path());
  add_column_option(*trades, o.source.column);
  add_gbm_options(*trades, o.source.gbm);
  trades->add_option("--series", o.series, "which series, by name or index (default: the first)")
      ->check(series_name_or_index());
  trades->add_option("--strategy", o.strategy, "a strategy the engine serves, or with --inproc its FILE.so (default: hma)")
      ->check(strategy_name_or_file());
  trades->add_option("--params", o.params, "the combo: the strategy's parameters in order, comma-separated (10,40)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            std::size_t count = 0;
            for (std::size_t at = 0; at <= text.size(); ++count) {
              const std::size_t comma = std::min(text.find(',', at), text.size());
              const std::string item = text.substr(at, comma - at);
              char* end = nullptr;
              errno = 0;
              (void)std::strtoll(item.c_str(), &end, 10);
              if (item.empty() || *end != '\0' || errno != 0) return "'" + item + "' is not a whole number";
              at = comma + 1;
            }
            return count <= 6 ? "" : "at most 6 parameters";
          },
          "1 to 6 whole numbers, comma-separated"))
      ->required();
  trades->add_option("--from", o.from_bar, "the first bar of the range it runs on")->check(in_range<std::uint64_t>(0, 1ULL << 40));
  trades->add_option("--to", o.to_bar, "the bar after the range (0: the end of the series)")
      ->check(in_range<std::uint64_t>(0, 1ULL << 40));
  trades->add_option("--fee", o.fee, "fee per round trip, percentage points (default: the engine's; --inproc 0.09)")
      ->check(in_range(0.0, 100.0))
      ->each([&o](const std::string&) { o.fee_given = true; });
  trades->add_option("--bars-per-year", o.bars_per_year, "for sharpe, sortino and calmar (default: the engine's; 252)")
      ->check(in_range(1e-9, kMaxBarsPerYear));
  const CLI::Validator output(
      [](std::string& text) -> std::string {
        auto kind = kind_of(text);
        return kind ? "" : kind.error().message;
      },
      "FILE.csv, .json or .npy");
  trades->add_option("--trades-out", o.trades_out, "write the trade list: FILE.csv, FILE.json (JSON lines) or FILE.npy")
      ->check(output);
  trades->add_option("--equity-out", o.equity_out,
                     "write the bar-by-bar equity and drawdown: FILE.csv, FILE.json or FILE.npy "
                     "(tools/plot_equity.py draws it)")
      ->check(output);
  trades->add_flag("--json", o.json, "the summary as one JSON object");
  return trades;
}

int run_trades_command(TradesOptions& o) {
  if (!o.name.empty() && !o.data_paths.empty())
    return usage_error("trades", "--data describes a series for --inproc; through --name the combo runs on the "
                       "engine's own series (--series picks one)");
  auto full = full_combo(o);
  if (!full) return report_error("trades", full.error());
  if (!o.trades_out.empty()) {
    if (auto written = write_out(o.trades_out, *full, true); !written) return report_error("trades", written.error());
  }
  if (!o.equity_out.empty()) {
    if (auto written = write_out(o.equity_out, *full, false); !written) return report_error("trades", written.error());
  }
  print_summary(*full, o);
  return 0;
}

}  // namespace ipcfloor
