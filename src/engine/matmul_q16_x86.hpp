// matmul_q16_x86.hpp — what the x86 kernels of the 16-bit-activation path share
// (matmul_q16_avx2.cpp, matmul_q16_avx512.cpp; the legacy 8-bit path's AVX-512
// kernel takes the sum and the prefetch too): the fixed sum of 8 lanes, the
// minimums' term in matmul_q16.hpp's order, and the weight-row prefetch. Needs
// AVX2 and FMA; internal linkage: each instruction-set file compiles its own copy.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "engine/matmul.hpp"

namespace activekv::engine::detail {
namespace {

// ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)) of 8 lanes.
static inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Σ mw × s over a row's nb blocks (matmul_q16.hpp): lanes j over k = 8c + j for whole groups of 8 blocks,
// added as hsum does, then the remaining blocks one by one with fma.
static inline float minimums(const float* mw, const float* s, std::size_t nb) {
  const std::size_t whole = nb / 8 * 8;
  __m256 lanes = _mm256_setzero_ps();
  for (std::size_t k = 0; k < whole; k += 8) lanes = _mm256_fmadd_ps(_mm256_loadu_ps(mw + k), _mm256_loadu_ps(s + k), lanes);
  float sum = hsum(lanes);
  for (std::size_t k = whole; k < nb; ++k) sum = std::fma(mw[k], s[k], sum);
  return sum;
}

// Asks for the bytes prefetch_bytes past weight rows r0..r0+rows (those the tiles after this one read) to be
// brought into the cache. At batch 1–4 a tile's arithmetic is too short for the core to reach the next rows'
// cache misses by itself: without this, the scales pass of row_tile stalls on every row's first loads.
// Loads asked for this far ahead overlap their latency with the current tile's work. A hint only: nothing
// computed depends on it, and nothing past the matrix's last byte is asked for.
constexpr std::size_t prefetch_bytes = 2048;

static inline void prefetch_ahead(const MatrixView& w, std::uint32_t r0, int rows) {
  const std::size_t end = std::size_t{w.rows} * w.row_bytes;
  const std::size_t from = std::size_t{r0} * w.row_bytes + prefetch_bytes;
  const std::size_t to = std::min(end, from + static_cast<std::size_t>(rows) * w.row_bytes);
  for (std::size_t at = from; at < to; at += 64) _mm_prefetch(reinterpret_cast<const char*>(w.data + at), _MM_HINT_T0);
}

}  // namespace
}  // namespace activekv::engine::detail
