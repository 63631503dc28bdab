// Philox4x32-10 against Random123's published known-answer vectors, and the
// sampling uniform built on it: in [0, 1), a pure function of (seed,
// position), roughly uniform.
#include "engine/model/counter_rng.h"

#include <array>
#include <cstdint>
#include <set>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

using Words = std::array<uint32_t, 4>;

// Random123 1.x, examples/kat_vectors: "philox4x32 10 <ctr> <key> <out>".
TEST(Philox4x32Test, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(Philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (Words{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(Philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
                          {0xffffffffu, 0xffffffffu}),
            (Words{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(Philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                          {0xa4093822u, 0x299f31d0u}),
            (Words{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(SamplingUniformTest, IsTheFirstTwoPhiloxWordsOfSeedAndPosition) {
  const uint64_t seed = 0x299f31d0a4093822ull, position = 0x85a308d3243f6a88ull;
  const Words w = Philox4x32_10({0x243f6a88u, 0x85a308d3u, 0, 0},
                                {0xa4093822u, 0x299f31d0u});
  const double expected =
      ((w[0] >> 5) * 67108864.0 + (w[1] >> 6)) / 9007199254740992.0;
  EXPECT_EQ(SamplingUniform(seed, position), expected);
  EXPECT_EQ(SamplingUniform(seed, position), SamplingUniform(seed, position));
}

TEST(SamplingUniformTest, InUnitIntervalAndSpreadOverIt) {
  constexpr int kDraws = 100000, kBins = 10;
  std::array<int, kBins> bins{};
  std::set<double> distinct;
  for (uint64_t pos = 0; pos < kDraws; ++pos) {
    const double u = SamplingUniform(7, pos);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    ++bins[static_cast<int>(u * kBins)];
    distinct.insert(u);
  }
  // Binomial(1e5, 0.1): sd ~ 95; 6 sd either side.
  for (int b : bins) EXPECT_NEAR(b, kDraws / kBins, 570);
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kDraws));
  // Neighbouring seeds and positions are unrelated draws.
  int same = 0;
  for (uint64_t pos = 0; pos < 1000; ++pos) {
    same += SamplingUniform(7, pos) == SamplingUniform(8, pos);
  }
  EXPECT_EQ(same, 0);
}

}  // namespace
}  // namespace pdserve
