#pragma once
// One backtest combo: the six HMA/HMA3 window lengths that travel as the 48-byte payload of a
// request frame (6 x little-endian int64, docs/SPEC.md §1).

#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

namespace ipcfloor {

struct Combo {
  std::int64_t h;   // HMA half window
  std::int64_t L;   // HMA full window
  std::int64_t s;   // HMA smoothing window
  std::int64_t p3;  // HMA3 third window
  std::int64_t p2;  // HMA3 half window
  std::int64_t p;   // HMA3 full window, also its smoothing window

  [[nodiscard]] constexpr std::array<std::int64_t, 6> as_array() const noexcept {
    return {h, L, s, p3, p2, p};
  }
  friend constexpr bool operator==(const Combo&, const Combo&) = default;
};

static_assert(std::is_trivially_copyable_v<Combo>, "Combo travels by memcpy in ring slots");
static_assert(sizeof(Combo) == 48, "Combo is the 48-byte wire payload of docs/SPEC.md §1");

// The client-side mapping from a user-facing length L to the six windows (docs/SPEC.md §1):
// round-half-to-even, each window at least 1. Pure; never allocates.
[[nodiscard]] inline Combo combo_from_length(std::int64_t length) noexcept {
  // nearbyint honours the default round-to-nearest-even mode, matching Python's round().
  const auto half_even = [](double x) { return static_cast<std::int64_t>(std::nearbyint(x)); };
  const auto at_least_one = [](std::int64_t v) { return v < 1 ? std::int64_t{1} : v; };
  const double l = static_cast<double>(length);
  const std::int64_t p = at_least_one(half_even(l / 2.0));
  return Combo{
      .h = at_least_one(half_even(l / 2.0)),
      .L = length,
      .s = at_least_one(half_even(std::sqrt(l))),
      .p3 = at_least_one(half_even(static_cast<double>(p) / 3.0)),
      .p2 = at_least_one(half_even(static_cast<double>(p) / 2.0)),
      .p = p,
  };
}

}  // namespace ipcfloor
