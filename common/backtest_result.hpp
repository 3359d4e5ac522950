#pragma once
// What one backtest answers, whichever way it travelled: in process, through the segment or over
// a socket. Plain data, shared by the kernel, the socket codec and every client.

#include <cstdint>

namespace ipcfloor {

inline constexpr double kDefaultFee = 0.09;  // percentage points per round trip

struct BacktestResult {
  double pnl = 0.0;          // sum of closed round trips, percentage points, net of fees
  std::int64_t trades = 0;   // closed round trips; a position open at the end is not counted
  friend bool operator==(const BacktestResult&, const BacktestResult&) = default;
};

}  // namespace ipcfloor
