#include "kernel/sweep_rows.hpp"

#include <fmt/format.h>

#include "kernel/combo_io.hpp"
#include "kernel/grid.hpp"
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

}  // namespace

Expected<std::vector<PlannedRow>> plan_rows(const ComboSpec& spec) {
  std::vector<PlannedRow> plan;
  if (!spec.combos_path.empty()) {
    // The plan keeps a PlannedRow a row: counted with the parsed rows before either is allocated.
    auto rows = load_combos(spec.combos_path, sizeof(PlannedRow));
    if (!rows) return std::unexpected(rows.error());
    plan.reserve(rows->size());
    for (std::size_t i = 0; i < rows->size(); ++i) {
      PlannedRow p;
      p.row.length = rows->combo(i).L;
      p.row.params = rows->combo(i);
      p.row.line = rows->line(i);
      if (!rows->parsed(i)) {
        ComboLine line = (*rows)[i];
        p.runnable = false;
        p.row.error = "bad_row: " + line.error;
        p.row.raw = std::move(line.raw);
      }
      plan.push_back(std::move(p));
    }
    return plan;
  }
  if (spec.lengths_given && spec.lengths.empty())
    return fail(ErrorCode::invalid_argument, "--lengths is empty; give lengths like 6,8,11, or leave it out for --grid");
  auto lengths = spec.lengths_given ? parse_lengths(spec.lengths) : parse_grid(spec.grid);
  if (!lengths) return std::unexpected(lengths.error());
  for (const std::int64_t length : *lengths) {
    PlannedRow p;
    p.row.length = length;
    p.row.params = combo_from_length(length);
    plan.push_back(std::move(p));
  }
  return plan;
}

std::string window_error(const SweepRow& row, std::size_t n_bars) {
  const auto w = row.params.as_array();
  const std::size_t line = row.line;
  return fmt::format("window_out_of_range: {}windows [{}, {}, {}, {}, {}, {}] must each be in [1, {}]",
                     line == 0 ? std::string() : fmt::format("line {}: ", line), w[0], w[1], w[2], w[3], w[4], w[5],
                     n_bars);
}

void check_windows(std::vector<PlannedRow>& plan, std::size_t n_bars) {
  for (PlannedRow& p : plan) {
    if (!p.runnable || validate_combo(p.row.params, n_bars) == KernelStatus::ok) continue;
    p.runnable = false;
    p.row.error = window_error(p.row, n_bars);
  }
}

void SweepWriter::header() {
  if (format_ == SweepFormat::table) {
    if (with_series_) fmt::print(out_, "{:<16}  ", "series");
    fmt::print(out_, "{:>5}  {:<28}  {:>22}  {:>7}\n", "L", "params [h,L,s,p3,p2,p]", "pnl (% points)", "trades");
  } else if (format_ == SweepFormat::csv) {
    fmt::print(out_, "{}h,L,s,p3,p2,p,pnl,trades,error,raw\n", with_series_ ? "series," : "");
  }
  std::fflush(out_);
}

void SweepWriter::row(const SweepRow& row) {
  const auto w = row.params.as_array();
  const bool parsed = row.raw.empty();
  const std::string params = fmt::format("{},{},{},{},{},{}", w[0], w[1], w[2], w[3], w[4], w[5]);
  switch (format_) {
    case SweepFormat::json: {
      const std::string series = with_series_ ? fmt::format("\"series\":\"{}\",", json_escaped(row.series)) : "";
      if (!parsed) {
        fmt::print(out_, "{{{}\"raw\":\"{}\",\"error\":\"{}\"}}\n", series, json_escaped(row.raw),
                   json_escaped(row.error));
      } else if (row.error.empty()) {
        fmt::print(out_, "{{{}\"L\":{},\"params\":[{}],\"pnl\":{:.17g},\"trades\":{}}}\n", series, row.length, params,
                   row.result.pnl, row.result.trades);
      } else {
        fmt::print(out_, "{{{}\"L\":{},\"params\":[{}],\"error\":\"{}\"}}\n", series, row.length, params,
                   json_escaped(row.error));
      }
      break;
    }
    case SweepFormat::csv: {
      const std::string series = with_series_ ? fmt::format("\"{}\",", csv_quoted(row.series)) : "";
      if (!parsed) {
        fmt::print(out_, "{},,,,,,,,\"{}\",\"{}\"\n", series, csv_quoted(row.error), csv_quoted(row.raw));
      } else if (row.error.empty()) {
        fmt::print(out_, "{}{},{:.17g},{},,\n", series, params, row.result.pnl, row.result.trades);
      } else {
        fmt::print(out_, "{}{},,,\"{}\",\n", series, params, csv_quoted(row.error));
      }
      break;
    }
    case SweepFormat::table: {
      if (with_series_) fmt::print(out_, "{:<16}  ", row.series);
      if (!parsed) {
        fmt::print(out_, "{:>5}  {:<28}  {}\n", "-", row.raw, row.error);
      } else if (row.error.empty()) {
        fmt::print(out_, "{:>5}  [{:<27}  {:>22.13f}  {:>7}\n", row.length, params + "]", row.result.pnl,
                   row.result.trades);
      } else {
        fmt::print(out_, "{:>5}  [{:<27}  {}\n", row.length, params + "]", row.error);
      }
      break;
    }
  }
  std::fflush(out_);
}

}  // namespace ipcfloor
