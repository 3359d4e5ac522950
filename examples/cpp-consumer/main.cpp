// Attaches to a running ipcfloor engine, reads its series in place, then streams a grid of
// lengths through it: one backtest per combo as they come, printed as `ipcfloor sweep --json`
// prints them, and the same grid once more pipelined (sweep) to check both agree. Then the
// statistics of every combo on the second half of the series (a Request's bar range), and the
// first combo's trade list there, whose pnl sums to its statistics' (on stderr).
//
//   cpp_consumer ENGINE_NAME L1,L2,...

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <ipcfloor/client.hpp>

namespace {

std::vector<std::int64_t> parse_lengths(std::string_view text) {
  std::vector<std::int64_t> lengths;
  while (!text.empty()) {
    const auto comma = text.find(',');
    const std::string item(text.substr(0, comma));
    char* end = nullptr;
    const long long value = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || value < 1) return {};
    lengths.push_back(value);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  return lengths;
}

// The combos' statistics on the bars [n/2, n), and the first one's trade list there.
int second_half(ipcfloor::Client& engine, const std::vector<ipcfloor::Params>& grid,
                const std::vector<std::int64_t>& lengths) {
  ipcfloor::Request half;
  half.from_bar = engine.bars() / 2;
  half.to_bar = engine.bars();
  std::vector<ipcfloor::Stats> stats(grid.size());
  std::vector<ipcfloor::Reason> reasons(grid.size());
  engine.sweep(grid, stats, half, {}, reasons);
  for (std::size_t i = 0; i < grid.size(); ++i) {
    const ipcfloor::Stats& s = stats[i];
    if (reasons[i][0] != '\0') {
      std::fprintf(stderr, "L=%lld on bars [%llu, %llu): refused: %s\n", static_cast<long long>(lengths[i]),
                   static_cast<unsigned long long>(half.from_bar), static_cast<unsigned long long>(half.to_bar),
                   reasons[i].data());
      continue;
    }
    std::fprintf(stderr, "L=%lld on bars [%llu, %llu): pnl %.6g, %lld trades, win rate %.3g, max drawdown %.4g, "
                 "sharpe %.4g\n", static_cast<long long>(lengths[i]), static_cast<unsigned long long>(half.from_bar),
                 static_cast<unsigned long long>(half.to_bar), s.pnl, static_cast<long long>(s.trades), s.win_rate,
                 s.max_drawdown, s.sharpe);
  }
  const ipcfloor::TradeList full = engine.trades(grid[0], half);
  double summed = 0.0;
  for (const ipcfloor::Trade& trade : full.trades) summed += trade.pnl;
  if (std::memcmp(&summed, &full.stats.pnl, sizeof summed) != 0 || full.equity.size() != half.to_bar - half.from_bar) {
    std::fprintf(stderr, "L=%lld: the trade list does not add up to its statistics\n",
                 static_cast<long long>(lengths[0]));
    return 1;
  }
  std::fprintf(stderr, "L=%lld: %zu trades summing to its pnl bit for bit, equity over %zu bars\n",
               static_cast<long long>(lengths[0]), full.trades.size(), full.equity.size());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto lengths = argc == 3 ? parse_lengths(argv[2]) : std::vector<std::int64_t>{};
  if (lengths.empty()) {
    std::fprintf(stderr, "usage: %s ENGINE_NAME L1,L2,... (whole lengths >= 1)\n", argv[0]);
    return 2;
  }
  try {
    auto engine = ipcfloor::Client::attach(argv[1]);
    const auto close = engine.series();
    const auto [low, high] = std::minmax_element(close.begin(), close.end());
    std::fprintf(stderr, "engine %.*s (pid %d), lane %u: series %.*s, %zu bars, checksum %016llx, fee %g\n",
                 static_cast<int>(engine.engine_name().size()), engine.engine_name().data(), engine.engine_pid(),
                 engine.lane(), static_cast<int>(engine.series_name().size()), engine.series_name().data(),
                 close.size(), static_cast<unsigned long long>(engine.series_checksum()), engine.fee());
    std::fprintf(stderr, "series: min %.17g max %.17g last %.17g\n", *low, *high, close.back());
    try {  // the round trips are shortest from the cpus the engine published as nearest its serving one
      const std::int32_t cpu = engine.pin_near();
      std::fprintf(stderr, "on cpu %d, next to the engine's serving cpu %d\n", cpu, engine.serving_cpu());
    } catch (const ipcfloor::ClientError& error) {
      std::fprintf(stderr, "not pinned: %s\n", error.what());
    }

    std::vector<ipcfloor::Params> grid;
    for (const auto length : lengths) grid.push_back(ipcfloor::params_from_length(length));
    std::vector<ipcfloor::Result> streamed;
    for (std::size_t i = 0; i < grid.size(); ++i) {
      const ipcfloor::Result r = engine.backtest(grid[i]);
      const auto& w = grid[i];
      std::printf("{\"L\":%lld,\"params\":[%lld,%lld,%lld,%lld,%lld,%lld],\"pnl\":%.17g,\"trades\":%lld}\n",
                  static_cast<long long>(lengths[i]), static_cast<long long>(w[0]), static_cast<long long>(w[1]),
                  static_cast<long long>(w[2]), static_cast<long long>(w[3]), static_cast<long long>(w[4]),
                  static_cast<long long>(w[5]), r.pnl, static_cast<long long>(r.trades));
      streamed.push_back(r);
    }
    std::vector<ipcfloor::Result> pipelined(grid.size());
    if (engine.sweep(grid, pipelined) != 0) {
      std::fprintf(stderr, "the pipelined sweep refused a combo the stream took\n");
      return 1;
    }
    for (std::size_t i = 0; i < grid.size(); ++i) {
      if (std::memcmp(&pipelined[i].pnl, &streamed[i].pnl, sizeof(double)) != 0 ||
          pipelined[i].trades != streamed[i].trades) {
        std::fprintf(stderr, "L=%lld: the pipelined sweep disagrees with the stream\n",
                     static_cast<long long>(lengths[i]));
        return 1;
      }
    }
    std::fprintf(stderr, "%zu combos streamed, and the pipelined sweep agrees bit for bit\n", grid.size());
    return second_half(engine, grid, lengths);
  } catch (const ipcfloor::ClientError& error) {
    std::fprintf(stderr, "%s (%s)\n", error.what(), ipcfloor_strerror(error.code()));
    return 1;
  }
  return 0;
}
