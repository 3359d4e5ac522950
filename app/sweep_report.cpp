#include "app/sweep_report.hpp"

#include <unistd.h>

#include <fmt/format.h>

namespace ipcfloor {

void SweepWriter::header() {
  if (format_ == SweepFormat::table) {
    fmt::print(out_, "{:>5}  {:<28}  {:>22}  {:>7}\n", "L", "params [h,L,s,p3,p2,p]", "pnl (% points)", "trades");
  } else if (format_ == SweepFormat::csv) {
    fmt::print(out_, "length,h,L,s,p3,p2,p,pnl,trades,error\n");
  }
  std::fflush(out_);
}

void SweepWriter::row(const SweepRow& row) {
  const auto w = row.params.as_array();
  switch (format_) {
    case SweepFormat::json:
      if (row.error.empty()) {
        fmt::print(out_, "{{\"L\":{},\"params\":[{},{},{},{},{},{}],\"pnl\":{:.17g},\"trades\":{}}}\n", row.length, w[0],
                   w[1], w[2], w[3], w[4], w[5], row.result.pnl, row.result.trades);
      } else {
        std::string escaped;
        for (const char c : row.error) {
          if (c == '"' || c == '\\') escaped.push_back('\\');
          escaped.push_back(c);
        }
        fmt::print(out_, "{{\"L\":{},\"params\":[{},{},{},{},{},{}],\"error\":\"{}\"}}\n", row.length, w[0], w[1], w[2],
                   w[3], w[4], w[5], escaped);
      }
      break;
    case SweepFormat::csv:
      if (row.error.empty()) {
        fmt::print(out_, "{},{},{},{},{},{},{},{:.17g},{},\n", row.length, w[0], w[1], w[2], w[3], w[4], w[5],
                   row.result.pnl, row.result.trades);
      } else {
        std::string quoted;
        for (const char c : row.error) {
          if (c == '"') quoted.push_back('"');
          quoted.push_back(c);
        }
        fmt::print(out_, "{},{},{},{},{},{},{},,,\"{}\"\n", row.length, w[0], w[1], w[2], w[3], w[4], w[5], quoted);
      }
      break;
    case SweepFormat::table:
      if (row.error.empty()) {
        fmt::print(out_, "{:>5}  {:<28}  {:>22.13f}  {:>7}\n", row.length,
                   fmt::format("[{},{},{},{},{},{}]", w[0], w[1], w[2], w[3], w[4], w[5]), row.result.pnl,
                   row.result.trades);
      } else {
        fmt::print(out_, "{:>5}  {:<28}  {}\n", row.length, fmt::format("[{},{},{},{},{},{}]", w[0], w[1], w[2], w[3], w[4], w[5]),
                   row.error);
      }
      break;
  }
  std::fflush(out_);
}

SweepProgress::SweepProgress(std::size_t total, bool enabled)
    : total_(total), enabled_(enabled && ::isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}

void SweepProgress::advance(std::size_t done) {
  if (!enabled_ || total_ == 0) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - start_ < std::chrono::seconds(1) || now - last_draw_ < std::chrono::milliseconds(100)) return;
  last_draw_ = now;
  shown_ = true;
  constexpr int kWidth = 40;
  const double share = static_cast<double>(done) / static_cast<double>(total_);
  const int filled = static_cast<int>(share * kWidth);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done) / elapsed : 0.0;
  fmt::print(stderr, "\r[{:=<{}}{:<{}}] {}/{} combos, {:.0f}/s", "", filled, "", kWidth - filled, done, total_, rate);
  std::fflush(stderr);
}

void SweepProgress::finish() {
  if (!shown_) return;
  fmt::print(stderr, "\r{:<80}\r", "");
  std::fflush(stderr);
}

}  // namespace ipcfloor
