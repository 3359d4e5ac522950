#include "kernel/live_signal.hpp"

#include <limits>

namespace ipcfloor {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// WMA of the n values ending at `end` (exclusive), in the kernel's order; NaN if short.
double wma_ending(std::span<const double> x, std::size_t n) noexcept {
  if (x.size() < n) return kNaN;
  const double* window = x.data() + (x.size() - n);
  double sum = 0.0;
  for (std::size_t k = 0; k < n; ++k) sum += static_cast<double>(k + 1) * window[k];
  return sum / (static_cast<double>(n * (n + 1)) / 2.0);
}

// The same over a ring buffer holding the newest `filled` values, the newest at `newest`.
double wma_ring(std::span<const double> ring, std::size_t newest, std::size_t filled) noexcept {
  const std::size_t n = ring.size();
  if (filled < n) return kNaN;
  // Oldest first: from just after `newest` to the end, then from the start up to `newest`.
  double sum = 0.0;
  std::size_t k = 1;
  for (std::size_t j = newest + 1; j < n; ++j, ++k) sum += static_cast<double>(k) * ring[j];
  for (std::size_t j = 0; j <= newest; ++j, ++k) sum += static_cast<double>(k) * ring[j];
  return sum / (static_cast<double>(n * (n + 1)) / 2.0);
}

}  // namespace

LiveSignal::LiveSignal(const Combo& combo) : combo_(combo), prev_hma_(kNaN), prev_hma3_(kNaN) {
  owned_.resize(storage_doubles(combo));
  diff_ = std::span<double>(owned_).first(static_cast<std::size_t>(combo.s));
  diff3_ = std::span<double>(owned_).subspan(static_cast<std::size_t>(combo.s));
}

LiveSignal::LiveSignal(const Combo& combo, std::span<double> storage) noexcept
    : combo_(combo),
      diff_(storage.first(static_cast<std::size_t>(combo.s))),
      diff3_(storage.subspan(static_cast<std::size_t>(combo.s), static_cast<std::size_t>(combo.p))),
      prev_hma_(kNaN),
      prev_hma3_(kNaN) {}

BarSignal LiveSignal::on_bar(std::span<const double> history) noexcept {
  const auto w = [](std::int64_t v) { return static_cast<std::size_t>(v); };
  const std::size_t slot_s = bars_ % diff_.size();
  const std::size_t slot_p = bars_ % diff3_.size();
  diff_[slot_s] = 2.0 * wma_ending(history, w(combo_.h)) - wma_ending(history, w(combo_.L));
  diff3_[slot_p] = 3.0 * wma_ending(history, w(combo_.p3)) - wma_ending(history, w(combo_.p2)) -
                   wma_ending(history, w(combo_.p));
  ++bars_;
  // The smoothing WMA needs its whole window of differences, each with its own full window;
  // NaN differences (too early) make it NaN, as in the batch kernel.
  const double hma = wma_ring(diff_, slot_s, bars_);
  const double hma3 = wma_ring(diff3_, slot_p, bars_);
  int cross = 0;
  if (prev_hma3_ <= prev_hma_ && hma3 > hma) cross = 1;
  else if (prev_hma3_ >= prev_hma_ && hma3 < hma) cross = -1;
  prev_hma_ = hma;
  prev_hma3_ = hma3;
  return BarSignal{hma, hma3, cross};
}

LiveBacktest::LiveBacktest(const Combo& combo, double fee, std::span<double> storage) noexcept
    : signal_(combo, storage), fee_(fee) {}

LiveBar LiveBacktest::on_bar(std::span<const double> history) noexcept {
  const BarSignal signal = signal_.on_bar(history);
  const double price = history.back();
  // Stop-and-reverse on crossings, exactly as run_backtest (kernel/kernel.cpp) does it.
  if (signal.cross == 1) {
    if (last_.position == -1) {
      last_.pnl += (entry_ / price - 1.0) * 100.0 - fee_;
      ++last_.trades;
    }
    if (last_.position != 1) {
      last_.position = 1;
      entry_ = price;
    }
  } else if (signal.cross == -1) {
    if (last_.position == 1) {
      last_.pnl += (price / entry_ - 1.0) * 100.0 - fee_;
      ++last_.trades;
    }
    if (last_.position != -1) {
      last_.position = -1;
      entry_ = price;
    }
  }
  last_.signal = signal;
  return last_;
}

}  // namespace ipcfloor
