// matmul_q8_avx2.cpp — the 8-bit-activation path with AVX2 integer dot
// products (compiled with -mavx2 -mfma -mf16c; called only where
// isa_available(Isa::avx2)). The order of every fp32 operation is the one
// matmul_q8.hpp states, so the bits equal the portable path's.
//
// Kernel: a tile of R weight rows × V activation rows. For each block the R
// weight blocks are unpacked once into 32 bytes each (Q4_1: the nibbles as
// 0..15; Q8_0: |u|, with the signs moved onto the activations) and every one
// of the V activation blocks is multiplied with them: vpmaddubsw (pairs of
// u8 × s8 into s16, at most 2 × 15 × 127 or 2 × 128 × 127, no saturation),
// vpmaddwd with ones (lane j = elements 4j..4j+3), one conversion and one FMA
// with dw × d. The activations are walked in blocks of 64 rows so that they
// stay in the L2 cache while a thread's weight rows pass over them.
// Internal linkage only.
#include <immintrin.h>

#include <cmath>

#include "engine/matmul_isa.hpp"
#include "engine/quant_blocks.hpp"

namespace activekv::engine::detail {
namespace {

using namespace blocks;

static inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

struct Q4_1 {
  using Block = BlockQ4_1;
  static constexpr bool has_min = true;
  // The 32 weights of the block as unsigned bytes in element order.
  static inline __m256i unpack(const Block& b) {
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
    const __m128i mask = _mm_set1_epi8(0x0F);
    const __m128i lo = _mm_and_si128(q, mask);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    return _mm256_set_m128i(hi, lo);
  }
  static inline __m256i signs(__m256i) { return _mm256_setzero_si256(); }
  // Activations as the signed operand of vpmaddubsw.
  static inline __m256i operand(__m256i x, __m256i) { return x; }
  static inline float min(const Block& b) { return _cvtsh_ss(b.m); }
};

struct Q8_0 {
  using Block = BlockQ8_0;
  static constexpr bool has_min = false;
  static inline __m256i raw(const Block& b) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)); }
  static inline __m256i unpack(const Block& b) { return _mm256_abs_epi8(raw(b)); }
  static inline __m256i signs(const Block& b) { return raw(b); }
  static inline __m256i operand(__m256i x, __m256i w_signs) { return _mm256_sign_epi8(x, w_signs); }
  static inline float min(const Block&) { return 0.0f; }
};

// Rows r0..r0+R of w against activation rows b0..b0+V. dw, mw: R × nb scales and minimums of the rows.
template <class T, int R, int V>
static inline void tile(const MatrixView& w, const Q8Rows& x, std::uint32_t r0, std::size_t b0, const float* dw,
                        const float* mw, float* y, std::size_t y_stride) {
  const std::size_t nb = w.cols / q8_block;
  const typename T::Block* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = reinterpret_cast<const typename T::Block*>(w.data + (r0 + r) * w.row_bytes);
  const std::int8_t* qx[V];
  const float* dx[V];
  for (int v = 0; v < V; ++v) {
    qx[v] = x.q + (b0 + v) * x.cols;
    dx[v] = x.d + (b0 + v) * nb;
  }
  __m256 acc[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::size_t k = 0; k < nb; ++k) {
    __m256i wu[R];
    __m256i ws[R];
    for (int r = 0; r < R; ++r) {
      wu[r] = T::unpack(rows[r][k]);
      if constexpr (!T::has_min) ws[r] = T::signs(rows[r][k]);
    }
    for (int v = 0; v < V; ++v) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx[v] + k * q8_block));
      const __m256 vdx = _mm256_broadcast_ss(dx[v] + k);
      for (int r = 0; r < R; ++r) {
        __m256i p;
        if constexpr (T::has_min) {
          p = _mm256_maddubs_epi16(wu[r], xv);
        } else {
          p = _mm256_maddubs_epi16(wu[r], T::operand(xv, ws[r]));
        }
        const __m256 f = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
        const __m256 scale = _mm256_mul_ps(_mm256_broadcast_ss(dw + r * nb + k), vdx);
        acc[r][v] = _mm256_fmadd_ps(f, scale, acc[r][v]);
      }
    }
  }
  const std::size_t whole = nb / 8 * 8;
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) {
      float sum = hsum(acc[r][v]);
      if constexpr (T::has_min) {
        const float* m = mw + r * nb;
        const float* sx = x.s + (b0 + v) * nb;
        __m256 lanes = _mm256_setzero_ps();
        for (std::size_t k = 0; k < whole; k += 8)
          lanes = _mm256_fmadd_ps(_mm256_loadu_ps(m + k), _mm256_loadu_ps(sx + k), lanes);
        float mins = hsum(lanes);
        for (std::size_t k = whole; k < nb; ++k) mins = std::fma(m[k], sx[k], mins);
        sum += mins;
      }
      y[(b0 + v) * y_stride + r0 + r] = sum;
    }
  }
}

template <class T, int R>
static inline void row_tile(const MatrixView& w, const Q8Rows& x, std::uint32_t r0, std::size_t b_begin,
                            std::size_t b_end, float* scratch, float* y, std::size_t y_stride) {
  const std::size_t nb = w.cols / q8_block;
  float* dw = scratch;           // R × nb
  float* mw = scratch + R * nb;  // R × nb
  for (int r = 0; r < R; ++r) {
    const auto* row = reinterpret_cast<const typename T::Block*>(w.data + (r0 + r) * w.row_bytes);
    for (std::size_t k = 0; k < nb; ++k) {
      dw[r * nb + k] = _cvtsh_ss(row[k].d);
      mw[r * nb + k] = T::min(row[k]);
    }
  }
  std::size_t b = b_begin;
  for (; b + 4 <= b_end; b += 4) tile<T, R, 4>(w, x, r0, b, dw, mw, y, y_stride);
  for (; b < b_end; ++b) tile<T, R, 1>(w, x, r0, b, dw, mw, y, y_stride);
}

template <class T>
static void matmul(const Q8Args& a) {
  const Q8Rows& x = *a.x;
  constexpr std::size_t vec_block = 64;
  for (std::size_t b0 = 0; b0 < x.batch; b0 += vec_block) {
    const std::size_t b1 = b0 + vec_block < x.batch ? b0 + vec_block : x.batch;
    std::uint32_t r = a.row_begin;
    for (; r + 2 <= a.row_end; r += 2) row_tile<T, 2>(*a.w, x, r, b0, b1, a.scratch, a.y, a.y_stride);
    for (; r < a.row_end; ++r) row_tile<T, 1>(*a.w, x, r, b0, b1, a.scratch, a.y, a.y_stride);
  }
}

}  // namespace

void quantize_q8_avx2(const float* x, std::size_t x_stride, const Q8Rows& out, std::size_t row_begin,
                      std::size_t row_end) noexcept {
  const std::size_t nb = out.cols / q8_block;
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256i lim = _mm256_set1_epi32(127);
  const __m256i neg_lim = _mm256_set1_epi32(-127);
  for (std::size_t b = row_begin; b < row_end; ++b) {
    for (std::size_t k = 0; k < nb; ++k) {
      const float* xs = x + b * x_stride + k * q8_block;
      __m256 v[4];
      __m256 amax = _mm256_setzero_ps();
      for (int i = 0; i < 4; ++i) {
        v[i] = _mm256_loadu_ps(xs + 8 * i);
        amax = _mm256_max_ps(_mm256_andnot_ps(sign_bit, v[i]), amax);
      }
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float d = _mm_cvtss_f32(m4) / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      const __m256 vid = _mm256_set1_ps(id);
      __m256i q[4];
      __m256i sum = _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i) {
        // Round to nearest even (the default MXCSR mode, as lrint), clamp to ±127.
        q[i] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[i], vid)), lim), neg_lim);
        sum = _mm256_add_epi32(sum, q[i]);
      }
      // 32 × int32 → 32 × int8 in element order (the packs interleave 128-bit halves; the permute undoes it).
      const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);
      const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
      const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q + b * out.cols + k * q8_block), p);
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      out.d[b * nb + k] = d;
      out.s[b * nb + k] = d * static_cast<float>(_mm_cvtsi128_si32(s4));
    }
  }
}

void matmul_q8_avx2(const Q8Args& a) noexcept {
  switch (a.w->type) {
    case GgmlType::q4_1: matmul<Q4_1>(a); return;
    case GgmlType::q8_0: matmul<Q8_0>(a); return;
    default: return;  // refused by matmul_rows_q8 (q8_supported)
  }
}

}  // namespace activekv::engine::detail
