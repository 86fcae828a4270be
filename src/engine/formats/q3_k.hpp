// formats/q3_k.hpp — Q3_K on the 16-bit-activation path. Activation block k = 8i + s
// is sub-block s of super-block i; its elements 0..15 and 16..31 are groups 2s and
// 2s + 1 with 6-bit signed scales:
//   u = q × sc (|u| ≤ 4 × 32: exact), dw = d
//   q = (2 bits of qs[32 (s / 4) + l] at shift 2 (s % 4)) − (4 where bit s of hmask[l] is clear)
#pragma once

#include "engine/formats/format_common.hpp"

namespace activekv::engine::formats {
namespace {

struct Q3_K {
  static constexpr GgmlType type = GgmlType::q3_k;
  static constexpr bool has_min = false;
  static inline void scales(const std::uint8_t* row, std::size_t nb, float* dw, float*) {
    for (std::size_t i = 0; i < nb / 8; ++i) {
      const float d = half_to_float(block_at<BlockQ3_K>(row, i).d);
      for (int s = 0; s < 8; ++s) dw[8 * i + s] = d;
    }
  }
  static inline void weights(const std::uint8_t* row, std::size_t k, int* u) {
    const BlockQ3_K& b = block_at<BlockQ3_K>(row, k / 8);
    const int s = static_cast<int>(k % 8);
    const std::uint8_t* qs = b.qs + 32 * (s / 4);
    for (int l = 0; l < 32; ++l) {
      const int q = ((qs[l] >> (2 * (s % 4))) & 3) - (((b.hmask[l] >> s) & 1) != 0 ? 0 : 4);
      u[l] = q * q3_k_scale(2 * s + l / 16, b.scales);
    }
  }
#if defined(__AVX2__)
  static inline void unpack(const std::uint8_t* row, std::size_t k, __m256i* w) {
    const BlockQ3_K& b = block_at<BlockQ3_K>(row, k / 8);
    const int s = static_cast<int>(k % 8);
    const std::uint8_t* qs = b.qs + 32 * (s / 4);
    const __m128i low_shift = _mm_cvtsi32_si128(2 * (s % 4));
    const __m128i mask_shift = _mm_cvtsi32_si128(s);
    const __m256i low2 = _mm256_set1_epi16(3), one = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; ++h) {
      const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(widen16(qs + 16 * h), low_shift), low2);
      const __m256i clear = _mm256_xor_si256(_mm256_and_si256(_mm256_srl_epi16(widen16(b.hmask + 16 * h), mask_shift), one), one);
      const __m256i q = _mm256_sub_epi16(lo, _mm256_slli_epi16(clear, 2));
      w[h] = _mm256_mullo_epi16(q, _mm256_set1_epi16(static_cast<short>(q3_k_scale(2 * s + h, b.scales))));
    }
  }
#endif
};

}  // namespace
}  // namespace activekv::engine::formats
