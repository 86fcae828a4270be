// matmul_avx512.cpp — the AVX-512 kernels (compiled with -mavx512f -mavx512bw
// -mavx512vl -mfma -mf16c; called only where isa_available(Isa::avx512)).
//
// A fused kernel works on tiles of 4 rows × 4 activation vectors: it unpacks
// each row's 32-element weight block into two registers of 16 floats once, and
// each vector's 32 activations are loaded once and used by all 4 rows — 32
// FMAs per 8 weight registers and 8 activation loads, so a prefill chunk is
// bound by the FMA units rather than by loads. A decode step (one vector) runs
// 4 rows at a time: 4 independent accumulator chains. 16 + 8 + 2 of the 32
// vector registers. Everything here has internal linkage (see quant_blocks.hpp).
#include <immintrin.h>

#include "engine/matmul_isa.hpp"
#include "engine/quant_blocks.hpp"

namespace activekv::engine::detail {
namespace {

using namespace blocks;

static inline float h2f(std::uint16_t h) { return _cvtsh_ss(h); }

struct LoadF32 {
  static constexpr std::size_t block_bytes = 32 * sizeof(float);
  static inline void load(const std::uint8_t* p, __m512& w0, __m512& w1) {
    w0 = _mm512_loadu_ps(p);
    w1 = _mm512_loadu_ps(p + 64);
  }
};

struct LoadF16 {
  static constexpr std::size_t block_bytes = 32 * sizeof(std::uint16_t);
  static inline void load(const std::uint8_t* p, __m512& w0, __m512& w1) {
    w0 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    w1 = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32)));
  }
};

struct LoadQ4_0 {
  static constexpr std::size_t block_bytes = sizeof(BlockQ4_0);
  static inline void load(const std::uint8_t* p, __m512& w0, __m512& w1) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(p);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(q, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    const float d = h2f(b->d);
    const __m512 vd = _mm512_set1_ps(d);
    const __m512 voff = _mm512_set1_ps(-8.0f * d);
    w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), vd, voff);
    w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), vd, voff);
  }
};

struct LoadQ4_1 {
  static constexpr std::size_t block_bytes = sizeof(BlockQ4_1);
  static inline void load(const std::uint8_t* p, __m512& w0, __m512& w1) {
    const auto* b = reinterpret_cast<const BlockQ4_1*>(p);
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(q, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    const __m512 vd = _mm512_set1_ps(h2f(b->d));
    const __m512 vm = _mm512_set1_ps(h2f(b->m));
    w0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(lo)), vd, vm);
    w1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(hi)), vd, vm);
  }
};

struct LoadQ8_0 {
  static constexpr std::size_t block_bytes = sizeof(BlockQ8_0);
  static inline void load(const std::uint8_t* p, __m512& w0, __m512& w1) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(p);
    const __m512 vd = _mm512_set1_ps(h2f(b->d));
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs));
    const __m128i q1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs + 16));
    w0 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)), vd);
    w1 = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)), vd);
  }
};

// A tile of R rows × G vectors: y[g × y_stride + r] = dot(row r, x + g × x_stride).
// Each (row, vector) pair has its own accumulator, summed in block order
// (low half, then high half of each block) and reduced at the end — the same
// order for every tile shape, so how rows and vectors are grouped (chunking,
// batching, thread split) never changes a bit of the result.
template <class L, int R, int G>
static inline void tile(const std::uint8_t* row, std::size_t row_bytes, std::size_t blocks_per_row, const float* x,
                        std::size_t x_stride, float* y, std::size_t y_stride) {
  __m512 acc[R][G];
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_ps();
  for (std::size_t k = 0; k < blocks_per_row; ++k) {
    __m512 w0[R];
    __m512 w1[R];
    for (int r = 0; r < R; ++r) L::load(row + r * row_bytes + k * L::block_bytes, w0[r], w1[r]);
    const float* xk = x + k * 32;
    for (int g = 0; g < G; ++g) {
      const __m512 xa = _mm512_loadu_ps(xk + g * x_stride);
      const __m512 xb = _mm512_loadu_ps(xk + g * x_stride + 16);
      for (int r = 0; r < R; ++r) {
        acc[r][g] = _mm512_fmadd_ps(w0[r], xa, acc[r][g]);
        acc[r][g] = _mm512_fmadd_ps(w1[r], xb, acc[r][g]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int g = 0; g < G; ++g) y[g * y_stride + r] = _mm512_reduce_add_ps(acc[r][g]);
}

// Rows [r, r + R) against every vector: groups of 4 vectors, then one at a time.
template <class L, int R>
static inline void rows_all_vectors(const MatmulArgs& a, std::uint32_t r, std::size_t blocks_per_row) {
  const MatrixView& w = *a.w;
  const std::uint8_t* row = w.data + r * w.row_bytes;
  std::size_t b = 0;
  for (; b + 4 <= a.batch; b += 4)
    tile<L, R, 4>(row, w.row_bytes, blocks_per_row, a.x + b * a.x_stride, a.x_stride, a.y + b * a.y_stride + r, a.y_stride);
  for (; b < a.batch; ++b)
    tile<L, R, 1>(row, w.row_bytes, blocks_per_row, a.x + b * a.x_stride, a.x_stride, a.y + b * a.y_stride + r, a.y_stride);
}

template <class L>
static void matmul_fused(const MatmulArgs& a) {
  const std::size_t blocks_per_row = a.w->cols / 32;
  std::uint32_t r = a.row_begin;
  for (; r + 4 <= a.row_end; r += 4) rows_all_vectors<L, 4>(a, r, blocks_per_row);
  for (; r < a.row_end; ++r) rows_all_vectors<L, 1>(a, r, blocks_per_row);
}

static inline float dot_f32(const float* w, const float* x, std::size_t n) {
  __m512 acc0 = _mm512_setzero_ps();
  __m512 acc1 = _mm512_setzero_ps();
  std::size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + i + 16), _mm512_loadu_ps(x + i + 16), acc1);
  }
  float sum = _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += w[i] * x[i];
  return sum;
}

// Types without a fused kernel: dequantise the row once, then SIMD dots.
static void matmul_scratch(const MatmulArgs& a) {
  const MatrixView& w = *a.w;
  for (std::uint32_t r = a.row_begin; r < a.row_end; ++r) {
    dequantize_row(w.type, w.data + r * w.row_bytes, a.scratch, w.cols);
    for (std::size_t b = 0; b < a.batch; ++b) a.y[b * a.y_stride + r] = dot_f32(a.scratch, a.x + b * a.x_stride, w.cols);
  }
}

}  // namespace

void matmul_avx512(const MatmulArgs& a) noexcept {
  const bool whole_blocks = a.w->cols % 32 == 0;
  switch (a.w->type) {
    case GgmlType::f32: whole_blocks ? matmul_fused<LoadF32>(a) : matmul_scratch(a); return;
    case GgmlType::f16: whole_blocks ? matmul_fused<LoadF16>(a) : matmul_scratch(a); return;
    case GgmlType::q4_0: matmul_fused<LoadQ4_0>(a); return;
    case GgmlType::q4_1: matmul_fused<LoadQ4_1>(a); return;
    case GgmlType::q8_0: matmul_fused<LoadQ8_0>(a); return;
    default: matmul_scratch(a); return;  // BF16, Q5_0, Q5_1, Q4_K, Q6_K
  }
}

}  // namespace activekv::engine::detail
