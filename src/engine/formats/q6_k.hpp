// formats/q6_k.hpp — Q6_K on the 16-bit-activation path. Activation block
// k = 8i + s is quarter t = s % 4 of half n = s / 4 of super-block i; its
// elements 0..15 and 16..31 are two groups with signed 8-bit scales sc_a, sc_b:
//   u = q × sc (|u| ≤ 32 × 128 = 4,096: exact in int16), dw = d
// so that (d × sc) × q is computed as d × (sc × q): the product's integer part
// is exact and the one rounding is the partial sum's conversion to fp32, the
// same on every path.
//   q = (ql nibble | 2 bits of qh << 4) − 32; ql: bytes 64n + 32 (t % 2) .. at
//   shift 4 (t / 2); qh: bytes 32n .. at shift 2t; scales 8n + 2t and 8n + 2t + 1.
#pragma once

#include "engine/formats/format_common.hpp"

namespace activekv::engine::formats {
namespace {

struct Q6_K {
  static constexpr GgmlType type = GgmlType::q6_k;
  static constexpr bool has_min = false;
  static inline void scales(const std::uint8_t* row, std::size_t nb, float* dw, float*) {
    for (std::size_t i = 0; i < nb / 8; ++i) {
      const float d = half_to_float(block_at<BlockQ6_K>(row, i).d);
      for (int s = 0; s < 8; ++s) dw[8 * i + s] = d;
    }
  }
  static inline void weights(const std::uint8_t* row, std::size_t k, int* u) {
    const BlockQ6_K& b = block_at<BlockQ6_K>(row, k / 8);
    const int s = static_cast<int>(k % 8), n = s / 4, t = s % 4;
    const std::uint8_t* ql = b.ql + 64 * n + 32 * (t % 2);
    const std::uint8_t* qh = b.qh + 32 * n;
    const std::int8_t* sc = b.scales + 8 * n + 2 * t;
    for (int l = 0; l < 32; ++l) {
      const int q = (((ql[l] >> (4 * (t / 2))) & 0x0F) | (((qh[l] >> (2 * t)) & 3) << 4)) - 32;
      u[l] = q * sc[l / 16];
    }
  }
#if defined(__AVX2__)
  // The bit work on all 32 bytes at once (a 16-bit shift of masked bytes never crosses a byte), then the two
  // halves widened to int16 and multiplied by their group's scale.
  static inline void unpack(const std::uint8_t* row, std::size_t k, __m256i* w) {
    const BlockQ6_K& b = block_at<BlockQ6_K>(row, k / 8);
    const int s = static_cast<int>(k % 8), n = s / 4, t = s % 4;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * n + 32 * (t % 2)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * n));
    const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (t / 2))), _mm256_set1_epi8(0x0F));
    const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * t)), _mm256_set1_epi8(0x03));
    const __m256i q = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), _mm256_set1_epi8(32));
    const std::int8_t* sc = b.scales + 8 * n + 2 * t;
    w[0] = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_castsi256_si128(q)), _mm256_set1_epi16(sc[0]));
    w[1] = _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm256_extracti128_si256(q, 1)), _mm256_set1_epi16(sc[1]));
  }
#endif
};

}  // namespace
}  // namespace activekv::engine::formats
