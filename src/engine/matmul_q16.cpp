// matmul_q16.cpp — the 16-bit-activation path's dispatch and its portable
// version, written element by element in the fixed order matmul_q16.hpp states,
// for every weight format of formats/all.hpp; the AVX2 and AVX-512 files
// (matmul_q16_avx2.cpp, matmul_q16_avx512.cpp) must give the same bits.
#include "engine/matmul_q16.hpp"

#include <cmath>

#include "activekv/assert.hpp"
#include "core/cpu_features.hpp"
#include "engine/matmul_isa.hpp"
#include "engine/formats/all.hpp"
#include "engine/quant_blocks.hpp"

namespace activekv::engine {
namespace {

using namespace blocks;

// ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7)): the AVX2 horizontal sum's order.
float sum8(const float* a) noexcept {
  const float s0 = a[0] + a[4], s1 = a[1] + a[5], s2 = a[2] + a[6], s3 = a[3] + a[7];
  return (s0 + s2) + (s1 + s3);
}

void quantize_portable(const float* x, std::size_t x_stride, const Q16Rows& out, std::size_t row_begin,
                       std::size_t row_end) noexcept {
  const std::size_t blocks_per_row = out.cols / q16_block;
  for (std::size_t b = row_begin; b < row_end; ++b) {
    for (std::size_t k = 0; k < blocks_per_row; ++k) {
      const float* xs = x + b * x_stride + k * q16_block;
      std::int16_t* q = out.q + b * out.cols + k * q16_block;
      float amax = 0.0f;
      for (std::uint32_t i = 0; i < q16_block; ++i) {
        const float a = std::fabs(xs[i]);
        amax = a > amax ? a : amax;
      }
      const float d = amax / q16_max;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      int sum = 0;
      for (std::uint32_t i = 0; i < q16_block; ++i) {
        long v = std::lrint(xs[i] * id);
        v = v < -32767 ? -32767 : (v > 32767 ? 32767 : v);
        q[i] = static_cast<std::int16_t>(v);
        sum += static_cast<int>(v);
      }
      out.d[b * blocks_per_row + k] = d;
      out.s[b * blocks_per_row + k] = d * static_cast<float>(sum);
    }
  }
}

// The fixed order of matmul_q16.hpp, element by element, for any format (formats/all.hpp).
template <class F>
void matmul_portable_format(const detail::Q16Args& a) noexcept {
  const MatrixView& w = *a.w;
  const Q16Rows& x = *a.x;
  const std::size_t nb = w.cols / q16_block;
  float* dw = a.scratch;       // the row's block factors
  float* mw = a.scratch + nb;  // and minimums (has_min)
  for (std::uint32_t r = a.row_begin; r < a.row_end; ++r) {
    const std::uint8_t* row = w.data + r * w.row_bytes;
    F::scales(row, nb, dw, mw);
    for (std::size_t b = 0; b < x.batch; ++b) {
      const std::int16_t* qx = x.q + b * x.cols;
      const float* dx = x.d + b * nb;
      const float* sx = x.s + b * nb;
      float acc[8] = {};
      for (std::size_t k = 0; k < nb; ++k) {
        int u[q16_block];
        F::weights(row, k, u);
        const float scale = dw[k] * dx[k];
        for (int j = 0; j < 8; ++j) {
          int partial = 0;
          for (const int e : {2 * j, 2 * j + 1, 16 + 2 * j, 17 + 2 * j}) partial += u[e] * qx[k * q16_block + e];
          acc[j] = std::fma(static_cast<float>(partial), scale, acc[j]);
        }
        if constexpr (formats::GroupMins<F>) {
          int m[2];
          F::group_mins(row, k, m);
          const float scale_min = mw[k] * dx[k];
          for (int j = 0; j < 8; ++j) {
            int partial = 0;
            for (const int e : {2 * j, 2 * j + 1, 16 + 2 * j, 17 + 2 * j}) partial += m[e / 16] * qx[k * q16_block + e];
            acc[j] = std::fma(static_cast<float>(partial), scale_min, acc[j]);
          }
        }
      }
      float sum = sum8(acc);
      if constexpr (F::has_min) {
        float lanes[8] = {};
        const std::size_t whole = nb / 8 * 8;
        for (std::size_t k = 0; k < whole; ++k) lanes[k % 8] = std::fma(mw[k], sx[k], lanes[k % 8]);
        float mins = sum8(lanes);
        for (std::size_t k = whole; k < nb; ++k) mins = std::fma(mw[k], sx[k], mins);
        sum += mins;
      }
      a.y[b * a.y_stride + r] = sum;
    }
  }
}

void matmul_portable_q16(const detail::Q16Args& a) noexcept {
  const bool known = formats::q16_format_of(a.w->type, [&](auto format) {
    matmul_portable_format<decltype(format)>(a);
  });
  AK_ASSERT(known, "matmul_portable_q16: q16_supported() and formats/all.hpp disagree");
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

bool q16_supported(GgmlType type, std::uint32_t cols) noexcept {
  const bool on_path = formats::q16_format_of(type, [](auto) {});
  return on_path && cols > 0 && cols % gguf::ggml_type_traits(type).block_elements == 0;
}

Isa q16_kernel_isa(Isa isa) noexcept {
  // CPUID once (it traps to the hypervisor on a virtual machine); the CPU does not change.
  static const bool vnni = isa_available(Isa::avx512) && activekv::cpu_has_avx512_vnni();
  return isa == Isa::avx512 && !vnni ? Isa::avx2 : isa;
}

// The quantisation has no AVX-512 version: Isa::avx512 runs the AVX2 one (the bytes are the same).
void quantize_rows_q16(Isa isa, const float* x, std::size_t x_stride, const Q16Rows& out, std::size_t row_begin,
                      std::size_t row_end) noexcept {
  AK_ASSERT(out.cols % q16_block == 0, "quantize_rows_q16: width not a multiple of 32");
  AK_ASSERT(row_begin <= row_end && row_end <= out.batch, "quantize_rows_q16: rows outside the batch");
  AK_ASSERT(isa_available(isa), "quantize_rows_q16: instruction set not available on this CPU");
#if defined(__x86_64__) && defined(ACTIVEKV_ENGINE_X86_KERNELS)
  if (x86_kernels(isa)) {
    detail::quantize_q16_avx2(x, x_stride, out, row_begin, row_end);
    return;
  }
#endif
  quantize_portable(x, x_stride, out, row_begin, row_end);
}

void matmul_rows_q16(Isa isa, const MatrixView& w, const Q16Rows& x, float* y, std::size_t y_stride,
                    std::uint32_t row_begin, std::uint32_t row_end, float* scratch) noexcept {
  AK_ASSERT(q16_supported(w.type, w.cols), "matmul_rows_q16: weight type or width not supported");
  AK_ASSERT(w.cols == x.cols, "matmul_rows_q16: activation width differs from the matrix's");
  AK_ASSERT(row_begin <= row_end && row_end <= w.rows, "matmul_rows_q16: rows outside the matrix");
  AK_ASSERT(isa_available(isa), "matmul_rows_q16: instruction set not available on this CPU");
  const detail::Q16Args args{&w, &x, y, y_stride, row_begin, row_end, scratch};
#if defined(__x86_64__) && defined(ACTIVEKV_ENGINE_X86_KERNELS)
  if (x86_kernels(isa)) {
    if (q16_kernel_isa(isa) == Isa::avx512) {
      detail::matmul_q16_avx512(args);
    } else {
      detail::matmul_q16_avx2(args);
    }
    return;
  }
#endif
  matmul_portable_q16(args);
}

}  // namespace activekv::engine
