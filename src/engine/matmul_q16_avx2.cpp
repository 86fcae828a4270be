// matmul_q16_avx2.cpp — the 16-bit-activation path with AVX2 integer dot
// products (compiled with -mavx2 -mfma -mf16c; called only where
// isa_available(Isa::avx2)). The order of every fp32 operation is the one
// matmul_q16.hpp states, so the bits equal the portable path's.
//
// Kernel: a tile of R weight rows × V activation rows, for every weight format
// of formats/all.hpp (each format's unpack gives a block's 32 integers). For
// each block the R weight blocks are widened once into two registers of 16 × int16 each
// (elements 0..15 and 16..31) and every one of the V activation blocks is
// multiplied with them: two vpmaddwd (pairs of int16 products into int32:
// at most 2 × 128 × 32767, exact), one add, one conversion to fp32 and one
// FMA with dw × d — 5 vector operations per 32 multiply-adds where the fp32
// kernel (matmul_avx2.cpp) needs 4 FMAs plus its share of the unpacking, and
// half the activation bytes to load. The activations are walked in blocks of
// 64 rows so that they stay in the L2 cache while a thread's weight rows pass
// over them. Internal linkage only.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "engine/matmul_isa.hpp"
#include "engine/formats/all.hpp"
#include "engine/matmul_q16_x86.hpp"

namespace activekv::engine::detail {
namespace {

// Rows r0..r0+R of w against activation rows b0..b0+V. dw, mw: R × nb scales and minimums of the rows.
template <class T, int R, int V>
static inline void tile(const MatrixView& w, const Q16Rows& x, std::uint32_t r0, std::size_t b0, const float* dw,
                        const float* mw, float* y, std::size_t y_stride) {
  const std::size_t nb = w.cols / q16_block;
  const std::uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w.data + (r0 + r) * w.row_bytes;
  const std::int16_t* qx[V];
  const float* dx[V];
  for (int v = 0; v < V; ++v) {
    qx[v] = x.q + (b0 + v) * x.cols;
    dx[v] = x.d + (b0 + v) * nb;
  }
  __m256 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
  for (std::size_t k = 0; k < nb; ++k) {
    __m256i wq[R][2];
    for (int r = 0; r < R; ++r) T::unpack(rows[r], k, wq[r]);
    [[maybe_unused]] __m256i wm[R][2];
    if constexpr (formats::GroupMins<T>)
      for (int r = 0; r < R; ++r) T::unpack_mins(rows[r], k, wm[r]);
    for (int v = 0; v < V; ++v) {
      const auto* xk = reinterpret_cast<const __m256i*>(qx[v] + k * q16_block);
      const __m256i x0 = _mm256_loadu_si256(xk);
      const __m256i x1 = _mm256_loadu_si256(xk + 1);
      const __m256 vdx = _mm256_broadcast_ss(dx[v] + k);
      for (int r = 0; r < R; ++r) {
        const __m256i p = _mm256_add_epi32(_mm256_madd_epi16(wq[r][0], x0), _mm256_madd_epi16(wq[r][1], x1));
        const __m256 scale = _mm256_mul_ps(_mm256_broadcast_ss(dw + r * nb + k), vdx);
        acc[r][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), scale, acc[r][v]);
        if constexpr (formats::GroupMins<T>) {
          const __m256i pm = _mm256_add_epi32(_mm256_madd_epi16(wm[r][0], x0), _mm256_madd_epi16(wm[r][1], x1));
          const __m256 scale_min = _mm256_mul_ps(_mm256_broadcast_ss(mw + r * nb + k), vdx);
          acc[r][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pm), scale_min, acc[r][v]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) {
      float sum = hsum(acc[r][v]);
      if constexpr (T::has_min) sum += minimums(mw + r * nb, x.s + (b0 + v) * nb, nb);
      y[(b0 + v) * y_stride + r0 + r] = sum;
    }
  }
}

template <class T, int R, int V>
static inline void row_tile(const MatrixView& w, const Q16Rows& x, std::uint32_t r0, std::size_t b_begin,
                            std::size_t b_end, float* scratch, float* y, std::size_t y_stride) {
  const std::size_t nb = w.cols / q16_block;
  prefetch_ahead(w, r0, R);
  float* dw = scratch;           // R × nb
  float* mw = scratch + R * nb;  // R × nb
  for (int r = 0; r < R; ++r) T::scales(w.data + (r0 + r) * w.row_bytes, nb, dw + r * nb, mw + r * nb);
  std::size_t b = b_begin;
  for (; b + V <= b_end; b += V) tile<T, R, V>(w, x, r0, b, dw, mw, y, y_stride);
  for (; b < b_end; ++b) tile<T, R, 1>(w, x, r0, b, dw, mw, y, y_stride);
}

// Tiles of 2 rows × 4 activation rows (8 accumulators, 4 weight registers: the 16 registers of AVX2).
// Measured at batch 64 on the development VM: 55 GFLOP/s per core against 42 for 1 × 4, 42 for 4 × 2,
// 49 for 3 × 4, 47 for 2 × 6, and 40 for the fp32 kernel.
template <class T>
static void matmul(const Q16Args& a) {
  constexpr int TR = 2;
  constexpr int TV = 4;
  const Q16Rows& x = *a.x;
  constexpr std::size_t vec_block = 64;
  for (std::size_t b0 = 0; b0 < x.batch; b0 += vec_block) {
    const std::size_t b1 = b0 + vec_block < x.batch ? b0 + vec_block : x.batch;
    std::uint32_t r = a.row_begin;
    for (; r + TR <= a.row_end; r += TR) row_tile<T, TR, TV>(*a.w, x, r, b0, b1, a.scratch, a.y, a.y_stride);
    for (; r < a.row_end; ++r) row_tile<T, 1, TV>(*a.w, x, r, b0, b1, a.scratch, a.y, a.y_stride);
  }
}

}  // namespace

void quantize_q16_avx2(const float* x, std::size_t x_stride, const Q16Rows& out, std::size_t row_begin,
                       std::size_t row_end) noexcept {
  const std::size_t nb = out.cols / q16_block;
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256i lim = _mm256_set1_epi32(32767);
  const __m256i neg_lim = _mm256_set1_epi32(-32767);
  for (std::size_t b = row_begin; b < row_end; ++b) {
    for (std::size_t k = 0; k < nb; ++k) {
      const float* xs = x + b * x_stride + k * q16_block;
      __m256 v[4];
      __m256 amax = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(xs + 8 * i);
        amax = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v[i]), amax);
      }
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float d = _mm_cvtss_f32(m4) / q16_max;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const __m256 vid = _mm256_set1_ps(id);
      __m256i q[4];
      __m256i sum = _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i) {
        // Round to nearest even (the default MXCSR mode, as lrint), clamp to ±32767.
        q[i] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], vid)), lim), neg_lim);
        sum = _mm256_add_epi32(sum, q[i]);
      }
      // 2 × 16 int32 → 16 int16 each, in element order (the pack interleaves 128-bit halves; the permute undoes it).
      auto* dst = reinterpret_cast<__m256i*>(out.q + b * out.cols + k * q16_block);
      _mm256_storeu_si256(dst, _mm256_permute4x64_epi64(_mm256_packs_epi32(q[0], q[1]), 0xD8));
      _mm256_storeu_si256(dst + 1, _mm256_permute4x64_epi64(_mm256_packs_epi32(q[2], q[3]), 0xD8));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      out.d[b * nb + k] = d;
      out.s[b * nb + k] = d * static_cast<float>(_mm_cvtsi128_si32(s4));
    }
  }
}

void matmul_q16_avx2(const Q16Args& a) noexcept {
  // Every type reaching here passed q16_supported(), which asks the same table.
  (void)formats::q16_format_of(a.w->type, [&](auto format) { matmul<decltype(format)>(a); });
}

}  // namespace activekv::engine::detail
