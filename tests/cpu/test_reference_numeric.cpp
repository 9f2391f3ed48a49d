// Host number formats of the reference: rounding, bit patterns, buffers, random fill.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "hopattn_ref/numeric.hpp"

namespace {

using hopattn::DType;
using namespace hopattn::ref;

float bits_to_float(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
uint32_t float_to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

TEST(ReferenceNumeric, HalfKnownPatterns) {
  EXPECT_EQ(to_half_bits(1.0f), 0x3C00);
  EXPECT_EQ(to_half_bits(-2.5f), 0xC100);
  EXPECT_EQ(to_half_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(to_half_bits(65519.0f), 0x7BFF);                  // below the overflow midpoint
  EXPECT_EQ(to_half_bits(65520.0f), 0x7C00);                  // the midpoint ties to "even" = inf
  EXPECT_EQ(to_half_bits(std::ldexp(1.0f, -14)), 0x0400);     // smallest normal
  EXPECT_EQ(to_half_bits(std::ldexp(1.0f, -24)), 0x0001);     // smallest subnormal
  EXPECT_EQ(to_half_bits(std::ldexp(1023.0f, -24)), 0x03FF);  // largest subnormal
  EXPECT_EQ(to_half_bits(std::ldexp(1.0f, -25)), 0x0000);     // tie to even -> 0
  EXPECT_EQ(to_half_bits(std::ldexp(3.0f, -26)), 0x0001);     // 0.75 of the smallest subnormal
  EXPECT_EQ(to_half_bits(std::ldexp(3.0f, -25)), 0x0002);     // 1.5 -> 2 (even)
  EXPECT_EQ(to_half_bits(-0.0f), 0x8000);
  EXPECT_EQ(to_half_bits(1.0f / 3.0f), 0x3555);
  EXPECT_EQ(to_half_bits(1.0f + std::ldexp(1.0f, -11)), 0x3C00);  // tie -> even
  EXPECT_EQ(to_half_bits(1.0f + std::ldexp(3.0f, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(to_half_bits(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(to_half_bits(-std::numeric_limits<float>::infinity()), 0xFC00);
  const uint16_t nan = to_half_bits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);

  EXPECT_EQ(from_half_bits(0x3C00), 1.0f);
  EXPECT_EQ(from_half_bits(0xC100), -2.5f);
  EXPECT_EQ(from_half_bits(0x7BFF), 65504.0f);
  EXPECT_EQ(from_half_bits(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(from_half_bits(0x03FF), std::ldexp(1023.0f, -24));
  EXPECT_EQ(from_half_bits(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(from_half_bits(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(from_half_bits(0x7E00)));
  EXPECT_TRUE(std::signbit(from_half_bits(0x8000)));
}

TEST(ReferenceNumeric, HalfAllPatternsRoundTrip) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = from_half_bits(uint16_t(b));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(from_half_bits(to_half_bits(f))));
    } else {
      ASSERT_EQ(to_half_bits(f), b) << std::hex << b;
      ASSERT_EQ(round_to(DType::kFloat16, f), double(f));
    }
  }
}

#if defined(__FLT16_MAX__) && !defined(__clang__)
// An independent check against the compiler's own _Float16 conversion (correctly rounded).
TEST(ReferenceNumeric, HalfMatchesCompilerFloat16) {
  std::mt19937_64 gen(7);
  for (int n = 0; n < 200000; ++n) {
    // Random bit patterns cover every exponent, including the subnormal and overflow ranges.
    float f = bits_to_float(uint32_t(gen()));
    if (std::isnan(f)) continue;
    if (n % 2) f = std::ldexp(float(int32_t(gen() % 200000) - 100000), -int(gen() % 40));
    const _Float16 h = static_cast<_Float16>(f);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    ASSERT_EQ(to_half_bits(f), hb) << f;
    const double d = std::ldexp(double(int64_t(gen() % 4000000000ull)), -int(gen() % 60));
    ASSERT_EQ(round_to(DType::kFloat16, d), double(static_cast<_Float16>(d))) << d;
  }
}
#endif

TEST(ReferenceNumeric, Bf16KnownPatterns) {
  EXPECT_EQ(to_bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(to_bf16_bits(-2.5f), 0xC020);
  EXPECT_EQ(to_bf16_bits(1.0f / 3.0f), 0x3EAB);  // 0x3EAAAAAB rounds up
  EXPECT_EQ(to_bf16_bits(FLT_MAX), 0x7F80);      // rounds past the largest bf16 -> inf
  EXPECT_EQ(to_bf16_bits(bits_to_float(0x7F7F0000)), 0x7F7F);
  EXPECT_EQ(to_bf16_bits(std::ldexp(1.0f, -133)), 0x0001);     // smallest subnormal
  EXPECT_EQ(to_bf16_bits(bits_to_float(0x3F808000)), 0x3F80);  // tie -> even
  EXPECT_EQ(to_bf16_bits(bits_to_float(0x3F818000)), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(to_bf16_bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(to_bf16_bits(-0.0f), 0x8000);
  EXPECT_TRUE(std::isnan(from_bf16_bits(to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(from_bf16_bits(0x3EAB), bits_to_float(0x3EAB0000));
  EXPECT_EQ(from_bf16_bits(0x0001), std::ldexp(1.0f, -133));
  EXPECT_EQ(from_bf16_bits(0xFF80), -std::numeric_limits<float>::infinity());
}

TEST(ReferenceNumeric, Bf16AllPatternsAndBitTrick) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = from_bf16_bits(uint16_t(b));
    if (std::isnan(f)) continue;  // NaN payloads are not preserved (decoded as a quiet NaN)
    ASSERT_EQ(float_to_bits(f), b << 16);
    ASSERT_EQ(to_bf16_bits(f), b);
  }
  // The classic integer formulation of float -> bf16 RNE, as an independent check.
  std::mt19937_64 gen(11);
  for (int n = 0; n < 200000; ++n) {
    const uint32_t fb = uint32_t(gen());
    const float f = bits_to_float(fb);
    if (std::isnan(f)) continue;
    const uint32_t expect = (fb + 0x7FFFu + ((fb >> 16) & 1u)) >> 16;
    ASSERT_EQ(to_bf16_bits(f), expect) << std::hex << fb;
  }
}

TEST(ReferenceNumeric, E4m3KnownPatterns) {
  EXPECT_EQ(to_e4m3_bits(1.0f), 0x38);
  EXPECT_EQ(to_e4m3_bits(-2.5f), 0xC2);
  EXPECT_EQ(to_e4m3_bits(448.0f), 0x7E);
  EXPECT_EQ(to_e4m3_bits(-448.0f), 0xFE);
  EXPECT_EQ(to_e4m3_bits(0.0019531f), 0x01);  // 2^-9, smallest subnormal (rounded)
  EXPECT_EQ(to_e4m3_bits(std::ldexp(1.0f, -9)), 0x01);
  EXPECT_EQ(to_e4m3_bits(std::ldexp(1.0f, -10)), 0x00);  // tie -> even (0)
  EXPECT_EQ(to_e4m3_bits(std::ldexp(7.0f, -9)), 0x07);   // largest subnormal
  EXPECT_EQ(to_e4m3_bits(std::ldexp(1.0f, -6)), 0x08);   // smallest normal
  EXPECT_EQ(to_e4m3_bits(464.0f), 0x7E);                 // midpoint 448/480 ties to the even 448
  // Saturating (default, CUDA satfinite) vs torch-like NaN on overflow.
  EXPECT_EQ(to_e4m3_bits(470.0f), 0x7E);
  EXPECT_EQ(to_e4m3_bits(1e6f), 0x7E);
  EXPECT_EQ(to_e4m3_bits(-1e6f), 0xFE);
  EXPECT_EQ(to_e4m3_bits(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(to_e4m3_bits(470.0f, false) & 0x7F, 0x7F);
  EXPECT_EQ(to_e4m3_bits(464.0f, false), 0x7E);
  EXPECT_EQ(to_e4m3_bits(std::numeric_limits<float>::infinity(), false) & 0x7F, 0x7F);
  EXPECT_EQ(to_e4m3_bits(std::numeric_limits<float>::quiet_NaN()) & 0x7F, 0x7F);
  EXPECT_TRUE(std::isnan(round_to_e4m3(500.0, false)));
  EXPECT_EQ(round_to(DType::kFloat8E4M3, 500.0), 448.0);

  EXPECT_EQ(from_e4m3_bits(0x7E), 448.0f);
  EXPECT_EQ(from_e4m3_bits(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(from_e4m3_bits(0x78), 256.0f);  // exponent field 15 is finite in E4M3FN
  EXPECT_TRUE(std::isnan(from_e4m3_bits(0x7F)));
  EXPECT_TRUE(std::isnan(from_e4m3_bits(0xFF)));
}

TEST(ReferenceNumeric, E4m3AllPatternsRoundTrip) {
  int finite = 0;
  for (uint32_t b = 0; b < 256; ++b) {
    const float f = from_e4m3_bits(uint8_t(b));
    if (std::isnan(f)) {
      EXPECT_EQ(b & 0x7F, 0x7Fu);
      continue;
    }
    ++finite;
    EXPECT_EQ(to_e4m3_bits(f), b);
    EXPECT_EQ(to_e4m3_bits(f, false), b);
  }
  EXPECT_EQ(finite, 254);
}

TEST(ReferenceNumeric, RoundsDoublesOnce) {
  // Just above the fp16 tie 1 + 2^-11: through float the excess is lost and the tie goes to
  // even (1.0); a single correct rounding goes up.
  const double x = 1.0 + std::ldexp(1.0, -11) + std::ldexp(1.0, -40);
  EXPECT_EQ(round_to(DType::kFloat16, x), 1.0 + std::ldexp(1.0, -10));
  EXPECT_EQ(half_bits_of(x), 0x3C01);
  EXPECT_EQ(round_to(DType::kFloat32, 1.0 / 3.0), double(1.0f / 3.0f));
  EXPECT_EQ(round_to(DType::kInt32, 2.5), 2.0);
  EXPECT_EQ(round_to(DType::kInt32, 3.5), 4.0);
  EXPECT_EQ(round_to(DType::kInt32, -1.2), -1.0);
  EXPECT_EQ(round_to(DType::kBFloat16, 1e39), std::numeric_limits<double>::infinity());
  EXPECT_EQ(round_to(DType::kFloat16, -1e6), -std::numeric_limits<double>::infinity());
  std::vector<double> v = {1.0 / 3.0, 1e-9, -7.0};
  round_in_place(DType::kBFloat16, v);
  EXPECT_EQ(v[0], double(from_bf16_bits(0x3EAB)));
  EXPECT_EQ(v[2], -7.0);
  EXPECT_EQ(rounded(DType::kFloat16, {1e-9})[0], 0.0);
}

TEST(ReferenceNumeric, EncodeDecodeBuffers) {
  std::vector<double> v(1000);
  fill_random(v, 3, 0.0, 10.0);
  for (DType dt : {DType::kFloat16, DType::kBFloat16, DType::kFloat8E4M3, DType::kFloat32}) {
    const std::vector<uint8_t> bytes = encode(dt, v);
    ASSERT_EQ(bytes.size(), v.size() * size_t(hopattn::dtype_size(dt)));
    const std::vector<double> back = decode(dt, bytes.data(), v.size());
    EXPECT_EQ(back, rounded(dt, v)) << int(dt);
  }
  const std::vector<uint8_t> hb = encode(DType::kFloat16, {1.0, -2.5});
  uint16_t h[2];
  std::memcpy(h, hb.data(), 4);
  EXPECT_EQ(h[0], 0x3C00);
  EXPECT_EQ(h[1], 0xC100);
  const std::vector<uint8_t> ib = encode(DType::kInt32, {7.0, -3.0});
  EXPECT_EQ(decode(DType::kInt32, ib.data(), 2), (std::vector<double>{7.0, -3.0}));
}

TEST(ReferenceNumeric, FillRandomDeterministicNormal) {
  std::vector<double> a(100001), b(100001), c(100001);
  fill_random(a, 42);
  fill_random(b, 42);
  fill_random(c, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  double mean = 0, sq = 0;
  for (double x : a) mean += x;
  mean /= double(a.size());
  for (double x : a) sq += (x - mean) * (x - mean);
  const double sd = std::sqrt(sq / double(a.size()));
  EXPECT_NEAR(mean, 0.0, 0.02);
  EXPECT_NEAR(sd, 1.0, 0.02);

  std::vector<double> s(20000);
  fill_random(s, 5, 3.0, 0.5);
  mean = 0;
  for (double x : s) mean += x;
  EXPECT_NEAR(mean / double(s.size()), 3.0, 0.02);

  std::vector<double> u(10000);
  fill_uniform(u, 9, -2.0, 1.0);
  for (double x : u) {
    ASSERT_GE(x, -2.0);
    ASSERT_LT(x, 1.0);
  }
}

}  // namespace
