// matmul.hpp — quantised weight matrix × fp32 activations, on the best
// instruction set the CPU has.
//
// A weight matrix is stored as ggml lays it out: `rows` rows (outputs) of
// `cols` values (inputs), each row a run of blocks. The product computed is
//
//   y[b × y_stride + r] = Σ_i W[r][i] × x[b × x_stride + i]     b < batch, row_begin ≤ r < row_end
//
// which is a matrix–vector product for one decode token (batch 1) and a
// matrix–matrix product for a prefill chunk or a decode batch. Callers split
// [0, rows) between threads; each call only reads W and x and writes its own
// rows of y, so threads never share a cache line of output except at edges.
//
// Kernels, chosen once at start-up (best_isa) and overridable for tests:
//   avx512  fused dequantise-in-register kernels for F32, F16, Q4_0, Q4_1, Q8_0;
//           16 lanes; tiles of 4 rows × 4 vectors
//   avx2    the same with 8 lanes (needs AVX2, FMA, F16C), groups of 4 vectors
//   portable dequantise the row once into scratch, then plain fp32 dots
// Other types (BF16, Q5_0, Q5_1, Q2_K ... Q6_K) take the scratch route on every
// instruction set, with a SIMD dot over the dequantised row.
// Every path is compared with the portable one in matmul_test.cpp.
// The forward pass computes the products of every type q16_supported() names
// on the 16-bit-activation path instead (matmul_q16.hpp); this one serves
// F32, F16 and BF16.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/quant.hpp"

namespace activekv::engine {

struct MatrixView {
  GgmlType type = GgmlType::f32;
  const std::uint8_t* data = nullptr;  // rows × row_bytes
  std::uint32_t cols = 0;              // inputs: elements per row
  std::uint32_t rows = 0;              // outputs
  std::size_t row_bytes = 0;           // quant_row_bytes(type, cols)
};

enum class Isa : std::uint8_t { portable, avx2, avx512 };

const char* isa_name(Isa isa) noexcept;
// Whether this CPU executes the kernels of `isa`.
bool isa_available(Isa isa) noexcept;
// The fastest available one.
Isa best_isa() noexcept;

// See the formula above. scratch: at least w.cols floats, private to the caller's thread.
void matmul_rows(Isa isa, const MatrixView& w, const float* x, std::size_t x_stride, std::size_t batch, float* y,
                 std::size_t y_stride, std::uint32_t row_begin, std::uint32_t row_end, float* scratch) noexcept;

}  // namespace activekv::engine
