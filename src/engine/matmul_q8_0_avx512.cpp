// matmul_q8_0_avx512.cpp — the legacy formats' 8-bit-activation path on AVX-512
// with VNNI (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni; called
// only where isa_available(Isa::avx512) and the CPU has AVX512-VNNI). The order
// of every fp32 operation is the one matmul_q8_0.hpp states, so the bits equal
// the portable path's and the AVX2 kernel's.
//
// Two weight rows per 512-bit register, each in one 256-bit half: a half holds
// its row's 8 int32 lanes P_j of a block, exactly the lanes of the AVX2 kernel
// (one vpmaddubsw + vpmaddwd there, one vpdpbusd here: the same integers, with
// no int16 step). The activation block's 32 bytes are broadcast to both halves.
// vpdpbusd multiplies unsigned bytes by signed ones, so a signed weight w goes in
// as w + 128 and the sum starts at −128 × Σ x over the lane's 4 activation bytes
// (one vpdpbusd per activation block, shared by every row pair of the tile):
// Σ (w + 128) x − 128 Σ x = Σ w x, exact in int32. Per block and activation row
// one conversion, one multiply (dw × dx of both rows, each lane the product the
// scalar path rounds) and one FMA per row pair; the minimums of Q4_1/Q5_1 in
// scalar fp32, as on the other paths. The tile: 2 row pairs × up to 4
// activation rows; for 8 or more activation rows a tile's weight blocks are
// unpacked once into a buffer (rows up to 4,096 wide); the rows ahead are prefetched as the 16-bit path's kernels do
// (matmul_q16_x86.hpp, whose final 8-lane sum this file shares). Internal linkage only.
#include <immintrin.h>

#include "engine/formats/all.hpp"
#include "engine/matmul_q16_x86.hpp"
#include "engine/matmul_q8_0.hpp"

namespace activekv::engine::detail {
namespace {

// A tile's weights, block by block: row pairs (r, r + 1) for p < P (the last pair may repeat its row:
// `odd`). Direct unpacks each block as it is reached (decode: each is used once); Unpacked reads them
// from a buffer filled once per tile of rows for all its activation rows (prefill: a Q5_0 block's
// unpacking costs more than its products with 4 activation rows).
template <class F, int P>
struct Direct {
  const std::uint8_t* rows[2 * P];
  Direct(const MatrixView& w, std::uint32_t r0, bool odd) {
    for (int r = 0; r < 2 * P; ++r) {
      const std::uint32_t row = odd && r == 2 * P - 1 ? r0 + r - 1 : r0 + r;
      rows[r] = w.data + row * w.row_bytes;
    }
  }
  // Block k: u[p] the pair's 64 bytes (+ 128 when signed), dw and mw (Q4_1/Q5_1) of each row.
  inline void block(std::size_t k, __m512i* u, float* dw, float* mw) const {
    using Block = typename F::block_type;
    for (int p = 0; p < P; ++p) {
      const __m512i pair = _mm512_inserti64x4(_mm512_castsi256_si512(F::bytes(rows[2 * p], k)),
                                              F::bytes(rows[2 * p + 1], k), 1);
      u[p] = F::has_min ? pair : _mm512_xor_si512(pair, _mm512_set1_epi8(static_cast<char>(0x80)));
    }
    for (int r = 0; r < 2 * P; ++r) {
      const Block& blk = reinterpret_cast<const Block*>(rows[r])[k];
      dw[r] = _cvtsh_ss(blk.d);  // exact, as half_to_float
      if constexpr (F::has_min) mw[r] = _cvtsh_ss(blk.m);
    }
  }
};

constexpr std::size_t unpacked_blocks_max = 128;  // 4,096 columns (34 KiB on the stack); wider rows: Direct

template <class F, int P>
struct Unpacked {
  alignas(64) __m512i u[unpacked_blocks_max][P];
  float dw[unpacked_blocks_max][2 * P], mw[unpacked_blocks_max][2 * P];
  Unpacked(const MatrixView& w, std::uint32_t r0, bool odd) {
    const Direct<F, P> d(w, r0, odd);
    for (std::size_t k = 0; k < w.cols / q8_0_block; ++k) d.block(k, u[k], dw[k], mw[k]);
  }
  inline void block(std::size_t k, __m512i* out, float* d, float* m) const {
    for (int p = 0; p < P; ++p) out[p] = _mm512_load_si512(&u[k][p]);
    for (int r = 0; r < 2 * P; ++r) {
      d[r] = dw[k][r];
      if constexpr (F::has_min) m[r] = mw[k][r];
    }
  }
};

// The tile's row pairs (weights from `src`) against activation rows b0..b0+V; rows r0.. of y.
template <class F, int P, int V, class Src>
static inline void tile(const Src& src, std::size_t nb, const Q8_0Rows& x, std::uint32_t r0, bool odd, std::size_t b0,
                        float* y, std::size_t y_stride) {
  constexpr bool is_signed = !F::has_min;
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[P][V];
  float mins[2 * P][V];
  for (int p = 0; p < P; ++p)
    for (int v = 0; v < V; ++v) acc[p][v] = _mm512_setzero_ps();
  for (int r = 0; r < 2 * P; ++r)
    for (int v = 0; v < V; ++v) mins[r][v] = 0.0f;
  for (std::size_t k = 0; k < nb; ++k) {
    __m512i u[P];
    float dw[2 * P], mw[2 * P];
    src.block(k, u, dw, mw);
    for (int v = 0; v < V; ++v) {
      const std::size_t row = b0 + v;
      const __m512i xv = _mm512_broadcast_i64x4(
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.q + row * x.cols + k * q8_0_block)));
      const float dx = x.d[row * nb + k];
      __m512i start = _mm512_setzero_si512();
      if constexpr (is_signed) start = _mm512_sub_epi32(start, _mm512_dpbusd_epi32(start, bias, xv));
      for (int p = 0; p < P; ++p) {
        const __m512 prod = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, u[p], xv));
        // Lanes 0-7: dw of row 2p × dx, lanes 8-15: of row 2p + 1 — each the scalar product.
        const __m512 scale = _mm512_mask_broadcastss_ps(_mm512_set1_ps(dw[2 * p] * dx), 0xFF00,
                                                        _mm_set_ss(dw[2 * p + 1] * dx));
        acc[p][v] = _mm512_fmadd_ps(prod, scale, acc[p][v]);
      }
      if constexpr (F::has_min) {
        for (int r = 0; r < 2 * P; ++r) {
          const float m = mw[r] * x.s[row * nb + k];
          mins[r][v] = mins[r][v] + m;
        }
      }
    }
  }
  for (int p = 0; p < P; ++p)
    for (int v = 0; v < V; ++v) {
      for (int h = 0; h < 2; ++h) {
        const int r = 2 * p + h;
        if (odd && r == 2 * P - 1) continue;  // the repeated row
        const __m256 lanes = h == 0 ? _mm512_castps512_ps256(acc[p][v])
                                    : _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p][v]), 1));
        const float sum = hsum(lanes);
        y[(b0 + v) * y_stride + r0 + r] = F::has_min ? sum + mins[r][v] : sum;
      }
    }
}

// One tile of rows against activation rows [b0, b1): 4 at a time, then one by one.
template <class F, int P, class Src>
static void run_acts(const Src& src, const Q8_0Args& a, std::size_t b0, std::size_t b1, std::uint32_t r, bool odd) {
  const std::size_t nb = a.w->cols / q8_0_block;
  std::size_t b = b0;
  for (; b + 4 <= b1; b += 4) tile<F, P, 4>(src, nb, *a.x, r, odd, b, a.y, a.y_stride);
  for (; b < b1; ++b) tile<F, P, 1>(src, nb, *a.x, r, odd, b, a.y, a.y_stride);
}

template <class F, int P>
static void run_rows(const Q8_0Args& a, std::size_t b0, std::size_t b1, std::uint32_t r, bool odd) {
  prefetch_ahead(*a.w, r, 2 * P);  // short rows: the next tiles' first lines before the prefetcher finds them
  if (b1 - b0 >= 8 && a.w->cols / q8_0_block <= unpacked_blocks_max) {
    const Unpacked<F, P> src(*a.w, r, odd);
    run_acts<F, P>(src, a, b0, b1, r, odd);
  } else {
    run_acts<F, P>(Direct<F, P>(*a.w, r, odd), a, b0, b1, r, odd);
  }
}

// Rows in tiles of 2 pairs (then one pair, then one row as a pair repeating it), activation rows
// in blocks of 64 that stay in the L2 cache while the weight rows pass.
template <class F>
static void matmul(const Q8_0Args& a) {
  const Q8_0Rows& x = *a.x;
  constexpr std::size_t vec_block = 64;
  for (std::size_t b0 = 0; b0 < x.batch; b0 += vec_block) {
    const std::size_t b1 = b0 + vec_block < x.batch ? b0 + vec_block : x.batch;
    std::uint32_t r = a.row_begin;
    for (; r + 4 <= a.row_end; r += 4) run_rows<F, 2>(a, b0, b1, r, false);
    for (; r + 2 <= a.row_end; r += 2) run_rows<F, 1>(a, b0, b1, r, false);
    if (r < a.row_end) run_rows<F, 1>(a, b0, b1, r, true);
  }
}

}  // namespace

void matmul_q8_0_avx512(const Q8_0Args& a) noexcept {
  formats::q8_0_format_of(a.w->type, [&](auto format) { matmul<decltype(format)>(a); });
}

}  // namespace activekv::engine::detail
