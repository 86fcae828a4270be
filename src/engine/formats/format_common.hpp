// formats/format_common.hpp — what every weight format of the 16-bit-activation
// path (matmul_q16.hpp) provides, and the helpers they share.
//
// A format is a struct, one per file in this folder (q4_0.hpp ... q6_k.hpp),
// that views a weight row as blocks of 32 elements — the activation block — and
// gives, for block k of a row:
//
//   scales(row, nb, dw, mw)  dw[k], mw[k] for every block: the fp32 factor of the
//                            integer product, and (has_min) the factor of Σx
//   weights(row, k, u)       the 32 integers u, in element order (portable)
//   unpack(row, k, w)        the same integers as two vectors of 16 × int16
//                            (elements 0..15, 16..31), compiled where __AVX2__ is
//
// The legacy formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) also serve the 8-bit path of
// matmul_q8_0.hpp: they name their block struct (block_type, whose d and, with
// a minimum, m are the f16 factors) and give the 32 integers as one vector of
// bytes in element order, bytes(row, k) — signed where has_min is false, else
// unsigned (0..31).
//
// so that element e of block k is worth dw[k] × u[e] + mw[k]. The kernel
// templates (matmul_q16.cpp, matmul_q16_avx2.cpp) own the order of every fp32
// operation; a format only says which integers and which factors, so one
// reduction order serves every format and every instruction set.
//
// |u| ≤ 4,096 in every format (Q6_K's q × scale is the largest), so a pair of
// int16 products (vpmaddwd) and a lane's four products stay inside int32.
//
// Everything here has internal linkage (an unnamed namespace, static inline):
// each instruction-set file compiles its own copy with its own flags, and the
// linker must not merge an AVX2 copy into the portable path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "engine/quant_blocks.hpp"
#include "gguf/ggml_type.hpp"

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace activekv::engine::formats {
namespace {

using gguf::GgmlType;
using namespace blocks;

constexpr int block = 32;  // elements per activation block

template <class Block>
static inline const Block& block_at(const std::uint8_t* row, std::size_t i) {
  return reinterpret_cast<const Block*>(row)[i];
}

// scales() of the legacy formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0): the f16 factors of nb consecutive blocks, d at
// byte 0 of each and, where HasMin, m at byte 2, as floats. Where F16C is compiled in, 8 blocks at a time: the
// fields gathered into one vector and converted by one vcvtph2ps, exact as half_to_float is, which keeps the
// rest of a row from a group holding an infinity or a NaN on (F16C would quiet a signalling NaN), so the floats
// are the same on every path. At batch 1-4 the scalar conversion of two fields per block was a fifth of the
// Q4_1 kernel's time.
template <class Block, bool HasMin>
static inline void legacy_scales(const std::uint8_t* row, std::size_t nb, float* dw, float* mw) {
  std::size_t k = 0;
#if defined(__AVX2__) && defined(__F16C__)
  const auto field32 = [&](std::size_t i) {
    std::uint32_t v;
    std::memcpy(&v, row + i * sizeof(Block), sizeof v);
    return static_cast<int>(v);
  };
  const auto field16 = [&](std::size_t i) {
    std::uint16_t v;
    std::memcpy(&v, row + i * sizeof(Block), sizeof v);
    return static_cast<short>(v);
  };
  const __m128i exponent = _mm_set1_epi16(0x7c00);
  const auto special = [&](__m128i h) {
    return _mm_movemask_epi8(_mm_cmpeq_epi16(_mm_and_si128(h, exponent), exponent)) != 0;
  };
  for (; k + 8 <= nb; k += 8) {
    __m128i d;
    [[maybe_unused]] __m128i m;
    if constexpr (HasMin) {
      // (d | m << 16) of each block; within each 128-bit half the d's to bytes 0..7 and the m's to 8..15, then
      // the 64-bit quarters reordered to d0..d7 | m0..m7.
      // Inserted lane by lane: built from eight general registers, GCC 12 may pass the vector through the stack
      // (a failed store forward per group, measured as half the time of a 576-column Q4_1 product at batch 1).
      const auto four = [&](std::size_t i) {
        __m128i v = _mm_cvtsi32_si128(field32(i));
        v = _mm_insert_epi32(v, field32(i + 1), 1);
        v = _mm_insert_epi32(v, field32(i + 2), 2);
        return _mm_insert_epi32(v, field32(i + 3), 3);
      };
      const __m256i dm = _mm256_inserti128_si256(_mm256_castsi128_si256(four(k)), four(k + 4), 1);
      const __m256i split = _mm256_shuffle_epi8(
          dm, _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                               0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15));
      const __m256i ordered = _mm256_permute4x64_epi64(split, 0xD8);
      d = _mm256_castsi256_si128(ordered);
      m = _mm256_extracti128_si256(ordered, 1);
      if (special(d) || special(m)) break;
      _mm256_storeu_ps(mw + k, _mm256_cvtph_ps(m));
    } else {
      // The lane index of _mm_insert_epi16 must be a constant at every optimisation level: written out.
      d = _mm_cvtsi32_si128(field16(k) & 0xffff);
      d = _mm_insert_epi16(d, field16(k + 1), 1);
      d = _mm_insert_epi16(d, field16(k + 2), 2);
      d = _mm_insert_epi16(d, field16(k + 3), 3);
      d = _mm_insert_epi16(d, field16(k + 4), 4);
      d = _mm_insert_epi16(d, field16(k + 5), 5);
      d = _mm_insert_epi16(d, field16(k + 6), 6);
      d = _mm_insert_epi16(d, field16(k + 7), 7);
      if (special(d)) break;
    }
    _mm256_storeu_ps(dw + k, _mm256_cvtph_ps(d));
  }
#endif
  for (; k < nb; ++k) {
    dw[k] = half_to_float(block_at<Block>(row, k).d);
    if constexpr (HasMin) mw[k] = half_to_float(block_at<Block>(row, k).m);
  }
}

#if defined(__AVX2__)
// 16 bytes widened to 16 × int16 (zero-extended).
static inline __m256i widen16(const std::uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// 16 bytes of nibble pairs as 32 bytes in element order: the low nibbles (elements 0..15), then the high ones.
static inline __m256i nibbles32(const std::uint8_t* p) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(0x0F));
}
// Bit j of `bits` (j = 0..31) as 16 in byte j, else 0: the fifth bits of 32 five-bit values.
static inline __m256i bit4_bytes(std::uint32_t bits) {
  // Byte j takes byte j / 8 of `bits` (the shuffle works within each 128-bit half; both hold all four bytes).
  const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)),
                                             _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                                                0x0202020202020202, 0x0303030303030303));
  const __m256i byte_bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, byte_bit), byte_bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(16));
}
// Bit j of `bits` (j = 0..15) as 16 in lane j, else 0: the fifth bit of a 5-bit value.
static inline __m256i bit4_lanes(std::uint32_t bits) {
  const __m256i lane_bit = _mm256_setr_epi16(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384,
                                             static_cast<short>(-32768));
  const __m256i set = _mm256_cmpeq_epi16(_mm256_and_si256(_mm256_set1_epi16(static_cast<short>(bits)), lane_bit), lane_bit);
  return _mm256_and_si256(set, _mm256_set1_epi16(16));
}
#endif

}  // namespace
}  // namespace activekv::engine::formats
