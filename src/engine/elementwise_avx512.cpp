// elementwise_avx512.cpp — exp, the gated activations and RMS norm, 16 lanes (compiled with -mavx512f
// -ffp-contract=off; called only where isa_available(Isa::avx512)). Each operation is the one
// elementwise_lanes.hpp names, so every lane matches the portable path bit for bit.
#include <immintrin.h>

#include "engine/elementwise_lanes.hpp"

namespace activekv::engine::detail {
namespace {

struct Avx512Lanes {
  using V = __m512;
  static constexpr std::size_t width = 16;
  static V load(const float* p) noexcept { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) noexcept { _mm512_storeu_ps(p, v); }
  static V splat(float v) noexcept { return _mm512_set1_ps(v); }
  static V add(V a, V b) noexcept { return _mm512_add_ps(a, b); }
  static V sub(V a, V b) noexcept { return _mm512_sub_ps(a, b); }
  static V mul(V a, V b) noexcept { return _mm512_mul_ps(a, b); }
  static V div(V a, V b) noexcept { return _mm512_div_ps(a, b); }
  static V fma(V a, V b, V c) noexcept { return _mm512_fmadd_ps(a, b, c); }
  static V min(V a, V b) noexcept { return _mm512_min_ps(a, b); }  // a < b ? a : b
  static V max(V a, V b) noexcept { return _mm512_max_ps(a, b); }  // a > b ? a : b
  static V keep_nan(V x, V y) noexcept { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), y, x); }
  static V pow2(__m512i k) noexcept {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(k, _mm512_set1_epi32(127)), 23));
  }
  static V scale_pow2(V e, V n) noexcept {
    const __m512i k = _mm512_cvtps_epi32(n);  // exact: n is integral
    const __m512i k1 = _mm512_srai_epi32(k, 1);
    return _mm512_mul_ps(_mm512_mul_ps(e, pow2(k1)), pow2(_mm512_sub_epi32(k, k1)));
  }
};

}  // namespace

void activation_avx512(const ActivationArgs& args) noexcept { activation_run<Avx512Lanes>(args); }
void norm_avx512(const NormArgs& args) noexcept { norm_run<Avx512Lanes>(args); }

}  // namespace activekv::engine::detail
