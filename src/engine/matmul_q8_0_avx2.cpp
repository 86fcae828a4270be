// matmul_q8_0_avx2.cpp — the legacy formats' 8-bit-activation path with AVX2
// byte dot products (compiled with -mavx2 -mfma -mf16c; called only where
// isa_available(Isa::avx2)). The order of every fp32 operation is the one
// matmul_q8_0.hpp states, so the bits equal the portable path's.
//
// Kernel: a tile of R weight rows × V activation rows. For each 32-element
// block the R weight blocks are unpacked once into 32 bytes each (formats/*.hpp
// bytes()) and every one of the V activation blocks (32 int8, one load) is
// multiplied with them: vpmaddubsw (unsigned byte × signed byte, pairs into
// int16: at most 2 × 128 × 127, no saturation; a signed weight goes in as its
// magnitude with its sign moved onto the activation, vpsignb), vpmaddwd with
// ones (pairs into the 8 int32 lanes), one conversion and one FMA per block.
// The rows ahead are prefetched and the 8 lanes summed as the 16-bit path's
// kernels do (matmul_q16_x86.hpp). Internal linkage only.
#include <immintrin.h>

#include <cmath>

#include "engine/formats/all.hpp"
#include "engine/matmul_q16_x86.hpp"
#include "engine/matmul_q8_0.hpp"

namespace activekv::engine::detail {
namespace {

// Rows r0..r0+R of w against activation rows b0..b0+V.
template <class F, int R, int V>
static inline void tile(const MatrixView& w, const Q8_0Rows& x, std::uint32_t r0, std::size_t b0, float* y,
                        std::size_t y_stride) {
  using Block = typename F::block_type;
  constexpr bool is_signed = !F::has_min;
  const std::size_t nb = w.cols / q8_0_block;
  const __m256i ones = _mm256_set1_epi16(1);
  const std::uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w.data + (r0 + r) * w.row_bytes;
  __m256 acc[R][V];
  float mins[R][V];
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      acc[r][v] = _mm256_setzero_ps();
      mins[r][v] = 0.0f;
    }
  for (std::size_t k = 0; k < nb; ++k) {
    __m256i wv[R], wabs[R];
    float dw[R], mw[R];
    for (int r = 0; r < R; ++r) {
      const Block& blk = reinterpret_cast<const Block*>(rows[r])[k];
      dw[r] = _cvtsh_ss(blk.d);  // exact, as half_to_float
      if constexpr (F::has_min) mw[r] = _cvtsh_ss(blk.m);
      wv[r] = F::bytes(rows[r], k);
      if constexpr (is_signed) wabs[r] = _mm256_sign_epi8(wv[r], wv[r]);
    }
    for (int v = 0; v < V; ++v) {
      const std::size_t row = b0 + v;
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + row * x.cols + k * q8_0_block));
      const float dx = x.d[row * nb + k];
      for (int r = 0; r < R; ++r) {
        __m256i p16;
        if constexpr (is_signed) p16 = _mm256_maddubs_epi16(wabs[r], _mm256_sign_epi8(xv, wv[r]));
        else p16 = _mm256_maddubs_epi16(wv[r], xv);
        const __m256 p = _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, ones));
        acc[r][v] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw[r] * dx), acc[r][v]);
        if constexpr (F::has_min) {
          const float m = mw[r] * x.s[row * nb + k];
          mins[r][v] = mins[r][v] + m;
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      const float sum = hsum(acc[r][v]);
      y[(b0 + v) * y_stride + r0 + r] = F::has_min ? sum + mins[r][v] : sum;
    }
}

template <class F, int TR, int TV>
static void run_tiles(const Q8_0Args& a) {
  const Q8_0Rows& x = *a.x;
  constexpr std::size_t vec_block = 64;  // activation rows that stay in the L2 cache while the weight rows pass
  for (std::size_t b0 = 0; b0 < x.batch; b0 += vec_block) {
    const std::size_t b1 = b0 + vec_block < x.batch ? b0 + vec_block : x.batch;
    std::uint32_t r = a.row_begin;
    for (; r + TR <= a.row_end; r += TR) {
      prefetch_ahead(*a.w, r, TR);  // short rows: the next tiles' first lines before the prefetcher finds them
      std::size_t b = b0;
      for (; b + TV <= b1; b += TV) tile<F, TR, TV>(*a.w, x, r, b, a.y, a.y_stride);
      for (; b < b1; ++b) tile<F, TR, 1>(*a.w, x, r, b, a.y, a.y_stride);
    }
    for (; r < a.row_end; ++r) {
      std::size_t b = b0;
      for (; b + TV <= b1; b += TV) tile<F, 1, TV>(*a.w, x, r, b, a.y, a.y_stride);
      for (; b < b1; ++b) tile<F, 1, 1>(*a.w, x, r, b, a.y, a.y_stride);
    }
  }
}

// Batches of 4 or more (prefill): tiles of 1 row × 4 activation rows, as the K-quant path (matmul_q8_avx2.cpp);
// decode (batch 1 to 3): 2 rows at a time, two independent chains.
template <class F>
static void matmul(const Q8_0Args& a) {
  if (a.x->batch >= 4) {
    run_tiles<F, 1, 4>(a);
    return;
  }
  run_tiles<F, 2, 1>(a);
}

}  // namespace

void quantize_q8_0_avx2(const float* x, std::size_t x_stride, const Q8_0Rows& out, std::size_t row_begin,
                        std::size_t row_end) noexcept {
  const std::size_t nb = out.cols / q8_0_block;
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256i lim = _mm256_set1_epi32(127);
  const __m256i neg_lim = _mm256_set1_epi32(-127);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (std::size_t b = row_begin; b < row_end; ++b) {
    for (std::size_t k = 0; k < nb; ++k) {
      const float* xs = x + b * x_stride + k * q8_0_block;
      __m256 v[4];
      for (int j = 0; j < 4; ++j) v[j] = _mm256_loadu_ps(xs + 8 * j);
      __m256 amax = _mm256_andnot_ps(sign_bit, v[0]);
      for (int j = 1; j < 4; ++j) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v[j]));
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float a = _mm_cvtss_f32(m4);
      const float d = a / 127.0f;
      float is = a != 0.0f ? 127.0f / a : 0.0f;
      is = std::isfinite(is) ? is : 0.0f;  // as the portable path
      const __m256 vis = _mm256_set1_ps(is);
      __m256i q[4];
      for (int j = 0; j < 4; ++j) {
        // Round to nearest even (the default MXCSR mode, as lrint), clamp to ±127.
        q[j] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(v[j], vis)), lim), neg_lim);
      }
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q + b * out.cols + k * q8_0_block),
                          _mm256_permutevar8x32_epi32(bytes, order));
      const __m256i sum = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      out.d[b * nb + k] = _cvtsh_ss(blocks::float_to_half(d));
      out.s[b * nb + k] = _cvtsh_ss(blocks::float_to_half(d * static_cast<float>(_mm_cvtsi128_si32(s4))));
    }
  }
}

void matmul_q8_0_avx2(const Q8_0Args& a) noexcept {
  formats::q8_0_format_of(a.w->type, [&](auto format) { matmul<decltype(format)>(a); });
}

}  // namespace activekv::engine::detail
