// matmul.cpp — kernel choice and the portable path (see matmul.hpp).
#include "engine/matmul.hpp"
#include "core/cpu_features.hpp"

#include "activekv/assert.hpp"
#include "engine/matmul_isa.hpp"

namespace activekv::engine {

const char* isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::portable: return "portable";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
  }
  return "?";
}

bool isa_available(Isa isa) noexcept {
  switch (isa) {
    case Isa::portable: return true;
#if defined(__x86_64__) && defined(ACTIVEKV_ENGINE_X86_KERNELS)
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && activekv::cpu_has_f16c();
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
#else
    case Isa::avx2:
    case Isa::avx512:
      return false;
#endif
  }
  return false;
}

Isa best_isa() noexcept {
  if (isa_available(Isa::avx512)) return Isa::avx512;
  if (isa_available(Isa::avx2)) return Isa::avx2;
  return Isa::portable;
}

void matmul_rows(Isa isa, const MatrixView& w, const float* x, std::size_t x_stride, std::size_t batch, float* y,
                 std::size_t y_stride, std::uint32_t row_begin, std::uint32_t row_end, float* scratch) noexcept {
  AK_ASSERT(row_begin <= row_end, "matmul_rows: row_begin after row_end");
  AK_ASSERT(row_end <= w.rows, "matmul_rows: row_end beyond the matrix");
  AK_ASSERT(isa_available(isa), "matmul_rows: instruction set not available on this CPU");
  const detail::MatmulArgs args{&w, x, x_stride, batch, y, y_stride, row_begin, row_end, scratch};
  switch (isa) {
    case Isa::portable: detail::matmul_portable(args); return;
#if defined(__x86_64__) && defined(ACTIVEKV_ENGINE_X86_KERNELS)
    case Isa::avx2: detail::matmul_avx2(args); return;
    case Isa::avx512: detail::matmul_avx512(args); return;
#else
    case Isa::avx2:
    case Isa::avx512:
      return;
#endif
  }
}

namespace detail {

void matmul_portable(const MatmulArgs& a) noexcept {
  const MatrixView& w = *a.w;
  for (std::uint32_t r = a.row_begin; r < a.row_end; ++r) {
    dequantize_row(w.type, w.data + r * w.row_bytes, a.scratch, w.cols);
    for (std::size_t b = 0; b < a.batch; ++b) {
      const float* x = a.x + b * a.x_stride;
      float sum = 0.0f;
      for (std::uint32_t i = 0; i < w.cols; ++i) sum += a.scratch[i] * x[i];
      a.y[b * a.y_stride + r] = sum;
    }
  }
}

}  // namespace detail
}  // namespace activekv::engine
