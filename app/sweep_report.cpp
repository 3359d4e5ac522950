#include "app/sweep_report.hpp"

#include <unistd.h>

#include <utility>

#include <fmt/format.h>

namespace ipcfloor {

SweepProgress::SweepProgress(std::size_t total, bool enabled, std::string unit)
    : total_(total),
      enabled_(enabled && ::isatty(STDERR_FILENO) == 1),
      unit_(std::move(unit)),
      start_(std::chrono::steady_clock::now()) {}

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
  const double left = rate > 0 && done < total_ ? static_cast<double>(total_ - done) / rate : 0.0;
  fmt::print(stderr, "\r[{:=<{}}{:<{}}] {}/{} {}, {:.0f}/s, ETA {}:{:02}  ", "", filled, "", kWidth - filled, done,
             total_, unit_, rate, static_cast<long>(left) / 60, static_cast<long>(left) % 60);
  std::fflush(stderr);
}

void SweepProgress::finish() {
  if (!shown_) return;
  fmt::print(stderr, "\r{:<80}\r", "");
  std::fflush(stderr);
}

}  // namespace ipcfloor
