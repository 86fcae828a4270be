// elementwise_avx2.cpp — exp, the gated activations and RMS norm, 8 lanes (compiled with -mavx2 -mfma
// -ffp-contract=off; called only where isa_available(Isa::avx2)). Each operation is the one
// elementwise_lanes.hpp names, so every lane matches the portable path bit for bit.
#include <immintrin.h>

#include "engine/elementwise_lanes.hpp"

namespace activekv::engine::detail {
namespace {

struct Avx2Lanes {
  using V = __m256;
  static constexpr std::size_t width = 8;
  static V load(const float* p) noexcept { return _mm256_loadu_ps(p); }
  static void store(float* p, V v) noexcept { _mm256_storeu_ps(p, v); }
  static V splat(float v) noexcept { return _mm256_set1_ps(v); }
  static V add(V a, V b) noexcept { return _mm256_add_ps(a, b); }
  static V sub(V a, V b) noexcept { return _mm256_sub_ps(a, b); }
  static V mul(V a, V b) noexcept { return _mm256_mul_ps(a, b); }
  static V div(V a, V b) noexcept { return _mm256_div_ps(a, b); }
  static V fma(V a, V b, V c) noexcept { return _mm256_fmadd_ps(a, b, c); }
  static V min(V a, V b) noexcept { return _mm256_min_ps(a, b); }  // a < b ? a : b
  static V max(V a, V b) noexcept { return _mm256_max_ps(a, b); }  // a > b ? a : b
  static V keep_nan(V x, V y) noexcept { return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q)); }
  static V pow2(__m256i k) noexcept {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
  }
  static V scale_pow2(V e, V n) noexcept {
    const __m256i k = _mm256_cvtps_epi32(n);  // exact: n is integral
    const __m256i k1 = _mm256_srai_epi32(k, 1);
    return _mm256_mul_ps(_mm256_mul_ps(e, pow2(k1)), pow2(_mm256_sub_epi32(k, k1)));
  }
};

}  // namespace

void activation_avx2(const ActivationArgs& args) noexcept { activation_run<Avx2Lanes>(args); }
void norm_avx2(const NormArgs& args) noexcept { norm_run<Avx2Lanes>(args); }

}  // namespace activekv::engine::detail
