// formats/q4_k.hpp — Q4_K and Q5_K on the 16-bit-activation path. A 256-element
// super-block holds 8 sub-blocks of 32, each one activation block k = 8i + s:
//   u = nibble (| fifth bit << 4 for Q5_K), dw = d × sc_s, mw = −(dmin × m_s)
// so that d × sc × u − dmin × m = dw × u + mw, the value gguf.quants gives
// (its d × sc and dmin × m are the same single fp32 products).
// Sub-blocks 2p and 2p + 1 share the 32 bytes qs[32p..32p+32): low nibbles, then high.
#pragma once

#include "engine/formats/format_common.hpp"

namespace activekv::engine::formats {
namespace {

template <class Block, GgmlType Type, bool Fifth>
struct QK4 {
  static constexpr GgmlType type = Type;
  static constexpr bool has_min = true;
  static inline void scales(const std::uint8_t* row, std::size_t nb, float* dw, float* mw) {
    for (std::size_t i = 0; i < nb / 8; ++i) {
      const Block& b = block_at<Block>(row, i);
      const float d = half_to_float(b.d);
      const float dmin = half_to_float(b.dmin);
      for (int s = 0; s < 8; ++s) {
        std::uint8_t sc = 0;
        std::uint8_t mn = 0;
        q4_k_scale_min(s, b.scales, &sc, &mn);
        dw[8 * i + s] = d * static_cast<float>(sc);
        mw[8 * i + s] = -(dmin * static_cast<float>(mn));
      }
    }
  }
  static inline void weights(const std::uint8_t* row, std::size_t k, int* u) {
    const Block& b = block_at<Block>(row, k / 8);
    const int s = static_cast<int>(k % 8);
    const std::uint8_t* q = b.qs + 32 * (s / 2);
    for (int l = 0; l < 32; ++l) {
      u[l] = (q[l] >> (4 * (s % 2))) & 0x0F;
      if constexpr (Fifth) u[l] |= ((b.qh[l] >> s) & 1) << 4;
    }
  }
#if defined(__AVX2__)
  // The bit work on all 32 bytes at once (a 16-bit shift of masked bytes never crosses a byte), then the two
  // halves widened to int16.
  static inline void unpack(const std::uint8_t* row, std::size_t k, __m256i* w) {
    const Block& b = block_at<Block>(row, k / 8);
    const int s = static_cast<int>(k % 8);
    const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (s / 2)));
    __m256i q = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(4 * (s % 2))), _mm256_set1_epi8(0x0F));
    if constexpr (Fifth) {
      // Bit s of qh[l], moved to bit 4.
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
      const __m256i h = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s)), _mm256_set1_epi8(0x01));
      q = _mm256_or_si256(q, _mm256_slli_epi16(h, 4));
    }
    w[0] = _mm256_cvtepu8_epi16(_mm256_castsi256_si128(q));
    w[1] = _mm256_cvtepu8_epi16(_mm256_extracti128_si256(q, 1));
  }
#endif
};

using Q4_K = QK4<BlockQ4_K, GgmlType::q4_k, false>;
using Q5_K = QK4<BlockQ5_K, GgmlType::q5_k, true>;

}  // namespace
}  // namespace activekv::engine::formats
