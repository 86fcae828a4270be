// attention_cpu_avx2.cpp — the kernel with AVX2 + F16C + FMA inner loops.
//
// This file alone is compiled with -mavx2 -mfma -mf16c; attention_cpu.cpp calls
// it only on a CPU that reports all three. exp is a Cephes-style polynomial
// (range reduction by ln 2, degree-5 polynomial; about 2 ulp on [-87, 0]),
// evaluated 8 lanes at a time in a fixed order, so results are reproducible.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/host/attention_cpu_isa.hpp"

namespace activekv::host::avx2 {

namespace {

inline void widen(const std::byte* src, DType dtype, std::uint32_t n, float* dst) {
  std::uint32_t i = 0;
  if (dtype == DType::f16) {
    for (; i + 8 <= n; i += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
      _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
  } else if (dtype == DType::bf16) {
    for (; i + 8 <= n; i += 8) {
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
      _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16)));
    }
  } else {
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, _mm256_loadu_ps(reinterpret_cast<const float*>(src + 4 * i)));
  }
  if (i < n) portable::widen(src + std::size_t{i} * dtype_bytes(dtype), dtype, n - i, dst + i);
}

inline __m256 exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f)), _mm256_set1_ps(-87.3365447504019f));
  __m256 fx = _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f));
  fx = _mm256_floor_ps(fx);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(fx), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(n));
}

// 8 elements of one row as fp32 (exact).
template <DType D>
inline __m256 load8(const std::byte* src) {
  if constexpr (D == DType::f16) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  } else if constexpr (D == DType::bf16) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(b), 16));
  } else {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(src));
  }
}

// 8 row vectors → one vector of their lane sums, lane i = ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)) of row i.
inline __m256 reduce8(const __m256* v) {
  const __m256 h01 = _mm256_hadd_ps(v[0], v[1]), h23 = _mm256_hadd_ps(v[2], v[3]);
  const __m256 h45 = _mm256_hadd_ps(v[4], v[5]), h67 = _mm256_hadd_ps(v[6], v[7]);
  const __m256 lo = _mm256_hadd_ps(h01, h23), hi = _mm256_hadd_ps(h45, h67);
  return _mm256_add_ps(_mm256_permute2f128_ps(lo, hi, 0x20), _mm256_permute2f128_ps(lo, hi, 0x31));
}

// The dots of R rows for HB heads, head_dim a multiple of 8: per (head, row)
// one FMA chain over the 8-element chunks in order (the first a multiply),
// so a dot's arithmetic is the same whatever R and HB. Per chunk the HB query
// chunks stay in registers and each row's K chunk is loaded once for all HB
// heads: R × HB independent chains, 3 + 4 loads per 12 FMAs at HB = 3, R = 4.
template <DType D, std::uint32_t HB, std::uint32_t R>
inline void rows_dots(const float* q, const std::byte* k, std::uint64_t stride, std::uint32_t dim, __m256 (*dots)[16],
                      std::uint32_t r0) {
  constexpr std::uint32_t eb = D == DType::f32 ? 4 : 2;
  __m256 acc[HB][R];
  {
    __m256 qv[HB];
    for (std::uint32_t g = 0; g < HB; ++g) qv[g] = _mm256_loadu_ps(q + std::size_t{g} * dim);
    for (std::uint32_t r = 0; r < R; ++r) {
      const __m256 kv = load8<D>(k + (r0 + r) * stride);
      for (std::uint32_t g = 0; g < HB; ++g) acc[g][r] = _mm256_mul_ps(qv[g], kv);
    }
  }
  for (std::uint32_t c = 8; c < dim; c += 8) {
    __m256 qv[HB];
    for (std::uint32_t g = 0; g < HB; ++g) qv[g] = _mm256_loadu_ps(q + std::size_t{g} * dim + c);
    for (std::uint32_t r = 0; r < R; ++r) {
      const __m256 kv = load8<D>(k + (r0 + r) * stride + c * eb);
      for (std::uint32_t g = 0; g < HB; ++g) acc[g][r] = _mm256_fmadd_ps(qv[g], kv, acc[g][r]);
    }
  }
  for (std::uint32_t g = 0; g < HB; ++g)
    for (std::uint32_t r = 0; r < R; ++r) dots[g][r0 + r] = acc[g][r];
}

// Rows [0, n) of one head batch: blocks of R rows, then single rows.
template <DType D, std::uint32_t HB>
inline void block_dots(const float* q, const std::byte* k, std::uint64_t stride, std::uint32_t n, std::uint32_t dim,
                       __m256 (*dots)[16]) {
  constexpr std::uint32_t R = HB <= 3 ? 4 : 2;
  std::uint32_t r = 0;
  for (; r + R <= n; r += R) rows_dots<D, HB, R>(q, k, stride, dim, dots, r);
  for (; r < n; ++r) rows_dots<D, HB, 1>(q, k, stride, dim, dots, r);
}

// The same sums for any head_dim: chunks of 8 alternate between the two
// chains; a last partial chunk is zero-padded and added after.
template <DType D>
inline __m256 row_dot_any(const float* qh, const std::byte* kr, std::uint32_t dim) {
  constexpr std::uint32_t eb = D == DType::f32 ? 4 : 2;
  __m256 e = _mm256_setzero_ps(), o = _mm256_setzero_ps();
  std::uint32_t c = 0;
  for (; c + 8 <= dim; c += 8) {
    const __m256 qc = _mm256_loadu_ps(qh + c), kc = load8<D>(kr + c * eb);
    if ((c / 8) % 2 == 0) {
      e = c == 0 ? _mm256_mul_ps(qc, kc) : _mm256_fmadd_ps(qc, kc, e);
    } else {
      o = c == 8 ? _mm256_mul_ps(qc, kc) : _mm256_fmadd_ps(qc, kc, o);
    }
  }
  __m256 sum = _mm256_add_ps(e, o);
  if (c < dim) {
    alignas(32) float qt[8] = {}, kt[8] = {};
    for (std::uint32_t i = c; i < dim; ++i) {
      qt[i - c] = qh[i];
      portable::widen(kr + i * eb, D, 1, &kt[i - c]);
    }
    sum = _mm256_fmadd_ps(_mm256_load_ps(qt), _mm256_load_ps(kt), sum);
  }
  return sum;
}

// out[h][r] = scale · q[h]·k[r] for r < n, 0 for n ≤ r < 16: per (head, row)
// rows_dots' (or row_dot_any's) vector, then reduce8's lane tree over 8 rows.
template <DType D>
inline void scores_impl(const float* q, const std::byte* k, std::uint64_t stride, std::uint32_t n, std::uint32_t dim,
                        std::uint32_t heads, float scale, float* out) {
  alignas(32) __m256 dots[4][16];  // [head of the batch][row]
  const __m256 sv = _mm256_set1_ps(scale);
  for (std::uint32_t h0 = 0; h0 < heads; h0 += 4) {
    const std::uint32_t hb = std::min<std::uint32_t>(4, heads - h0);
    const float* qb = q + std::size_t{h0} * dim;
    for (std::uint32_t r = 0; r < 16; ++r) {
      if (r >= n) {
        for (std::uint32_t g = 0; g < hb; ++g) dots[g][r] = _mm256_setzero_ps();
        continue;
      }
      if (dim % 8 != 0) {
        const std::byte* kr = k + r * stride;
        for (std::uint32_t g = 0; g < hb; ++g) dots[g][r] = row_dot_any<D>(qb + std::size_t{g} * dim, kr, dim);
      }
    }
    if (dim % 8 == 0) {
      switch (hb) {
        case 1: block_dots<D, 1>(qb, k, stride, n, dim, dots); break;
        case 2: block_dots<D, 2>(qb, k, stride, n, dim, dots); break;
        case 3: block_dots<D, 3>(qb, k, stride, n, dim, dots); break;
        default: block_dots<D, 4>(qb, k, stride, n, dim, dots); break;
      }
    }
    for (std::uint32_t g = 0; g < hb; ++g) {
      float* o = out + std::size_t{h0 + g} * 16;
      _mm256_storeu_ps(o, _mm256_mul_ps(reduce8(dots[g]), sv));
      _mm256_storeu_ps(o + 8, _mm256_mul_ps(reduce8(dots[g] + 8), sv));
    }
  }
}

// x[r] = exp(x[r] - m) for r < n, 0 for n ≤ r < 16; returns their sum (lanes 0-7 + 8-15, then a fixed tree).
inline float exp_sum(float* x, std::uint32_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i nv = _mm256_set1_epi32(static_cast<int>(n));
  const __m256 keep0 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(nv, lane));
  const __m256 keep1 = _mm256_castsi256_ps(_mm256_cmpgt_epi32(nv, _mm256_add_epi32(lane, _mm256_set1_epi32(8))));
  const __m256 p0 = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_loadu_ps(x), mv)), keep0);
  const __m256 p1 = _mm256_and_ps(exp8(_mm256_sub_ps(_mm256_loadu_ps(x + 8), mv)), keep1);
  _mm256_storeu_ps(x, p0);
  _mm256_storeu_ps(x + 8, p1);
  const __m256 sum = _mm256_add_ps(p0, p1);
  __m128 half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
  half = _mm_add_ps(half, _mm_movehl_ps(half, half));
  half = _mm_add_ss(half, _mm_movehdup_ps(half));
  return _mm_cvtss_f32(half);
}

// max(x[0], …, x[n-1]), 1 ≤ n ≤ 16 (max is exact: any order gives the same value).
inline float tile_max(const float* x, std::uint32_t n) {
  if (n == 16) {
    __m256 m = _mm256_max_ps(_mm256_loadu_ps(x), _mm256_loadu_ps(x + 8));
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
  }
  float m = x[0];
  for (std::uint32_t r = 1; r < n; ++r) m = std::max(m, x[r]);
  return m;
}

// x[i] = exp(x[i]) for the 16 values of a merge's scales (exp8 per lane: each
// value's result is independent of its neighbours).
inline void exp16(float* x) {
  _mm256_storeu_ps(x, exp8(_mm256_loadu_ps(x)));
  _mm256_storeu_ps(x + 8, exp8(_mm256_loadu_ps(x + 8)));
}

// acc[h][:] += p[h][r] · v[r][:] for r < n (acc taken as 0 when `fresh`: the
// same sums as from a zeroed acc): per element one FMA per row, rows in
// order. A V chunk of 16 elements is loaded once for HB (≤ 4) heads of the group.
template <DType D, std::uint32_t HB>
inline void values_heads(float* acc, const float* p, const std::byte* v, std::uint64_t stride, std::uint32_t n,
                         std::uint32_t d, std::uint32_t dim, bool fresh) {
  constexpr std::uint32_t eb = D == DType::f32 ? 4 : 2;
  __m256 a[HB][2];
  for (std::uint32_t g = 0; g < HB; ++g) {
    a[g][0] = fresh ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + std::size_t{g} * dim + d);
    a[g][1] = fresh ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + std::size_t{g} * dim + d + 8);
  }
  for (std::uint32_t r = 0; r < n; ++r) {
    const std::byte* vr = v + r * stride + std::size_t{d} * eb;
    const __m256 v0 = load8<D>(vr), v1 = load8<D>(vr + 8 * eb);
    for (std::uint32_t g = 0; g < HB; ++g) {
      const __m256 x = _mm256_broadcast_ss(p + std::size_t{g} * 16 + r);
      a[g][0] = _mm256_fmadd_ps(x, v0, a[g][0]);
      a[g][1] = _mm256_fmadd_ps(x, v1, a[g][1]);
    }
  }
  for (std::uint32_t g = 0; g < HB; ++g) {
    _mm256_storeu_ps(acc + std::size_t{g} * dim + d, a[g][0]);
    _mm256_storeu_ps(acc + std::size_t{g} * dim + d + 8, a[g][1]);
  }
}

template <DType D>
inline void values_impl(float* acc, const float* p, const std::byte* v, std::uint64_t stride, std::uint32_t n,
                        std::uint32_t dim, std::uint32_t heads, bool fresh) {
  constexpr std::uint32_t eb = D == DType::f32 ? 4 : 2;
  std::uint32_t d = 0;
  for (; d + 16 <= dim; d += 16) {
    for (std::uint32_t h0 = 0; h0 < heads; h0 += 4) {
      float* a = acc + std::size_t{h0} * dim;
      const float* ph = p + std::size_t{h0} * 16;
      switch (std::min<std::uint32_t>(4, heads - h0)) {
        case 1: values_heads<D, 1>(a, ph, v, stride, n, d, dim, fresh); break;
        case 2: values_heads<D, 2>(a, ph, v, stride, n, d, dim, fresh); break;
        case 3: values_heads<D, 3>(a, ph, v, stride, n, d, dim, fresh); break;
        default: values_heads<D, 4>(a, ph, v, stride, n, d, dim, fresh); break;
      }
    }
  }
  for (; d < dim; ++d) {  // a head_dim not a multiple of 16
    for (std::uint32_t g = 0; g < heads; ++g) {
      float x = fresh ? 0.0f : acc[std::size_t{g} * dim + d];
      for (std::uint32_t r = 0; r < n; ++r) {
        float w;
        portable::widen(v + r * stride + std::size_t{d} * eb, D, 1, &w);
        x = std::fma(p[std::size_t{g} * 16 + r], w, x);
      }
      acc[std::size_t{g} * dim + d] = x;
    }
  }
}

inline void scores(const float* q, const std::byte* k, std::uint64_t stride, DType dtype, std::uint32_t n,
                   std::uint32_t dim, std::uint32_t heads, float scale, float* out) {
  switch (dtype) {
    case DType::f16: return scores_impl<DType::f16>(q, k, stride, n, dim, heads, scale, out);
    case DType::bf16: return scores_impl<DType::bf16>(q, k, stride, n, dim, heads, scale, out);
    case DType::f32: return scores_impl<DType::f32>(q, k, stride, n, dim, heads, scale, out);
  }
}

inline void values(float* acc, const float* p, const std::byte* v, std::uint64_t stride, DType dtype, std::uint32_t n,
                   std::uint32_t dim, std::uint32_t heads, bool fresh) {
  switch (dtype) {
    case DType::f16: return values_impl<DType::f16>(acc, p, v, stride, n, dim, heads, fresh);
    case DType::bf16: return values_impl<DType::bf16>(acc, p, v, stride, n, dim, heads, fresh);
    case DType::f32: return values_impl<DType::f32>(acc, p, v, stride, n, dim, heads, fresh);
  }
}

}  // namespace

#include "backends/host/attention_cpu_kernel.hpp"

}  // namespace activekv::host::avx2
