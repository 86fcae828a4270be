// matmul_q8.cpp — the 8-bit-activation path's dispatch and its portable
// version, written element by element in the fixed order matmul_q8.hpp states;
// the AVX2 file (matmul_q8_avx2.cpp) must give the same bits.
#include "engine/matmul_q8.hpp"

#include <cmath>

#include "activekv/assert.hpp"
#include "engine/formats/k_super.hpp"

namespace activekv::engine {
namespace {

void quantize_portable(const float* x, std::size_t x_stride, const Q8Rows& out, std::size_t row_begin,
                       std::size_t row_end) noexcept {
  const std::size_t nb = out.cols / q8_block;
  for (std::size_t b = row_begin; b < row_end; ++b) {
    for (std::size_t k = 0; k < nb; ++k) {
      const float* xs = x + b * x_stride + k * q8_block;
      std::int8_t* q = out.q + b * out.cols + k * q8_block;
      float amax = 0.0f;
      for (std::uint32_t i = 0; i < q8_block; ++i) {
        const float a = std::fabs(xs[i]);
        amax = a > amax ? a : amax;
      }
      const float is = amax != 0.0f ? q8_max / amax : 0.0f;
      for (std::uint32_t g = 0; g < q8_block / q8_group; ++g) {
        int sum = 0;
        for (std::uint32_t l = 0; l < q8_group; ++l) {
          const std::uint32_t i = g * q8_group + l;
          long v = std::lrint(xs[i] * is);
          v = v < -127 ? -127 : (v > 127 ? 127 : v);
          q[i] = static_cast<std::int8_t>(v);
          sum += static_cast<int>(v);
        }
        out.bsum[(b * nb + k) * (q8_block / q8_group) + g] = static_cast<std::int16_t>(sum);
      }
      out.d[b * nb + k] = amax != 0.0f ? 1.0f / is : 0.0f;
    }
  }
}

// One output: weight row `row` (nb super-blocks of `type`) · activation row b of x, in the order of matmul_q8.hpp.
float dot_portable(GgmlType type, const std::uint8_t* row, const Q8Rows& x, std::size_t b) noexcept {
  const std::size_t nb = x.cols / q8_block;
  float acc = 0.0f;
  float mins = 0.0f;  // Q4_K, Q5_K
  for (std::size_t i = 0; i < nb; ++i) {
    formats::KScales s;
    formats::k_scales(type, row, i, &s);
    int u[q8_block];
    formats::k_values(type, row, i, u);
    const std::int8_t* q = x.q + b * x.cols + i * q8_block;
    const float dx = x.d[b * nb + i];
    const std::int16_t* bsum = x.bsum + (b * nb + i) * (q8_block / q8_group);
    std::int32_t p = 0, m = 0;
    for (std::uint32_t g = 0; g < q8_block / q8_group; ++g) {
      std::int32_t part = 0;
      for (std::uint32_t e = q8_group * g; e < q8_group * (g + 1); ++e) part += u[e] * q[e];
      p += s.sc[g] * part;
      m += s.mk[g] * bsum[g];
    }
    if (type == GgmlType::q6_k) {
      acc = std::fma(static_cast<float>(p - m), s.d * dx, acc);
    } else {
      acc = std::fma(static_cast<float>(p), s.d * dx, acc);
      mins = std::fma(static_cast<float>(m), -(s.dmin * dx), mins);
    }
  }
  return type == GgmlType::q6_k ? acc : acc + mins;
}

void matmul_portable(const detail::Q8Args& a) noexcept {
  const MatrixView& w = *a.w;
  for (std::uint32_t r = a.row_begin; r < a.row_end; ++r)
    for (std::size_t b = 0; b < a.x->batch; ++b)
      a.y[b * a.y_stride + r] = dot_portable(w.type, w.data + r * w.row_bytes, *a.x, b);
}

bool x86_kernels(Isa isa) noexcept {
#if defined(__x86_64__) && defined(ACTIVEKV_ENGINE_X86_KERNELS)
  return isa != Isa::portable;
#else
  (void)isa;
  return false;
#endif
}

}  // namespace

const char* activations_name(Activations a) noexcept {
  switch (a) {
    case Activations::q16: return "q16";
    case Activations::q8: return "q8";
  }
  return "?";
}

bool parse_activations(std::string_view text, Activations* out) noexcept {
  if (text == "q16") *out = Activations::q16;
  else if (text == "q8") *out = Activations::q8;
  else return false;
  return true;
}

bool q8_supported(GgmlType type, std::uint32_t cols) noexcept {
  const bool on_path = type == GgmlType::q4_k || type == GgmlType::q5_k || type == GgmlType::q6_k;
  return on_path && cols > 0 && cols % q8_block == 0 && cols / q8_block <= q8_super_blocks_max;
}

bool vnni_available() noexcept {
#if defined(__x86_64__) && defined(ACTIVEKV_ENGINE_X86_KERNELS)
  return __builtin_cpu_supports("avx512vnni") != 0;
#else
  return false;
#endif
}

// AVX-512 CPUs quantise with the AVX2 kernel and, with VNNI, take the AVX-512 prefill kernel (the bits are the
// same on every path).
void quantize_rows_q8(Isa isa, const float* x, std::size_t x_stride, const Q8Rows& out, std::size_t row_begin,
                      std::size_t row_end) noexcept {
  AK_ASSERT(out.cols % q8_block == 0, "quantize_rows_q8: width not a multiple of 256");
  AK_ASSERT(row_begin <= row_end && row_end <= out.batch, "quantize_rows_q8: rows outside the batch");
  AK_ASSERT(isa_available(isa), "quantize_rows_q8: instruction set not available on this CPU");
#if defined(__x86_64__) && defined(ACTIVEKV_ENGINE_X86_KERNELS)
  if (x86_kernels(isa)) {
    detail::quantize_q8_avx2(x, x_stride, out, row_begin, row_end);
    return;
  }
#endif
  quantize_portable(x, x_stride, out, row_begin, row_end);
}

void matmul_rows_q8(Isa isa, const MatrixView& w, const Q8Rows& x, float* y, std::size_t y_stride,
                    std::uint32_t row_begin, std::uint32_t row_end) noexcept {
  AK_ASSERT(q8_supported(w.type, w.cols), "matmul_rows_q8: weight type or width not supported");
  AK_ASSERT(w.cols == x.cols, "matmul_rows_q8: activation width differs from the matrix's");
  AK_ASSERT(row_begin <= row_end && row_end <= w.rows, "matmul_rows_q8: rows outside the matrix");
  AK_ASSERT(isa_available(isa), "matmul_rows_q8: instruction set not available on this CPU");
  const detail::Q8Args args{&w, &x, y, y_stride, row_begin, row_end};
#if defined(__x86_64__) && defined(ACTIVEKV_ENGINE_X86_KERNELS)
  if (x86_kernels(isa)) {
    if (isa == Isa::avx512 && vnni_available()) detail::matmul_q8_avx512(args);
    else detail::matmul_q8_avx2(args);
    return;
  }
#endif
  matmul_portable(args);
}

}  // namespace activekv::engine
