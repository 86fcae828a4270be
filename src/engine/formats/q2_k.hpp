// formats/q2_k.hpp — Q2_K on the 16-bit-activation path. Activation block k = 8i + s
// is sub-block s of super-block i; its elements 0..15 and 16..31 are groups 2s and
// 2s + 1, each with a 4-bit scale sc and a 4-bit minimum m (scales[g]: low, high nibble):
//   value = d × sc × q − dmin × m
//   u = q × sc (at most 45), dw = d;  and a second integer product per block,
//   Σ m_g × x (group_mins: m of each half), with factor mw = −dmin
// because a minimum per 16 elements cannot fold into the block's one activation sum s.
//   q = 2 bits of qs[32 (s / 4) + l] at shift 2 (s % 4)
#pragma once

#include "engine/formats/format_common.hpp"

namespace activekv::engine::formats {
namespace {

struct Q2_K {
  static constexpr GgmlType type = GgmlType::q2_k;
  static constexpr bool has_min = false;
  static inline void scales(const std::uint8_t* row, std::size_t nb, float* dw, float* mw) {
    for (std::size_t i = 0; i < nb / 8; ++i) {
      const BlockQ2_K& b = block_at<BlockQ2_K>(row, i);
      const float d = half_to_float(b.d);
      const float dmin = half_to_float(b.dmin);
      for (int s = 0; s < 8; ++s) {
        dw[8 * i + s] = d;
        mw[8 * i + s] = -dmin;
      }
    }
  }
  static inline void weights(const std::uint8_t* row, std::size_t k, int* u) {
    const BlockQ2_K& b = block_at<BlockQ2_K>(row, k / 8);
    const int s = static_cast<int>(k % 8);
    const std::uint8_t* qs = b.qs + 32 * (s / 4);
    for (int l = 0; l < 32; ++l) u[l] = ((qs[l] >> (2 * (s % 4))) & 3) * (b.scales[2 * s + l / 16] & 0x0F);
  }
  // The minimum of elements 0..15 and of 16..31.
  static inline void group_mins(const std::uint8_t* row, std::size_t k, int* m) {
    const BlockQ2_K& b = block_at<BlockQ2_K>(row, k / 8);
    const int s = static_cast<int>(k % 8);
    m[0] = b.scales[2 * s] >> 4;
    m[1] = b.scales[2 * s + 1] >> 4;
  }
#if defined(__AVX2__)
  static inline void unpack(const std::uint8_t* row, std::size_t k, __m256i* w) {
    const BlockQ2_K& b = block_at<BlockQ2_K>(row, k / 8);
    const int s = static_cast<int>(k % 8);
    const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (s / 4)));
    const __m256i q = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(2 * (s % 4))), _mm256_set1_epi8(0x03));
    w[0] = _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(q)), _mm256_set1_epi16(b.scales[2 * s] & 0x0F));
    w[1] = _mm256_mullo_epi16(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(q, 1)),
                              _mm256_set1_epi16(b.scales[2 * s + 1] & 0x0F));
  }
  static inline void unpack_mins(const std::uint8_t* row, std::size_t k, __m256i* w) {
    const BlockQ2_K& b = block_at<BlockQ2_K>(row, k / 8);
    const int s = static_cast<int>(k % 8);
    w[0] = _mm256_set1_epi16(b.scales[2 * s] >> 4);
    w[1] = _mm256_set1_epi16(b.scales[2 * s + 1] >> 4);
  }
#endif
};

}  // namespace
}  // namespace activekv::engine::formats
