// matmul_q8_avx2.cpp — the 8-bit-activation path with AVX2 byte dot products
// (compiled with -mavx2 -mfma -mf16c; called only where isa_available(Isa::avx2)).
// The order of every fp32 operation is the one matmul_q8.hpp states, so the
// bits equal the portable path's.
//
// Kernel: a tile of R weight rows × V activation rows (prefill: 1 × 4, Q6_K 1 × 8;
// decode: 1 × 1). A super-block's factors (the 6-bit Q4_K/Q5_K scales and
// minimums unpacked with four 32-bit mask-and-shift steps, Q6_K's by one
// sign extension; d and dmin by vcvtph2ps) are decoded with vector operations,
// once per row for a whole prefill tile pass, where they are used in decode.
// The weights are unpacked a load at a time with constant shifts (Q4_K/Q5_K:
// 32 bytes give two chunks of 32 elements; Q6_K: ql's two halves and qh give
// four), each chunk's scale vector is one vpshufb of the scales, and every
// activation chunk (32 int8, one load) meets the unpacked weights in
// vpmaddubsw (unsigned weight byte × signed activation byte, pairs into int16:
// at most 2 × 63 × 127, no saturation). Decode then applies the chunk's scales
// with one vpmaddwd (pairs into int32) and one add. The Zen-class VMs this runs
// on issue both multiplies on one pipe, so prefill, which the multiplier
// limits, packs two chunks' 4-product sums into the two int16 halves of each
// lane (a vpaddw of the pair sums with themselves shifted, one vpblendw) and
// applies both chunks' scales in one vpmaddwd: 3 multiplies per 64 products
// instead of 4, the same integers. Q6_K's values go in unsigned (0..63) and
// their −32 offset comes off through the activation's block sums (one
// vpmaddwd per super-block); Q4_K/Q5_K's minimums meet the sums per 32 in one
// 128-bit vpmaddwd. Once per super-block the 8 integer lanes become fp32
// (exactly) and meet dw × dx in one FMA. Internal linkage only.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "engine/quant_blocks.hpp"
#include "engine/matmul_q8.hpp"

namespace activekv::engine::detail {
namespace {

using gguf::GgmlType;

static inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

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

// vpshufb controls that build a chunk pair's scale vector: 32-bit lane j holds the int16 scales of lane j in
// chunks c and c + 1 (c even), the factors of the packed 4-product sums (see tile()). Q4_K/Q5_K: elements c,
// c + 1 of the 8 per-32 scales in every lane; Q6_K: of the 8 per-16 scales 8 (c / 4) .. 8 (c / 4) + 7
// (broadcast to both halves), elements 2c, 2c + 2 mod 8 in the low half (lanes 0..3: elements 0..15 of a
// chunk) and 2c + 1, 2c + 3 mod 8 in the high half.
// The controls of one chunk's scale vector (every int16 of a lane the chunk's scale of that lane) are the
// same with c in place of both chunks of the pair.
struct ScaleMasks {
  alignas(32) std::uint8_t k4[4][32];
  alignas(32) std::uint8_t k6[4][32];
  alignas(32) std::uint8_t k4_one[8][32];
  alignas(32) std::uint8_t k6_one[8][32];
  constexpr ScaleMasks() : k4{}, k6{}, k4_one{}, k6_one{} {
    for (int h = 0; h < 4; ++h)
      for (int l = 0; l < 32; ++l) {
        const int c = 2 * h + (l % 4) / 2;  // the lane's first int16 from chunk 2h, its second from 2h + 1
        const int e6 = (2 * c + (l < 16 ? 0 : 1)) % 8;
        k4[h][l] = static_cast<std::uint8_t>(2 * c + l % 2);
        k6[h][l] = static_cast<std::uint8_t>(2 * e6 + l % 2);
      }
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

// The scale vector of chunks 2h and 2h + 1.
template <GgmlType T>
static inline __m256i pair_scales(const Prep& p, int h) {
  if constexpr (T == GgmlType::q6_k) return shuffled_scales(p.sc + 8 * (h / 2), scale_masks.k6[h]);
  else return shuffled_scales(p.sc, scale_masks.k4[h]);
}

// The scale vector of chunk c alone.
template <GgmlType T>
static inline __m256i chunk_scales(const Prep& p, int c) {
  if constexpr (T == GgmlType::q6_k) return shuffled_scales(p.sc + 8 * (c / 4), scale_masks.k6_one[c]);
  else return shuffled_scales(p.sc, scale_masks.k4_one[c]);
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

// Rows r0..r0+R of w against activation rows b0..b0+V. pr: the rows' decoded factors, R × nb, or null: then
// each super-block's are decoded here (decode steps, where each weight row meets one activation row).
template <GgmlType T, int R, int V>
static inline void tile(const MatrixView& w, const Q8Rows& x, std::uint32_t r0, std::size_t b0, const Prep* pr,
                        float* y, std::size_t y_stride) {
  constexpr bool has_min = T != GgmlType::q6_k;
  constexpr int groups = static_cast<int>(q8_block / q8_group);
  constexpr int steps = static_cast<int>(q8_block / q8_chunk) / step_chunks<T>;
  // Tiles of several activation rows (prefill) pack two chunks' sums into one vpmaddwd (fewer multiplies, where
  // the multiplier is what limits); one activation row (decode) multiplies each chunk's pair sums by its scale
  // (fewer instructions in all).
  constexpr bool packed = V > 1;
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
    Prep local[R];
    const Prep* s[R];
    for (int r = 0; r < R; ++r) {
      if (pr != nullptr) {
        s[r] = pr + r * nb + i;
      } else {
        prep<T>(rows[r] + i * super_bytes<T>(), &local[r]);
        s[r] = &local[r];
      }
    }
    __m256i isum[R][V];
    for (int r = 0; r < R; ++r)
      for (int v = 0; v < V; ++v) isum[r][v] = _mm256_setzero_si256();
    const std::int8_t* xq = x.q + b0 * x.cols + i * q8_block;
    // Unrolled whole (2 or 4 load steps): 1–7 % faster than one step at a time (engine_matmul_bench BM_matmul_q8).
#pragma GCC unroll 4
    for (int k = 0; k < steps; ++k) {
      __m256i wv[R][step_chunks<T>];
      for (int r = 0; r < R; ++r) unpack<T>(rows[r] + i * super_bytes<T>(), k, wv[r]);
      if constexpr (!packed) {
        for (int j = 0; j < step_chunks<T>; ++j) {
          const int c = step_chunks<T> * k + j;
          __m256i sc[R];
          for (int r = 0; r < R; ++r) sc[r] = chunk_scales<T>(*s[r], c);
          for (int v = 0; v < V; ++v) {
            const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + v * x.cols + c * q8_chunk));
            for (int r = 0; r < R; ++r)
              isum[r][v] = _mm256_add_epi32(isum[r][v], _mm256_madd_epi16(_mm256_maddubs_epi16(wv[r][j], xv), sc[r]));
          }
        }
        continue;
      }
      for (int j = 0; j < step_chunks<T>; j += 2) {
        const int c = step_chunks<T> * k + j;  // the pair c, c + 1
        __m256i sc[R];
        for (int r = 0; r < R; ++r) sc[r] = pair_scales<T>(*s[r], c / 2);
        for (int v = 0; v < V; ++v) {
          const std::int8_t* xc = xq + v * x.cols + c * q8_chunk;
          const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc));
          const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xc + q8_chunk));
          for (int r = 0; r < R; ++r) {
            // vpmaddubsw leaves two int16 pair sums in each 32-bit lane; the lane's 4-product sum (|·| ≤ 4 × 63 ×
            // 127 < 2^15) goes to its low int16 for chunk c and its high int16 for chunk c + 1, and one vpmaddwd
            // applies both chunks' scales: lane j gains sc_c × S_c,j + sc_c+1 × S_c+1,j, the same integer as two
            // vpmaddwd of the pair sums would give, with one multiply instead of two.
            __m256i a = _mm256_maddubs_epi16(wv[r][j], x0);
            __m256i b = _mm256_maddubs_epi16(wv[r][j + 1], x1);
            a = _mm256_add_epi16(a, _mm256_srli_epi32(a, 16));
            b = _mm256_add_epi16(b, _mm256_slli_epi32(b, 16));
            isum[r][v] = _mm256_add_epi32(isum[r][v], _mm256_madd_epi16(_mm256_blend_epi16(a, b, 0xAA), sc[r]));
          }
        }
      }
    }
    for (int v = 0; v < V; ++v) {
      const float dx = x.d[(b0 + v) * nb + i];
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsum + ((b0 + v) * nb + i) * groups));
      // Q4_K/Q5_K: the sums per 32, b32[j] = bsum[2j] + bsum[2j+1] (|·| ≤ 32 × 127), as 8 int16; with mk[2j] =
      // mk[2j+1] = m[j], lane k of vpmaddwd(b32, m) is m[2k] b32[2k] + m[2k+1] b32[2k+1] = M_2k + M_2k+1.
      __m128i b32 = _mm_setzero_si128();
      if constexpr (has_min)
        b32 = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      for (int r = 0; r < R; ++r) {
        const __m256 scale = _mm256_set1_ps(s[r]->d * dx);
        if constexpr (has_min) {
          acc[r][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][v]), scale, acc[r][v]);
          const __m128i m4 = _mm_madd_epi16(b32, _mm_load_si128(reinterpret_cast<const __m128i*>(s[r]->sc + 8)));
          const float scale_min = -(s[r]->dmin * dx);
          if constexpr (T == GgmlType::q4_k) {
            mins4[r][v] = _mm_fmadd_ps(_mm_cvtepi32_ps(m4), _mm_set1_ps(scale_min), mins4[r][v]);
          } else {
            __m128i t = _mm_add_epi32(m4, _mm_shuffle_epi32(m4, 0x4E));
            t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
            mins[r][v] = std::fma(scale_min, static_cast<float>(_mm_cvtsi128_si32(t)), mins[r][v]);
          }
        } else {
          const __m256i m = _mm256_madd_epi16(bs, _mm256_load_si256(reinterpret_cast<const __m256i*>(s[r]->mk)));
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

// Batches of 4 or more (prefill): the R rows' factors are decoded once (q8_supported bounds nb by
// q8_super_blocks_max) and serve every activation row.
template <GgmlType T, int R, int V>
static inline void row_tile(const MatrixView& w, const Q8Rows& x, std::uint32_t r0, std::size_t b_begin,
                            std::size_t b_end, float* y, std::size_t y_stride) {
  const std::size_t nb = w.cols / q8_block;
  Prep s[R * q8_super_blocks_max];
  for (int r = 0; r < R; ++r)
    for (std::size_t i = 0; i < nb; ++i) prep<T>(w.data + (r0 + r) * w.row_bytes + i * super_bytes<T>(), &s[r * nb + i]);
  std::size_t b = b_begin;
  for (; b + V <= b_end; b += V) tile<T, R, V>(w, x, r0, b, s, y, y_stride);
  for (; b < b_end; ++b) tile<T, R, 1>(w, x, r0, b, s, y, y_stride);
}

// Batches of 4 or more (prefill): tiles of 1 row × V activation rows, V = 8 for Q6_K (its unpacking costs more,
// so it pays to share it; 4 % faster than 4 rows) and 4 for Q4_K/Q5_K (2 % faster than 8), on the development
// VM (engine_matmul_bench BM_matmul_q8, batch 64, CPU time). Decode (batch 1 to 3): one weight row at a time
// against each activation row, each super-block's factors decoded where they are used (measured the same way at
// batch 1: 2 rows at a time 7–14 % slower, 3 rows 10–40 %).
template <GgmlType T>
static void matmul(const Q8Args& a) {
  const Q8Rows& x = *a.x;
  if (x.batch >= 4) {
    run_tiles<T, 1, T == GgmlType::q6_k ? 8 : 4>(a);
    return;
  }
  for (std::size_t b = 0; b < x.batch; ++b)
    for (std::uint32_t r = a.row_begin; r < a.row_end; ++r) tile<T, 1, 1>(*a.w, x, r, b, nullptr, a.y, a.y_stride);
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
