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

}  // namespace

void widen(const std::byte* src, DType dtype, std::uint32_t n, float* dst);

namespace {

// One element of K or V as fp32.
inline float element(const std::byte* src, DType dtype, std::uint32_t i) {
  float x;
  widen(src + std::size_t{i} * dtype_bytes(dtype), dtype, 1, &x);
  return x;
}

// out[h][r] = scale · q[h]·k[r] for r < n (8 lane sums, then a fixed tree), 0 for n ≤ r < 16.
inline void scores(const float* q, const std::byte* k, std::uint64_t stride, DType dtype, std::uint32_t n,
                   std::uint32_t dim, std::uint32_t heads, float scale, float* out) {
  for (std::uint32_t r = 0; r < 16; ++r) {
    for (std::uint32_t h = 0; h < heads; ++h) {
      float dot = 0.0f;
      if (r < n) {
        const float* qh = q + std::size_t{h} * dim;
        float lanes[8] = {};
        for (std::uint32_t d = 0; d < dim; ++d) lanes[d % 8] += qh[d] * element(k + r * stride, dtype, d);
        dot = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      }
      out[std::size_t{h} * 16 + r] = dot * scale;
    }
  }
}

// x[r] = exp(x[r] - m) for r < n, 0 for n ≤ r < 16; returns their sum (pairwise over 8 + 8 lanes).
inline float exp_sum(float* x, std::uint32_t n, float m) {
  for (std::uint32_t r = 0; r < 16; ++r) x[r] = r < n ? std::exp(x[r] - m) : 0.0f;
  float lanes[8];
  for (std::uint32_t l = 0; l < 8; ++l) lanes[l] = x[l] + x[l + 8];
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

// max(x[0], …, x[n-1]), 1 ≤ n ≤ 16.
inline float tile_max(const float* x, std::uint32_t n) {
  float m = x[0];
  for (std::uint32_t r = 1; r < n; ++r) m = std::max(m, x[r]);
  return m;
}

// x[i] = exp(x[i]) for the 16 values of a merge's scales.
inline void exp16(float* x) {
  for (std::uint32_t i = 0; i < 16; ++i) x[i] = std::exp(x[i]);
}

// acc[h][:] += p[h][r] · v[r][:] for r < n, rows in order (acc zeroed first when `fresh`).
inline void values(float* acc, const float* p, const std::byte* v, std::uint64_t stride, DType dtype, std::uint32_t n,
                   std::uint32_t dim, std::uint32_t heads, bool fresh) {
  for (std::uint32_t h = 0; h < heads; ++h) {
    float* a = acc + std::size_t{h} * dim;
    if (fresh) std::fill(a, a + dim, 0.0f);
    for (std::uint32_t r = 0; r < n; ++r) {
      const float pr = p[std::size_t{h} * 16 + r];
      for (std::uint32_t d = 0; d < dim; ++d) a[d] += pr * element(v + r * stride, dtype, d);
    }
  }
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
