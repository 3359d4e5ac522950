#pragma once
// The user-facing side of a sweep: its rows streamed as they come, as a table a person reads,
// JSON lines (the contract scripts depend on, docs/SPEC.md §6) or CSV, and a progress bar on
// stderr for sweeps that take a while.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "common/backtest_result.hpp"
#include "common/combo.hpp"

namespace ipcfloor {

struct SweepRow {
  std::int64_t length = 0;  // the user-facing L the combo was built from (its L window otherwise)
  Combo params{};
  BacktestResult result{};
  std::string error;        // empty when the combo ran; otherwise its status and why
};

enum class SweepFormat : std::uint8_t { table, json, csv };

// Writes rows one by one, flushing each line, so a long sweep streams.
class SweepWriter {
 public:
  SweepWriter(std::FILE* out, SweepFormat format) noexcept : out_(out), format_(format) {}
  // The table's or CSV's header line (nothing for JSON lines).
  void header();
  // JSON: {"L":6,"params":[3,6,2,1,2,3],"pnl":-5165.577039790348,"trades":57029} (pnl with 17
  // significant digits); a failed row {"L":..,"params":[..],"error":"..."}. CSV:
  // length,h,L,s,p3,p2,p,pnl,trades,error.
  void row(const SweepRow& row);

 private:
  std::FILE* out_;
  SweepFormat format_;
};

// A progress bar on stderr that appears only once a sweep has run for a second, and only when
// stderr is a terminal and the user did not ask for quiet.
class SweepProgress {
 public:
  SweepProgress(std::size_t total, bool enabled);
  void advance(std::size_t done);
  void finish();

 private:
  std::size_t total_;
  bool enabled_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace ipcfloor
