// attention_cpu_portable.cpp — the kernel with portable inner loops (any CPU).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backends/host/attention_cpu_isa.hpp"

namespace activekv::host::portable {

namespace {

float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = (h & 0x8000u) << 16;
  std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exponent = 127 - 15 + 1;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        --exponent;
      }
      mantissa &= 0x3ffu;
      bits = sign | (exponent << 23) | (mantissa << 13);
    }
  } else if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

float bf16_to_f32(std::uint16_t b) {
  const std::uint32_t bits = std::uint32_t{b} << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

inline float dot(const float* a, const float* b, std::uint32_t n) {
  float lanes[8] = {};
  std::uint32_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (std::uint32_t l = 0; l < 8; ++l) lanes[l] += a[i + l] * b[i + l];
  }
  for (; i < n; ++i) lanes[i % 8] += a[i] * b[i];
  return ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5])) + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
}

inline void axpy(float* acc, float p, const float* v, std::uint32_t n) {
  for (std::uint32_t i = 0; i < n; ++i) acc[i] += p * v[i];
}

inline void exp_shifted(float* x, std::uint32_t n, float m) {
  for (std::uint32_t i = 0; i < n; ++i) x[i] = std::exp(x[i] - m);
}

}  // namespace

void widen(const std::byte* src, DType dtype, std::uint32_t n, float* dst) {
  switch (dtype) {
    case DType::f32: std::memcpy(dst, src, std::size_t{n} * 4); return;
    case DType::f16:
      for (std::uint32_t i = 0; i < n; ++i) {
        std::uint16_t h;
        std::memcpy(&h, src + 2 * i, 2);
        dst[i] = f16_to_f32(h);
      }
      return;
    case DType::bf16:
      for (std::uint32_t i = 0; i < n; ++i) {
        std::uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        dst[i] = bf16_to_f32(b);
      }
      return;
  }
}

#include "backends/host/attention_cpu_kernel.hpp"

}  // namespace activekv::host::portable
