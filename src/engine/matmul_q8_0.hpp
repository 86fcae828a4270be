// matmul_q8_0.hpp — legacy weight matrix (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0) ×
// activations quantised to 8-bit integers in 32-value blocks: the arithmetic
// llama.cpp's CPU backend uses for these formats (its Q8_0 and Q8_1 activation
// blocks and the AVX2 block dot products), with integer dot products on bytes.
// The engine takes it where EngineSettings::activations is Activations::q8;
// the K-quants take matmul_q8.hpp's 256-value blocks, everything else the
// 16-bit path (docs/ENGINE-ARITHMETIC.md, "Activation width").
//
// Activations. Each row of x (one token) is cut into blocks of 32 values, the
// weight block. A block is stored as 32 int8 q (|q| ≤ 127), its scale d and
// s = d × Σq, both as the fp32 values of f16 numbers:
//
//   amax = max|x[i]|, d32 = amax / 127, is = 127 / amax (0 when amax = 0),
//   q[i] = round_to_nearest_even(x[i] × is),
//   d = f16(d32), s = f16(d32 × float(Σq))                 (f16: round to nearest even)
//
// — llama.cpp's quantize_row_q8_0 and quantize_row_q8_1 as its AVX2 build
// computes them (Q8_0 is Q8_1 without s: the same q and d, so one set of rows
// serves all five formats). Note s uses the fp32 d32, not the rounded d. Each
// value moves by at most d/2 = amax / 254 of its block. The quantisation of a
// row reads only that row.
//
// Product. A weight block k has the f16 factor dw (and mw: Q4_1, Q5_1) and 32
// integers u (formats/*.hpp: signed for Q4_0, Q5_0, Q8_0; 0..31 for Q4_1, Q5_1)
// so that element e is worth dw × u[e] (+ mw). For weight row r, activation
// row b, block k with activation scale dx and sum sx:
//
//   P_j   = Σ_{e=4j..4j+3} u[e] × q[e]                      (lane j = 0..7, exact in int32 and in fp32)
//   acc_j = fma(float(P_j), dw × dx, acc_j)                    over k in order
//   mins  = mins + mw × sx                                     over k in order (Q4_1, Q5_1; fp32, not fused)
//   y     = ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7))  (+ mins)
//
// Lane j is what vpmaddubsw + vpmaddwd (with ones) leave in 32-bit lane j when
// the block's 32 bytes sit in one register, and the final sum is llama.cpp's
// hsum_float_8. |P_j| ≤ 4 × 128 × 127 < 2^24, so its conversion is exact; the
// roundings are dw × dx, the FMAs, mw × sx, the sums of mins and the final sum,
// in the order above on every instruction set, for every batch size, tile and
// thread split. So the portable path, the AVX2 path and the AVX-512 VNNI path
// (two rows per register, one vpdpbusd for the lanes) give the same bits
// (tested), and every output depends only on its weight row and its
// activation row.
//
// Where llama.cpp takes other routes (its repacked Q4_0 layout or the
// llamafile GEMM for large batches), the integers are the same and only the
// order of the fp32 sums differs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/matmul.hpp"

namespace activekv::engine {

constexpr std::uint32_t q8_0_block = 32;  // values per activation block (and weight block)

// A batch of activation rows quantised as above. The caller owns the arrays.
struct Q8_0Rows {
  std::int8_t* q = nullptr;  // batch × cols
  float* d = nullptr;        // batch × cols / 32: f16 values
  float* s = nullptr;        // batch × cols / 32: f16 values
  std::uint32_t cols = 0;    // a multiple of 32
  std::size_t batch = 0;
};

// Whether matmul_rows_q8_0 computes with weights of this type at this width (a multiple of 32).
bool q8_0_supported(GgmlType type, std::uint32_t cols) noexcept;

// Quantises rows [row_begin, row_end) of x (row b at x + b × x_stride, out.cols values) into out.
// Every instruction set gives the same bytes.
void quantize_rows_q8_0(Isa isa, const float* x, std::size_t x_stride, const Q8_0Rows& out, std::size_t row_begin,
                        std::size_t row_end) noexcept;

// y[b × y_stride + r] = the product above, for every b < x.batch and row_begin ≤ r < row_end.
// w.cols == x.cols; q8_0_supported(w.type, w.cols). Allocates nothing.
void matmul_rows_q8_0(Isa isa, const MatrixView& w, const Q8_0Rows& x, float* y, std::size_t y_stride,
                      std::uint32_t row_begin, std::uint32_t row_end) noexcept;

namespace detail {
struct Q8_0Args {
  const MatrixView* w;
  const Q8_0Rows* x;
  float* y;
  std::size_t y_stride;
  std::uint32_t row_begin;
  std::uint32_t row_end;
};
void quantize_q8_0_avx2(const float* x, std::size_t x_stride, const Q8_0Rows& out, std::size_t row_begin,
                        std::size_t row_end) noexcept;
void matmul_q8_0_avx2(const Q8_0Args& args) noexcept;
void matmul_q8_0_avx512(const Q8_0Args& args) noexcept;  // needs AVX512-VNNI
}  // namespace detail

}  // namespace activekv::engine
