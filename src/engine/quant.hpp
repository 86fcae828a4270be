// quant.hpp — dequantisation of the ggml types the engine computes with, and
// the portable dot product every SIMD kernel is checked against.
//
// The fp32 path: a weight row is dequantised (in registers on the SIMD paths,
// here element by element) and multiplied with fp32 activations, so the only
// rounding beyond fp32 arithmetic is the file's own. The quantised types take
// the 16-bit-activation path instead (matmul_q16.hpp), whose added rounding is
// at most max|x| / 65534 per value; the logits are still compared with a numpy
// reference to the same tight tolerance (tests/reference).
//
// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K (quant_supported_names). Any other type (IQ*, TQ*, MXFP4, ...) is
// refused by name when the model loads, and never reaches here. Each
// dequantisation equals the Python `gguf` package's bit for bit
// (quant_test.cpp, against vectors tests/reference/make_quant_vectors.py writes
// at test time).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gguf/ggml_type.hpp"

namespace activekv::engine {

using gguf::GgmlType;

// The types listed above, as one line for messages: "F32, F16, ...".
const char* quant_supported_names() noexcept;

// True for the types listed above.
bool quant_supported(GgmlType type) noexcept;

// Bytes of `elements` values of `type`; elements must be a multiple of the block size.
std::size_t quant_row_bytes(GgmlType type, std::size_t elements) noexcept;

// dst[0..elements) = the values of the row starting at src (block aligned).
void dequantize_row(GgmlType type, const void* src, float* dst, std::size_t elements) noexcept;

// Σ dequantised(row)[i] × x[i], accumulated in fp32 in element order.
float dot_row_scalar(GgmlType type, const void* row, const float* x, std::size_t elements) noexcept;

}  // namespace activekv::engine
