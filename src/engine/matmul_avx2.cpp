// matmul_avx2.cpp — the AVX2 kernels (compiled with -mavx2 -mfma -mf16c;
// called only where isa_available(Isa::avx2)). Same structure as the AVX-512
// file: one 32-element weight block unpacked into four registers of 8 floats,
// multiplied into the accumulators of up to 4 activation vectors at once
// (16 registers: 4 weights, 8 accumulators, loads). Internal linkage only.
#include <immintrin.h>

#include <cstring>

#include "engine/matmul_isa.hpp"
#include "engine/quant_blocks.hpp"

namespace activekv::engine::detail {
namespace {

using namespace blocks;

static inline float h2f(std::uint16_t h) { return _cvtsh_ss(h); }

static inline __m256 u8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v)); }
static inline __m256 i8x8_to_ps(__m128i v) { return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v)); }

struct LoadF32 {
  static constexpr std::size_t block_bytes = 32 * sizeof(float);
  static inline void load(const std::uint8_t* p, __m256* w) {
    const auto* f = reinterpret_cast<const float*>(p);
    for (int i = 0; i < 4; ++i) w[i] = _mm256_loadu_ps(f + 8 * i);
  }
};

struct LoadF16 {
  static constexpr std::size_t block_bytes = 32 * sizeof(std::uint16_t);
  static inline void load(const std::uint8_t* p, __m256* w) {
    for (int i = 0; i < 4; ++i) w[i] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)));
  }
};

// The 32 nibbles of qs as four 8-byte groups: elements 0..7, 8..15 (low), 16..23, 24..31 (high).
static inline void nibbles(const std::uint8_t* qs, __m128i* lo, __m128i* hi) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i mask = _mm_set1_epi8(0x0F);
  *lo = _mm_and_si128(q, mask);
  *hi = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
}

struct LoadQ4_0 {
  static constexpr std::size_t block_bytes = sizeof(BlockQ4_0);
  static inline void load(const std::uint8_t* p, __m256* w) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(p);
    __m128i lo;
    __m128i hi;
    nibbles(b->qs, &lo, &hi);
    const float d = h2f(b->d);
    const __m256 vd = _mm256_set1_ps(d);
    const __m256 voff = _mm256_set1_ps(-8.0f * d);
    w[0] = _mm256_fmadd_ps(u8x8_to_ps(lo), vd, voff);
    w[1] = _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(lo, 8)), vd, voff);
    w[2] = _mm256_fmadd_ps(u8x8_to_ps(hi), vd, voff);
    w[3] = _mm256_fmadd_ps(u8x8_to_ps(_mm_srli_si128(hi, 8)), vd, voff);
  }
};

// The 32 nibbles of qs as four vectors of 8 ints: each 8 bytes widened to
// 32-bit lanes straight from memory, then the low nibble masked (elements
// 0..15) and the high one shifted down (16..31) — fewer shuffles than
// unpacking in a 128-bit register first; the same integers.
static inline void nibbles32(const std::uint8_t* qs, __m256i* q) {
  const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs)));
  const __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8)));
  const __m256i mask = _mm256_set1_epi32(0x0F);
  q[0] = _mm256_and_si256(a, mask);
  q[1] = _mm256_and_si256(b, mask);
  q[2] = _mm256_srli_epi32(a, 4);
  q[3] = _mm256_srli_epi32(b, 4);
}

struct LoadQ4_1 {
  static constexpr std::size_t block_bytes = sizeof(BlockQ4_1);
  static inline void load(const std::uint8_t* p, __m256* w) {
    const auto* b = reinterpret_cast<const BlockQ4_1*>(p);
    __m256i q[4];
    nibbles32(b->qs, q);
    // d and m (adjacent f16) converted together, then broadcast.
    int bits;
    std::memcpy(&bits, &b->d, sizeof bits);
    const __m128 dm = _mm_cvtph_ps(_mm_cvtsi32_si128(bits));
    const __m256 vd = _mm256_broadcastss_ps(dm);
    const __m256 vm = _mm256_broadcastss_ps(_mm_movehdup_ps(dm));
    for (int i = 0; i < 4; ++i) w[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q[i]), vd, vm);
  }
};

struct LoadQ8_0 {
  static constexpr std::size_t block_bytes = sizeof(BlockQ8_0);
  static inline void load(const std::uint8_t* p, __m256* w) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(p);
    const __m256 vd = _mm256_set1_ps(h2f(b->d));
    // Each 8 bytes widened straight from memory (no shuffle to reach the upper half).
    for (int i = 0; i < 4; ++i) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b->qs + 8 * i));
      w[i] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), vd);
    }
  }
};

static inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

template <class L, int G>
static inline void row_group(const std::uint8_t* row, std::size_t blocks_per_row, const float* x, std::size_t x_stride,
                             float* out, std::size_t out_stride) {
  __m256 acc0[G];
  __m256 acc1[G];
  for (int g = 0; g < G; ++g) {
    acc0[g] = _mm256_setzero_ps();
    acc1[g] = _mm256_setzero_ps();
  }
  for (std::size_t k = 0; k < blocks_per_row; ++k) {
    __m256 w[4];
    L::load(row + k * L::block_bytes, w);
    const float* xk = x + k * 32;
    for (int g = 0; g < G; ++g) {
      const float* xg = xk + g * x_stride;
      acc0[g] = _mm256_fmadd_ps(w[0], _mm256_loadu_ps(xg), acc0[g]);
      acc1[g] = _mm256_fmadd_ps(w[1], _mm256_loadu_ps(xg + 8), acc1[g]);
      acc0[g] = _mm256_fmadd_ps(w[2], _mm256_loadu_ps(xg + 16), acc0[g]);
      acc1[g] = _mm256_fmadd_ps(w[3], _mm256_loadu_ps(xg + 24), acc1[g]);
    }
  }
  for (int g = 0; g < G; ++g) out[g * out_stride] = hsum(_mm256_add_ps(acc0[g], acc1[g]));
}

template <class L>
static void matmul_fused(const MatmulArgs& a) {
  const MatrixView& w = *a.w;
  const std::size_t blocks_per_row = w.cols / 32;
  for (std::uint32_t r = a.row_begin; r < a.row_end; ++r) {
    const std::uint8_t* row = w.data + r * w.row_bytes;
    std::size_t b = 0;
    for (; b + 4 <= a.batch; b += 4)
      row_group<L, 4>(row, blocks_per_row, a.x + b * a.x_stride, a.x_stride, a.y + b * a.y_stride + r, a.y_stride);
    for (; b < a.batch; ++b)
      row_group<L, 1>(row, blocks_per_row, a.x + b * a.x_stride, a.x_stride, a.y + b * a.y_stride + r, a.y_stride);
  }
}

static inline float dot_f32(const float* w, const float* x, std::size_t n) {
  __m256 acc0 = _mm256_setzero_ps();
  __m256 acc1 = _mm256_setzero_ps();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), acc1);
  }
  float sum = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += w[i] * x[i];
  return sum;
}

static void matmul_scratch(const MatmulArgs& a) {
  const MatrixView& w = *a.w;
  for (std::uint32_t r = a.row_begin; r < a.row_end; ++r) {
    dequantize_row(w.type, w.data + r * w.row_bytes, a.scratch, w.cols);
    for (std::size_t b = 0; b < a.batch; ++b) a.y[b * a.y_stride + r] = dot_f32(a.scratch, a.x + b * a.x_stride, w.cols);
  }
}

}  // namespace

void matmul_avx2(const MatmulArgs& a) noexcept {
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
