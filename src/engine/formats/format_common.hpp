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

#if defined(__AVX2__)
// 16 bytes widened to 16 × int16 (zero-extended).
static inline __m256i widen16(const std::uint8_t* p) {
  return _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
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
