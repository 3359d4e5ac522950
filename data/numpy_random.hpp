#pragma once
// numpy's `numpy.random.default_rng(seed)` and its `standard_normal`, reproduced bit for bit
// without Python (docs/SPEC.md §1, the default data set): SeedSequence seeding, the PCG64 bit
// generator (128-bit LCG, XSL-RR output) and the 256-layer ziggurat normal sampler.
//
// Everything here is deterministic, allocation-free and noexcept. The types are plain values:
// one object may be used by one thread at a time; distinct objects are independent.

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace ipcfloor {

// The 128-bit unsigned integer PCG64 needs; __extension__ keeps -Wpedantic quiet about it.
__extension__ using Uint128 = unsigned __int128;

// numpy.random.SeedSequence restricted to what default_rng(seed) uses: entropy given as
// 32-bit words (no spawn key), the 4-word pool, and generate_state().
class SeedSequence {
 public:
  // SeedSequence(seed) for a non-negative Python int below 2^64: the entropy is the seed's
  // little-endian 32-bit words, one word for seeds below 2^32 (including 0), else two.
  explicit SeedSequence(std::uint64_t seed) noexcept;

  // SeedSequence(entropy) for an entropy array of 32-bit words (numpy's uint32 coercion).
  explicit SeedSequence(std::span<const std::uint32_t> entropy) noexcept;

  // generate_state(out.size(), np.uint32).
  void generate_state(std::span<std::uint32_t> out) const noexcept;

  // generate_state(out.size(), np.uint64): each 64-bit word is two consecutive 32-bit words,
  // the first one low, as numpy's little-endian view of the uint32 state makes it.
  void generate_state(std::span<std::uint64_t> out) const noexcept;

  static constexpr std::size_t kPoolSize = 4;

 private:
  std::array<std::uint32_t, kPoolSize> pool_{};
};

// numpy.random.PCG64: a 128-bit LCG whose increment selects the stream, with the XSL-RR
// 128->64 output function applied to the state *after* each step.
class Pcg64 {
 public:
  // PCG64(seed), hence default_rng(seed).bit_generator: SeedSequence(seed).generate_state(4,
  // np.uint64) gives words w0..w3; initstate = w0:w1 and initseq = w2:w3 (high word first).
  explicit Pcg64(std::uint64_t seed) noexcept;

  // numpy's pcg64_set_seed(initstate, initseq): state 0, inc = 2*initseq + 1, step,
  // add initstate, step.
  Pcg64(Uint128 initstate, Uint128 initseq) noexcept;

  // The next raw 64-bit output; equals PCG64(seed).random_raw() in sequence.
  std::uint64_t next_uint64() noexcept {
    state_ = state_ * kMultiplier + inc_;
    const auto folded =
        static_cast<std::uint64_t>(state_ >> 64) ^ static_cast<std::uint64_t>(state_);
    const auto rotation = static_cast<unsigned>(state_ >> 122);
    return (folded >> rotation) | (folded << ((64U - rotation) & 63U));
  }

  // A double in [0, 1) from the top 53 bits of one next_uint64(), as numpy's next_double.
  double next_double() noexcept {
    return static_cast<double>(next_uint64() >> 11) * (1.0 / 9007199254740992.0);
  }

  // Jumps ahead by `delta` outputs in O(log delta), as PCG64.advance(delta) for delta < 2^128.
  void advance(Uint128 delta) noexcept;

  // The raw LCG state and increment (numpy's state["state"]["state"] and ["inc"]).
  Uint128 state() const noexcept { return state_; }
  Uint128 increment() const noexcept { return inc_; }

  // PCG's default 128-bit multiplier, 2549297995355413924 * 2^64 + 4865540595714422341.
  static constexpr Uint128 kMultiplier =
      (static_cast<Uint128>(0x2360ED051FC65DA4ULL) << 64) | 0x4385DF649FCCF645ULL;

 private:
  Uint128 state_ = 0;
  Uint128 inc_ = 1;
};

// One draw of Generator.standard_normal() from `rng`: numpy's 256-layer ziggurat. Consumes
// one next_uint64() in about 99.3% of calls; the rejection and tail branches consume more,
// exactly as numpy does, so the stream stays aligned with numpy's draw for draw.
double standard_normal(Pcg64& rng) noexcept;

}  // namespace ipcfloor
