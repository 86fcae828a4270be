// element_codec_test.cpp — the conversions are exact where they must be and round to nearest even.
#include "runtime/element_codec.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace activekv::runtime {
namespace {

TEST(ElementCodec, F16KnownValues) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);                 // largest finite
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                 // rounds up to infinity
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);    // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -26)), 0x0000);    // below half the smallest: zero
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie, even stays
  EXPECT_EQ(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie, odd rounds up
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(ElementCodec, F16RoundTripsEveryNonNanValue) {
  for (std::uint32_t bits = 0; bits < 0x10000u; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const bool nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
    if (nan) continue;
    ASSERT_EQ(f32_to_f16(f16_to_f32(h)), h) << "bits " << bits;
  }
}

#if defined(__FLT16_MAX__)
TEST(ElementCodec, F16MatchesTheCompilersConversionOnRandomFloats) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<std::uint32_t> any;
  for (int i = 0; i < 1'000'000; ++i) {
    const float x = std::bit_cast<float>(any(rng));
    if (std::isnan(x)) continue;
    const auto expected = std::bit_cast<std::uint16_t>(static_cast<_Float16>(x));
    ASSERT_EQ(f32_to_f16(x), expected) << x;
    ASSERT_EQ(std::bit_cast<std::uint32_t>(f16_to_f32(expected)),
              std::bit_cast<std::uint32_t>(static_cast<float>(std::bit_cast<_Float16>(expected))));
  }
}
#endif

TEST(ElementCodec, SpanConversionsAgreeWithScalarsOnEveryKindOfValue) {
  // Random bit patterns: normals, subnormals, infinities, NaNs, both signs; a
  // count that is not a multiple of any vector width.
  std::mt19937 rng(11);
  std::uniform_int_distribution<std::uint32_t> any;
  std::vector<float> src(100'003);
  for (auto& x : src) x = std::bit_cast<float>(any(rng));
  src[5] = std::ldexp(1.0f, -20);   // f16 subnormal
  src[6] = 70000.0f;                // overflows f16
  src[7] = -std::numeric_limits<float>::infinity();
  std::vector<std::uint16_t> encoded(src.size());
  encode_elements(DType::f16, src.data(), src.size(), encoded.data());
  for (std::size_t i = 0; i < src.size(); ++i) ASSERT_EQ(encoded[i], f32_to_f16(src[i])) << i;
  std::vector<std::uint16_t> halves(65536);
  for (std::uint32_t b = 0; b < 65536; ++b) halves[b] = static_cast<std::uint16_t>(b);
  std::vector<float> decoded(halves.size());
  decode_elements(DType::f16, halves.data(), halves.size(), decoded.data());
  for (std::uint32_t b = 0; b < 65536; ++b) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(decoded[b]), std::bit_cast<std::uint32_t>(f16_to_f32(halves[b]))) << b;
  }
}

TEST(ElementCodec, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(ElementCodec, EncodeDecodeSpansAgreeWithScalars) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> src(1000), back(1000);
  for (auto& x : src) x = normal(rng);
  std::vector<std::uint16_t> encoded(src.size());
  encode_elements(DType::f16, src.data(), src.size(), encoded.data());
  decode_elements(DType::f16, encoded.data(), src.size(), back.data());
  for (std::size_t i = 0; i < src.size(); ++i) {
    ASSERT_EQ(encoded[i], f32_to_f16(src[i]));
    ASSERT_NEAR(back[i], src[i], std::abs(src[i]) * 1e-3f + 1e-7f);
  }
  encode_elements(DType::bf16, src.data(), src.size(), encoded.data());
  for (std::size_t i = 0; i < src.size(); ++i) ASSERT_EQ(encoded[i], f32_to_bf16(src[i]));
  std::vector<float> copy(src.size());
  encode_elements(DType::f32, src.data(), src.size(), copy.data());
  EXPECT_EQ(copy, src);
}

}  // namespace
}  // namespace activekv::runtime
