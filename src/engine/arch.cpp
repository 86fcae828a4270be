// arch.cpp — the architecture table (see arch.hpp).
#include "engine/arch.hpp"

#include "engine/models/models.hpp"

namespace activekv::engine {
namespace {

// clang-format off
constexpr ArchTraits kArchs[] = {
  // name      builder                 rope               ffn                  bias   qk_norm post   scaled freqs  windows              period base      rms eps hybrid
  {"llama",  &models::llama_layer,  RopeOrder::normal, FfnKind::swiglu,     false, false,  false, false, true,  WindowRule::uniform, 0,     0.0f,     1e-5f,  false},
  {"qwen2",  &models::qwen2_layer,  RopeOrder::neox,   FfnKind::swiglu,     true,  false,  false, false, false, WindowRule::none,    0,     0.0f,     1e-6f,  false},
  {"qwen3",  &models::qwen3_layer,  RopeOrder::neox,   FfnKind::swiglu,     false, true,   false, false, false, WindowRule::none,    0,     0.0f,     1e-6f,  false},
  {"gemma3", &models::gemma3_layer, RopeOrder::neox,   FfnKind::geglu_tanh, false, true,   true,  true,  false, WindowRule::pattern, 6,     10000.0f, 1e-6f,  false},
  {"qwen35", &models::qwen35_layer, RopeOrder::neox,   FfnKind::swiglu,     false, true,   false, false, false, WindowRule::none,    0,     0.0f,     1e-6f,  true},
};
// clang-format on

}  // namespace

const ArchTraits* find_arch(std::string_view name) noexcept {
  for (const ArchTraits& a : kArchs)
    if (a.name == name) return &a;
  return nullptr;
}

std::string arch_names() {
  std::string out;
  for (const ArchTraits& a : kArchs) out += (out.empty() ? "" : ", ") + std::string(a.name);
  return out;
}

}  // namespace activekv::engine
