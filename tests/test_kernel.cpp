// The HMA/HMA3 kernel: windows, WMA semantics, the event loop, the sweep driver.

#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <random>
#include <vector>

#include "common/checksum.hpp"
#include "data/gbm.hpp"
#include "data/series_source.hpp"
#include "kernel/isa.hpp"
#include "kernel/kernel.hpp"

// Counts heap allocations in this test binary, to prove the hot path makes none.
namespace {
std::atomic<long> g_allocations{0};
}
void* operator new(std::size_t size) {
  // relaxed: a statistic read after the measured call returns on the same thread.
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  // relaxed: as above. std::stable_sort takes its buffer through the nothrow form.
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(size == 0 ? 1 : size);
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

using namespace ipcfloor;

namespace {

// The docs/SPEC.md §1 definition written as plainly as possible, one output at a time.
std::vector<double> plain_wma(const std::vector<double>& x, std::size_t n) {
  std::vector<double> out(x.size(), std::numeric_limits<double>::quiet_NaN());
  const double denom = static_cast<double>(n * (n + 1)) / 2.0;
  for (std::size_t i = n - 1; i < x.size(); ++i) {
    double acc = 0.0;
    for (std::size_t k = 1; k <= n; ++k) acc += static_cast<double>(k) * x[i - n + k];
    out[i] = acc / denom;
  }
  return out;
}

std::vector<double> random_walk(std::size_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> step(0.0, 0.4);
  std::vector<double> x(n);
  double level = 100.0;
  for (double& v : x) {
    level += step(rng);
    v = std::max(level, 1.0);
  }
  return x;
}

struct PlainAverages {
  std::vector<double> hma;
  std::vector<double> hma3;
};

// hma and hma3 of the docs/SPEC.md §1 backtest, written out plainly on top of plain_wma.
PlainAverages plain_averages(const std::vector<double>& close, const Combo& c) {
  const auto w = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  const auto wh = plain_wma(close, w(c.h)), wl = plain_wma(close, w(c.L));
  std::vector<double> diff(close.size());
  for (std::size_t i = 0; i < close.size(); ++i) diff[i] = 2.0 * wh[i] - wl[i];
  PlainAverages averages;
  averages.hma = plain_wma(diff, w(c.s));
  const auto w3 = plain_wma(close, w(c.p3)), w2 = plain_wma(close, w(c.p2)), wp = plain_wma(close, w(c.p));
  for (std::size_t i = 0; i < close.size(); ++i) diff[i] = 3.0 * w3[i] - w2[i] - wp[i];
  averages.hma3 = plain_wma(diff, w(c.p));
  return averages;
}

// The docs/SPEC.md §1 trading loop over given averages.
BacktestResult plain_trades(const std::vector<double>& close, const PlainAverages& averages, double fee) {
  const std::vector<double>& hma = averages.hma;
  const std::vector<double>& hma3 = averages.hma3;
  BacktestResult r;
  int pos = 0;
  double entry = 0.0;
  for (std::size_t i = 1; i < close.size(); ++i) {
    if (hma3[i - 1] <= hma[i - 1] && hma3[i] > hma[i]) {
      if (pos == -1) { r.pnl += (entry / close[i] - 1.0) * 100.0 - fee; ++r.trades; }
      if (pos != 1) { pos = 1; entry = close[i]; }
    } else if (hma3[i - 1] >= hma[i - 1] && hma3[i] < hma[i]) {
      if (pos == 1) { r.pnl += (close[i] / entry - 1.0) * 100.0 - fee; ++r.trades; }
      if (pos != -1) { pos = -1; entry = close[i]; }
    }
  }
  return r;
}

// The docs/SPEC.md §1 backtest, plainly: plain_trades over plain_averages.
BacktestResult plain_backtest(const std::vector<double>& close, const Combo& c, double fee) {
  return plain_trades(close, plain_averages(close, c), fee);
}

bool same_bits_or_both_nan(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

// Runs `body` once on every instruction-set path this CPU supports, then restores the path that
// was active. Paths this CPU lacks cannot run here; the parity gates in ctest name them skipped.
template <class Body>
void on_every_path(Body body) {
  const KernelIsa before = active_kernel_isa();
  for (const KernelIsa isa : supported_kernel_isas()) {
    REQUIRE(set_kernel_isa(isa).has_value());
    CAPTURE(to_string(isa));
    body(isa);
  }
  REQUIRE(set_kernel_isa(before).has_value());
}

}  // namespace

TEST_CASE("combo_from_length builds the SPEC frame, rounding half to even") {
  CHECK(combo_from_length(6) == Combo{3, 6, 2, 1, 2, 3});
  CHECK(combo_from_length(5) == Combo{2, 5, 2, 1, 1, 2});    // 2.5 -> 2, 2.236 -> 2, 2/3 -> 1
  CHECK(combo_from_length(1) == Combo{1, 1, 1, 1, 1, 1});    // round(0.5) = 0, clamped to 1
  CHECK(combo_from_length(200) == Combo{100, 200, 14, 33, 50, 100});
  CHECK(combo_from_length(13) == Combo{6, 13, 4, 2, 3, 6});  // 6.5 -> 6, 3.6 -> 4
}

TEST_CASE("the default grid is round(linspace(6, 200, 80))") {
  const auto grid = grid_lengths(6, 200, 80);
  REQUIRE(grid.size() == 80);
  CHECK(grid[0] == 6);
  CHECK(grid[1] == 8);
  CHECK(grid[2] == 11);
  CHECK(grid[3] == 13);
  CHECK(grid[4] == 16);
  CHECK(grid[78] == 198);
  CHECK(grid[79] == 200);
}

TEST_CASE("WMA weights the newest bar by n and is NaN before the window fills, on every path") {
  on_every_path([](KernelIsa) {
    const std::vector<double> x{1, 2, 3, 4, 5};
    std::vector<double> out(x.size());
    weighted_moving_average(x, 3, out);
    CHECK(std::isnan(out[0]));
    CHECK(std::isnan(out[1]));
    CHECK(out[2] == doctest::Approx((1 * 1 + 2 * 2 + 3 * 3) / 6.0));
    CHECK(out[4] == doctest::Approx((1 * 3 + 2 * 4 + 3 * 5) / 6.0));
  });
}

TEST_CASE("WMA is NaN wherever its window holds a NaN, on every path") {
  on_every_path([](KernelIsa) {
    std::vector<double> x = random_walk(100, 3);
    x[50] = std::numeric_limits<double>::quiet_NaN();
    std::vector<double> out(x.size());
    weighted_moving_average(x, 4, out);
    CHECK(!std::isnan(out[49]));
    for (std::size_t i = 50; i <= 53; ++i) CHECK(std::isnan(out[i]));
    CHECK(!std::isnan(out[54]));
  });
}

TEST_CASE("every path's blocked WMA is bit-identical to the plain definition for every window and length") {
  on_every_path([](KernelIsa) {
    // Lengths around each path's block (16, 32 outputs) so that blocks, tails and windows that
    // leave no full block all run.
    for (std::size_t len : {1u, 2u, 15u, 16u, 17u, 31u, 32u, 33u, 47u, 1'000u}) {
      const auto x = random_walk(len, 11 + static_cast<unsigned>(len));
      std::vector<double> out(x.size());
      for (std::size_t n : {1u, 2u, 3u, 7u, 31u, 32u, 33u, 64u, 199u, 200u, 999u, 1000u}) {
        if (n > len) continue;
        weighted_moving_average(x, n, out);
        const auto expected = plain_wma(x, n);
        std::size_t differing = 0;
        for (std::size_t i = 0; i < x.size(); ++i) differing += same_bits_or_both_nan(out[i], expected[i]) ? 0 : 1;
        CHECK_MESSAGE(differing == 0, "length ", len, " window ", n);
      }
    }
  });
}

TEST_CASE("the kernel equals the plain definition for any six windows, h != p included, on every path") {
  const auto close = random_walk(4'000, 21);
  KernelWorkspace workspace(hma_workspace_bytes(close.size()));
  on_every_path([&](KernelIsa) {
    std::mt19937_64 rng(99);
    std::uniform_int_distribution<std::int64_t> window(1, 90);
    for (int trial = 0; trial < 40; ++trial) {
      const Combo combo{window(rng), window(rng), window(rng), window(rng), window(rng), window(rng)};
      BacktestResult fast;
      REQUIRE(run_backtest(close, combo, kDefaultFee, workspace, fast) == KernelStatus::ok);
      const BacktestResult plain = plain_backtest(close, combo, kDefaultFee);
      CAPTURE(trial);
      CHECK(fast.trades == plain.trades);
      CHECK(fast.pnl == plain.pnl);  // same operations in the same order: same bits
    }
  });
}

TEST_CASE("the crossing walk equals the plain loop at every length and block position, with ties and NaN, on every path") {
  // Prices on a coarse grid make hma and hma3 tie often; short windows make them cross often; a
  // NaN bar leaves a run of NaN averages whose compares are all false. Every length from 2 to 70
  // puts crossings on each lane of a block and in the tail after the last whole block.
  on_every_path([&](KernelIsa) {
    std::mt19937_64 rng(7);
    std::uniform_int_distribution<std::int64_t> window(1, 3);
    std::int64_t trades = 0;
    int tied = 0;
    for (std::size_t bars = 2; bars <= 70; ++bars) {
      for (int variant = 0; variant < 6; ++variant) {
        std::vector<double> close = random_walk(bars, static_cast<unsigned>(bars * 10 + variant));
        for (double& price : close) price = std::round(price * 2.0) / 2.0;
        if (variant == 5 && bars > 4) close[bars / 2] = std::numeric_limits<double>::quiet_NaN();
        const Combo combo{window(rng), window(rng), window(rng), window(rng), window(rng), window(rng)};
        if (!builtin().accepts(combo, bars)) continue;
        KernelWorkspace workspace(hma_workspace_bytes(bars));
        BacktestResult fast;
        REQUIRE(run_backtest(close, combo, kDefaultFee, workspace, fast) == KernelStatus::ok);
        const PlainAverages averages = plain_averages(close, combo);
        const BacktestResult plain = plain_trades(close, averages, kDefaultFee);
        CAPTURE(bars);
        CAPTURE(variant);
        CHECK(fast.trades == plain.trades);
        CHECK(same_bits_or_both_nan(fast.pnl, plain.pnl));
        trades += plain.trades;
        for (std::size_t i = 0; i < bars; ++i) tied += averages.hma[i] == averages.hma3[i];
      }
    }
    // The cases must cross and tie often, or they would not test the walk.
    CHECK(trades > 1000);
    CHECK(tied > 500);
  });
}

TEST_CASE("IPCFLOOR_ISA forces a path, and an unknown name is refused naming what this CPU supports") {
  const KernelIsa before = active_kernel_isa();
  for (const KernelIsa isa : supported_kernel_isas()) {
    REQUIRE(::setenv("IPCFLOOR_ISA", std::string(to_string(isa)).c_str(), 1) == 0);
    const auto selected = select_kernel_isa();
    REQUIRE(selected.has_value());
    CHECK(*selected == isa);
    CHECK(active_kernel_isa() == isa);
  }
  REQUIRE(::setenv("IPCFLOOR_ISA", "avx1024", 1) == 0);
  const auto refused = select_kernel_isa();
  REQUIRE_FALSE(refused.has_value());
  CHECK(refused.error().code == ErrorCode::invalid_argument);
  CHECK(refused.error().message.find("avx1024") != std::string::npos);
  CHECK(refused.error().message.find("scalar") != std::string::npos);
  for (const KernelIsa isa : {KernelIsa::avx512, KernelIsa::avx2}) {
    if (cpu_supports(isa)) continue;
    const auto lacking = set_kernel_isa(isa);
    REQUIRE_FALSE(lacking.has_value());
    CHECK(lacking.error().message.find("cannot run") != std::string::npos);
  }
  REQUIRE(::unsetenv("IPCFLOOR_ISA") == 0);
  const auto best = select_kernel_isa();
  REQUIRE(best.has_value());
  CHECK(*best == supported_kernel_isas().front());
  CHECK(cpu_supports(KernelIsa::scalar));
  REQUIRE(set_kernel_isa(before).has_value());
}

TEST_CASE("rejects a window below 1 or above the number of bars") {
  const auto close = random_walk(100, 5);
  KernelWorkspace workspace(hma_workspace_bytes(close.size()));
  BacktestResult out{1.5, 7};
  CHECK(run_backtest(close, Combo{0, 6, 2, 1, 2, 3}, kDefaultFee, workspace, out) ==
        KernelStatus::window_out_of_range);
  CHECK(run_backtest(close, Combo{3, 101, 2, 1, 2, 3}, kDefaultFee, workspace, out) ==
        KernelStatus::window_out_of_range);
  CHECK(run_backtest(close, Combo{3, 6, 2, 1, 2, -4}, kDefaultFee, workspace, out) ==
        KernelStatus::window_out_of_range);
  CHECK(out == BacktestResult{1.5, 7});  // untouched on error
  CHECK(run_backtest(close, Combo{3, 100, 2, 1, 2, 100}, kDefaultFee, workspace, out) == KernelStatus::ok);
}

TEST_CASE("rejects a series shorter than two bars and a workspace too small") {
  KernelWorkspace small(hma_workspace_bytes(10));
  BacktestResult out;
  const std::vector<double> one{100.0};
  CHECK(run_backtest(one, Combo{1, 1, 1, 1, 1, 1}, kDefaultFee, small, out) == KernelStatus::too_few_bars);
  const auto close = random_walk(50, 1);
  CHECK(run_backtest(close, Combo{1, 1, 1, 1, 1, 1}, kDefaultFee, small, out) ==
        KernelStatus::workspace_too_small);
}

TEST_CASE("a window as long as the series yields no trades and no error") {
  const auto close = random_walk(40, 2);
  KernelWorkspace workspace(hma_workspace_bytes(close.size()));
  BacktestResult out{9.0, 9};
  REQUIRE(run_backtest(close, Combo{20, 40, 6, 7, 10, 40}, kDefaultFee, workspace, out) == KernelStatus::ok);
  CHECK(out == BacktestResult{0.0, 0});
}

TEST_CASE("each closed round trip is charged the fee once") {
  const auto close = random_walk(5'000, 8);
  KernelWorkspace workspace(hma_workspace_bytes(close.size()));
  BacktestResult free{}, charged{};
  REQUIRE(run_backtest(close, combo_from_length(10), 0.0, workspace, free) == KernelStatus::ok);
  REQUIRE(run_backtest(close, combo_from_length(10), 0.25, workspace, charged) == KernelStatus::ok);
  REQUIRE(free.trades > 10);
  CHECK(charged.trades == free.trades);
  CHECK(charged.pnl == doctest::Approx(free.pnl - 0.25 * static_cast<double>(free.trades)).epsilon(1e-12));
}

TEST_CASE("a backtest makes no heap allocation once the workspace exists") {
  const auto close = random_walk(20'000, 4);
  KernelWorkspace workspace(hma_workspace_bytes(close.size()));
  BacktestResult out;
  // relaxed: same thread; see operator new above.
  const long before = g_allocations.load(std::memory_order_relaxed);
  for (std::int64_t length : {6, 50, 200})
    REQUIRE(run_backtest(close, combo_from_length(length), kDefaultFee, workspace, out) == KernelStatus::ok);
  CHECK(g_allocations.load(std::memory_order_relaxed) == before);  // relaxed: same thread
}

TEST_CASE("the sweep gives the same results on one thread and on many, in combo order") {
  const auto close = random_walk(30'000, 6);
  std::vector<Combo> combos;
  for (const auto length : grid_lengths(6, 120, 17)) combos.push_back(combo_from_length(length));
  const auto one = run_sweep(builtin(), close, combos, kDefaultFee, 1);
  const auto many = run_sweep(builtin(), close, combos, kDefaultFee, 3);
  REQUIRE(one.has_value());
  REQUIRE(many.has_value());
  CHECK(*one == *many);
  KernelWorkspace workspace(hma_workspace_bytes(close.size()));
  BacktestResult single;
  REQUIRE(run_backtest(close, combos[5], kDefaultFee, workspace, single) == KernelStatus::ok);
  CHECK((*many)[5] == single);
}

TEST_CASE("the sweep names the first combo with a bad window") {
  const auto close = random_walk(100, 6);
  const std::vector<Combo> combos{combo_from_length(6), Combo{3, 500, 2, 1, 2, 3}};
  const auto result = run_sweep(builtin(), close, combos, kDefaultFee, 1);
  REQUIRE(!result.has_value());
  CHECK(result.error().code == ErrorCode::invalid_argument);
  CHECK(result.error().message.find("combo 1") != std::string::npos);
  CHECK(result.error().message.find("500") != std::string::npos);
  CHECK(result.error().message.find("[1, 100]") != std::string::npos);
}

TEST_CASE("L=6 on the embedded default data gives the published fingerprint on every path") {
  auto series = load_series_source(SeriesSource{});
  REQUIRE(series.has_value());
  CHECK(series->is_default);
  CHECK(fnv1a64(std::as_bytes(std::span<const double>(series->close))) == kDefaultSeriesChecksum);
  KernelWorkspace workspace(hma_workspace_bytes(series->close.size()));
  on_every_path([&](KernelIsa) {
    BacktestResult out;
    REQUIRE(run_backtest(series->close, combo_from_length(6), kDefaultFee, workspace, out) == KernelStatus::ok);
    CHECK(out.trades == kFingerprintTrades);
    CHECK(out.pnl == kFingerprintPnl);
  });
}
