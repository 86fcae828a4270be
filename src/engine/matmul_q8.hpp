// matmul_q8.hpp — K-quant weight matrix (Q4_K, Q5_K, Q6_K) × activations
// quantised to 8-bit integers in 256-element blocks: the arithmetic llama.cpp's
// CPU backend uses for these formats, with integer dot products on bytes. The
// engine takes it where EngineSettings::activations is Activations::q8; the
// 16-bit path (matmul_q16.hpp) stays the default (docs/ENGINE-ARITHMETIC.md, "Activation
// width", says why and what each costs).
//
// Activations. Each row of x (one token) is cut into blocks of 256 values, the
// K-quant super-block. A block is stored as 256 int8 q (|q| ≤ 127), one fp32
// scale d and 16 int16 sums, one per 16 values:
//
//   amax = max|x[i]|, is = 127 / amax, q[i] = round_to_nearest_even(x[i] × is),
//   d = 1 / is, bsum[g] = Σ q[16g .. 16g+15]                  (q = 0, d = 0 when amax = 0)
//
// — llama.cpp's Q8_K up to the sign of q and d (it divides by the signed
// largest value; the products d × q are the same numbers). Each value moves by
// at most d/2 = amax / 254 of its block. The quantisation of a row reads only
// that row.
//
// Product. A weight super-block i has fp32 factors dw (and dmin, Q4_K/Q5_K),
// integer group scales sc (one per 16 elements; Q4_K/Q5_K's per-32 scale
// repeated), unsigned integers u per element (the stored bits) and a factor mk
// per 16 elements for the activation's block sums:
//   Q4_K: u = nibble, Q5_K: u = nibble | fifth bit << 4, mk = m (per 32, repeated), w = dw × sc × u − dmin × m
//   Q6_K: u = 6-bit value (0..63), mk = 32 × sc,                                      w = dw × sc × (u − 32)
// For weight row r, activation row b, super-block i with activation scale dx, two integers
//   P = Σ_{g<16} sc[g] × Σ_{e=16g..16g+15} u[e] × q[e],    M = Σ_{g<16} mk[g] × bsum[g]
// and, over i in order, from acc = m = 0:
//   Q4_K, Q5_K: acc = fma(float(P), dw × dx, acc),  m = fma(float(M), −(dmin × dx), m);  y = acc + m
//   Q6_K:       acc = fma(float(P − M), dw × dx, acc);                                 y = acc
// (Q6_K's P − M = Σ sc[g] × (u[e] − 32) × q[e]: the −32 offset). P, M and P − M are exact in int32
// (|P| ≤ 256 × 128 × 63 × 127 < 2^28), so any grouping of the integer sums gives them: the decode kernel
// sums a row's 8 lanes of bytes 4j..4j+3 per 32 chunk, the prefill kernel keeps 8 rows interleaved one per
// lane (the layout of llama.cpp's repack.cpp) and sums 8 or 4 steps in int16 before the scales apply;
// float(P) rounds to nearest where |P| > 2^24, identically on every path. The other roundings are dw × dx,
// dmin × dx, the FMAs and the final sum, in the order above on every instruction set, for every batch
// size, tile and thread split. So the portable path and the AVX2 path give the same bits (tested), and
// every output depends only on its weight row and its activation row. This is llama.cpp's arithmetic (the
// same Q8_K activations, the same integers) up to the grouping of the fp32 sums: its AVX2 vec_dot keeps 8
// partial lanes per row and super-block, this order one (scripts/peer-dots.sh measures the difference).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/matmul.hpp"

namespace activekv::engine {

// Which activation width the quantised matrix products use (--activations).
enum class Activations : std::uint8_t {
  q16,  // matmul_q16.hpp: 32-value blocks of int16, every quantised format; within ~4e-8 NMSE of float64
  q8,   // llama.cpp's arithmetic, faster: this file for Q4_K, Q5_K and Q6_K, matmul_q8_0.hpp for Q4_0, Q4_1,
        // Q5_0, Q5_1 and Q8_0 (the rest stay on q16)
};
const char* activations_name(Activations a) noexcept;
// "q8" or "q16"; false for anything else.
bool parse_activations(std::string_view text, Activations* out) noexcept;
// What a refusal of another value says to give instead.
constexpr const char* activations_choices =
    "give q16 (exact, the default) or q8 (llama.cpp's 8-bit arithmetic: the K-quants and the legacy formats "
    "Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0; faster)";

constexpr std::uint32_t q8_block = 256;  // values per activation block
constexpr std::uint32_t q8_chunk = 32;   // values per register chunk of the kernel
constexpr std::uint32_t q8_group = 16;   // values per block sum
constexpr float q8_max = 127.0f;         // the largest |q|
// The widest row the path takes, in super-blocks (32,768 values; wider than any matrix of the supported
// models, and the width the tests cover). The kernels' stack use does not depend on it.
constexpr std::uint32_t q8_super_blocks_max = 128;

// A batch of activation rows quantised as above. The caller owns the arrays.
struct Q8Rows {
  std::int8_t* q = nullptr;      // batch × cols
  float* d = nullptr;            // batch × cols / 256
  std::int16_t* bsum = nullptr;  // batch × cols / 16
  std::uint32_t cols = 0;        // a multiple of 256
  std::size_t batch = 0;
};

// Whether matmul_rows_q8 computes with weights of this type at this width (a multiple of 256, at most
// q8_super_blocks_max super-blocks).
bool q8_supported(GgmlType type, std::uint32_t cols) noexcept;

// Quantises rows [row_begin, row_end) of x (row b at x + b × x_stride, out.cols values) into out.
// Every instruction set gives the same bytes.
void quantize_rows_q8(Isa isa, const float* x, std::size_t x_stride, const Q8Rows& out, std::size_t row_begin,
                      std::size_t row_end) noexcept;

// Whether the CPU has AVX512-VNNI: Isa::avx512 then takes the VNNI prefill kernel (the same bits).
bool vnni_available() noexcept;

// y[b × y_stride + r] = the product above, for every b < x.batch and row_begin ≤ r < row_end.
// w.cols == x.cols; q8_supported(w.type, w.cols). Allocates nothing.
void matmul_rows_q8(Isa isa, const MatrixView& w, const Q8Rows& x, float* y, std::size_t y_stride,
                    std::uint32_t row_begin, std::uint32_t row_end) noexcept;

namespace detail {
struct Q8Args {
  const MatrixView* w;
  const Q8Rows* x;
  float* y;
  std::size_t y_stride;
  std::uint32_t row_begin;
  std::uint32_t row_end;
};
void quantize_q8_avx2(const float* x, std::size_t x_stride, const Q8Rows& out, std::size_t row_begin,
                      std::size_t row_end) noexcept;
void matmul_q8_avx2(const Q8Args& args) noexcept;
void matmul_q8_avx512(const Q8Args& args) noexcept;  // AVX-512 with VNNI (vnni_available())
}  // namespace detail

}  // namespace activekv::engine
