// geometry.cpp — dtypes, presets and validation of a KV geometry.
#include "activekv/geometry.hpp"

#include <array>
#include <bit>
#include <limits>
#include <string>

namespace activekv {

std::uint32_t dtype_bytes(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::f16: return 2;
    case DType::bf16: return 2;
  }
  return 0;
}

const char* dtype_name(DType dtype) noexcept {
  switch (dtype) {
    case DType::f32: return "f32";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
  }
  return "?";
}

Result<DType> parse_dtype(std::string_view text, std::string_view setting) {
  if (text == "f32" || text == "fp32" || text == "float32") return DType::f32;
  if (text == "f16" || text == "fp16" || text == "float16") return DType::f16;
  if (text == "bf16" || text == "bfloat16") return DType::bf16;
  return make_error(ErrorCode::invalid_argument, std::string(setting),
                    "unknown dtype '" + std::string(text) + "': use f32, f16 or bf16");
}

namespace {

constexpr std::uint64_t mib = 1024ull * 1024ull;

// The seed's model, from Qwen3.5-27B's published configuration: 64 layers laid out as
// 16 × (3 × Gated DeltaNet + 1 × gated full attention), so full_attention_interval 4.
//   full attention: 4 KV heads × head dim 256; bf16 K and V → a row of 2 × 4 × 256 × 2 = 4,096 B,
//     a 32K history 16 layers × 32,768 × 4,096 B = 2 GiB.
//   Gated DeltaNet: 48 value heads, 16 query/key heads, head dims 128 (key and value), a causal
//     convolution of kernel 4 over the q, k and v channels (2 × 16 × 128 + 48 × 128 = 10,240).
//     Its state per layer: one key_dim × value_dim matrix per value head, 48 × 128 × 128 = 786,432
//     elements, and the convolution's window, the last kernel − 1 = 3 inputs of every channel,
//     3 × 10,240 = 30,720 elements.
// The state dtypes decide the bytes. The delta-rule matrices kept in f32 (4 B: the recurrence
// accumulates over the whole context) and the convolution window in bf16 (2 B: the model's own
// activations) give 48 × (786,432 × 4 + 30,720 × 2) = 48 × 3,207,168 = 153,944,064 B = 146.8 MiB,
// the seed's "147 MiB". (Everything f32: 156,893,184 B = 149.6 MiB; everything bf16: 74.8 MiB.)
namespace qwen35_27b {
constexpr std::uint64_t layers = 64, full_attention_interval = 4;
constexpr std::uint64_t dense_layers = layers / full_attention_interval;  // 16
constexpr std::uint64_t recurrent_layers = layers - dense_layers;         // 48
constexpr std::uint64_t kv_heads = 4, head_dim = 256;
constexpr std::uint64_t value_heads = 48, key_heads = 16, key_dim = 128, value_dim = 128, conv_kernel = 4;
constexpr std::uint64_t conv_channels = 2 * key_heads * key_dim + value_heads * value_dim;
constexpr std::uint64_t matrix_elements = value_heads * key_dim * value_dim;
constexpr std::uint64_t window_elements = (conv_kernel - 1) * conv_channels;
constexpr std::uint64_t matrix_dtype_bytes = 4, window_dtype_bytes = 2;  // f32 matrices, bf16 window
constexpr std::uint64_t state_bytes = recurrent_layers * (matrix_elements * matrix_dtype_bytes + window_elements * window_dtype_bytes);
static_assert(conv_channels == 10'240 && matrix_elements == 786'432 && window_elements == 30'720);
static_assert(state_bytes == 153'944'064, "hybrid-27b: 48 × 3,207,168 B of recurrent state");
static_assert((state_bytes + mib / 2) / mib == 147, "hybrid-27b: the seed's 147 MiB (rounded)");
static_assert(dense_layers * 32768 * (2 * kv_heads * head_dim * 2) == 2048 * mib, "hybrid-27b: 2 GiB per 32K history");
}  // namespace qwen35_27b

// Gemma 3 (the published configs): every sixth layer is global (full), the other five attend to
// a sliding window (sliding_window_pattern 6: layer l is a window layer iff l % 6 < 5).
//   270M: 18 layers, 4 query heads, 1 KV head × 256, window 512,   context 32,768 (3 full, 15 window)
//   1B:   26 layers, 4 query heads, 1 KV head × 256, window 512,   context 32,768 (4 full, 22 window)
//   4B:   34 layers, 8 query heads, 4 KV heads × 256, window 1,024, context 131,072 (5 full, 29 window)
//   12B:  48 layers, 16 query heads, 8 KV heads × 256, window 1,024, context 131,072 (8 full, 40 window)
//   27B:  62 layers, 32 query heads, 16 KV heads × 128, window 1,024, context 131,072 (10 full, 52 window)
constexpr std::uint32_t gemma3_period = 6;
constexpr Geometry gemma3(std::uint32_t layers, std::uint32_t kv_heads, std::uint32_t head_dim, std::uint32_t window) {
  Geometry g;  // by field name: other fields keep their defaults (no recurrent layers)
  g.dense_layers = layers;
  g.kv_heads = kv_heads;
  g.head_dim = head_dim;
  g.dtype = DType::bf16;
  g.kinds = LayerKinds::periodic(layers, gemma3_period, window);
  return g;
}

constexpr std::array<Preset, 8> preset_table{{
    {"smollm2-135m", Geometry{30, 0, 3, 64, DType::f16, 0}, 8192},
    {"llama-3.1-8b", Geometry{32, 0, 8, 128, DType::bf16, 0}, 131072},
    {"hybrid-27b",
     Geometry{static_cast<std::uint32_t>(qwen35_27b::dense_layers), static_cast<std::uint32_t>(qwen35_27b::recurrent_layers),
              static_cast<std::uint32_t>(qwen35_27b::kv_heads), static_cast<std::uint32_t>(qwen35_27b::head_dim), DType::bf16,
              qwen35_27b::state_bytes},
     32768},
    {"gemma3-270m", gemma3(18, 1, 256, 512), 32768},
    {"gemma3-1b", gemma3(26, 1, 256, 512), 32768},
    {"gemma3-4b", gemma3(34, 4, 256, 1024), 131072},
    {"gemma3-12b", gemma3(48, 8, 256, 1024), 131072},
    {"gemma3-27b", gemma3(62, 16, 128, 1024), 131072},
}};

static_assert(2ull * 3 * 64 * 2 == 768, "smollm2-135m row bytes (DESIGN.md presets)");
static_assert(2ull * 8 * 128 * 2 == 4096, "llama-3.1-8b row bytes (DESIGN.md presets)");
static_assert(2ull * 4 * 256 * 2 == 4096, "hybrid-27b row bytes (DESIGN.md presets)");
static_assert(gemma3(18, 1, 256, 512).window_layers() == 15, "gemma3-270m: 15 of 18 layers are window layers");
static_assert(gemma3(62, 16, 128, 1024).window_layers() == 52, "gemma3-27b: 52 of 62 layers are window layers");

Error field_error(const char* field, const char* what) {
  return make_error(ErrorCode::invalid_argument, field, what);
}

Status validate_kinds(const Geometry& g) {
  const LayerKinds& k = g.kinds;
  const std::uint32_t window_layers = k.window_layers();
  if (window_layers != 0 && k.window_tokens == 0)
    return field_error("--window", "is 0 but some layers are window layers: give the window in tokens (at least 1)");
  if (window_layers == 0) return Status::success();
  if (g.dense_layers > LayerKinds::layers_max)
    return field_error("--dense-layers", "is above 1,024: a layer-kind table with window layers describes at most 1,024 dense layers");
  for (std::uint32_t l = g.dense_layers; l < LayerKinds::layers_max; ++l) {
    if (k.is_window(l)) return field_error("--window-layers", "names a window layer at or past --dense-layers");
  }
  return Status::success();
}

}  // namespace

Status Geometry::validate() const {
  if (dense_layers == 0) return field_error("--dense-layers", "must be at least 1: ActiveKV manages dense-layer KV");
  if (kv_heads == 0) return field_error("--kv-heads", "must be at least 1");
  if (head_dim == 0) return field_error("--head-dim", "must be at least 1");
  constexpr std::uint64_t field_max = 1u << 20;  // far above any model; keeps products in range
  if (dense_layers > field_max) return field_error("--dense-layers", "is implausibly large (more than 1,048,576)");
  if (kv_heads > field_max) return field_error("--kv-heads", "is implausibly large (more than 1,048,576)");
  if (head_dim > field_max) return field_error("--head-dim", "is implausibly large (more than 1,048,576)");
  if (row_bytes() > (std::numeric_limits<std::uint32_t>::max)()) {
    return field_error("--kv-heads", "kv_heads × head_dim × dtype bytes overflows a row: lower --kv-heads or --head-dim");
  }
  if (Status s = validate_kinds(*this); !s) return s;
  return Status::success();
}

std::span<const Preset> presets() noexcept { return preset_table; }

Result<Preset> find_preset(std::string_view name) {
  for (const Preset& preset : preset_table) {
    if (preset.name == name) return preset;
  }
  std::string names;
  for (const Preset& preset : preset_table) {
    if (!names.empty()) names += ", ";
    names += preset.name;
  }
  return make_error(ErrorCode::invalid_argument, "--preset",
                    "unknown preset '" + std::string(name) + "': choose one of " + names +
                        ", or give the geometry with --dense-layers, --kv-heads, --head-dim and --dtype");
}

}  // namespace activekv
