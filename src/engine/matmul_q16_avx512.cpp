// matmul_q16_avx512.cpp — the 16-bit-activation path with AVX-512 VNNI integer
// dot products (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni plus
// the AVX2 flags the formats' unpack needs; called only where
// q16_kernel_isa(Isa::avx512) is avx512, i.e. the CPU has AVX-512 F/BW/VL and
// VNNI). The order of every fp32 operation is the one matmul_q16.hpp states,
// so the bits equal the portable path's and the AVX2 path's.
//
// Layout: one 512-bit register holds two weight rows — row r in the low 256
// bits, row r + 1 in the high 256 — against the same activation block
// broadcast to both halves. Each half then computes exactly the eight lanes
// the AVX2 kernel (matmul_q16_avx2.cpp) computes for its row: lane j of a half
// is Σ over elements 2j, 2j+1 (first register, elements 0..15) and 16+2j,
// 17+2j (second register, 16..31). vpmaddwd gives the first pair sum and
// vpdpwssd adds the second pair's products to it in one instruction, in int32
// without saturation; both are exact because a lane's four products are below
// 4 × 4,096 × 32,767 < 2^31 (formats/format_common.hpp). Conversion to fp32
// rounds to nearest as on every path, and each half's accumulator takes
// fma(float(partial), dw·d, acc) over the blocks in order, with the factor of
// its own row; the halves are summed separately in the fixed order. So a row's
// result does not depend on which row shares its register, which tile it falls
// in, or how many activation rows are processed together.
//
// Kernel: tiles of 2 row pairs × 4 activation rows, 1–3 for the batch's
// remainder (so decode steps of 2 or 3 rows unpack each weight block once),
// and 4 row pairs where the batch is 1–3. The legacy formats (Q4_0, Q4_1, Q8_0) widen a pair of blocks with one
// 512-bit instruction; the others unpack each row as the AVX2 kernel does and
// join the halves. A matrix with an odd row count runs its last row paired
// with itself, storing one half. Internal linkage only.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "engine/matmul_isa.hpp"
#include "engine/formats/all.hpp"
#include "engine/matmul_q16_x86.hpp"

namespace activekv::engine::detail {
namespace {


static inline __m512i join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1);
}

// *a in the low 8 lanes, *b in the high 8.
static inline __m512 two_factors(const float* a, const float* b) {
  return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(*a)), _mm256_castps_pd(_mm256_set1_ps(*b)), 1));
}

// 16 bytes of row a and 16 of row b as one 256-bit register (a low, b high).
static inline __m256i two16(const void* a, const void* b) {
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
}

// Block k of rows a and b as two registers of 2 × 16 int16: w[0] holds elements 0..15 of a (low half) and of b
// (high half), w[1] elements 16..31 — the integers T::unpack gives, side by side.
template <class T>
static inline void unpack_pair(const std::uint8_t* a, const std::uint8_t* b, std::size_t k, __m512i* w) {
  using formats::block_at;
  if constexpr (std::is_same_v<T, formats::Q4_1> || std::is_same_v<T, formats::Q4_0>) {
    using B = typename T::block_type;
    const __m512i q = _mm512_cvtepu8_epi16(two16(block_at<B>(a, k).qs, block_at<B>(b, k).qs));
    w[0] = _mm512_and_si512(q, _mm512_set1_epi16(0x0F));
    w[1] = _mm512_srli_epi16(q, 4);
    if constexpr (std::is_same_v<T, formats::Q4_0>) {
      w[0] = _mm512_sub_epi16(w[0], _mm512_set1_epi16(8));
      w[1] = _mm512_sub_epi16(w[1], _mm512_set1_epi16(8));
    }
  } else if constexpr (std::is_same_v<T, formats::Q8_0>) {
    const auto& ba = block_at<blocks::BlockQ8_0>(a, k);
    const auto& bb = block_at<blocks::BlockQ8_0>(b, k);
    w[0] = _mm512_cvtepi8_epi16(two16(ba.qs, bb.qs));
    w[1] = _mm512_cvtepi8_epi16(two16(ba.qs + 16, bb.qs + 16));
  } else {
    __m256i wa[2], wb[2];
    T::unpack(a, k, wa);
    T::unpack(b, k, wb);
    w[0] = join(wa[0], wb[0]);
    w[1] = join(wa[1], wb[1]);
  }
}

// The pair's group minimums of block k (formats::GroupMins), side by side as above.
template <class T>
static inline void unpack_mins_pair(const std::uint8_t* a, const std::uint8_t* b, std::size_t k, __m512i* w) {
  __m256i wa[2], wb[2];
  T::unpack_mins(a, k, wa);
  T::unpack_mins(b, k, wb);
  w[0] = join(wa[0], wb[0]);
  w[1] = join(wa[1], wb[1]);
}

// The exact int32 lane partials of a pair against one activation block (x0, x1: elements 0..15 and 16..31,
// broadcast to both halves).
static inline __m512i partials(const __m512i* w, __m512i x0, __m512i x1) {
  return _mm512_dpwssd_epi32(_mm512_madd_epi16(w[0], x0), w[1], x1);
}

// Weight rows rows[0..2P) (their scales dw, mw: 2P × nb, row i at i × nb) against activation rows b0..b0+V;
// outputs for the first `live` rows only (the others repeat the last live row), at y[b × y_stride + r0 + i].
template <class T, int P, int V>
static inline void tile(const MatrixView& w, const Q16Rows& x, const std::uint8_t* const* rows, std::uint32_t r0,
                        int live, std::size_t b0, const float* dw, const float* mw, float* y, std::size_t y_stride) {
  const std::size_t nb = w.cols / q16_block;
  const std::int16_t* qx[V];
  const float* dx[V];
  for (int v = 0; v < V; ++v) {
    qx[v] = x.q + (b0 + v) * x.cols;
    dx[v] = x.d + (b0 + v) * nb;
  }
  __m512 acc[P][V];
  for (int p = 0; p < P; ++p)
    for (int v = 0; v < V; ++v) acc[p][v] = _mm512_setzero_ps();
  for (std::size_t k = 0; k < nb; ++k) {
    __m512i wq[P][2];
    __m512 dwp[P];
    for (int p = 0; p < P; ++p) {
      unpack_pair<T>(rows[2 * p], rows[2 * p + 1], k, wq[p]);
      dwp[p] = two_factors(dw + 2 * p * nb + k, dw + (2 * p + 1) * nb + k);
    }
    [[maybe_unused]] __m512i wm[P][2];
    [[maybe_unused]] __m512 mwp[P];
    if constexpr (formats::GroupMins<T>) {
      for (int p = 0; p < P; ++p) {
        unpack_mins_pair<T>(rows[2 * p], rows[2 * p + 1], k, wm[p]);
        mwp[p] = two_factors(mw + 2 * p * nb + k, mw + (2 * p + 1) * nb + k);
      }
    }
    for (int v = 0; v < V; ++v) {
      const auto* xk = reinterpret_cast<const __m256i*>(qx[v] + k * q16_block);
      const __m512i x0 = _mm512_broadcast_i64x4(_mm256_loadu_si256(xk));
      const __m512i x1 = _mm512_broadcast_i64x4(_mm256_loadu_si256(xk + 1));
      const __m512 vdx = _mm512_set1_ps(dx[v][k]);
      for (int p = 0; p < P; ++p) {
        const __m512 scale = _mm512_mul_ps(dwp[p], vdx);
        acc[p][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(partials(wq[p], x0, x1)), scale, acc[p][v]);
        if constexpr (formats::GroupMins<T>) {
          const __m512 scale_min = _mm512_mul_ps(mwp[p], vdx);
          acc[p][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(partials(wm[p], x0, x1)), scale_min, acc[p][v]);
        }
      }
    }
  }
  for (int p = 0; p < P; ++p) {
    for (int v = 0; v < V; ++v) {
      const __m256 halves[2] = {_mm512_castps512_ps256(acc[p][v]),
                                _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p][v]), 1))};
      for (int h = 0; h < 2; ++h) {
        const int i = 2 * p + h;
        if (i >= live) break;
        float sum = hsum(halves[h]);
        if constexpr (T::has_min) sum += minimums(mw + i * nb, x.s + (b0 + v) * nb, nb);
        y[(b0 + v) * y_stride + r0 + i] = sum;
      }
    }
  }
}

// Weight rows r0..r0+live (1 ≤ live ≤ 2P) against activation rows [b_begin, b_end). scratch: 4P × nb floats.
template <class T, int P, int V>
static inline void row_tile(const MatrixView& w, const Q16Rows& x, std::uint32_t r0, int live, std::size_t b_begin,
                            std::size_t b_end, float* scratch, float* y, std::size_t y_stride) {
  const std::size_t nb = w.cols / q16_block;
  prefetch_ahead(w, r0, live);
  const std::uint8_t* rows[2 * P];
  for (int i = 0; i < 2 * P; ++i) rows[i] = w.data + (r0 + std::min(i, live - 1)) * w.row_bytes;
  float* dw = scratch;               // 2P × nb
  float* mw = scratch + 2 * P * nb;  // 2P × nb
  for (int i = 0; i < 2 * P; ++i) T::scales(rows[i], nb, dw + i * nb, mw + i * nb);
  std::size_t b = b_begin;
  for (; b + V <= b_end; b += V) tile<T, P, V>(w, x, rows, r0, live, b, dw, mw, y, y_stride);
  switch (b_end - b) {
    case 3: tile<T, P, 3>(w, x, rows, r0, live, b, dw, mw, y, y_stride); break;
    case 2: tile<T, P, 2>(w, x, rows, r0, live, b, dw, mw, y, y_stride); break;
    case 1: tile<T, P, 1>(w, x, rows, r0, live, b, dw, mw, y, y_stride); break;
    default: break;
  }
}

// Tiles of P row pairs × V activation rows over the whole range; the rows left after the last whole tile in
// tiles of one pair.
template <class T, int P, int V>
static void matmul_tiles(const Q16Args& a) {
  const Q16Rows& x = *a.x;
  constexpr std::size_t vec_block = 64;
  for (std::size_t b0 = 0; b0 < x.batch; b0 += vec_block) {
    const std::size_t b1 = b0 + vec_block < x.batch ? b0 + vec_block : x.batch;
    std::uint32_t r = a.row_begin;
    for (; r + 2 * P <= a.row_end; r += 2 * P) row_tile<T, P, V>(*a.w, x, r, 2 * P, b0, b1, a.scratch, a.y, a.y_stride);
    for (; r < a.row_end; r += 2)
      row_tile<T, 1, V>(*a.w, x, r, static_cast<int>(std::min<std::uint32_t>(2, a.row_end - r)), b0, b1, a.scratch,
                        a.y, a.y_stride);
  }
}

// Decode (batch 1-3): 4 row pairs per tile, so each activation block loaded is used 8 times and 4 to 12
// accumulators keep the FMA latency covered. Larger batches: 2 pairs × 4 activation rows (8 accumulators).
template <class T>
static void matmul(const Q16Args& a) {
  if (a.x->batch < 4) {
    matmul_tiles<T, 4, 3>(a);
  } else {
    matmul_tiles<T, 2, 4>(a);
  }
}

}  // namespace

void matmul_q16_avx512(const Q16Args& a) noexcept {
  // Every type reaching here passed q16_supported(), which asks the same table.
  (void)formats::q16_format_of(a.w->type, [&](auto format) { matmul<decltype(format)>(a); });
}

}  // namespace activekv::engine::detail
