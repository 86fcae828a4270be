// geometry.hpp — the shape of a model's KV, from which every size is derived.
//
//   row_bytes = 2 × kv_heads × head_dim × dtype_bytes      (one token, one dense layer, K and V)
//
// Dense layers grow a row per token; recurrent layers hold a fixed state per
// context (recurrent_state_bytes, all recurrent layers together). A Geometry
// comes from a preset (DESIGN.md "Presets"), from field-by-field settings, or
// from a model file's metadata; validate() refuses any field that is zero or
// whose products overflow.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "activekv/result.hpp"

namespace activekv {

enum class DType : std::uint8_t { f32, f16, bf16 };

std::uint32_t dtype_bytes(DType dtype) noexcept;
const char* dtype_name(DType dtype) noexcept;
Result<DType> parse_dtype(std::string_view text, std::string_view setting);

struct Geometry {
  std::uint32_t dense_layers = 0;            // attention layers whose KV grows per token
  std::uint32_t recurrent_layers = 0;        // SSM / linear-attention layers (state is fixed-size)
  std::uint32_t kv_heads = 0;                // KV heads per dense layer
  std::uint32_t head_dim = 0;                // elements per head
  DType dtype = DType::f16;                  // element type of K and V
  std::uint64_t recurrent_state_bytes = 0;   // per context, all recurrent layers together

  std::uint64_t row_bytes() const noexcept {
    return 2ull * kv_heads * head_dim * dtype_bytes(dtype);
  }
  // Bytes of K (or of V) in one row: row_bytes / 2.
  std::uint64_t half_row_bytes() const noexcept { return row_bytes() / 2; }

  // Refuses zero fields, a recurrent state without recurrent layers (or the
  // reverse), and sizes that overflow; names the field to change.
  Status validate() const;
};

struct Preset {
  std::string_view name;
  Geometry geometry;
  std::uint32_t max_context_tokens;  // the model's own context length
};

// The presets of DESIGN.md, in table order.
std::span<const Preset> presets() noexcept;
Result<Preset> find_preset(std::string_view name);

}  // namespace activekv
