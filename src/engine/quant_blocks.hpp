// quant_blocks.hpp — the byte layout of every ggml block the engine computes with.
//
// A quantised row is a sequence of blocks along the row's first dimension.
// Each block stores a scale (and for the "_1" and K types a minimum) in IEEE
// half precision, then packed integers. The value of element i is
//
//   Q4_0: d × (q − 8)            q: 4 bits; elements 0..15 in the low nibbles, 16..31 in the high
//   Q4_1: d × q + m              same packing as Q4_0
//   Q5_0: d × (q − 16)           4 low bits as Q4_0, bit 4 of element j is bit j of qh (little endian)
//   Q5_1: d × q + m              same packing as Q5_0
//   Q8_0: d × q                  q: signed 8 bits
//   Q4_K: 256 elements in 8 sub-blocks of 32; sub-block s has a 6-bit scale and
//         a 6-bit min packed in scales[12]; value = d × sc_s × q − dmin × m_s;
//         each 64 elements share 32 bytes of qs: low nibbles first, then high
//   Q5_K: as Q4_K with a fifth bit: bit s of qh[l] is bit 4 of element l of sub-block s
//   Q6_K: 256 elements in 16 groups of 16 with signed 8-bit scales;
//         q = (4 bits of ql | 2 bits of qh << 4) − 32; value = d × sc × q
//   Q3_K: 256 elements in 16 groups of 16 with 6-bit scales packed in scales[12]
//         (sc − 32); q = 2 bits of qs − (4 where the hmask bit is clear); value = d × sc × q
//   Q2_K: 256 elements in 16 groups of 16; scales[g] holds a 4-bit scale (low)
//         and a 4-bit min (high); value = d × sc × q − dmin × m, q: 2 bits
// In the 2- and 3-bit types, byte l of a 32-byte run of qs holds element l of
// four consecutive 32-element sub-blocks, at shifts 0, 2, 4, 6.
//
// This header is included by every instruction-set file (scalar, AVX2,
// AVX-512), so it holds only plain structs and `static inline` helpers:
// internal linkage keeps the linker from merging an AVX-512 copy of a helper
// into the portable path.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__F16C__)
#include <immintrin.h>
#endif

namespace activekv::engine::blocks {

constexpr int qk = 32;     // elements per block of the 32-element types
constexpr int qk_k = 256;  // elements per K-quant super-block

struct BlockQ4_0 {
  std::uint16_t d;            // scale, f16
  std::uint8_t qs[qk / 2];    // nibbles
};
struct BlockQ4_1 {
  std::uint16_t d;            // scale, f16
  std::uint16_t m;            // minimum, f16
  std::uint8_t qs[qk / 2];
};
struct BlockQ5_0 {
  std::uint16_t d;
  std::uint8_t qh[4];         // fifth bits, one per element
  std::uint8_t qs[qk / 2];
};
struct BlockQ5_1 {
  std::uint16_t d;
  std::uint16_t m;
  std::uint8_t qh[4];
  std::uint8_t qs[qk / 2];
};
struct BlockQ8_0 {
  std::uint16_t d;
  std::int8_t qs[qk];
};
struct BlockQ4_K {
  std::uint16_t d;            // super-block scale for the sub-block scales
  std::uint16_t dmin;         // super-block scale for the sub-block mins
  std::uint8_t scales[12];    // 8 × (6-bit scale, 6-bit min)
  std::uint8_t qs[qk_k / 2];
};
struct BlockQ6_K {
  std::uint8_t ql[qk_k / 2];  // low 4 bits
  std::uint8_t qh[qk_k / 4];  // high 2 bits
  std::int8_t scales[qk_k / 16];
  std::uint16_t d;
};

struct BlockQ5_K {
  std::uint16_t d;
  std::uint16_t dmin;
  std::uint8_t scales[12];    // as Q4_K
  std::uint8_t qh[qk_k / 8];  // fifth bits
  std::uint8_t qs[qk_k / 2];  // low nibbles, as Q4_K
};
struct BlockQ3_K {
  std::uint8_t hmask[qk_k / 8];  // bit i of hmask[l]: element l of sub-block i is not offset by −4
  std::uint8_t qs[qk_k / 4];     // low 2 bits
  std::uint8_t scales[12];       // 16 × 6 bits
  std::uint16_t d;
};
struct BlockQ2_K {
  std::uint8_t scales[qk_k / 16];  // low nibble scale, high nibble min
  std::uint8_t qs[qk_k / 4];
  std::uint16_t d;
  std::uint16_t dmin;
};

static_assert(sizeof(BlockQ4_0) == 18, "Q4_0 block is 18 bytes");
static_assert(sizeof(BlockQ4_1) == 20, "Q4_1 block is 20 bytes");
static_assert(sizeof(BlockQ5_0) == 22, "Q5_0 block is 22 bytes");
static_assert(sizeof(BlockQ5_1) == 24, "Q5_1 block is 24 bytes");
static_assert(sizeof(BlockQ8_0) == 34, "Q8_0 block is 34 bytes");
static_assert(sizeof(BlockQ4_K) == 144, "Q4_K block is 144 bytes");
static_assert(sizeof(BlockQ6_K) == 210, "Q6_K block is 210 bytes");
static_assert(sizeof(BlockQ5_K) == 176, "Q5_K block is 176 bytes");
static_assert(sizeof(BlockQ3_K) == 110, "Q3_K block is 110 bytes");
static_assert(sizeof(BlockQ2_K) == 84, "Q2_K block is 84 bytes");

// IEEE half → float, exact (subnormals, infinities and NaN included). Where F16C is compiled in (the AVX2 and
// AVX-512 files), finite values take its one-instruction conversion, which is exact too, so the bits are the
// same on every path; infinities and NaN keep the code below (F16C would set a signalling NaN's quiet bit).
static inline float half_to_float(std::uint16_t h) {
#if defined(__F16C__)
  if ((h & 0x7c00u) != 0x7c00u) return _cvtsh_ss(h);
#endif
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  std::uint32_t bits = 0;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (mantissa != 0) {
    // Subnormal half: normalise into a float.
    std::uint32_t shift = 0;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      ++shift;
    }
    mantissa &= 0x3ffu;
    bits = sign | ((113u - shift) << 23) | (mantissa << 13);
  } else {
    bits = sign;
  }
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// float → IEEE half, rounded to nearest with ties to even (what F16C's vcvtps2ph does with rounding
// mode 0, and llama.cpp's fp16 stores on x86): overflow to infinity, subnormals rounded, NaN kept a NaN.
static inline std::uint16_t float_to_half(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  const std::uint16_t sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000u);
  const std::uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  if (abs >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // ≥ 65520: rounds past the largest half
  const std::int32_t exponent = static_cast<std::int32_t>(abs >> 23) - 127;
  std::uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;  // 24 significant bits
  // Bits of the 24-bit significand dropped: 13 for a normal half, more below 2^-14 (subnormal), all below 2^-25.
  const std::int32_t drop = exponent >= -14 ? 13 : 13 + (-14 - exponent);
  if (drop > 24) return sign;  // below 2^-25, half the smallest subnormal (float subnormals included)
  const std::uint32_t half_ulp = 1u << (drop - 1);
  const std::uint32_t rest = mantissa & ((1u << drop) - 1u);
  mantissa >>= drop;
  if (rest > half_ulp || (rest == half_ulp && (mantissa & 1u))) ++mantissa;
  // Normal: biased exponent (exponent + 15) and the 10 stored bits; a carry out of the mantissa moves into the
  // exponent by the addition. Subnormal: the mantissa alone (a carry into bit 10 makes the smallest normal).
  const std::uint32_t h = exponent >= -14 ? ((static_cast<std::uint32_t>(exponent + 15) << 10) + (mantissa - 0x400u))
                                          : mantissa;
  return static_cast<std::uint16_t>(sign | h);
}

static inline float bf16_to_float(std::uint16_t h) {
  const std::uint32_t bits = static_cast<std::uint32_t>(h) << 16;
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Sub-block j's 6-bit scale and min from a Q4_K scales[12] array.
static inline void q4_k_scale_min(int j, const std::uint8_t* q, std::uint8_t* scale, std::uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = static_cast<std::uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *min = static_cast<std::uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Group g's (0..15) signed scale from a Q3_K scales[12] array: low 4 bits from byte g % 8 (shift 4 × (g / 8)),
// high 2 bits from byte 8 + g % 4 (shift 2 × (g / 4)), minus 32.
static inline int q3_k_scale(int g, const std::uint8_t* q) {
  const int lo = (q[g % 8] >> (4 * (g / 8))) & 0x0F;
  const int hi = (q[8 + g % 4] >> (2 * (g / 4))) & 0x03;
  return (lo | (hi << 4)) - 32;
}

}  // namespace activekv::engine::blocks
