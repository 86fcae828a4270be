// ggml_type.hpp — the tensor element types a GGUF file may name, and their block layout.
//
// A ggml tensor is stored as blocks along its first dimension: `block_elements`
// values packed into `block_bytes` bytes (1 and 4 for F32; 32 and 20 for Q4_1;
// 256 and 210 for Q6_K). A tensor's byte size is therefore
//
//   bytes = (elements / block_elements) × block_bytes,   with ne[0] % block_elements == 0.
//
// The table is the one ggml itself uses (checked against the Python `gguf`
// package's GGML_QUANT_SIZES). The reader accepts every type listed here so it
// can describe any well-formed file; which of them an engine can compute with is
// the engine's decision. An id not in the table is an error in the file
// ("unknown ggml type 31"), never an assertion.
#pragma once

#include <cstdint>
#include <string_view>

namespace activekv::gguf {

// Ids as written in a GGUF tensor info (ggml's enum ggml_type). Gaps (4, 5, 31-33,
// 36-38) are ids ggml retired or never assigned; they are unknown here.
enum class GgmlType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
  mxfp4 = 39,
  nvfp4 = 40,
  q1_0 = 41,
};

struct GgmlTypeTraits {
  GgmlType type;
  std::string_view name;        // "Q4_1", as ggml and the gguf package spell it
  std::uint32_t block_elements;  // values per block (1 for plain types)
  std::uint32_t block_bytes;     // bytes per block
};

// The traits of a type id read from a file, or nullptr when the id is unknown.
const GgmlTypeTraits* find_ggml_type(std::uint32_t id) noexcept;

// The traits of a known type (a programming error if `type` is not in the table).
const GgmlTypeTraits& ggml_type_traits(GgmlType type) noexcept;

}  // namespace activekv::gguf
