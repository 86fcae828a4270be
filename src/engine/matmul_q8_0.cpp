// matmul_q8_0.cpp — the legacy formats' 8-bit-activation path: dispatch and
// the portable version, written element by element in the fixed order
// matmul_q8_0.hpp states; the AVX2 file (matmul_q8_0_avx2.cpp) must give the
// same bits.
#include "engine/matmul_q8_0.hpp"

#include <cmath>

#include "activekv/assert.hpp"
#include "core/cpu_features.hpp"
#include "engine/formats/all.hpp"

namespace activekv::engine {
namespace {

// ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)): the AVX2 horizontal sum's order.
float sum8(const float* a) noexcept {
  const float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
  return (s0 + s2) + (s1 + s3);
}

void quantize_portable(const float* x, std::size_t x_stride, const Q8_0Rows& out, std::size_t row_begin,
                       std::size_t row_end) noexcept {
  const std::size_t nb = out.cols / q8_0_block;
  for (std::size_t b = row_begin; b < row_end; ++b) {
    for (std::size_t k = 0; k < nb; ++k) {
      const float* xs = x + b * x_stride + k * q8_0_block;
      std::int8_t* q = out.q + b * out.cols + k * q8_0_block;
      float amax = 0.0f;
      for (std::uint32_t i = 0; i < q8_0_block; ++i) {
        const float a = std::fabs(xs[i]);
        amax = a > amax ? a : amax;
      }
      const float d = amax / 127.0f;
      float is = amax != 0.0f ? 127.0f / amax : 0.0f;
      is = std::isfinite(is) ? is : 0.0f;  // amax below 127 / FLT_MAX: a block of zeros (d rounds to 0 in f16)
      int sum = 0;
      for (std::uint32_t i = 0; i < q8_0_block; ++i) {
        long v = std::lrint(xs[i] * is);
        v = v < -127 ? -127 : (v > 127 ? 127 : v);
        q[i] = static_cast<std::int8_t>(v);
        sum += static_cast<int>(v);
      }
      out.d[b * nb + k] = blocks::half_to_float(blocks::float_to_half(d));
      out.s[b * nb + k] = blocks::half_to_float(blocks::float_to_half(d * static_cast<float>(sum)));
    }
  }
}

// One output: weight row `row` (nb blocks of format F) · activation row b of x, in the order of matmul_q8_0.hpp.
template <class F>
float dot_portable(const std::uint8_t* row, const Q8_0Rows& x, std::size_t b) noexcept {
  using Block = typename F::block_type;
  const std::size_t nb = x.cols / q8_0_block;
  float acc[8] = {};
  float mins = 0.0f;
  for (std::size_t k = 0; k < nb; ++k) {
    const Block& blk = reinterpret_cast<const Block*>(row)[k];
    int u[q8_0_block];
    F::weights(row, k, u);
    const std::int8_t* q = x.q + b * x.cols + k * q8_0_block;
    const float scale = blocks::half_to_float(blk.d) * x.d[b * nb + k];
    for (int j = 0; j < 8; ++j) {
      int p = 0;
      for (int e = 4 * j; e < 4 * j + 4; ++e) p += u[e] * q[e];
      acc[j] = std::fma(static_cast<float>(p), scale, acc[j]);
    }
    if constexpr (F::has_min) {
      const float m = blocks::half_to_float(blk.m) * x.s[b * nb + k];
      mins = mins + m;
    }
  }
  const float y = sum8(acc);
  if constexpr (F::has_min) return y + mins;
  return y;
}

void matmul_portable(const detail::Q8_0Args& a) noexcept {
  const MatrixView& w = *a.w;
  formats::q8_0_format_of(w.type, [&](auto format) {
    using F = decltype(format);
    for (std::uint32_t r = a.row_begin; r < a.row_end; ++r)
      for (std::size_t b = 0; b < a.x->batch; ++b)
        a.y[b * a.y_stride + r] = dot_portable<F>(w.data + r * w.row_bytes, *a.x, b);
  });
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

bool q8_0_supported(GgmlType type, std::uint32_t cols) noexcept {
  const bool on_path = formats::q8_0_format_of(type, [](auto) {});
  return on_path && cols > 0 && cols % q8_0_block == 0;
}

// The quantisation has no AVX-512 version: AVX-512 CPUs run the AVX2 one (the bytes are the same);
// the product has one where the CPU has AVX512-VNNI.
void quantize_rows_q8_0(Isa isa, const float* x, std::size_t x_stride, const Q8_0Rows& out, std::size_t row_begin,
                        std::size_t row_end) noexcept {
  AK_ASSERT(out.cols % q8_0_block == 0, "quantize_rows_q8_0: width not a multiple of 32");
  AK_ASSERT(row_begin <= row_end && row_end <= out.batch, "quantize_rows_q8_0: rows outside the batch");
  AK_ASSERT(isa_available(isa), "quantize_rows_q8_0: instruction set not available on this CPU");
#if defined(__x86_64__) && defined(ACTIVEKV_ENGINE_X86_KERNELS)
  if (x86_kernels(isa)) {
    detail::quantize_q8_0_avx2(x, x_stride, out, row_begin, row_end);
    return;
  }
#endif
  quantize_portable(x, x_stride, out, row_begin, row_end);
}

void matmul_rows_q8_0(Isa isa, const MatrixView& w, const Q8_0Rows& x, float* y, std::size_t y_stride,
                      std::uint32_t row_begin, std::uint32_t row_end) noexcept {
  AK_ASSERT(q8_0_supported(w.type, w.cols), "matmul_rows_q8_0: weight type or width not supported");
  AK_ASSERT(w.cols == x.cols, "matmul_rows_q8_0: activation width differs from the matrix's");
  AK_ASSERT(row_begin <= row_end && row_end <= w.rows, "matmul_rows_q8_0: rows outside the matrix");
  AK_ASSERT(isa_available(isa), "matmul_rows_q8_0: instruction set not available on this CPU");
  const detail::Q8_0Args args{&w, &x, y, y_stride, row_begin, row_end};
#if defined(__x86_64__) && defined(ACTIVEKV_ENGINE_X86_KERNELS)
  if (x86_kernels(isa)) {
    static const bool vnni = activekv::cpu_has_avx512_vnni();
    if (isa == Isa::avx512 && vnni) detail::matmul_q8_0_avx512(args);
    else detail::matmul_q8_0_avx2(args);
    return;
  }
#endif
  matmul_portable(args);
}

}  // namespace activekv::engine
