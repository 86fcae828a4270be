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

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <string_view>

#include "activekv/result.hpp"

namespace activekv {

enum class DType : std::uint8_t { f32, f16, bf16 };

std::uint32_t dtype_bytes(DType dtype) noexcept;
const char* dtype_name(DType dtype) noexcept;
Result<DType> parse_dtype(std::string_view text, std::string_view setting);

// Which dense layers attend to a sliding window (DESIGN.md "Layer kinds"): a full layer's query
// sees the whole history; a window layer's query at p sees keys in (p − W, p]. One bit per dense
// layer, so a Geometry stays a plain value (presets are constants).
struct LayerKinds {
  static constexpr std::uint32_t layers_max = 1024;  // dense layers a layer-kind table can describe
  std::uint32_t window_tokens = 0;                   // W of every window layer; 0: no window layers
  std::array<std::uint64_t, layers_max / 64> window_mask{};  // bit l: dense layer l is a window layer

  constexpr bool is_window(std::uint32_t layer) const noexcept {
    return layer < layers_max && ((window_mask[layer / 64] >> (layer % 64)) & 1u) != 0;
  }
  // The layer's window: W for a window layer, 0 for a full one.
  std::uint32_t window_of(std::uint32_t layer) const noexcept { return is_window(layer) ? window_tokens : 0; }
  void set_window(std::uint32_t layer) noexcept { window_mask[layer / 64] |= std::uint64_t{1} << (layer % 64); }
  constexpr std::uint32_t window_layers() const noexcept {
    std::uint32_t n = 0;
    for (const std::uint64_t word : window_mask) n += static_cast<std::uint32_t>(std::popcount(word));
    return n;
  }
  // Window layers among dense layers [0, layer): where layer `layer`'s host segment starts.
  constexpr std::uint32_t window_layers_below(std::uint32_t layer) const noexcept {
    std::uint32_t n = 0;
    const std::uint32_t words = std::min(layer, layers_max) / 64;
    for (std::uint32_t w = 0; w < words; ++w) n += static_cast<std::uint32_t>(std::popcount(window_mask[w]));
    const std::uint32_t bits = std::min(layer, layers_max) % 64;
    if (bits != 0) n += static_cast<std::uint32_t>(std::popcount(window_mask[words] & ((std::uint64_t{1} << bits) - 1)));
    return n;
  }
  // Gemma 3's pattern: layer l is a window layer iff l % period < period − 1 (5 of 6 for period 6).
  static constexpr LayerKinds periodic(std::uint32_t layers, std::uint32_t period, std::uint32_t window) noexcept {
    LayerKinds k;
    k.window_tokens = window;
    for (std::uint32_t l = 0; l < layers && l < layers_max; ++l)
      if (period != 0 && l % period < period - 1) k.window_mask[l / 64] |= std::uint64_t{1} << (l % 64);
    return k;
  }
};

struct Geometry {
  std::uint32_t dense_layers = 0;            // attention layers whose KV grows per token
  std::uint32_t recurrent_layers = 0;        // SSM / linear-attention layers (state is fixed-size)
  std::uint32_t kv_heads = 0;                // KV heads per dense layer
  std::uint32_t head_dim = 0;                // elements per head
  DType dtype = DType::f16;                  // element type of K and V
  std::uint64_t recurrent_state_bytes = 0;   // per context, all recurrent layers together
  LayerKinds kinds{};                        // full and window dense layers (all full by default)

  std::uint64_t row_bytes() const noexcept {
    return 2ull * kv_heads * head_dim * dtype_bytes(dtype);
  }
  // Bytes of K (or of V) in one row: row_bytes / 2.
  std::uint64_t half_row_bytes() const noexcept { return row_bytes() / 2; }

  constexpr std::uint32_t window_layers() const noexcept { return kinds.window_layers(); }
  constexpr std::uint32_t full_layers() const noexcept { return dense_layers - window_layers(); }

  // Refuses zero fields, a recurrent state without recurrent layers (or the
  // reverse), sizes that overflow, and a layer-kind table that contradicts the
  // layer count or has window layers without a window; names the field to change.
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
