#include "data/numpy_random.hpp"

#include <cmath>

#include "data/ziggurat_tables.hpp"

namespace ipcfloor {
namespace {

// SeedSequence's hashing constants (numpy/random/bit_generator.pyx, after O'Neill's
// seed_seq_fe). All arithmetic is modulo 2^32.
constexpr std::uint32_t kInitA = 0x43b0d7e5U;
constexpr std::uint32_t kMultA = 0x931e8875U;
constexpr std::uint32_t kInitB = 0x8b51f9ddU;
constexpr std::uint32_t kMultB = 0x58f38dedU;
constexpr std::uint32_t kMixMultL = 0xca01f9ddU;
constexpr std::uint32_t kMixMultR = 0x4973f715U;
constexpr unsigned kXShift = 16;  // half the word size

// Hashes one word with a multiplier that evolves on every call, so equal words fed at
// different positions hash differently.
class HashMix {
 public:
  std::uint32_t operator()(std::uint32_t value) noexcept {
    value ^= hash_const_;
    hash_const_ *= kMultA;
    value *= hash_const_;
    value ^= value >> kXShift;
    return value;
  }

 private:
  std::uint32_t hash_const_ = kInitA;
};

std::uint32_t mix(std::uint32_t x, std::uint32_t y) noexcept {
  std::uint32_t result = kMixMultL * x - kMixMultR * y;
  result ^= result >> kXShift;
  return result;
}

}  // namespace

SeedSequence::SeedSequence(std::uint64_t seed) noexcept {
  // Python's int -> uint32 array: little-endian words, at least one, no leading zero word.
  const std::array<std::uint32_t, 2> words = {static_cast<std::uint32_t>(seed),
                                              static_cast<std::uint32_t>(seed >> 32)};
  *this = SeedSequence(std::span<const std::uint32_t>(words.data(), (seed >> 32) != 0 ? 2 : 1));
}

SeedSequence::SeedSequence(std::span<const std::uint32_t> entropy) noexcept {
  HashMix hashmix;
  for (std::size_t i = 0; i < kPoolSize; ++i) {
    pool_[i] = hashmix(i < entropy.size() ? entropy[i] : 0U);
  }
  // Every pool word is stirred into every other one, so each depends on all the entropy.
  for (std::size_t src = 0; src < kPoolSize; ++src) {
    for (std::size_t dst = 0; dst < kPoolSize; ++dst) {
      if (src != dst) {
        pool_[dst] = mix(pool_[dst], hashmix(pool_[src]));
      }
    }
  }
  for (std::size_t src = kPoolSize; src < entropy.size(); ++src) {
    for (std::size_t dst = 0; dst < kPoolSize; ++dst) {
      pool_[dst] = mix(pool_[dst], hashmix(entropy[src]));
    }
  }
}

void SeedSequence::generate_state(std::span<std::uint32_t> out) const noexcept {
  std::uint32_t hash_const = kInitB;
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint32_t value = pool_[i % kPoolSize];
    value ^= hash_const;
    hash_const *= kMultB;
    value *= hash_const;
    value ^= value >> kXShift;
    out[i] = value;
  }
}

void SeedSequence::generate_state(std::span<std::uint64_t> out) const noexcept {
  // numpy draws 2n uint32 words and reinterprets them, so one 32-bit stream feeds both halves.
  std::uint32_t hash_const = kInitB;
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::array<std::uint32_t, 2> halves{};
    for (std::size_t h = 0; h < 2; ++h) {
      std::uint32_t value = pool_[(2 * i + h) % kPoolSize];
      value ^= hash_const;
      hash_const *= kMultB;
      value *= hash_const;
      value ^= value >> kXShift;
      halves[h] = value;
    }
    out[i] = (static_cast<std::uint64_t>(halves[1]) << 32) | halves[0];
  }
}

Pcg64::Pcg64(Uint128 initstate, Uint128 initseq) noexcept : state_(0), inc_((initseq << 1) | 1) {
  next_uint64();
  state_ += initstate;
  next_uint64();
}

Pcg64::Pcg64(std::uint64_t seed) noexcept {
  std::array<std::uint64_t, 4> words{};
  SeedSequence(seed).generate_state(std::span<std::uint64_t>(words));
  *this = Pcg64((static_cast<Uint128>(words[0]) << 64) | words[1],
                (static_cast<Uint128>(words[2]) << 64) | words[3]);
}

void Pcg64::advance(Uint128 delta) noexcept {
  // Composes the affine step s -> a*s + c with itself by repeated squaring (Brown, 1994).
  Uint128 acc_mult = 1;
  Uint128 acc_plus = 0;
  Uint128 cur_mult = kMultiplier;
  Uint128 cur_plus = inc_;
  while (delta != 0) {
    if ((delta & 1) != 0) {
      acc_mult *= cur_mult;
      acc_plus = acc_plus * cur_mult + cur_plus;
    }
    cur_plus = (cur_mult + 1) * cur_plus;
    cur_mult *= cur_mult;
    delta >>= 1;
  }
  state_ = acc_mult * state_ + acc_plus;
}

double standard_normal(Pcg64& rng) noexcept {
  using namespace ziggurat;
  for (;;) {
    // One word: 8 bits pick the layer, 1 bit the sign, 52 bits the magnitude.
    std::uint64_t bits = rng.next_uint64();
    const auto idx = static_cast<std::size_t>(bits & 0xffU);
    bits >>= 8;
    const bool negative = (bits & 1U) != 0;
    const std::uint64_t rabs = (bits >> 1) & 0x000fffffffffffffULL;
    double x = static_cast<double>(rabs) * kNormalWi[idx];
    if (negative) {
      x = -x;
    }
    if (rabs < kNormalKi[idx]) {
      return x;
    }
    if (idx == 0) {
      // Marsaglia's tail method beyond r. numpy uses log1p(-u), i.e. log(1 - u), so u = 0
      // never reaches log(0); the order of the two uniform draws matters for the stream.
      for (;;) {
        const double xx = -kNormalInvR * std::log1p(-rng.next_double());
        const double yy = -std::log1p(-rng.next_double());
        if (yy + yy > xx * xx) {
          return ((rabs >> 8) & 1U) != 0 ? -(kNormalR + xx) : kNormalR + xx;
        }
      }
    }
    // The wedge between the layer's rectangle and the density: accept under the curve.
    const double u = rng.next_double();
    if ((kNormalFi[idx - 1] - kNormalFi[idx]) * u + kNormalFi[idx] < std::exp(-0.5 * x * x)) {
      return x;
    }
  }
}

}  // namespace ipcfloor
