// matmul_q16.hpp — quantised weight matrix × activations quantised to 16-bit
// integers in blocks, with integer dot products. The prefill and decode path
// for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K and Q6_K weights; each
// format (formats/*.hpp) gives a 32-element block's integers u and factors
// dw (and mw), and the kernels below own every fp32 operation.
//
// Activations. Each row of x (one token) is cut into blocks of 32 values, the
// weight block size. A block is stored as 32 signed 16-bit integers q
// (|q| ≤ 32767), a scale d = max|x| / 32767 and s = d × Σq, all fp32:
//
//   q[i] = round_to_nearest_even(x[i] × (1 / d))        (q = 0 when d = 0)
//
// Each value moves by at most d/2 = max|x| / 65534 of its block: 256 times
// less than 8-bit blocks (what llama.cpp does), whose rounding moves this
// model's logits by up to ~1 against a float64 reference (measured: 0.68 to
// 1.10) where 16-bit blocks keep the 0.02 bound the reference test holds.
// The quantisation of a row reads only that row, so a row's integers do not
// depend on which other rows share its step (chunk, batch, decode).
//
// Product. For weight row r and activation row b, block k contributes
//
//   with a minimum (Q4_1, Q5_1, Q4_K, Q5_K: w = dw × u + mw):  dw·d × Σ u·q   +   mw × s
//   without (Q4_0, Q5_0, Q8_0, Q3_K, Q6_K: w = dw × u):         dw·d × Σ u·q
//   Q2_K (a minimum m per 16 elements, w = dw × u + mw × m):     dw·d × Σ u·q   +   mw·d × Σ m·q
//
// The integer sums are exact. A lane's partial sum (four products) is below
// 2^24, so exact in fp32 too, for every format but Q3_K and Q6_K, whose
// u = q × group scale reaches 128 and 4,096: their partial's conversion rounds
// to nearest, identically on every path. The
// fp32 reduction order is fixed, the same on every instruction set and for
// every batch size, tile or thread split:
//   - Σ u·q is kept as 8 partial sums, lane j over elements 2j, 2j+1, 16+2j, 17+2j
//     (vpmaddwd's pairs in the two halves of the block);
//   - lane j accumulates fma(float(partial_j), dw·d, acc_j) over k in order
//     (Q2_K: then, for the same k, fma(float(Σ m·q partial_j), mw·d, acc_j));
//   - the 8 lanes are added as ((a0+a4)+(a2+a6)) + ((a1+a5)+(a3+a7));
//   - the minimums' Σ mw × s: lanes j over k = 8c + j for whole groups of 8 blocks
//     (fma in order of c), added as above, then the remaining blocks one by
//     one with fma; the result is added to the first sum.
// So the portable, AVX2 and AVX-512 paths give the same bits (tested), and
// every output depends only on its weight row and its activation row.
//
// Kernels: portable (matmul_q16.cpp), AVX2 (matmul_q16_avx2.cpp) and AVX-512
// VNNI (matmul_q16_avx512.cpp, two weight rows per register); q16_kernel_isa
// says which one an Isa runs.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/matmul.hpp"

namespace activekv::engine {

constexpr std::uint32_t q16_block = 32;
constexpr float q16_max = 32767.0f;  // the largest |q|

// A batch of activation rows quantised as above. The caller owns the arrays.
struct Q16Rows {
  std::int16_t* q = nullptr;  // batch × cols
  float* d = nullptr;         // batch × cols / 32
  float* s = nullptr;         // batch × cols / 32
  std::uint32_t cols = 0;     // a multiple of 32
  std::size_t batch = 0;
};

// Whether matmul_rows_q16 computes with weights of this type (formats/all.hpp) at
// this width (a whole number of the type's blocks).
bool q16_supported(GgmlType type, std::uint32_t cols) noexcept;

// The kernels matmul_rows_q16(isa, ...) runs: avx512 where the CPU also has AVX512_VNNI, else avx2 for
// Isa::avx512 (the bits are the same either way); isa itself otherwise. isa_available(isa).
Isa q16_kernel_isa(Isa isa) noexcept;

// Quantises rows [row_begin, row_end) of x (row b at x + b × x_stride, out.cols values) into out.
// Every instruction set gives the same bytes.
void quantize_rows_q16(Isa isa, const float* x, std::size_t x_stride, const Q16Rows& out, std::size_t row_begin,
                      std::size_t row_end) noexcept;

// y[b × y_stride + r] = Σ_k (block k of weight row r) · (block k of activation row b), for every b < x.batch and
// row_begin ≤ r < row_end, with the fixed order stated above. w.cols == x.cols; q16_supported(w.type, w.cols).
// scratch: at least w.cols / 2 floats, private to the caller's thread.
void matmul_rows_q16(Isa isa, const MatrixView& w, const Q16Rows& x, float* y, std::size_t y_stride,
                    std::uint32_t row_begin, std::uint32_t row_end, float* scratch) noexcept;

}  // namespace activekv::engine
