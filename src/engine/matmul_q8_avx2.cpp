// matmul_q8_avx2.cpp — the 8-bit-activation path with AVX2 byte dot products
// (compiled with -mavx2 -mfma -mf16c; called only where isa_available(Isa::avx2)).
// The order of every fp32 operation is the one matmul_q8.hpp states, so the
// bits equal the portable path's.
//
// Prefill (batches of 4 or more) is limited by the integer multiplier. It keeps
// 8 weight rows interleaved, one per 32-bit lane (the layout llama.cpp's
// repack.cpp builds at load): per super-block span the rows are unpacked,
// transposed in 4-byte units and kept on the stack, then serve up to 64
// activation rows, 4 at a time. Each step is one vpmaddubsw of 4 elements of all
// 8 rows against the activation's 4 bytes broadcast; Q4_K adds all 8 steps of a
// 32-element chunk in int16 (pair sums ≤ 2 × 15 × 127, 8 of them ≤ 30,480), Q5_K
// and Q6_K 4 (one group of 16), before one vpmaddwd applies the rows' scales: 9
// (Q4_K) or 10 multiplies per 256 products, where a row per register needs 12.
// Q6_K goes in as u − 32 (|·| ≤ 32) with its sign moved onto the activation byte
// (vpsignb), so its offset needs no block sums. Once per super-block the 8 rows'
// integers P become fp32 and meet dw × dx in one FMA (Q4_K/Q5_K: the minimums
// by 4 vpmaddwd of the activation's sums per 32, and an FMA of their own).
// Decode (1 to 3 activation rows) reads the stored layout in place, a row at a
// time: scales decoded with vector operations (the 6-bit Q4_K/Q5_K scales and
// minimums by four 32-bit mask-and-shift steps, Q6_K's by one sign extension, d
// and dmin by vcvtph2ps), the weights unpacked with constant shifts, each 32-
// element chunk one vpmaddubsw + one vpmaddwd with its scales (one vpshufb),
// and P the 8 lanes' sum. The integers are exact, so both kernels give the
// portable path's bits. Internal linkage only.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "engine/matmul_q8.hpp"
#include "engine/matmul_q8_x86.hpp"

namespace activekv::engine::detail {
namespace {

using gguf::GgmlType;

// vpshufb controls that build chunk c's scale vector (decode): every int16 of 32-bit lane j the scale of
// bytes 4j..4j+3 of the chunk. Q4_K/Q5_K: element c of the 8 per-32 scales; Q6_K: of the 8 per-16 scales
// 8 (c / 4) .. 8 (c / 4) + 7 (broadcast to both halves), element 2c mod 8 in the low half (lanes 0..3: elements
// 0..15 of the chunk) and 2c + 1 mod 8 in the high half.
struct ScaleMasks {
  alignas(32) std::uint8_t k4_one[8][32];
  alignas(32) std::uint8_t k6_one[8][32];
  constexpr ScaleMasks() : k4_one{}, k6_one{} {
    for (int c = 0; c < 8; ++c)
      for (int l = 0; l < 32; ++l) {
        const int e6 = (2 * c + (l < 16 ? 0 : 1)) % 8;
        k4_one[c][l] = static_cast<std::uint8_t>(2 * c + l % 2);
        k6_one[c][l] = static_cast<std::uint8_t>(2 * e6 + l % 2);
      }
  }
};
constexpr ScaleMasks scale_masks{};

// The 8 16-bit scales at `sc`, broadcast to both lanes and placed by one of scale_masks' shuffles.
static inline __m256i shuffled_scales(const std::int16_t* sc, const std::uint8_t* mask) {
  const __m256i src = _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(sc)));
  return _mm256_shuffle_epi8(src, _mm256_load_si256(reinterpret_cast<const __m256i*>(mask)));
}

// The scale vector of chunk c.
template <GgmlType T>
static inline __m256i chunk_scales(const Prep& p, int c) {
  if constexpr (T == GgmlType::q6_k) return shuffled_scales(p.sc + 8 * (c / 4), scale_masks.k6_one[c]);
  else return shuffled_scales(p.sc, scale_masks.k4_one[c]);
}

// Decode: weight row r against activation row b, the row's super-blocks as stored. Chunk c's 32 products meet
// in vpmaddubsw (pair sums, int16) and its scales in vpmaddwd (int32 lanes); the 8 lanes' sum after the last
// chunk is P.
template <GgmlType T>
static inline float dot_one(const MatrixView& w, const Q8Rows& x, std::uint32_t r, std::size_t b) {
  constexpr int groups = static_cast<int>(q8_block / q8_group);
  constexpr int steps = static_cast<int>(q8_block / q8_chunk) / step_chunks<T>;
  const std::size_t nb = w.cols / q8_block;
  const std::uint8_t* row = w.data + r * w.row_bytes;
  float acc = 0.0f, mins = 0.0f;
  for (std::size_t i = 0; i < nb; ++i) {
    const std::uint8_t* sb = row + i * super_bytes<T>();
    Prep s;
    prep<T>(sb, &s);
    const std::int8_t* xq = x.q + b * x.cols + i * q8_block;
    __m256i isum = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int k = 0; k < steps; ++k) {
      __m256i wv[step_chunks<T>];
      unpack<T>(sb, k, wv);
      for (int j = 0; j < step_chunks<T>; ++j) {
        const int c = step_chunks<T> * k + j;
        const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c * q8_chunk));
        isum = _mm256_add_epi32(isum, _mm256_madd_epi16(_mm256_maddubs_epi16(wv[j], xv), chunk_scales<T>(s, c)));
      }
    }
    const float dx = x.d[b * nb + i];
    const std::int16_t* bsum = x.bsum + (b * nb + i) * groups;
    if constexpr (T == GgmlType::q6_k) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsum));
      const __m256i m = _mm256_madd_epi16(bs, _mm256_load_si256(reinterpret_cast<const __m256i*>(s.mk)));
      acc = std::fma(static_cast<float>(hsum_epi32(_mm256_sub_epi32(isum, m))), s.d * dx, acc);
    } else {
      // With mk[2j] = mk[2j+1] = m[j]: M = Σ_j m[j] b32[j]; P and M summed in one tree, both exact.
      const __m128i m4 = _mm_madd_epi16(sums_per_32(bsum), _mm_load_si128(reinterpret_cast<const __m128i*>(s.sc + 8)));
      const __m128i p4 = _mm_add_epi32(_mm256_castsi256_si128(isum), _mm256_extracti128_si256(isum, 1));
      __m128i pm = _mm_hadd_epi32(p4, m4);
      pm = _mm_hadd_epi32(pm, pm);  // P, M, P, M
      const __m128 pmf = _mm_cvtepi32_ps(pm);
      acc = std::fma(_mm_cvtss_f32(pmf), s.d * dx, acc);
      mins = std::fma(_mm_cvtss_f32(_mm_movehdup_ps(pmf)), -(s.dmin * dx), mins);
    }
  }
  return T == GgmlType::q6_k ? acc : acc + mins;
}

constexpr int tile_rows = 8;  // weight rows interleaved per tile

// Steps of a chunk whose vpmaddubsw pair sums add in int16 before vpmaddwd applies the scales: each pair sum is
// at most 2 × umax × 127, so Q4_K (umax 15) takes all 8 steps (≤ 30,480), Q5_K (31) 4 (≤ 31,496), Q6_K
// (|u − 32| ≤ 32) 4 (≤ 32,512); the steps of one run stay within one group of 16.
template <GgmlType T>
constexpr int int16_run = T == GgmlType::q4_k ? 8 : 4;

// The interleaved rows of `t` (n super-blocks from i0) against activation rows b..b+V: acc and mins (8 lanes,
// one per row) carried over the super-blocks in order.
template <GgmlType T, int V>
static inline void interleaved_tile(const Interleaved<tile_rows>* t, std::size_t n, std::size_t i0, const Q8Rows& x,
                                    std::size_t b, __m256* acc, __m256* mins) {
  constexpr int groups = static_cast<int>(q8_block / q8_group);
  constexpr int run = int16_run<T>;
  const std::size_t nb = x.cols / q8_block;
  for (std::size_t s = 0; s < n; ++s) {
    const Interleaved<tile_rows>& il = t[s];
    const std::size_t i = i0 + s;
    __m256i isum[V];
    for (int v = 0; v < V; ++v) isum[v] = _mm256_setzero_si256();
    for (int c = 0; c < 8; ++c) {
      for (int k0 = 0; k0 < 8; k0 += run) {
        __m256i part[V];
        for (int v = 0; v < V; ++v) part[v] = _mm256_setzero_si256();
        for (int k = k0; k < k0 + run; ++k) {
          const __m256i wk = _mm256_load_si256(reinterpret_cast<const __m256i*>(il.u[c][k]));
          const __m256i wu = T == GgmlType::q6_k ? _mm256_abs_epi8(wk) : wk;
          for (int v = 0; v < V; ++v) {
            std::int32_t x4;
            std::memcpy(&x4, x.q + (b + v) * x.cols + i * q8_block + c * q8_chunk + 4 * k, 4);
            __m256i xb = _mm256_set1_epi32(x4);
            if constexpr (T == GgmlType::q6_k) xb = _mm256_sign_epi8(xb, wk);
            part[v] = _mm256_add_epi16(part[v], _mm256_maddubs_epi16(wu, xb));
          }
        }
        const __m256i sc = _mm256_load_si256(reinterpret_cast<const __m256i*>(il.sc[2 * c + k0 / 4]));
        for (int v = 0; v < V; ++v) isum[v] = _mm256_add_epi32(isum[v], _mm256_madd_epi16(part[v], sc));
      }
    }
    const __m256 d = _mm256_load_ps(il.d);
    for (int v = 0; v < V; ++v) {
      const float dx = x.d[(b + v) * nb + i];
      const std::int16_t* bsum = x.bsum + ((b + v) * nb + i) * groups;
      __m256i m = _mm256_setzero_si256();
      if constexpr (T == GgmlType::q6_k) {
        acc[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[v]), _mm256_mul_ps(d, _mm256_set1_ps(dx)), acc[v]);  // P − M
      } else {
        alignas(16) std::int32_t b32[4];
        _mm_store_si128(reinterpret_cast<__m128i*>(b32), sums_per_32(bsum));
        for (int p = 0; p < 4; ++p)
          m = _mm256_add_epi32(m, _mm256_madd_epi16(_mm256_load_si256(reinterpret_cast<const __m256i*>(il.mk[p])),
                                                    _mm256_set1_epi32(b32[p])));
        acc[v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[v]), _mm256_mul_ps(d, _mm256_set1_ps(dx)), acc[v]);
        const __m256 smin = _mm256_mul_ps(_mm256_load_ps(il.dmin), _mm256_set1_ps(dx));
        mins[v] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(m), smin, mins[v]);  // fma(M, −(dmin × dx), mins)
      }
    }
  }
}

constexpr std::size_t vec_block = 64;  // activation rows that stay in the L2 cache while the weight rows pass
constexpr std::size_t span_max = 4;    // super-blocks interleaved at a time (11 KiB on the stack)
constexpr int tile_acts = 4;           // activation rows per pass over an interleaved span

// Rows r0..r0+7 (those past row_end repeat the last row; their lanes are not stored) against activation rows
// [b_begin, b_end), at most vec_block of them.
template <GgmlType T>
static void row_tile(const MatrixView& w, const Q8Rows& x, std::uint32_t r0, std::uint32_t row_end,
                     std::size_t b_begin, std::size_t b_end, float* y, std::size_t y_stride) {
  const std::size_t nb = w.cols / q8_block;
  const std::uint8_t* rows[tile_rows];
  tile_row_pointers(w, r0, row_end, rows);
  __m256 acc[vec_block], mins[vec_block];
  const std::size_t nv = b_end - b_begin;
  for (std::size_t v = 0; v < nv; ++v) acc[v] = mins[v] = _mm256_setzero_ps();
  Interleaved<tile_rows> il[span_max];
  for (std::size_t i0 = 0; i0 < nb; i0 += span_max) {
    const std::size_t n = nb - i0 < span_max ? nb - i0 : span_max;
    for (std::size_t s = 0; s < n; ++s) interleave<T, tile_rows, T == GgmlType::q6_k>(rows, i0 + s, &il[s]);
    std::size_t v = 0;
    for (; v + tile_acts <= nv; v += tile_acts)
      interleaved_tile<T, tile_acts>(il, n, i0, x, b_begin + v, acc + v, mins + v);
    for (; v < nv; ++v) interleaved_tile<T, 1>(il, n, i0, x, b_begin + v, acc + v, mins + v);
  }
  const int live = row_end - r0 < static_cast<std::uint32_t>(tile_rows) ? static_cast<int>(row_end - r0) : tile_rows;
  for (std::size_t v = 0; v < nv; ++v) {
    alignas(32) float out[tile_rows];
    _mm256_store_ps(out, T == GgmlType::q6_k ? acc[v] : _mm256_add_ps(acc[v], mins[v]));
    std::memcpy(y + (b_begin + v) * y_stride + r0, out, live * sizeof(float));
  }
}

// Batches of 4 or more (prefill): 8 weight rows interleaved per super-block span, against activation rows in
// blocks of 64 (the rows' values unpacked and transposed once per block). Decode (batch 1 to 3): one weight row
// at a time against each activation row, the stored layout read in place.
template <GgmlType T>
static void matmul(const Q8Args& a) {
  const Q8Rows& x = *a.x;
  if (x.batch < tile_acts) {
    for (std::size_t b = 0; b < x.batch; ++b)
      for (std::uint32_t r = a.row_begin; r < a.row_end; ++r)
        a.y[b * a.y_stride + r] = dot_one<T>(*a.w, x, r, b);
    return;
  }
  for (std::size_t b0 = 0; b0 < x.batch; b0 += vec_block) {
    const std::size_t b1 = b0 + vec_block < x.batch ? b0 + vec_block : x.batch;
    for (std::uint32_t r = a.row_begin; r < a.row_end; r += tile_rows)
      row_tile<T>(*a.w, x, r, a.row_end, b0, b1, a.y, a.y_stride);
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
