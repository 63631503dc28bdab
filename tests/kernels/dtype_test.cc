#include "kernels/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

float Bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(F16Test, EveryHalfRoundTripsThroughFloat) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = F16ToF32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(F16ToF32(F32ToF16(f)))) << h;
      EXPECT_EQ((h & 0x7c00), 0x7c00u);
      continue;
    }
    EXPECT_EQ(F32ToF16(f), h) << "half bits " << h;
  }
}

TEST(F16Test, KnownValues) {
  EXPECT_EQ(F16ToF32(0x3c00), 1.0f);
  EXPECT_EQ(F16ToF32(0xc000), -2.0f);
  EXPECT_EQ(F16ToF32(0x7bff), 65504.0f);
  EXPECT_EQ(F16ToF32(0x0001), std::ldexp(1.0f, -24));     // smallest subnormal
  EXPECT_EQ(F16ToF32(0x03ff), std::ldexp(1023.0f, -24));  // largest subnormal
  EXPECT_EQ(F16ToF32(0x0400), std::ldexp(1.0f, -14));     // smallest normal
  EXPECT_TRUE(std::isinf(F16ToF32(0x7c00)));
  EXPECT_TRUE(std::isinf(F16ToF32(0xfc00)) && F16ToF32(0xfc00) < 0);
  EXPECT_TRUE(std::isnan(F16ToF32(0x7e00)));
  EXPECT_TRUE(std::signbit(F16ToF32(0x8000)));
}

TEST(F16Test, RoundsToNearestEven) {
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even (1.0).
  EXPECT_EQ(F32ToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 * 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9: up.
  EXPECT_EQ(F32ToF16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  // Just above the tie rounds up.
  EXPECT_EQ(F32ToF16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)),
            0x3c01);
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bff);
  EXPECT_EQ(F32ToF16(65519.0f), 0x7bff);  // below the overflow midpoint
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00);  // the midpoint rounds to inf
  EXPECT_EQ(F32ToF16(1e10f), 0x7c00);
  EXPECT_EQ(F32ToF16(-1e10f), 0xfc00);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(F32ToF16(std::nanf("")) & 0x7c00, 0x7c00);
  EXPECT_NE(F32ToF16(std::nanf("")) & 0x03ff, 0);
  // Subnormal halves: 2^-25 is the tie between 0 and 2^-24: to even (0).
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(F32ToF16(std::ldexp(3.0f, -25)), 0x0002);  // tie 1.5 -> 2
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(F32ToF16(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(F32ToF16(std::ldexp(1.0f, -30)), 0x0000);
  // Largest subnormal + half a step rounds up into the smallest normal.
  EXPECT_EQ(F32ToF16(std::ldexp(1023.5f, -24)), 0x0400);
}

TEST(Bf16Test, ConversionsAndTies) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80);
  EXPECT_EQ(BF16ToF32(0x3f80), 1.0f);
  // 1 + 2^-8 is the tie between 1 and 1 + 2^-7: to even (1).
  EXPECT_EQ(F32ToBF16(Bits(0x3f808000)), 0x3f80);
  EXPECT_EQ(F32ToBF16(Bits(0x3f818000)), 0x3f82);  // odd below: up
  EXPECT_EQ(F32ToBF16(Bits(0x3f808001)), 0x3f81);
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(F32ToBF16(Bits(0x7f7fffff)), 0x7f80);  // max float rounds to inf
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(BF16ToF32(F32ToBF16(Bits(0x7f800001)))));
  EXPECT_EQ(BF16ToF32(F32ToBF16(Bits(0x00010000))), Bits(0x00010000));
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = BF16ToF32(static_cast<uint16_t>(b));
    if (!std::isnan(f)) {
      EXPECT_EQ(F32ToBF16(f), b);
    }
  }
}

std::vector<float> RandomRow(int64_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST(QuantizeRowTest, RoundTripErrorBounds) {
  const int64_t n = 32 * 40;
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    std::vector<float> x = RandomRow(n, seed, 0.05f * seed);
    x[7] = 0.0f;
    for (int j = 64; j < 96; ++j) x[j] = 0.0f;  // an all-zero block
    for (DType type : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                       DType::kQ4_0, DType::kQ4_1}) {
      std::vector<uint8_t> q(RowBytes(type, n).value());
      QuantizeRow(type, x.data(), q.data(), n);
      std::vector<float> back(n);
      DequantizeRow(type, q.data(), back.data(), n);
      for (int64_t b = 0; b < n / 32; ++b) {
        float amax = 0, lo = x[b * 32], hi = x[b * 32];
        for (int j = 0; j < 32; ++j) {
          amax = std::max(amax, std::fabs(x[b * 32 + j]));
          lo = std::min(lo, x[b * 32 + j]);
          hi = std::max(hi, x[b * 32 + j]);
        }
        for (int j = 0; j < 32; ++j) {
          const int64_t i = b * 32 + j;
          const float err = std::fabs(back[i] - x[i]);
          float bound = 0;
          switch (type) {
            case DType::kF32:
              bound = 0;
              break;
            case DType::kF16:
              bound = std::fabs(x[i]) * 0x1p-11f + 0x1p-25f;
              break;
            case DType::kBF16:
              bound = std::fabs(x[i]) * 0x1p-8f;
              break;
            // Half a step, plus the f16 rounding of the scale times |q|.
            case DType::kQ8_0:
              bound = amax / 127 * (0.5f + 127 * 0x1p-11f);
              break;
            // The extreme opposite the max clamps at 15 (error up to d).
            case DType::kQ4_0:
              bound = amax / 8 * (1.0f + 16 * 0x1p-11f);
              break;
            case DType::kQ4_1:
              bound = (hi - lo) / 15 * (0.5f + 15 * 0x1p-11f) +
                      std::fabs(lo) * 0x1p-11f;
              break;
          }
          ASSERT_LE(err, bound * 1.0001f + 1e-12f)
              << DTypeName(type) << " i=" << i << " x=" << x[i]
              << " back=" << back[i];
        }
      }
    }
  }
}

TEST(QuantizeRowTest, Q4_0MatchesGgmlRounding) {
  // x_j = j - 16: max magnitude is x_0 = -16, so d = -16 / -8 = 2 and
  // q_j = min(15, (int)((j - 16) / 2 + 8.5)) = min(15, (int)(j / 2 + 0.5)).
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j - 16);
  BlockQ4_0 b;
  QuantizeRow(DType::kQ4_0, x, &b, 32);
  EXPECT_EQ(F16ToF32(b.d), 2.0f);
  for (int j = 0; j < 16; ++j) {
    const int lo = std::min(15, static_cast<int>(j / 2.0 + 0.5));
    const int hi = std::min(15, static_cast<int>((j + 16) / 2.0 + 0.5));
    EXPECT_EQ(b.qs[j] & 0x0f, lo) << j;
    EXPECT_EQ(b.qs[j] >> 4, hi) << j;
  }
}

TEST(QuantizeRowTest, Q8_0AndQ4_1MatchGgmlRounding) {
  float x[32];
  for (int j = 0; j < 32; ++j) x[j] = static_cast<float>(j) * 0.25f - 2.0f;
  BlockQ8_0 q8;
  QuantizeRow(DType::kQ8_0, x, &q8, 32);
  const float d8 = 5.75f / 127.0f;  // amax is x_31 = 5.75
  EXPECT_EQ(q8.d, F32ToF16(d8));
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(q8.qs[j], static_cast<int8_t>(std::roundf(x[j] * (1.0f / d8))));
  }
  BlockQ4_1 q41;
  QuantizeRow(DType::kQ4_1, x, &q41, 32);
  const float d41 = 7.75f / 15.0f;
  EXPECT_EQ(q41.d, F32ToF16(d41));
  EXPECT_EQ(F16ToF32(q41.m), -2.0f);
  for (int j = 0; j < 16; ++j) {
    const float id = 1.0f / d41;
    EXPECT_EQ(q41.qs[j] & 0x0f,
              std::min(15, static_cast<int>((x[j] + 2.0f) * id + 0.5f)));
    EXPECT_EQ(q41.qs[j] >> 4,
              std::min(15, static_cast<int>((x[j + 16] + 2.0f) * id + 0.5f)));
  }
}

TEST(DTypeTest, RowBytesAndIds) {
  EXPECT_EQ(RowBytes(DType::kQ4_1, 576).value(), 18 * 20);
  EXPECT_EQ(RowBytes(DType::kQ8_0, 64).value(), 68);
  EXPECT_EQ(RowBytes(DType::kF16, 7).value(), 14);
  EXPECT_FALSE(RowBytes(DType::kQ4_0, 33).ok());
  EXPECT_EQ(DTypeFromGgmlId(30).value(), DType::kBF16);
  EXPECT_FALSE(DTypeFromGgmlId(12).ok());
}

}  // namespace
}  // namespace pdserve
