// matmul_q8_avx2.cpp — the 8-bit-activation path with AVX2 byte dot products
// (compiled with -mavx2 -mfma -mf16c; called only where isa_available(Isa::avx2)).
// The order of every fp32 operation is the one matmul_q8.hpp states, so the
// bits equal the portable path's.
//
// Kernel: a tile of R weight rows × V activation rows. For each super-block the
// R rows' scales are decoded once; then for each chunk of 32 elements the R
// weight chunks are unpacked once into 32 bytes each and every one of the V
// activation chunks (32 int8, one load) is multiplied with them: vpmaddubsw
// (unsigned weight byte × signed activation byte, pairs into int16: at most
// 2 × 32 × 127, no saturation), vpmaddwd with the group scales (pairs into
// int32), one add — 3 operations per 32 multiply-adds where the 16-bit path
// needs 5 per 32 and twice the activation bytes. Q6_K's values go in unsigned
// (0..63) and their −32 offset comes off through the activation's block sums
// (one vpmaddwd per super-block). Once per super-block the 8 integer lanes become fp32 (exactly)
// and meet dw × dx in one FMA. Internal linkage only.
#include <immintrin.h>

#include <cmath>

#include "engine/formats/k_super.hpp"
#include "engine/matmul_q8.hpp"

namespace activekv::engine::detail {
namespace {

using formats::KScales;
using gguf::GgmlType;

static inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// Chunk c's 32 unsigned integers u of super-block `sb`, one per byte.
template <GgmlType T>
static inline __m256i chunk(const std::uint8_t* sb, int c) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  if constexpr (T == GgmlType::q6_k) {
    const auto& b = *reinterpret_cast<const blocks::BlockQ6_K*>(sb);
    const int n = c / 4, t = c % 4;
    const __m256i ql = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.ql + 64 * n + 32 * (t % 2)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh + 32 * n));
    const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(ql, _mm_cvtsi32_si128(4 * (t / 2))), low4);
    const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * t)), _mm256_set1_epi8(0x03));
    return _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));  // 0..63; the −32 goes through the block sums
  } else {
    using Block = std::conditional_t<T == GgmlType::q4_k, blocks::BlockQ4_K, blocks::BlockQ5_K>;
    const auto& b = *reinterpret_cast<const Block*>(sb);
    const __m256i qs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * (c / 2)));
    __m256i q = _mm256_and_si256(_mm256_srl_epi16(qs, _mm_cvtsi32_si128(4 * (c % 2))), low4);
    if constexpr (T == GgmlType::q5_k) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh));
      const __m256i h = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(c)), _mm256_set1_epi8(0x01));
      q = _mm256_or_si256(q, _mm256_slli_epi16(h, 4));
    }
    return q;
  }
}

template <GgmlType T>
static inline std::size_t super_bytes() {
  if constexpr (T == GgmlType::q4_k) return sizeof(blocks::BlockQ4_K);
  else if constexpr (T == GgmlType::q5_k) return sizeof(blocks::BlockQ5_K);
  else return sizeof(blocks::BlockQ6_K);
}

// Rows r0..r0+R of w against activation rows b0..b0+V. s: the rows' decoded scales, R × nb.
template <GgmlType T, int R, int V>
static inline void tile(const MatrixView& w, const Q8Rows& x, std::uint32_t r0, std::size_t b0, const KScales* sr,
                        float* y, std::size_t y_stride) {
  constexpr bool has_min = T != GgmlType::q6_k;
  constexpr int chunks = static_cast<int>(q8_block / q8_chunk);
  constexpr int groups = static_cast<int>(q8_block / q8_group);
  const std::size_t nb = w.cols / q8_block;
  const std::uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w.data + (r0 + r) * w.row_bytes;
  __m256 acc[R][V];
  __m128 mins4[R][V];  // Q4_K: the minimums' 4 lanes
  float mins[R][V];    // Q5_K: their scalar sum
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      acc[r][v] = _mm256_setzero_ps();
      mins4[r][v] = _mm_setzero_ps();
      mins[r][v] = 0.0f;
    }
  for (std::size_t i = 0; i < nb; ++i) {
    const KScales* s[R];
    for (int r = 0; r < R; ++r) s[r] = sr + r * nb + i;
    __m256i isum[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) isum[r][v] = _mm256_setzero_si256();
    // Not unrolled further: fully unrolled, the compiler keeps every chunk's unpacked weights live at once and
    // spills them (measured: a third of the kernel's time in stack stores).
#pragma GCC unroll 2
    for (int c = 0; c < chunks; ++c) {
      __m256i wv[R], sc[R];
      for (int r = 0; r < R; ++r) {
        wv[r] = chunk<T>(rows[r] + i * super_bytes<T>(), c);
        if constexpr (T == GgmlType::q6_k)
          sc[r] = _mm256_setr_m128i(_mm_set1_epi16(s[r]->sc[2 * c]), _mm_set1_epi16(s[r]->sc[2 * c + 1]));
        else
          sc[r] = _mm256_set1_epi16(s[r]->sc[2 * c]);  // one scale per 32: a single broadcast
      }
      for (int v = 0; v < V; ++v) {
        const __m256i xv = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(x.q + (b0 + v) * x.cols + i * q8_block + c * q8_chunk));
        for (int r = 0; r < R; ++r) {
          const __m256i p = _mm256_maddubs_epi16(wv[r], xv);
          isum[r][v] = _mm256_add_epi32(isum[r][v], _mm256_madd_epi16(p, sc[r]));
        }
      }
    }
    for (int v = 0; v < V; ++v) {
      const float dx = x.d[(b0 + v) * nb + i];
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsum + ((b0 + v) * nb + i) * groups));
      for (int r = 0; r < R; ++r) {
        const __m256i m = _mm256_madd_epi16(bs, _mm256_load_si256(reinterpret_cast<const __m256i*>(s[r]->mk)));
        const __m256 scale = _mm256_set1_ps(s[r]->d * dx);
        if constexpr (has_min) {
          acc[r][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][v]), scale, acc[r][v]);
          // Lanes k = M_2k + M_2k+1: the pairwise sums' low halves, lanes 0, 1 and 4, 5 of vphaddd.
          const __m256i pairs = _mm256_hadd_epi32(m, m);
          const __m128i m4 = _mm256_castsi256_si128(_mm256_permute4x64_epi64(pairs, 0x08));
          const float scale_min = -(s[r]->dmin * dx);
          if constexpr (T == GgmlType::q4_k) {
            mins4[r][v] = _mm_fmadd_ps(_mm_cvtepi32_ps(m4), _mm_set1_ps(scale_min), mins4[r][v]);
          } else {
            __m128i t = _mm_add_epi32(m4, _mm_shuffle_epi32(m4, 0x4E));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
            mins[r][v] = std::fma(scale_min, static_cast<float>(_mm_cvtsi128_si32(t)), mins[r][v]);
          }
        } else {
          acc[r][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum[r][v], m)), scale, acc[r][v]);
        }
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < V; ++v) {
      float out = hsum(acc[r][v]);
      if constexpr (T == GgmlType::q4_k) {
        const __m128 t = _mm_add_ps(mins4[r][v], _mm_movehl_ps(mins4[r][v], mins4[r][v]));  // (a0+a2), (a1+a3)
        out = out + _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
      } else if constexpr (T == GgmlType::q5_k) {
        out = out + mins[r][v];
      }
      y[(b0 + v) * y_stride + r0 + r] = out;
    }
}

template <GgmlType T, int TR, int TV>
static void run_tiles(const Q8Args& a);

// The R rows' scales are decoded once (q8_supported bounds nb by q8_super_blocks_max) and serve every
// activation row.
template <GgmlType T, int R, int V>
static inline void row_tile(const MatrixView& w, const Q8Rows& x, std::uint32_t r0, std::size_t b_begin,
                            std::size_t b_end, float* y, std::size_t y_stride) {
  const std::size_t nb = w.cols / q8_block;
  KScales s[R * q8_super_blocks_max];
  for (int r = 0; r < R; ++r)
    for (std::size_t i = 0; i < nb; ++i) formats::k_scales(T, w.data + (r0 + r) * w.row_bytes, i, &s[r * nb + i]);
  std::size_t b = b_begin;
  for (; b + V <= b_end; b += V) tile<T, R, V>(w, x, r0, b, s, y, y_stride);
  for (; b < b_end; ++b) tile<T, R, 1>(w, x, r0, b, s, y, y_stride);
}

// Batches of 4 or more (prefill): tiles of 1 row × 4 activation rows; measured on the development VM
// (1 thread, a 256-token Q4_K prefill, CPU seconds): 1 × 4 and 2 × 2 best, 2 × 4, 1 × 8 and 2 × 6 7 % slower,
// 3 × 4 and 4 × 2 10 % slower (with the chunk loop fully unrolled); once it was not, 1 × 4 and 2 × 4 equal
// (152 tokens per CPU second, the 16-bit path 95). Decode (batch 1 to 3): 2 rows at a time, two
// independent chains.
template <GgmlType T>
static void matmul(const Q8Args& a) {
  const Q8Rows& x = *a.x;
  if (x.batch >= 4) {
    run_tiles<T, 1, 4>(a);
    return;
  }
  run_tiles<T, 2, 1>(a);
}

template <GgmlType T, int TR, int TV>
static void run_tiles(const Q8Args& a) {
  const Q8Rows& x = *a.x;
  constexpr std::size_t vec_block = 64;  // activation rows that stay in the L2 cache while the weight rows pass
  for (std::size_t b0 = 0; b0 < x.batch; b0 += vec_block) {
    const std::size_t b1 = b0 + vec_block < x.batch ? b0 + vec_block : x.batch;
    std::uint32_t r = a.row_begin;
    for (; r + TR <= a.row_end; r += TR) row_tile<T, TR, TV>(*a.w, x, r, b0, b1, a.y, a.y_stride);
    for (; r < a.row_end; ++r) row_tile<T, 1, TV>(*a.w, x, r, b0, b1, a.y, a.y_stride);
  }
}

}  // namespace

void quantize_q8_avx2(const float* x, std::size_t x_stride, const Q8Rows& out, std::size_t row_begin,
                      std::size_t row_end) noexcept {
  const std::size_t nb = out.cols / q8_block;
  constexpr int chunks = static_cast<int>(q8_block / q8_chunk);
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256i lim = _mm256_set1_epi32(127);
  const __m256i neg_lim = _mm256_set1_epi32(-127);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (std::size_t b = row_begin; b < row_end; ++b) {
    for (std::size_t k = 0; k < nb; ++k) {
      const float* xs = x + b * x_stride + k * q8_block;
      __m256 amax = _mm256_setzero_ps();
      for (std::uint32_t i = 0; i < q8_block; i += 8)
        amax = _mm256_max_ps(_mm256_andnot_ps(sign_bit, _mm256_loadu_ps(xs + i)), amax);
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float a = _mm_cvtss_f32(m4);
      const float is = a != 0.0f ? q8_max / a : 0.0f;
      const __m256 vis = _mm256_set1_ps(is);
      for (int c = 0; c < chunks; ++c) {
        __m256i q[4];
        for (int j = 0; j < 4; ++j) {
          // Round to nearest even (the default MXCSR mode, as lrint), clamp to ±127.
          const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xs + c * q8_chunk + 8 * j), vis);
          q[j] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(v), lim), neg_lim);
        }
        const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q + b * out.cols + k * q8_block + c * q8_chunk),
                            _mm256_permutevar8x32_epi32(bytes, order));
        for (int h = 0; h < 2; ++h) {  // the chunk's two groups of 16: q[0..1], q[2..3]
          const __m256i sum = _mm256_add_epi32(q[2 * h], q[2 * h + 1]);
          __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
          s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
          s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
          out.bsum[(b * nb + k) * (q8_block / q8_group) + 2 * c + h] = static_cast<std::int16_t>(_mm_cvtsi128_si32(s4));
        }
      }
      out.d[b * nb + k] = a != 0.0f ? 1.0f / is : 0.0f;
    }
  }
}

void matmul_q8_avx2(const Q8Args& a) noexcept {
  switch (a.w->type) {
    case GgmlType::q4_k: matmul<GgmlType::q4_k>(a); return;
    case GgmlType::q5_k: matmul<GgmlType::q5_k>(a); return;
    case GgmlType::q6_k: matmul<GgmlType::q6_k>(a); return;
    default: return;  // matmul_rows_q8 asserted q8_supported()
  }
}

}  // namespace activekv::engine::detail
