// element_codec.cpp — bit-exact fp32 ⇄ f16 / bf16 conversions (round to nearest even).
#include "runtime/element_codec.hpp"
#include "core/cpu_features.hpp"

#include <bit>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define ACTIVEKV_CODEC_F16C 1
#endif

namespace activekv::runtime {
namespace {

#if ACTIVEKV_CODEC_F16C
// F16C converts 8 lanes at a time with the same rounding (nearest even) and the
// same NaN rule (quiet bit set, payload truncated) as the scalar code; the tail
// goes through the scalar code. Chosen at run time where the CPU has it.
const bool cpu_has_f16c = activekv::cpu_has_f16c() && __builtin_cpu_supports("avx");

__attribute__((target("avx,f16c"))) void encode_f16_f16c(const float* src, std::size_t count,
                                                          std::uint16_t* out) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  for (; i < count; ++i) out[i] = f32_to_f16(src[i]);
}

__attribute__((target("avx,f16c"))) void decode_f16_f16c(const std::uint16_t* in, std::size_t count,
                                                          float* dst) noexcept {
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  }
  for (; i < count; ++i) dst[i] = f16_to_f32(in[i]);
}
#endif

}  // namespace

std::uint16_t f32_to_f16(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t exponent = (x >> 23) & 0xffu;
  std::uint32_t mantissa = x & 0x7fffffu;
  if (exponent == 0xffu) {  // inf or NaN (NaN kept quiet and non-zero)
    return static_cast<std::uint16_t>(sign | 0x7c00u | (mantissa != 0 ? 0x200u | (mantissa >> 13) : 0u));
  }
  const int e = static_cast<int>(exponent) - 127 + 15;
  if (e >= 31) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow: infinity
  if (e <= 0) {                                                      // subnormal or zero in f16
    if (e < -10) return static_cast<std::uint16_t>(sign);
    mantissa |= 0x800000u;  // implicit leading one
    const auto shift = static_cast<std::uint32_t>(14 - e);
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1u << shift) - 1u);
    const std::uint32_t halfway = 1u << (shift - 1u);
    if (rest > halfway || (rest == halfway && (half & 1u) != 0)) ++half;
    return static_cast<std::uint16_t>(sign | half);
  }
  std::uint32_t half = (static_cast<std::uint32_t>(e) << 10) | (mantissa >> 13);
  const std::uint32_t rest = mantissa & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u) != 0)) ++half;  // may carry into the exponent: correct
  return static_cast<std::uint16_t>(sign | half);
}

float f16_to_f32(std::uint16_t bits) noexcept {
  const std::uint32_t sign = (static_cast<std::uint32_t>(bits) & 0x8000u) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1fu;
  std::uint32_t mantissa = bits & 0x3ffu;
  std::uint32_t x = 0;
  if (exponent == 0x1fu) {  // infinity, or NaN made quiet (as the conversion instructions do)
    x = sign | 0x7f800000u | (mantissa != 0 ? 0x400000u : 0u) | (mantissa << 13);
  } else if (exponent != 0) {
    x = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    x = sign;
  } else {  // subnormal: normalise
    std::uint32_t e = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    x = sign | (e << 23) | ((mantissa & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(x);
}

std::uint16_t f32_to_bf16(float value) noexcept {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu) != 0) {
    return static_cast<std::uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  }
  const std::uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + rounding) >> 16);
}

float bf16_to_f32(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

void encode_elements(DType dtype, const float* src, std::size_t count, void* dst) noexcept {
  switch (dtype) {
    case DType::f32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::f16: {
      auto* out = static_cast<std::uint16_t*>(dst);
#if ACTIVEKV_CODEC_F16C
      if (cpu_has_f16c) return encode_f16_f16c(src, count, out);
#endif
      for (std::size_t i = 0; i < count; ++i) out[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::bf16: {
      auto* out = static_cast<std::uint16_t*>(dst);
      for (std::size_t i = 0; i < count; ++i) out[i] = f32_to_bf16(src[i]);
      return;
    }
  }
}

void decode_elements(DType dtype, const void* src, std::size_t count, float* dst) noexcept {
  switch (dtype) {
    case DType::f32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case DType::f16: {
      const auto* in = static_cast<const std::uint16_t*>(src);
#if ACTIVEKV_CODEC_F16C
      if (cpu_has_f16c) return decode_f16_f16c(in, count, dst);
#endif
      for (std::size_t i = 0; i < count; ++i) dst[i] = f16_to_f32(in[i]);
      return;
    }
    case DType::bf16: {
      const auto* in = static_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(in[i]);
      return;
    }
  }
}

}  // namespace activekv::runtime
