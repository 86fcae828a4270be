// matmul_isa.hpp — the per-instruction-set entry points behind matmul_rows.
// Each is defined in its own file, compiled with that instruction set's flags
// (matmul_avx2.cpp, matmul_avx512.cpp) and called only when isa_available().
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/matmul.hpp"
#include "engine/matmul_q16.hpp"

namespace activekv::engine::detail {

struct MatmulArgs {
  const MatrixView* w;
  const float* x;
  std::size_t x_stride;
  std::size_t batch;
  float* y;
  std::size_t y_stride;
  std::uint32_t row_begin;
  std::uint32_t row_end;
  float* scratch;
};

void matmul_portable(const MatmulArgs& args) noexcept;
void matmul_avx2(const MatmulArgs& args) noexcept;
void matmul_avx512(const MatmulArgs& args) noexcept;

}  // namespace activekv::engine::detail

// The 16-bit-activation path (matmul_q16.hpp): the same bits on every instruction set.
namespace activekv::engine::detail {

struct Q16Args {
  const MatrixView* w;
  const Q16Rows* x;
  float* y;
  std::size_t y_stride;
  std::uint32_t row_begin;
  std::uint32_t row_end;
  float* scratch;
};

void quantize_q16_avx2(const float* x, std::size_t x_stride, const Q16Rows& out, std::size_t row_begin,
                      std::size_t row_end) noexcept;
void matmul_q16_avx2(const Q16Args& args) noexcept;
void matmul_q16_avx512(const Q16Args& args) noexcept;  // needs AVX512_VNNI besides Isa::avx512

}  // namespace activekv::engine::detail
