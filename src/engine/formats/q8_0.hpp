// formats/q8_0.hpp — Q8_0 on the 16-bit-activation path: u = q (signed 8 bits), dw = d.
#pragma once

#include "engine/formats/format_common.hpp"

namespace activekv::engine::formats {
namespace {

struct Q8_0 {
  static constexpr GgmlType type = GgmlType::q8_0;
  static constexpr bool has_min = false;
  using block_type = BlockQ8_0;
  static inline void scales(const std::uint8_t* row, std::size_t nb, float* dw, float* mw) {
    legacy_scales<BlockQ8_0, false>(row, nb, dw, mw);
  }
  static inline void weights(const std::uint8_t* row, std::size_t k, int* u) {
    const BlockQ8_0& b = block_at<BlockQ8_0>(row, k);
    for (int j = 0; j < 32; ++j) u[j] = b.qs[j];
  }
#if defined(__AVX2__)
  static inline void unpack(const std::uint8_t* row, std::size_t k, __m256i* w) {
    const BlockQ8_0& b = block_at<BlockQ8_0>(row, k);
    w[0] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs)));
    w[1] = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 16)));
  }
  static inline __m256i bytes(const std::uint8_t* row, std::size_t k) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block_at<BlockQ8_0>(row, k).qs));
  }
#endif
};

}  // namespace
}  // namespace activekv::engine::formats
