// formats/q4_0.hpp — Q4_0 on the 16-bit-activation path: u = nibble − 8, dw = d.
#pragma once

#include "engine/formats/format_common.hpp"

namespace activekv::engine::formats {
namespace {

struct Q4_0 {
  static constexpr GgmlType type = GgmlType::q4_0;
  static constexpr bool has_min = false;
  using block_type = BlockQ4_0;
  static inline void scales(const std::uint8_t* row, std::size_t nb, float* dw, float* mw) {
    legacy_scales<BlockQ4_0, false>(row, nb, dw, mw);
  }
  static inline void weights(const std::uint8_t* row, std::size_t k, int* u) {
    const BlockQ4_0& b = block_at<BlockQ4_0>(row, k);
    for (int j = 0; j < 16; ++j) {
      u[j] = (b.qs[j] & 0x0F) - 8;
      u[j + 16] = (b.qs[j] >> 4) - 8;
    }
  }
#if defined(__AVX2__)
  static inline void unpack(const std::uint8_t* row, std::size_t k, __m256i* w) {
    const __m256i q = widen16(block_at<BlockQ4_0>(row, k).qs);
    const __m256i eight = _mm256_set1_epi16(8);
    w[0] = _mm256_sub_epi16(_mm256_and_si256(q, _mm256_set1_epi16(0x0F)), eight);
    w[1] = _mm256_sub_epi16(_mm256_srli_epi16(q, 4), eight);
  }
  static inline __m256i bytes(const std::uint8_t* row, std::size_t k) {
    return _mm256_sub_epi8(nibbles32(block_at<BlockQ4_0>(row, k).qs), _mm256_set1_epi8(8));
  }
#endif
};

}  // namespace
}  // namespace activekv::engine::formats
