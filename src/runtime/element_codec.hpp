// element_codec.hpp — fp32 ⇄ the geometry's KV element type (f32, f16, bf16).
//
// The engine computes K and V in fp32; ActiveKV stores them in Geometry::dtype.
// Encoding rounds to nearest, ties to even (the IEEE default, and what every
// GPU conversion instruction does), so a row encoded here equals the row any
// backend would produce from the same floats. Decoding is exact. NaN stays NaN
// (quiet), infinities and overflow saturate to infinity, f16 subnormals are
// kept. These are the only conversions the runtime and its reference oracle
// use, so "the row written" has one meaning everywhere.
//
// Hot path: called per token per layer; no allocation, no branches on the
// dtype inside the element loop.
#pragma once

#include <cstddef>
#include <cstdint>

#include "activekv/geometry.hpp"

namespace activekv::runtime {

std::uint16_t f32_to_f16(float value) noexcept;
float f16_to_f32(std::uint16_t bits) noexcept;
std::uint16_t f32_to_bf16(float value) noexcept;
float bf16_to_f32(std::uint16_t bits) noexcept;

// Encodes count fp32 elements into dst (count × dtype_bytes(dtype) bytes).
void encode_elements(DType dtype, const float* src, std::size_t count, void* dst) noexcept;
// Decodes count elements of dtype from src into fp32.
void decode_elements(DType dtype, const void* src, std::size_t count, float* dst) noexcept;

}  // namespace activekv::runtime
