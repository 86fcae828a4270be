// matmul_q8_x86.hpp — what the x86 kernels of the 8-bit K-quant path share
// (matmul_q8_avx2.cpp, matmul_q8_avx512.cpp): a super-block's factors decoded
// with vector operations, its values unpacked to bytes, and the interleaved
// layout of the prefill kernels (N weight rows, one per 32-bit lane). Needs AVX2,
// FMA and F16C; internal linkage: each instruction-set file compiles its own copy.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "engine/matmul_q8.hpp"
#include "engine/quant_blocks.hpp"

namespace activekv::engine::detail {
namespace {

using gguf::GgmlType;

// A super-block's factors, decoded once per weight row and super-block: the integer scales as int16 (Q4_K and
// Q5_K: the 8 per-32 scales in elements 0..7 and the 8 minimums in 8..15; Q6_K: the 16 per-16 scales), Q6_K's
// block sums' factors mk = 32 × sc per 16 (int16, one aligned vector) and the fp32 factors.
struct alignas(32) Prep {
  std::int16_t mk[16];  // Q6_K only
  std::int16_t sc[16];
  float d;
  float dmin;  // 0 for Q6_K
};

// Q4_K/Q5_K's 12 scale bytes as two 64-bit words of 8 bytes each: the 6-bit scales, the 6-bit minimums
// (q4_k_scale_min: j < 4 from the low 6 bits of bytes j and j + 4; j ≥ 4 from the nibbles of bytes j + 4
// and the top 2 bits of bytes j − 4 and j).
static inline __m128i k4_scale_bytes(const std::uint8_t* q) {
  std::uint32_t u0, u1, u2;
  std::memcpy(&u0, q, 4);
  std::memcpy(&u1, q + 4, 4);
  std::memcpy(&u2, q + 8, 4);
  const std::uint32_t sc_lo = u0 & 0x3f3f3f3fu, mn_lo = u1 & 0x3f3f3f3fu;
  const std::uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
  const std::uint32_t mn_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
  return _mm_set_epi32(static_cast<int>(mn_hi), static_cast<int>(mn_lo), static_cast<int>(sc_hi),
                       static_cast<int>(sc_lo));
}

template <GgmlType T>
static inline void prep(const std::uint8_t* sb, Prep* p) {
  if constexpr (T == GgmlType::q6_k) {
    const auto& b = *reinterpret_cast<const blocks::BlockQ6_K*>(sb);
    const __m256i sc = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.scales)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(p->sc), sc);
    _mm256_store_si256(reinterpret_cast<__m256i*>(p->mk), _mm256_slli_epi16(sc, 5));  // 32 × sc
    p->d = _cvtsh_ss(b.d);
    p->dmin = 0.0f;
  } else {
    using Block = std::conditional_t<T == GgmlType::q4_k, blocks::BlockQ4_K, blocks::BlockQ5_K>;
    const auto& b = *reinterpret_cast<const Block*>(sb);
    // Scales 0..7 | minimums 0..7 (the epilogue reads the minimums with the activation's sums per 32; mk unused)
    _mm256_store_si256(reinterpret_cast<__m256i*>(p->sc), _mm256_cvtepu8_epi16(k4_scale_bytes(b.scales)));
    p->d = _cvtsh_ss(b.d);
    p->dmin = _cvtsh_ss(b.dmin);
  }
}

// The chunks one load step yields: Q4_K/Q5_K 2 (the low and high nibbles of 32 bytes), Q6_K 4 (ql's two
// 32-byte halves at shifts 0 and 4, with qh's four 2-bit fields).
template <GgmlType T>
constexpr int step_chunks = T == GgmlType::q6_k ? 4 : 2;

// Step k's chunks of super-block `sb` as unsigned bytes u (chunk step_chunks × k + j in w[j]).
template <GgmlType T>
static inline void unpack(const std::uint8_t* sb, int k, __m256i* w) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  if constexpr (T == GgmlType::q6_k) {
    const auto& b = *reinterpret_cast<const blocks::BlockQ6_K*>(sb);
    const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * k));
    const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * k + 32));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * k));
    const __m256i high2 = _mm256_set1_epi8(0x30);
    w[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), high2));
    w[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), high2));
    w[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), _mm256_and_si256(qh, high2));
    w[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                           _mm256_and_si256(_mm256_srli_epi16(qh, 2), high2));
  } else {
    using Block = std::conditional_t<T == GgmlType::q4_k, blocks::BlockQ4_K, blocks::BlockQ5_K>;
    const auto& b = *reinterpret_cast<const Block*>(sb);
    const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * k));
    w[0] = _mm256_and_si256(qs, low4);
    w[1] = _mm256_and_si256(_mm256_srli_epi16(qs, 4), low4);
    if constexpr (T == GgmlType::q5_k) {
      const __m256i qh = _mm256_srl_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh)),
                                          _mm_cvtsi32_si128(2 * k));
      const __m256i bit4 = _mm256_set1_epi8(0x10);
      w[0] = _mm256_or_si256(w[0], _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
      w[1] = _mm256_or_si256(w[1], _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
    }
  }
}

template <GgmlType T>
static inline std::size_t super_bytes() {
  if constexpr (T == GgmlType::q4_k) return sizeof(blocks::BlockQ4_K);
  else if constexpr (T == GgmlType::q5_k) return sizeof(blocks::BlockQ5_K);
  else return sizeof(blocks::BlockQ6_K);
}

static inline std::int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// Q4_K/Q5_K: the activation's sums per 32 of super-block i, b32[j] = bsum[2j] + bsum[2j+1] (|·| ≤ 32 × 127),
// as 8 int16.
static inline __m128i sums_per_32(const std::int16_t* bsum) {
  const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsum));
  return _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
}

// Prefill: N weight rows (8 or 16) interleaved, one row per 32-bit lane (the layout llama.cpp's repack.cpp
// builds at load; here built per tile, on the stack, and shared by up to 64 activation rows). Super-block i of
// rows r0..r0+N−1:
template <int N>
struct alignas(64) Interleaved {
  // [chunk c][step k]: lane r holds row r's elements 32c + 4k .. 32c + 4k + 3: u, or (Q6_K where `offset`)
  // u − 32 as a signed byte
  std::uint8_t u[8][8][4 * N];
  std::int16_t sc[16][2 * N];  // [group g]: lane r holds (sc, sc) of row r, group g
  std::int16_t mk[4][2 * N];   // Q4_K/Q5_K, [t]: lane r holds row r's minimums (m[2t], m[2t+1])
  float d[N];
  float dmin[N];
};

// 8 rows of 8 dwords → 8 vectors of one dword from each row: out[k] lane r = in[r] lane k.
static inline void transpose8(const __m256i* in, __m256i* out) {
  __m256i t[8], u[8];
  for (int h = 0; h < 2; ++h) {
    t[4 * h + 0] = _mm256_unpacklo_epi32(in[4 * h + 0], in[4 * h + 1]);
    t[4 * h + 1] = _mm256_unpackhi_epi32(in[4 * h + 0], in[4 * h + 1]);
    t[4 * h + 2] = _mm256_unpacklo_epi32(in[4 * h + 2], in[4 * h + 3]);
    t[4 * h + 3] = _mm256_unpackhi_epi32(in[4 * h + 2], in[4 * h + 3]);
    u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);  // dwords 0 | 4 of rows 4h..4h+3
    u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);  // 1 | 5
    u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);  // 2 | 6
    u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);  // 3 | 7
  }
  for (int k = 0; k < 4; ++k) {
    out[k] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x20);
    out[k + 4] = _mm256_permute2x128_si256(u[k], u[4 + k], 0x31);
  }
}

// The first bytes of weight rows r0..r0+N−1 for an interleaved tile; rows at or past row_end repeat the last
// row (their lanes are computed and not stored).
template <int N>
static inline void tile_row_pointers(const MatrixView& w, std::uint32_t r0, std::uint32_t row_end,
                                     const std::uint8_t* (&rows)[N]) {
  for (int r = 0; r < N; ++r) {
    const std::uint32_t rr = r0 + static_cast<std::uint32_t>(r) < row_end ? r0 + static_cast<std::uint32_t>(r) : row_end - 1;
    rows[r] = w.data + std::size_t{rr} * w.row_bytes;
  }
}

// Super-block i of rows rows[0..N−1] into `out`; offset: Q6_K's values as u − 32.
template <GgmlType T, int N, bool offset>
static inline void interleave(const std::uint8_t* const* rows, std::size_t i, Interleaved<N>* out) {
  constexpr int steps = static_cast<int>(q8_block / q8_chunk) / step_chunks<T>;
  alignas(32) __m256i chunks[8][N];  // [c][r]
  for (int r = 0; r < N; ++r) {
    const std::uint8_t* sb = rows[r] + i * super_bytes<T>();
    for (int k = 0; k < steps; ++k) {
      __m256i wv[step_chunks<T>];
      unpack<T>(sb, k, wv);
      for (int j = 0; j < step_chunks<T>; ++j) chunks[step_chunks<T> * k + j][r] = wv[j];
    }
    Prep p;
    prep<T>(sb, &p);
    for (int g = 0; g < 16; ++g)
      out->sc[g][2 * r] = out->sc[g][2 * r + 1] = T == GgmlType::q6_k ? p.sc[g] : p.sc[g / 2];
    for (int t = 0; t < 4; ++t) {
      out->mk[t][2 * r] = p.sc[8 + 2 * t];
      out->mk[t][2 * r + 1] = p.sc[8 + 2 * t + 1];
    }
    out->d[r] = p.d;
    out->dmin[r] = p.dmin;
  }
  for (int c = 0; c < 8; ++c) {
    if constexpr (offset)
      for (int r = 0; r < N; ++r) chunks[c][r] = _mm256_sub_epi8(chunks[c][r], _mm256_set1_epi8(32));
    for (int h = 0; h < N / 8; ++h) {
      __m256i t[8];
      transpose8(chunks[c] + 8 * h, t);
      for (int k = 0; k < 8; ++k) _mm256_store_si256(reinterpret_cast<__m256i*>(out->u[c][k] + 32 * h), t[k]);
    }
  }
}

}  // namespace
}  // namespace activekv::engine::detail
