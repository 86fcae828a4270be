// formats/q5_0.hpp — Q5_0 and Q5_1 on the 16-bit-activation path:
// u = (nibble | fifth bit << 4) − 16 and dw = d (Q5_0); u without the offset, dw = d, mw = m (Q5_1).
#pragma once

#include <cstring>

#include "engine/formats/format_common.hpp"

namespace activekv::engine::formats {
namespace {

template <class Block, GgmlType Type, bool HasMin>
struct Q5Legacy {
  static constexpr GgmlType type = Type;
  static constexpr bool has_min = HasMin;
  static constexpr int offset = HasMin ? 0 : 16;
  using block_type = Block;
  static inline std::uint32_t high_bits(const Block& b) {
    std::uint32_t bits;
    std::memcpy(&bits, b.qh, sizeof bits);  // little-endian host assumed (x86-64, aarch64)
    return bits;
  }
  static inline void scales(const std::uint8_t* row, std::size_t nb, float* dw, float* mw) {
    legacy_scales<Block, HasMin>(row, nb, dw, mw);
  }
  static inline void weights(const std::uint8_t* row, std::size_t k, int* u) {
    const Block& b = block_at<Block>(row, k);
    const std::uint32_t qh = high_bits(b);
    for (int j = 0; j < 16; ++j) {
      u[j] = ((b.qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4)) - offset;
      u[j + 16] = ((b.qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4)) - offset;
    }
  }
#if defined(__AVX2__)
  static inline void unpack(const std::uint8_t* row, std::size_t k, __m256i* w) {
    const Block& b = block_at<Block>(row, k);
    const std::uint32_t qh = high_bits(b);
    const __m256i q = widen16(b.qs);
    const __m256i off = _mm256_set1_epi16(offset);
    w[0] = _mm256_sub_epi16(_mm256_or_si256(_mm256_and_si256(q, _mm256_set1_epi16(0x0F)), bit4_lanes(qh)), off);
    w[1] = _mm256_sub_epi16(_mm256_or_si256(_mm256_srli_epi16(q, 4), bit4_lanes(qh >> 16)), off);
  }
  static inline __m256i bytes(const std::uint8_t* row, std::size_t k) {
    const Block& b = block_at<Block>(row, k);
    const __m256i v = _mm256_or_si256(nibbles32(b.qs), bit4_bytes(high_bits(b)));
    return _mm256_sub_epi8(v, _mm256_set1_epi8(static_cast<char>(offset)));
  }
#endif
};

using Q5_0 = Q5Legacy<BlockQ5_0, GgmlType::q5_0, false>;
using Q5_1 = Q5Legacy<BlockQ5_1, GgmlType::q5_1, true>;

}  // namespace
}  // namespace activekv::engine::formats
