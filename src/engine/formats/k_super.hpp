// formats/k_super.hpp — the K-quant super-blocks (Q4_K, Q5_K, Q6_K) as the
// 8-bit-activation path (matmul_q8.hpp) reads them: per 256-element super-block
// the fp32 factors d and dmin, a signed integer scale per 16 elements, the factor
// mk per 16 elements of the activation's block sums, and (portable) the 256
// unsigned integers u (the stored bits) in element order; element e is worth
//   Q4_K, Q5_K: d × sc[e / 16] × u[e] − dmin × mk[e / 16]   (mk: the sub-block's minimum)
//   Q6_K:       d × sc[e / 16] × u[e] − d × mk[e / 16]      (mk = 32 × sc: the 6-bit value's offset)
//
// Chunk c (elements 32c .. 32c+31) of a super-block:
//   Q4_K/Q5_K: the nibbles of qs[32 (c/2) ..] at shift 4 (c % 2); Q5_K's fifth bit is bit c of qh[l];
//   Q6_K:      n = c / 4, t = c % 4: ql[64n + 32 (t%2) ..] at shift 4 (t/2), qh[32n ..] at shift 2t,
//              scales 8n + 2t (elements 0..15) and 8n + 2t + 1 (16..31).
// Internal linkage: each instruction-set file compiles its own copy.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/quant_blocks.hpp"
#include "gguf/ggml_type.hpp"

namespace activekv::engine::formats {
namespace {

using namespace blocks;

// No initialisers: the AVX2 kernel keeps a row pair's worth on its stack, filled by k_scales() alone.
struct alignas(32) KScales {
  std::int16_t mk[16];  // per 16 elements; first, so that it loads as one aligned vector
  std::int16_t sc[16];  // per 16 elements
  float d;
  float dmin;           // 0 for Q6_K
};

template <class Block>
static inline const Block& super_at(const std::uint8_t* row, std::size_t i) {
  return reinterpret_cast<const Block*>(row)[i];
}

// Q4_K and Q5_K share the scales layout.
template <class Block>
static inline void k4_scales(const Block& b, KScales* s) {
  s->d = half_to_float(b.d);
  s->dmin = half_to_float(b.dmin);
  for (int c = 0; c < 8; ++c) {
    std::uint8_t sc = 0, mn = 0;
    q4_k_scale_min(c, b.scales, &sc, &mn);
    s->sc[2 * c] = s->sc[2 * c + 1] = sc;
    s->mk[2 * c] = s->mk[2 * c + 1] = mn;
  }
}

static inline void k6_scales(const BlockQ6_K& b, KScales* s) {
  s->d = half_to_float(b.d);
  s->dmin = 0.0f;
  for (int g = 0; g < 16; ++g) {
    s->sc[g] = b.scales[g];
    s->mk[g] = static_cast<std::int16_t>(32 * b.scales[g]);  // |32 × sc| ≤ 4,096
  }
}

static inline void k_scales(gguf::GgmlType type, const std::uint8_t* row, std::size_t i, KScales* s) {
  if (type == gguf::GgmlType::q4_k) k4_scales(super_at<BlockQ4_K>(row, i), s);
  else if (type == gguf::GgmlType::q5_k) k4_scales(super_at<BlockQ5_K>(row, i), s);
  else k6_scales(super_at<BlockQ6_K>(row, i), s);
}

// The 256 integers u of super-block i, element order.
static inline void k_values(gguf::GgmlType type, const std::uint8_t* row, std::size_t i, int* u) {
  for (int c = 0; c < 8; ++c) {
    for (int l = 0; l < 32; ++l) {
      int v = 0;
      if (type == gguf::GgmlType::q6_k) {
        const BlockQ6_K& b = super_at<BlockQ6_K>(row, i);
        const int n = c / 4, t = c % 4;
        const int lo = (b.ql[64 * n + 32 * (t % 2) + l] >> (4 * (t / 2))) & 0x0F;
        const int hi = (b.qh[32 * n + l] >> (2 * t)) & 0x03;
        v = lo | (hi << 4);
      } else if (type == gguf::GgmlType::q5_k) {
        const BlockQ5_K& b = super_at<BlockQ5_K>(row, i);
        v = ((b.qs[32 * (c / 2) + l] >> (4 * (c % 2))) & 0x0F) | (((b.qh[l] >> c) & 1) << 4);
      } else {
        const BlockQ4_K& b = super_at<BlockQ4_K>(row, i);
        v = (b.qs[32 * (c / 2) + l] >> (4 * (c % 2))) & 0x0F;
      }
      u[32 * c + l] = v;
    }
  }
}

}  // namespace
}  // namespace activekv::engine::formats
