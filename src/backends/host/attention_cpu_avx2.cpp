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

inline float dot(const float* a, const float* b, std::uint32_t n) {
  __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
  std::uint32_t i = 0;
  for (; i + 16 <= n; i += 16) {
    sum0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), sum0);
    sum1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), sum1);
  }
  for (; i + 8 <= n; i += 8) sum0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), sum0);
  const __m256 sum = _mm256_add_ps(sum0, sum1);
  __m128 half = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
  half = _mm_add_ps(half, _mm_movehl_ps(half, half));
  half = _mm_add_ss(half, _mm_movehdup_ps(half));
  float total = _mm_cvtss_f32(half);
  for (; i < n; ++i) total += a[i] * b[i];
  return total;
}

inline void axpy(float* acc, float p, const float* v, std::uint32_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  std::uint32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(acc + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(v + i), _mm256_loadu_ps(acc + i)));
  for (; i < n; ++i) acc[i] += p * v[i];
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

inline void exp_shifted(float* x, std::uint32_t n, float m) {
  const __m256 mv = _mm256_set1_ps(m);
  std::uint32_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv)));
  if (i < n) {
    alignas(32) float tail[8] = {};
    for (std::uint32_t j = i; j < n; ++j) tail[j - i] = x[j];
    _mm256_store_ps(tail, exp8(_mm256_sub_ps(_mm256_load_ps(tail), mv)));
    for (std::uint32_t j = i; j < n; ++j) x[j] = tail[j - i];
  }
}

}  // namespace

#include "backends/host/attention_cpu_kernel.hpp"

}  // namespace activekv::host::avx2
