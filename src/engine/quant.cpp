// quant.cpp — element-by-element dequantisation (see quant.hpp, quant_blocks.hpp).
//
// Clarity over speed: this is the oracle for the SIMD kernels and the fallback
// for types without a fused kernel, where a row is dequantised once into a
// scratch buffer and then reused by every vector of the batch.
#include "engine/quant.hpp"

#include <array>
#include <cstring>

#include "activekv/assert.hpp"
#include "engine/quant_blocks.hpp"

namespace activekv::engine {
namespace {

using namespace blocks;

void dequantize_q4_0(const BlockQ4_0* b, std::size_t count, float* y) {
  for (std::size_t i = 0; i < count; ++i, y += qk) {
    const float d = half_to_float(b[i].d);
    for (int j = 0; j < qk / 2; ++j) {
      y[j] = d * static_cast<float>((b[i].qs[j] & 0x0F) - 8);
      y[j + qk / 2] = d * static_cast<float>((b[i].qs[j] >> 4) - 8);
    }
  }
}

void dequantize_q4_1(const BlockQ4_1* b, std::size_t count, float* y) {
  for (std::size_t i = 0; i < count; ++i, y += qk) {
    const float d = half_to_float(b[i].d);
    const float m = half_to_float(b[i].m);
    for (int j = 0; j < qk / 2; ++j) {
      y[j] = d * static_cast<float>(b[i].qs[j] & 0x0F) + m;
      y[j + qk / 2] = d * static_cast<float>(b[i].qs[j] >> 4) + m;
    }
  }
}

std::uint32_t load_qh(const std::uint8_t* qh) {
  std::uint32_t bits;
  std::memcpy(&bits, qh, sizeof bits);
  return bits;  // little-endian host assumed (x86-64, aarch64)
}

void dequantize_q5_0(const BlockQ5_0* b, std::size_t count, float* y) {
  for (std::size_t i = 0; i < count; ++i, y += qk) {
    const float d = half_to_float(b[i].d);
    const std::uint32_t qh = load_qh(b[i].qh);
    for (int j = 0; j < qk / 2; ++j) {
      const int lo = (b[i].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = d * static_cast<float>(lo - 16);
      y[j + qk / 2] = d * static_cast<float>(hi - 16);
    }
  }
}

void dequantize_q5_1(const BlockQ5_1* b, std::size_t count, float* y) {
  for (std::size_t i = 0; i < count; ++i, y += qk) {
    const float d = half_to_float(b[i].d);
    const float m = half_to_float(b[i].m);
    const std::uint32_t qh = load_qh(b[i].qh);
    for (int j = 0; j < qk / 2; ++j) {
      const int lo = (b[i].qs[j] & 0x0F) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int hi = (b[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      y[j] = d * static_cast<float>(lo) + m;
      y[j + qk / 2] = d * static_cast<float>(hi) + m;
    }
  }
}

void dequantize_q8_0(const BlockQ8_0* b, std::size_t count, float* y) {
  for (std::size_t i = 0; i < count; ++i, y += qk) {
    const float d = half_to_float(b[i].d);
    for (int j = 0; j < qk; ++j) y[j] = d * static_cast<float>(b[i].qs[j]);
  }
}

void dequantize_q4_k(const BlockQ4_K* b, std::size_t count, float* y) {
  for (std::size_t i = 0; i < count; ++i) {
    const float d = half_to_float(b[i].d);
    const float dmin = half_to_float(b[i].dmin);
    const std::uint8_t* q = b[i].qs;
    for (int s = 0; s < 8; s += 2, q += 32) {
      std::uint8_t sc = 0;
      std::uint8_t mn = 0;
      q4_k_scale_min(s, b[i].scales, &sc, &mn);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = dmin * static_cast<float>(mn);
      q4_k_scale_min(s + 1, b[i].scales, &sc, &mn);
      const float d2 = d * static_cast<float>(sc);
      const float m2 = dmin * static_cast<float>(mn);
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0F) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

void dequantize_q6_k(const BlockQ6_K* b, std::size_t count, float* y) {
  for (std::size_t i = 0; i < count; ++i) {
    const float d = half_to_float(b[i].d);
    const std::uint8_t* ql = b[i].ql;
    const std::uint8_t* qh = b[i].qh;
    const std::int8_t* sc = b[i].scales;
    for (int n = 0; n < qk_k; n += 128, ql += 64, qh += 32, sc += 8, y += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l] = (d * static_cast<float>(sc[is + 0])) * static_cast<float>(q1);
        y[l + 32] = (d * static_cast<float>(sc[is + 2])) * static_cast<float>(q2);
        y[l + 64] = (d * static_cast<float>(sc[is + 4])) * static_cast<float>(q3);
        y[l + 96] = (d * static_cast<float>(sc[is + 6])) * static_cast<float>(q4);
      }
    }
  }
}

// The K types below follow gguf.quants' order of operations exactly: the scale products first
// (d × sc, dmin × m), then one multiply and one subtract per element, never fused (this file is compiled
// without FMA).
void dequantize_q5_k(const BlockQ5_K* b, std::size_t count, float* y) {
  for (std::size_t i = 0; i < count; ++i) {
    const float d = half_to_float(b[i].d);
    const float dmin = half_to_float(b[i].dmin);
    for (int s = 0; s < 8; ++s, y += 32) {
      std::uint8_t sc = 0;
      std::uint8_t mn = 0;
      q4_k_scale_min(s, b[i].scales, &sc, &mn);
      const float d1 = d * static_cast<float>(sc);
      const float m1 = dmin * static_cast<float>(mn);
      const std::uint8_t* q = b[i].qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) {
        const int v = ((q[l] >> shift) & 0x0F) | (((b[i].qh[l] >> s) & 1) << 4);
        y[l] = d1 * static_cast<float>(v) - m1;
      }
    }
  }
}

// Element e of a 2- or 3-bit K block: sub-block s = e / 32 reads byte 32 × (s / 4) + e % 32 of qs at shift
// 2 × (s % 4).
int low2_k(const std::uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e / 32) % 4))) & 3; }

void dequantize_q3_k(const BlockQ3_K* b, std::size_t count, float* y) {
  for (std::size_t i = 0; i < count; ++i, y += qk_k) {
    const float d = half_to_float(b[i].d);
    for (int g = 0; g < 16; ++g) {
      const float dl = d * static_cast<float>(q3_k_scale(g, b[i].scales));
      for (int e = 16 * g; e < 16 * g + 16; ++e) {
        const int high = (b[i].hmask[e % 32] >> (e / 32)) & 1;
        const int q = low2_k(b[i].qs, e) - (high != 0 ? 0 : 4);
        y[e] = dl * static_cast<float>(q);
      }
    }
  }
}

void dequantize_q2_k(const BlockQ2_K* b, std::size_t count, float* y) {
  for (std::size_t i = 0; i < count; ++i, y += qk_k) {
    const float d = half_to_float(b[i].d);
    const float dmin = half_to_float(b[i].dmin);
    for (int g = 0; g < 16; ++g) {
      const float dl = d * static_cast<float>(b[i].scales[g] & 0x0F);
      const float ml = dmin * static_cast<float>(b[i].scales[g] >> 4);
      for (int e = 16 * g; e < 16 * g + 16; ++e) y[e] = dl * static_cast<float>(low2_k(b[i].qs, e)) - ml;
    }
  }
}

}  // namespace

const char* quant_supported_names() noexcept {
  return "F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K";
}

bool quant_supported(GgmlType type) noexcept {
  switch (type) {
    case GgmlType::f32:
    case GgmlType::f16:
    case GgmlType::bf16:
    case GgmlType::q4_0:
    case GgmlType::q4_1:
    case GgmlType::q5_0:
    case GgmlType::q5_1:
    case GgmlType::q8_0:
    case GgmlType::q2_k:
    case GgmlType::q3_k:
    case GgmlType::q4_k:
    case GgmlType::q5_k:
    case GgmlType::q6_k:
      return true;
    default:  // the enum lists every type a file may name; most are not computed with here
      return false;
  }
}

std::size_t quant_row_bytes(GgmlType type, std::size_t elements) noexcept {
  const gguf::GgmlTypeTraits& traits = gguf::ggml_type_traits(type);
  AK_ASSERT(elements % traits.block_elements == 0, "quant_row_bytes: elements not a multiple of the block size");
  return elements / traits.block_elements * traits.block_bytes;
}

void dequantize_row(GgmlType type, const void* src, float* dst, std::size_t elements) noexcept {
  AK_ASSERT(quant_supported(type), "dequantize_row: unsupported type (the loader should have refused it)");
  const std::size_t block_elements = gguf::ggml_type_traits(type).block_elements;
  AK_ASSERT(elements % block_elements == 0, "dequantize_row: elements not a multiple of the block size");
  const std::size_t count = elements / block_elements;
  switch (type) {
    case GgmlType::f32:
      std::memcpy(dst, src, elements * sizeof(float));
      return;
    case GgmlType::f16: {
      const auto* h = static_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < elements; ++i) dst[i] = half_to_float(h[i]);
      return;
    }
    case GgmlType::bf16: {
      const auto* h = static_cast<const std::uint16_t*>(src);
      for (std::size_t i = 0; i < elements; ++i) dst[i] = bf16_to_float(h[i]);
      return;
    }
    case GgmlType::q4_0: dequantize_q4_0(static_cast<const BlockQ4_0*>(src), count, dst); return;
    case GgmlType::q4_1: dequantize_q4_1(static_cast<const BlockQ4_1*>(src), count, dst); return;
    case GgmlType::q5_0: dequantize_q5_0(static_cast<const BlockQ5_0*>(src), count, dst); return;
    case GgmlType::q5_1: dequantize_q5_1(static_cast<const BlockQ5_1*>(src), count, dst); return;
    case GgmlType::q8_0: dequantize_q8_0(static_cast<const BlockQ8_0*>(src), count, dst); return;
    case GgmlType::q4_k: dequantize_q4_k(static_cast<const BlockQ4_K*>(src), count, dst); return;
    case GgmlType::q5_k: dequantize_q5_k(static_cast<const BlockQ5_K*>(src), count, dst); return;
    case GgmlType::q6_k: dequantize_q6_k(static_cast<const BlockQ6_K*>(src), count, dst); return;
    case GgmlType::q3_k: dequantize_q3_k(static_cast<const BlockQ3_K*>(src), count, dst); return;
    case GgmlType::q2_k: dequantize_q2_k(static_cast<const BlockQ2_K*>(src), count, dst); return;
    default: AK_ASSERT(false, "dequantize_row: quant_supported() and this switch disagree");
  }
}

float dot_row_scalar(GgmlType type, const void* row, const float* x, std::size_t elements) noexcept {
  // One block at a time through a small stack buffer: no allocation, any row length.
  const std::size_t block_elements = gguf::ggml_type_traits(type).block_elements;
  const std::size_t block_bytes = gguf::ggml_type_traits(type).block_bytes;
  const std::size_t chunk_blocks = block_elements == 1 ? 256 : 1;
  std::array<float, qk_k> buffer{};
  const auto* bytes = static_cast<const std::uint8_t*>(row);
  float sum = 0.0f;
  for (std::size_t i = 0; i < elements;) {
    const std::size_t n = chunk_blocks * block_elements <= elements - i ? chunk_blocks * block_elements : elements - i;
    dequantize_row(type, bytes + i / block_elements * block_bytes, buffer.data(), n);
    for (std::size_t j = 0; j < n; ++j) sum += buffer[j] * x[i + j];
    i += n;
  }
  return sum;
}

}  // namespace activekv::engine
