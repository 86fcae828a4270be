// arch.hpp — the architecture table: a GGUF `general.architecture` name to its
// layer builder and the traits the loader and the hyper-parameters read.
//
// One row per architecture (arch.cpp). A row says which optional tensors its
// layers carry (biases, per-head Q/K norms, norms after attention and FFN),
// how RoPE pairs elements, which FFN it uses, whether embeddings are scaled
// and whether it has sliding-window layers; its builder (src/engine/models/,
// one file per architecture) composes the shared blocks (blocks.hpp) into one
// layer. A new architecture is one builder file and one row here; the
// loader, the hyper-parameters and the forward pass follow the row.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "activekv/result.hpp"
#include "engine/hparams.hpp"

namespace activekv::engine {

class Blocks;

// One layer over the step's rows: x (blocks.x()) in, x out.
using LayerBuilder = Status (*)(Blocks& blocks, std::uint32_t layer);

enum class FfnKind : std::uint8_t {
  swiglu,      // down(silu(gate(h)) ⊙ up(h))
  geglu_tanh,  // down(gelu_tanh(gate(h)) ⊙ up(h))
};

// Where an architecture's window layers come from.
enum class WindowRule : std::uint8_t {
  none,     // every layer attends to the whole history
  uniform,  // attention.sliding_window, when the file sets it, applies to every layer (Mistral-style)
  pattern,  // attention.sliding_window required; the window pattern picks the window layers (Gemma 3)
};

struct ArchTraits {
  std::string_view name;               // general.architecture
  LayerBuilder build_layer;            // src/engine/models/<name>.cpp
  RopeOrder rope_order;
  FfnKind ffn;
  bool qkv_bias;                       // blk.L.attn_{q,k,v}.bias
  bool qk_norm;                        // blk.L.attn_{q,k}_norm.weight [head_dim], before RoPE
  bool post_norms;                     // blk.L.post_attention_norm, post_ffw_norm
  bool embedding_scaled;               // x = token_embd[t] × sqrt(embedding)
  bool rope_freqs;                     // may carry rope_freqs.weight (Llama 3 frequency factors)
  WindowRule windows;
  std::uint32_t window_pattern;        // WindowRule::pattern: the default period n (layer l local iff l % n < n − 1)
  float window_rope_theta;             // WindowRule::pattern: window layers' default base (rope.freq_base_swa)
  float rms_epsilon;                   // default attention.layer_norm_rms_epsilon
  // Qwen3.5's hybrid: Gated DeltaNet layers between gated full-attention layers (hparams.hpp
  // SsmHParams; models/qwen35.cpp). Its attention layers' attn_q gives a query and a gate per head.
  bool gated_delta_net;
};

// The row for `name`, or null.
const ArchTraits* find_arch(std::string_view name) noexcept;
// "llama, qwen2, qwen3, gemma3, qwen35": for messages.
std::string arch_names();

}  // namespace activekv::engine
