#include "data/sweep_rows.hpp"

#include <cmath>
#include <span>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "data/combo_io.hpp"
#include "data/grid.hpp"
#include "kernel/kernel.hpp"

namespace ipcfloor {
namespace {

std::string json_escaped(const std::string& text) {
  std::string escaped;
  for (const char c : text) {
    if (static_cast<unsigned char>(c) < 0x20) {  // a control byte of a row's text: JSON needs it escaped
      escaped += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
      continue;
    }
    if (c == '"' || c == '\\') escaped.push_back('\\');
    escaped.push_back(c);
  }
  return escaped;
}

std::string csv_quoted(const std::string& text) {
  std::string quoted;
  for (const char c : text) {
    if (c == '"') quoted.push_back('"');
    quoted.push_back(c);
  }
  return quoted;
}

// The figures after pnl and trades, in docs/STATISTICS.md's order.
std::string json_stats(const TradeStats& stats) {
  std::string out;
  for (std::size_t k = 0; k < kStatsFigureCount; ++k)
    out += fmt::format(",\"{}\":{}", kStatsFigureNames[k], json_number(stats_figure(stats, k)));
  return out;
}

std::string csv_stats(const TradeStats* stats) {
  std::string out;
  for (std::size_t k = 0; k < kStatsFigureCount; ++k) out += "," + (stats != nullptr ? text_number(stats_figure(*stats, k)) : "");
  return out;
}

// The row's parameters as keys of their own, for JSON: a name that is another field's too is
// prefixed "param_"; the built-in's L is already a key.
std::string json_named_params(const SweepShape& shape, const std::array<std::int64_t, 6>& values) {
  static constexpr std::string_view kTaken[] = {"L",    "params", "pnl",         "trades",      "error", "raw",
                                                "series", "series_bars", "series_checksum"};
  std::string out;
  for (std::size_t k = 0; k < shape.columns.count; ++k) {
    const std::string_view name = shape.columns.names[k];
    if (shape.lengths && name == "L") continue;
    bool taken = stats_figure_index(std::string(name).c_str()) != -3;
    for (const std::string_view other : kTaken) taken = taken || name == other;
    out += fmt::format(",\"{}{}\":{}", taken ? "param_" : "", name, values[k]);
  }
  return out;
}

}  // namespace

std::string json_number(double value) {
  if (std::isnan(value)) return "null";
  if (std::isinf(value)) return value > 0 ? "\"inf\"" : "\"-inf\"";
  return fmt::format("{:.17g}", value);
}

std::string text_number(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return fmt::format("{:.17g}", value);
}


Expected<SweepPlan> plan_rows(const ComboSpec& spec, const ComboColumns& columns, bool lengths_allowed,
                              std::size_t kept_bytes_per_row) {
  if (!spec.combos_path.empty()) return load_combos(spec.combos_path, columns, kept_bytes_per_row);
  if (!lengths_allowed)
    return fail(ErrorCode::invalid_argument, "--lengths and --grid build combos of the built-in strategy; give this "
                "strategy's combos with --combos FILE (a CSV whose header names its parameters, or JSON lines)");
  if (spec.lengths_given && spec.lengths.empty())
    return fail(ErrorCode::invalid_argument, "--lengths is empty; give lengths like 6,8,11, or leave it out for --grid");
  auto lengths = spec.lengths_given ? parse_lengths(spec.lengths) : parse_grid(spec.grid);
  if (!lengths) return std::unexpected(lengths.error());
  std::vector<Combo> combos;
  combos.reserve(lengths->size());
  for (const std::int64_t length : *lengths) combos.push_back(combo_from_length(length));
  return SweepPlan::of(std::move(combos));
}

std::string window_error(const SweepRow& row, std::size_t n_bars, const Strategy* strategy,
                         std::string_view strategy_name) {
  const auto w = row.params.as_array();
  const std::size_t line = row.line;
  std::string why;
  if (strategy != nullptr) {
    char sentence[IPCFLOOR_STRATEGY_WHY_BYTES] = {};
    (void)strategy->accepts(row.params, n_bars, sentence);
    why = sentence;
  }
  if (why.empty()) why = fmt::format("refused by strategy {} for a series of {} bars", strategy_name, n_bars);
  return fmt::format("window_out_of_range: {}params [{}, {}, {}, {}, {}, {}]: {}",
                     line == 0 ? std::string() : fmt::format("line {}: ", line), w[0], w[1], w[2], w[3], w[4], w[5],
                     why);
}

std::vector<RowVerdict> verdicts_of(const SweepPlan& plan) {
  std::vector<RowVerdict> verdicts(plan.size(), RowVerdict::runnable);
  for (std::size_t i = 0; i < plan.size(); ++i)
    if (!plan.parsed(i)) verdicts[i] = RowVerdict::bad_row;
  return verdicts;
}

std::vector<RowVerdict> admit_rows(const SweepPlan& plan, const Strategy& strategy, std::size_t n_bars) {
  std::vector<RowVerdict> verdicts = verdicts_of(plan);
  for (std::size_t i = 0; i < plan.size(); ++i)
    if (verdicts[i] == RowVerdict::runnable && !strategy.accepts(plan.combo(i), n_bars)) verdicts[i] = RowVerdict::refused;
  return verdicts;
}

SweepRow planned_row(const SweepPlan& plan, std::size_t i, RowVerdict verdict, std::size_t n_bars,
                     const Strategy* strategy, std::string_view strategy_name) {
  SweepRow row;
  row.params = plan.combo(i);
  row.length = row.params.L;
  row.line = plan.line(i);
  if (verdict == RowVerdict::bad_row) {
    ComboLine line = plan[i];
    row.error = "bad_row: " + line.error;
    row.raw = std::move(line.raw);
  } else if (verdict == RowVerdict::refused) {
    row.error = window_error(row, n_bars, strategy, strategy_name);
  }
  return row;
}

void SweepWriter::header() {
  const std::string names = fmt::format("{}", fmt::join(std::span(shape_.columns.names).first(shape_.columns.count), ","));
  if (format_ == SweepFormat::table) {
    if (with_series_) fmt::print(out_, "{:<16}  ", "series");
    fmt::print(out_, "{:>5}  {:<28}  {:>22}  {:>7}{}\n", shape_.lengths ? "L" : "", fmt::format("params [{}]", names),
               "pnl (% points)", "trades", shape_.stats ? "  win_rate  profit_factor  max_drawdown      sharpe" : "");
  } else if (format_ == SweepFormat::csv) {
    const std::string figures =
        shape_.stats ? fmt::format(",{}", fmt::join(std::span(kStatsFigureNames), ",")) : std::string();
    fmt::print(out_, "{}{},pnl,trades{},error,raw,{}series_bars,series_checksum{}\n", with_series_ ? "series," : "",
               names, figures, with_series_ ? "" : "series,", shape_.ranged ? ",from_bar,to_bar" : "");
  }
  std::fflush(out_);
}

void SweepWriter::row(const SweepRow& row) {
  const auto w = row.params.as_array();
  const bool parsed = row.raw.empty();
  const std::string params = fmt::format("{}", fmt::join(std::span(w).first(shape_.columns.count), ","));
  // The built-in strategy's rows carry their length L first; another strategy's rows none.
  const std::string length = shape_.lengths ? fmt::format("\"L\":{},", row.length) : std::string();
  const std::string table_length = shape_.lengths ? fmt::format("{}", row.length) : std::string();
  const std::string unparsed_fields(shape_.columns.count + 2 + (shape_.stats ? kStatsFigureCount : 0), ',');
  const std::string named = format_ == SweepFormat::json ? json_named_params(shape_, w) : std::string();
  switch (format_) {
    case SweepFormat::json: {
      const std::string name = fmt::format("\"series\":\"{}\"", json_escaped(row.series));
      const std::string lead = with_series_ ? name + "," : "";
      const std::string range =
          shape_.ranged ? fmt::format(",\"from_bar\":{},\"to_bar\":{}", row.from_bar, row.to_bar) : std::string();
      const std::string tail = fmt::format(",{}\"series_bars\":{},\"series_checksum\":\"{:016x}\"{}",
                                           with_series_ ? "" : name + ",", row.series_bars, row.series_checksum, range);
      if (!parsed) {
        fmt::print(out_, "{{{}\"raw\":\"{}\",\"error\":\"{}\"{}}}\n", lead, json_escaped(row.raw),
                   json_escaped(row.error), tail);
      } else if (row.error.empty()) {
        fmt::print(out_, "{{{}{}\"params\":[{}],\"pnl\":{:.17g},\"trades\":{}{}{}{}}}\n", lead, length, params,
                   row.result.pnl, row.result.trades, shape_.stats ? json_stats(row.stats) : "", named, tail);
      } else {
        fmt::print(out_, "{{{}{}\"params\":[{}],\"error\":\"{}\"{}{}}}\n", lead, length, params,
                   json_escaped(row.error), named, tail);
      }
      break;
    }
    case SweepFormat::csv: {
      const std::string name = fmt::format("\"{}\"", csv_quoted(row.series));
      const std::string lead = with_series_ ? name + "," : "";
      const std::string range = shape_.ranged ? fmt::format(",{},{}", row.from_bar, row.to_bar) : std::string();
      const std::string tail = fmt::format(",{}{},{:016x}{}", with_series_ ? "" : name + ",", row.series_bars,
                                           row.series_checksum, range);
      if (!parsed) {
        fmt::print(out_, "{}{}\"{}\",\"{}\"{}\n", lead, unparsed_fields, csv_quoted(row.error), csv_quoted(row.raw), tail);
      } else if (row.error.empty()) {
        fmt::print(out_, "{}{},{:.17g},{}{},,{}\n", lead, params, row.result.pnl, row.result.trades,
                   shape_.stats ? csv_stats(&row.stats) : "", tail);
      } else {
        fmt::print(out_, "{}{},,{},\"{}\",{}\n", lead, params, shape_.stats ? csv_stats(nullptr) : "",
                   csv_quoted(row.error), tail);
      }
      break;
    }
    case SweepFormat::table: {
      if (with_series_) fmt::print(out_, "{:<16}  ", row.series);
      if (!parsed) {
        fmt::print(out_, "{:>5}  {:<28}  {}\n", "-", row.raw, row.error);
      } else if (row.error.empty()) {
        const std::string figures =
            shape_.stats ? fmt::format("  {:>8.4f}  {:>13.4f}  {:>12.4f}  {:>10.4f}", row.stats.win_rate,
                                       row.stats.profit_factor, row.stats.max_drawdown, row.stats.sharpe)
                         : std::string();
        fmt::print(out_, "{:>5}  [{:<27}  {:>22.13f}  {:>7}{}\n", table_length, params + "]", row.result.pnl,
                   row.result.trades, figures);
      } else {
        fmt::print(out_, "{:>5}  [{:<27}  {}\n", table_length, params + "]", row.error);
      }
      break;
    }
  }
  std::fflush(out_);
}

}  // namespace ipcfloor
