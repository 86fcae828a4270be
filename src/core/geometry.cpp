// geometry.cpp — dtypes, presets and validation of a KV geometry.
#include "activekv/geometry.hpp"

#include <array>
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

constexpr std::array<Preset, 3> preset_table{{
    {"smollm2-135m", Geometry{30, 0, 3, 64, DType::f16, 0}, 8192},
    {"llama-3.1-8b", Geometry{32, 0, 8, 128, DType::bf16, 0}, 131072},
    {"hybrid-27b", Geometry{16, 48, 4, 256, DType::bf16, 147 * mib}, 32768},
}};

static_assert(2ull * 3 * 64 * 2 == 768, "smollm2-135m row bytes (DESIGN.md presets)");
static_assert(2ull * 8 * 128 * 2 == 4096, "llama-3.1-8b row bytes (DESIGN.md presets)");
static_assert(2ull * 4 * 256 * 2 == 4096, "hybrid-27b row bytes (DESIGN.md presets)");

Error field_error(const char* field, const char* what) {
  return make_error(ErrorCode::invalid_argument, field, what);
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
