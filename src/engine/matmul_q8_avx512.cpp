// matmul_q8_avx512.cpp — the 8-bit K-quant path's prefill on AVX-512 with VNNI
// (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni; called only where
// isa_available(Isa::avx512) and the CPU has AVX512-VNNI; decode takes the AVX2
// kernel). The order of every fp32 operation is the one matmul_q8.hpp states, so
// the bits equal the portable path's.
//
// 16 weight rows interleaved, one per 32-bit lane of a 512-bit register (the
// layout of matmul_q8_x86.hpp, built per tile on the stack and shared by up to 64
// activation rows, 4 at a time). Each step is one vpdpbusd: 4 elements of all 16
// rows (unsigned u) against the activation's 4 bytes broadcast, summed into the
// int32 lanes with no int16 limit, so a group of 16 elements is 4 chained
// vpdpbusd and the scale applies once per 32 (Q4_K/Q5_K) or per 16 (Q6_K) with
// vpmulld. Q6_K's −32 offset starts each group's sum at −32 × the activation's
// block sum. Per super-block the 16 rows' integers P become fp32 and meet
// dw × dx in one FMA; Q4_K/Q5_K's minimums by 4 vpdpwssd of the activation's sums
// per 32 and an FMA of their own. Internal linkage only.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "engine/matmul_q8.hpp"
#include "engine/matmul_q8_x86.hpp"

namespace activekv::engine::detail {
namespace {

constexpr int tile_rows = 16;          // weight rows interleaved per tile
constexpr std::size_t vec_block = 64;  // activation rows that stay in the L2 cache while the weight rows pass
constexpr std::size_t span_max = 2;    // super-blocks interleaved at a time (11 KiB on the stack)
constexpr int tile_acts = 4;           // activation rows per pass over an interleaved span

static inline __m512i load512(const void* p) { return _mm512_load_si512(p); }

// Decode's scale controls: chunks 2h and 2h + 1 of a super-block in the two 256-bit halves, every int16 of
// 32-bit lane j the scale of bytes 4j..4j+3 of its chunk (matmul_q8_avx2.cpp's single-chunk controls, paired).
// Q4_K/Q5_K: element c of the 8 per-32 scales; Q6_K: of the 8 per-16 scales 8 (c / 4) .. 8 (c / 4) + 7,
// element 2c mod 8 for lanes 0..3 of a half and 2c + 1 mod 8 for lanes 4..7.
struct PairMasks {
  alignas(64) std::uint8_t k4[4][64];
  alignas(64) std::uint8_t k6[4][64];
  constexpr PairMasks() : k4{}, k6{} {
    for (int h = 0; h < 4; ++h)
      for (int l = 0; l < 64; ++l) {
        const int c = 2 * h + l / 32, lh = l % 32;
        const int e6 = (2 * c + (lh < 16 ? 0 : 1)) % 8;
        k4[h][l] = static_cast<std::uint8_t>(2 * c + lh % 2);
        k6[h][l] = static_cast<std::uint8_t>(2 * e6 + lh % 2);
      }
  }
};
constexpr PairMasks pair_masks{};

// Chunks 2h and 2h + 1 of super-block sb as unsigned bytes, one per 256-bit half.
template <GgmlType T>
static inline __m512i unpack_pair(const std::uint8_t* sb, int h) {
  if constexpr (T == GgmlType::q6_k) {
    __m256i w[4];
    unpack<T>(sb, h / 2, w);
    return _mm512_inserti64x4(_mm512_castsi256_si512(w[2 * (h % 2)]), w[2 * (h % 2) + 1], 1);
  } else {
    using Block = std::conditional_t<T == GgmlType::q4_k, blocks::BlockQ4_K, blocks::BlockQ5_K>;
    const auto& b = *reinterpret_cast<const Block*>(sb);
    const __m512i half_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);  // 0 | 4
    const __m512i qs = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs + 32 * h)));
    __m512i u = _mm512_and_si512(_mm512_srlv_epi16(qs, half_shift), _mm512_set1_epi8(0x0F));
    if constexpr (T == GgmlType::q5_k) {
      // Chunk c's fifth bit is bit c of qh[l]: bits 2h and 2h + 1 to bit 4 of each byte.
      const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qh)));
      const __m512i shift = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(2 * h)),
                                               _mm256_set1_epi16(static_cast<short>(2 * h + 1)), 1);
      const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(qh, shift), _mm512_set1_epi8(0x01));
      u = _mm512_or_si512(u, _mm512_slli_epi16(bit, 4));
    }
    return u;
  }
}

// Decode: weight row r against activation row b, the stored layout read in place; two chunks per register,
// each pair one vpmaddubsw and one vpdpwssd with its scales; P the 16 lanes' sum.
template <GgmlType T>
static inline float dot_one(const MatrixView& w, const Q8Rows& x, std::uint32_t r, std::size_t b) {
  constexpr int groups = static_cast<int>(q8_block / q8_group);
  const std::size_t nb = w.cols / q8_block;
  const std::uint8_t* row = w.data + r * w.row_bytes;
  float acc = 0.0f, mins = 0.0f;
  for (std::size_t i = 0; i < nb; ++i) {
    const std::uint8_t* sb = row + i * super_bytes<T>();
    Prep s;
    prep<T>(sb, &s);
    const std::int8_t* xq = x.q + b * x.cols + i * q8_block;
    __m512i isum = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int h = 0; h < 4; ++h) {
      const __m512i u = unpack_pair<T>(sb, h);
      const __m512i xv = _mm512_loadu_si512(xq + 2 * h * q8_chunk);
      const std::int16_t* scales = T == GgmlType::q6_k ? s.sc + 8 * (h / 2) : s.sc;
      const __m512i src = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(scales)));
      const __m512i sc =
          _mm512_shuffle_epi8(src, load512(T == GgmlType::q6_k ? pair_masks.k6[h] : pair_masks.k4[h]));
      isum = _mm512_dpwssd_epi32(isum, _mm512_maddubs_epi16(u, xv), sc);
    }
    const float dx = x.d[b * nb + i];
    const std::int16_t* bsum = x.bsum + (b * nb + i) * groups;
    if constexpr (T == GgmlType::q6_k) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsum));
      const __m256i m = _mm256_madd_epi16(bs, _mm256_load_si256(reinterpret_cast<const __m256i*>(s.mk)));
      const __m512i pm = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(m));  // P − M in one sum
      acc = std::fma(static_cast<float>(_mm512_reduce_add_epi32(pm)), s.d * dx, acc);
    } else {
      const __m128i m4 = _mm_madd_epi16(sums_per_32(bsum), _mm_load_si128(reinterpret_cast<const __m128i*>(s.sc + 8)));
      __m128i t = _mm_add_epi32(m4, _mm_shuffle_epi32(m4, 0x4E));
      t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
      acc = std::fma(static_cast<float>(_mm512_reduce_add_epi32(isum)), s.d * dx, acc);
      mins = std::fma(static_cast<float>(_mm_cvtsi128_si32(t)), -(s.dmin * dx), mins);
    }
  }
  return T == GgmlType::q6_k ? acc : acc + mins;
}

// The interleaved rows of `t` (n super-blocks from i0) against activation rows b..b+V: acc and mins (16 lanes,
// one per row) carried over the super-blocks in order.
template <GgmlType T, int V>
static inline void interleaved_tile(const Interleaved<tile_rows>* t, std::size_t n, std::size_t i0, const Q8Rows& x,
                                    std::size_t b, __m512* acc, __m512* mins) {
  constexpr int groups = static_cast<int>(q8_block / q8_group);
  const std::size_t nb = x.cols / q8_block;
  for (std::size_t s = 0; s < n; ++s) {
    const Interleaved<tile_rows>& il = t[s];
    const std::size_t i = i0 + s;
    const std::int8_t* xq[V];
    const std::int16_t* bsum[V];
    for (int v = 0; v < V; ++v) {
      xq[v] = x.q + (b + v) * x.cols + i * q8_block;
      bsum[v] = x.bsum + ((b + v) * nb + i) * groups;
    }
    // Q6_K: each group's sum starts at −32 × its activation block sum.
    alignas(64) std::int32_t start[V][groups];
    if constexpr (T == GgmlType::q6_k)
      for (int v = 0; v < V; ++v) {
        const __m512i bs = _mm512_cvtepi16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsum[v])));
        _mm512_store_si512(start[v], _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(bs, 5)));
      }
    __m512i isum[V];
    for (int v = 0; v < V; ++v) isum[v] = _mm512_setzero_si512();
    for (int c = 0; c < 8; ++c) {
      __m512i g0[V], g1[V];  // the chunk's two groups of 16
      for (int v = 0; v < V; ++v) {
        if constexpr (T == GgmlType::q6_k) {
          g0[v] = _mm512_set1_epi32(start[v][2 * c]);
          g1[v] = _mm512_set1_epi32(start[v][2 * c + 1]);
        } else {
          g0[v] = g1[v] = _mm512_setzero_si512();
        }
      }
      for (int k = 0; k < 4; ++k) {
        const __m512i w0 = load512(il.u[c][k]);
        const __m512i w1 = load512(il.u[c][k + 4]);
        for (int v = 0; v < V; ++v) {
          std::int32_t x0, x1;
          std::memcpy(&x0, xq[v] + c * q8_chunk + 4 * k, 4);
          std::memcpy(&x1, xq[v] + c * q8_chunk + 16 + 4 * k, 4);
          g0[v] = _mm512_dpbusd_epi32(g0[v], w0, _mm512_set1_epi32(x0));
          g1[v] = _mm512_dpbusd_epi32(g1[v], w1, _mm512_set1_epi32(x1));
        }
      }
      // The scales: the high int16 of each (sc, sc) lane, sign-extended.
      const __m512i sc0 = _mm512_srai_epi32(load512(il.sc[2 * c]), 16);
      if constexpr (T == GgmlType::q6_k) {
        const __m512i sc1 = _mm512_srai_epi32(load512(il.sc[2 * c + 1]), 16);
        for (int v = 0; v < V; ++v)
          isum[v] = _mm512_add_epi32(isum[v], _mm512_add_epi32(_mm512_mullo_epi32(g0[v], sc0),
                                                               _mm512_mullo_epi32(g1[v], sc1)));
      } else {
        for (int v = 0; v < V; ++v)
          isum[v] = _mm512_add_epi32(isum[v], _mm512_mullo_epi32(_mm512_add_epi32(g0[v], g1[v]), sc0));
      }
    }
    const __m512 d = _mm512_load_ps(il.d);
    for (int v = 0; v < V; ++v) {
      const float dx = x.d[(b + v) * nb + i];
      acc[v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[v]), _mm512_mul_ps(d, _mm512_set1_ps(dx)), acc[v]);
      if constexpr (T != GgmlType::q6_k) {
        alignas(16) std::int32_t b32[4];
        _mm_store_si128(reinterpret_cast<__m128i*>(b32), sums_per_32(bsum[v]));
        __m512i m = _mm512_setzero_si512();
        for (int p = 0; p < 4; ++p) m = _mm512_dpwssd_epi32(m, load512(il.mk[p]), _mm512_set1_epi32(b32[p]));
        const __m512 smin = _mm512_mul_ps(_mm512_load_ps(il.dmin), _mm512_set1_ps(dx));
        mins[v] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), smin, mins[v]);  // fma(M, −(dmin × dx), mins)
      }
    }
  }
}

// Rows r0..r0+15 (those past row_end repeat the last row; their lanes are not stored) against activation rows
// [b_begin, b_end), at most vec_block of them.
template <GgmlType T>
static void row_tile(const MatrixView& w, const Q8Rows& x, std::uint32_t r0, std::uint32_t row_end,
                     std::size_t b_begin, std::size_t b_end, float* y, std::size_t y_stride) {
  const std::size_t nb = w.cols / q8_block;
  const std::uint8_t* rows[tile_rows];
  tile_row_pointers(w, r0, row_end, rows);
  __m512 acc[vec_block], mins[vec_block];
  const std::size_t nv = b_end - b_begin;
  for (std::size_t v = 0; v < nv; ++v) acc[v] = mins[v] = _mm512_setzero_ps();
  Interleaved<tile_rows> il[span_max];
  for (std::size_t i0 = 0; i0 < nb; i0 += span_max) {
    const std::size_t n = nb - i0 < span_max ? nb - i0 : span_max;
    for (std::size_t s = 0; s < n; ++s) interleave<T, tile_rows, false>(rows, i0 + s, &il[s]);
    std::size_t v = 0;
    for (; v + tile_acts <= nv; v += tile_acts)
      interleaved_tile<T, tile_acts>(il, n, i0, x, b_begin + v, acc + v, mins + v);
    for (; v < nv; ++v) interleaved_tile<T, 1>(il, n, i0, x, b_begin + v, acc + v, mins + v);
  }
  const std::uint32_t live = row_end - r0 < static_cast<std::uint32_t>(tile_rows) ? row_end - r0 : tile_rows;
  const __mmask16 keep = static_cast<__mmask16>((1u << live) - 1u);
  for (std::size_t v = 0; v < nv; ++v)
    _mm512_mask_storeu_ps(y + (b_begin + v) * y_stride + r0, keep,
                          T == GgmlType::q6_k ? acc[v] : _mm512_add_ps(acc[v], mins[v]));
}

template <GgmlType T>
static void matmul(const Q8Args& a) {
  const Q8Rows& x = *a.x;
  if (x.batch < static_cast<std::size_t>(tile_acts)) {
    for (std::size_t b = 0; b < x.batch; ++b)
      for (std::uint32_t r = a.row_begin; r < a.row_end; ++r) a.y[b * a.y_stride + r] = dot_one<T>(*a.w, x, r, b);
    return;
  }
  for (std::size_t b0 = 0; b0 < x.batch; b0 += vec_block) {
    const std::size_t b1 = b0 + vec_block < x.batch ? b0 + vec_block : x.batch;
    for (std::uint32_t r = a.row_begin; r < a.row_end; r += tile_rows)
      row_tile<T>(*a.w, x, r, a.row_end, b0, b1, a.y, a.y_stride);
  }
}

}  // namespace

// Batches of 4 or more: 16 interleaved rows per tile; decode (1 to 3 rows): a row at a time, as stored.
void matmul_q8_avx512(const Q8Args& a) noexcept {
  switch (a.w->type) {
    case GgmlType::q4_k: matmul<GgmlType::q4_k>(a); return;
    case GgmlType::q5_k: matmul<GgmlType::q5_k>(a); return;
    case GgmlType::q6_k: matmul<GgmlType::q6_k>(a); return;
    default: return;  // matmul_rows_q8 asserted q8_supported()
  }
}

}  // namespace activekv::engine::detail
