// formats/q4_1.hpp — Q4_1 on the 16-bit-activation path: u = nibble, dw = d, mw = m.
#pragma once

#include "engine/formats/format_common.hpp"

namespace activekv::engine::formats {
namespace {

struct Q4_1 {
  static constexpr GgmlType type = GgmlType::q4_1;
  static constexpr bool has_min = true;
  using block_type = BlockQ4_1;
  static inline void scales(const std::uint8_t* row, std::size_t nb, float* dw, float* mw) {
    legacy_scales<BlockQ4_1, true>(row, nb, dw, mw);
  }
  static inline void weights(const std::uint8_t* row, std::size_t k, int* u) {
    const BlockQ4_1& b = block_at<BlockQ4_1>(row, k);
    for (int j = 0; j < 16; ++j) {
      u[j] = b.qs[j] & 0x0F;
      u[j + 16] = b.qs[j] >> 4;
    }
  }
#if defined(__AVX2__)
  // The 16 bytes widened to int16 straight from memory, then the low nibble masked (elements 0..15) and the
  // high one shifted down (16..31): three operations.
  static inline void unpack(const std::uint8_t* row, std::size_t k, __m256i* w) {
    const __m256i q = widen16(block_at<BlockQ4_1>(row, k).qs);
    w[0] = _mm256_and_si256(q, _mm256_set1_epi16(0x0F));
    w[1] = _mm256_srli_epi16(q, 4);
  }
  static inline __m256i bytes(const std::uint8_t* row, std::size_t k) { return nibbles32(block_at<BlockQ4_1>(row, k).qs); }
#endif
};

}  // namespace
}  // namespace activekv::engine::formats
