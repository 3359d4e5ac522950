// numpy's default_rng reproduced: every expected value below was printed once by numpy 1.24
// (Debian 12's python3-numpy) and is compared bit for bit.

#include <doctest/doctest.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "data/numpy_random.hpp"
#include "data/ziggurat_tables.hpp"

namespace {

using ipcfloor::Pcg64;
using ipcfloor::SeedSequence;
using ipcfloor::Uint128;

constexpr Uint128 make_u128(std::uint64_t high, std::uint64_t low) {
  return (static_cast<Uint128>(high) << 64) | low;
}

// How many next_uint64() calls one standard_normal() made, found by stepping a copy of the
// generator until it reaches the same state (PCG64's period makes a false match impossible).
int words_consumed(Pcg64& rng, double& out) {
  Pcg64 shadow = rng;
  out = ipcfloor::standard_normal(rng);
  int words = 0;
  while (shadow.state() != rng.state() && words < 1000) {
    shadow.next_uint64();
    ++words;
  }
  return words;
}

}  // namespace

TEST_CASE("SeedSequence(42).generate_state matches numpy for uint32 and uint64 words") {
  const SeedSequence seq(42);
  std::array<std::uint32_t, 6> words32{};
  seq.generate_state(std::span<std::uint32_t>(words32));
  const std::array<std::uint32_t, 6> expected32 = {0xcd540ab7, 0x9f1e2e6d, 0x79fb94b6,
                                                   0xd57873dc, 0x64d420b7, 0x7d282a1b};
  CHECK(words32 == expected32);

  std::array<std::uint64_t, 4> words64{};
  seq.generate_state(std::span<std::uint64_t>(words64));
  const std::array<std::uint64_t, 4> expected64 = {0x9f1e2e6dcd540ab7, 0xd57873dc79fb94b6,
                                                   0x7d282a1b64d420b7, 0x336579714692d5ff};
  CHECK(words64 == expected64);
}

TEST_CASE("SeedSequence handles seed 0, a two-word seed and entropy longer than its pool") {
  std::array<std::uint64_t, 2> zero{};
  SeedSequence(0).generate_state(std::span<std::uint64_t>(zero));
  CHECK(zero == std::array<std::uint64_t, 2>{0xdb2cd7e7b0f478be, 0xabf4641a2c71ba49});

  std::array<std::uint64_t, 2> big{};
  SeedSequence((std::uint64_t{1} << 63) + 5).generate_state(std::span<std::uint64_t>(big));
  CHECK(big == std::array<std::uint64_t, 2>{0x7deda5d2fb140929, 0xf318c464aba74dc6});

  // SeedSequence([1, 2, 3, 4, 5, 6]).generate_state(5, np.uint32)
  const std::array<std::uint32_t, 6> entropy = {1, 2, 3, 4, 5, 6};
  std::array<std::uint32_t, 5> words{};
  SeedSequence(std::span<const std::uint32_t>(entropy)).generate_state(std::span<std::uint32_t>(words));
  CHECK(words == std::array<std::uint32_t, 5>{0x1d1bca21, 0xebcd001d, 0xb202608b, 0xcfea83a4,
                                              0xe4fcf5b6});
}

TEST_CASE("PCG64 seeded with 42 has numpy's state and increment") {
  const Pcg64 rng(42);
  CHECK(rng.state() == make_u128(0xcea44f6798798f2a, 0xacbc7c9d68860ac8));
  CHECK(rng.increment() == make_u128(0xfa505436c9a8416e, 0x66caf2e28d25abff));
}

TEST_CASE("PCG64 seeded with 42 yields numpy's first uint64 draws") {
  Pcg64 rng(42);
  for (const std::uint64_t expected : {0xc621fbcd16d92688ULL, 0x705a5661a791ffc1ULL,
                                       0xdbcd12c26eda1624ULL, 0xb286b60e1600888dULL,
                                       0x181c01b5339381ebULL}) {
    CHECK(rng.next_uint64() == expected);
  }
}

TEST_CASE("PCG64 seeded with 0 yields numpy's first uint64 draws") {
  Pcg64 rng(0);
  for (const std::uint64_t expected : {0xa30febcfd9c2825fULL, 0x4510bdf882d9d721ULL,
                                       0x0a7d3da94ecde8b8ULL, 0x043b27b61342f01dULL,
                                       0xd0327a782cde513bULL}) {
    CHECK(rng.next_uint64() == expected);
  }
}

TEST_CASE("PCG64 seeded with 2^63+5 (a two-word seed) yields numpy's first uint64 draws") {
  Pcg64 rng((std::uint64_t{1} << 63) + 5);
  for (const std::uint64_t expected : {0x7af08e89d1f1456dULL, 0xe777e80c301c2fd6ULL,
                                       0xa44875755450c1c0ULL, 0x0ff81ef497d16368ULL,
                                       0x2befa4de3ad25e6fULL}) {
    CHECK(rng.next_uint64() == expected);
  }
}

TEST_CASE("PCG64.advance jumps like numpy's advance and like stepping one by one") {
  Pcg64 jumped(42);
  jumped.advance(1000);
  Pcg64 stepped(42);
  for (int i = 0; i < 1000; ++i) {
    stepped.next_uint64();
  }
  CHECK(jumped.state() == stepped.state());
  CHECK(jumped.next_uint64() == 0x0fe35e24e0cd297aULL);

  Pcg64 far(42);
  far.advance((static_cast<Uint128>(1) << 100) + 3);
  CHECK(far.next_uint64() == 0xab39cc46d9435b44ULL);

  Pcg64 still(42);
  still.advance(0);
  CHECK(still.state() == Pcg64(42).state());
}

TEST_CASE("next_double matches numpy's Generator.random for seed 42") {
  Pcg64 rng(42);
  for (const double expected : {0x1.8c43f79a2db24p-1, 0x1.c16959869e47ep-2, 0x1.b79a2584ddb42p-1,
                                0x1.650d6c1c2c011p-1, 0x1.81c01b5339380p-4}) {
    CHECK(rng.next_double() == expected);
  }
}

TEST_CASE("standard_normal seeded with 42 yields numpy's first 20 draws bit for bit") {
  const std::array<double, 20> expected = {
      0x1.3807c1104fc6bp-2,  -0x1.0a3c65fca9a7ep+0, 0x1.803b239e77350p-1,  0x1.e191b2d157f36p-1,
      -0x1.f3770ac89d08fp+0, -0x1.4d5ba2db7ebc8p+0, 0x1.05d13075b0043p-3,  -0x1.43d5191edf2d2p-2,
      -0x1.1345298103f02p-6, -0x1.b4c22c75f5b7fp-1, 0x1.c240738c68b17p-1,  0x1.8e3abe9b850e9p-1,
      0x1.0e763468eb7a8p-4,  0x1.2092e136a19adp+0,  0x1.debac4de30229p-2,  -0x1.b7f52e8390cb7p-1,
      0x1.7999ce3808e60p-2,  -0x1.eaf2a90687277p-1, 0x1.c1c43ce68d5a9p-1,  -0x1.98fe395d163a3p-5};
  Pcg64 rng(42);
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(i);
    CHECK(ipcfloor::standard_normal(rng) == expected[i]);
  }
}

TEST_CASE("a million standard normals match numpy's, through the tail and rejection branches") {
  // numpy: default_rng(42).standard_normal(1_000_000). The FNV-1a hash covers every draw's bit
  // pattern, the sum is sequential, and `consumed` is the number of raw words numpy's
  // generator had used afterwards (its next raw word then is 0xe98de1a0c32899f3).
  constexpr int kDraws = 1'000'000;
  Pcg64 rng(42);
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  double sum = 0.0;
  double lowest = 0.0;
  double highest = 0.0;
  int words = 0;
  int tail_draws = 0;   // |z| > r: only the tail branch returns those
  int wedge_draws = 0;  // two words: one rejection (wedge) test that accepted
  for (int i = 0; i < kDraws; ++i) {
    double z = 0.0;
    const int used = words_consumed(rng, z);
    words += used;
    if (std::fabs(z) > ipcfloor::ziggurat::kNormalR) {
      ++tail_draws;
    }
    if (used == 2) {
      ++wedge_draws;
    }
    hash ^= std::bit_cast<std::uint64_t>(z);
    hash *= 0x100000001b3ULL;
    sum += z;
    lowest = std::fmin(lowest, z);
    highest = std::fmax(highest, z);
  }
  CHECK(hash == 0xfb0cae997b963804ULL);
  CHECK(sum == 0x1.86028eced00bfp+6);  // 97.50249789376083
  CHECK(lowest == -0x1.3b68425f7717bp+2);
  CHECK(highest == 0x1.40768ac31b664p+2);
  CHECK(words == 1'021'962);
  CHECK(rng.next_uint64() == 0xe98de1a0c32899f3ULL);
  // Counts from a draw-by-draw Python replay of numpy's raw stream with the generated tables
  // (it reproduced all 10^6 numpy draws): 279 tail returns, 8087 draws settled by one wedge test.
  CHECK(tail_draws == 279);
  CHECK(wedge_draws == 8087);
}

TEST_CASE("the generated ziggurat tables have numpy's shape") {
  using namespace ipcfloor::ziggurat;
  CHECK(kNormalKi[1] == 0);  // the top layer is all wedge
  CHECK(kNormalFi[0] == 1.0);
  CHECK(kNormalWi[255] * 0x1p52 == kNormalR);
  CHECK(kNormalInvR == 1.0 / kNormalR);
  for (std::size_t i = 1; i + 1 < kNormalWi.size(); ++i) {
    CAPTURE(i);
    CHECK(kNormalWi[i] < kNormalWi[i + 1]);
    CHECK(kNormalFi[i] > kNormalFi[i + 1]);
  }
}
