#pragma once
// The progress bar on stderr for sweeps that take a while. The rows themselves are written by
// data/sweep_rows.hpp, which every way of running a sweep shares.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>


namespace ipcfloor {

// A progress bar on stderr that appears only once a sweep has run for a second, and only when
// stderr is a terminal and the user did not ask for quiet.
class SweepProgress {
 public:
  // `unit` names what is counted ("combos", "pairs").
  SweepProgress(std::size_t total, bool enabled, std::string unit = "combos");
  void advance(std::size_t done);
  void finish();

 private:
  std::size_t total_;
  bool enabled_;
  std::string unit_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_{};
};

}  // namespace ipcfloor
