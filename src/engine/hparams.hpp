// hparams.hpp — a model's hyper-parameters: read, defaulted and checked in one place.
//
// What it owns: every number the forward pass, the KV runtime and the reports
// take from a GGUF file's metadata (`{arch}.…` keys), with the defaults the
// architecture table (arch.hpp) gives and the per-layer picture derived from
// them: which layers see a sliding window, which RoPE table each layer uses.
//
// The invariant: read_hparams() returns only values the engine can size
// buffers from and compute with. Each value is within its limit (below), the
// heads divide, the head dimension is even, RoPE covers at most the head, a
// window is 1 … context_length, a window pattern agrees with block_count, and
// the head counts agree with the attention tensors of layer 0. Anything else
// is one line naming the file, the key (and the tensor it contradicts) and the
// value. Nothing downstream re-checks.
//
// Keys read (prefix `{arch}.`; * = optional, with its default):
//   block_count, embedding_length, feed_forward_length, context_length,
//   attention.head_count, attention.head_count_kv* (= head_count),
//   attention.key_length* (= embedding / head_count), attention.value_length* (= key_length),
//   rope.dimension_count* (= key_length), rope.freq_base* (10000),
//   rope.scaling.type* (none | linear; others refused by name), rope.scaling.factor* (1),
//   attention.layer_norm_rms_epsilon* (the table's default),
//   attention.sliding_window (architectures with windows; * where windows are optional),
//   attention.sliding_window_pattern* (u32 n: layer l is a window layer iff l % n < n − 1;
//     or a per-layer bool array; default: the table's), rope.freq_base_swa* (window layers' base),
//   attention.scale* (the softmax scale; default 1 / sqrt(key_length))
// Hybrid architectures (the table's gated_delta_net: Qwen3.5) also read, checked in read_recurrent():
//   full_attention_interval* (n: layer l is full attention iff (l + 1) % n == 0; default 4), or
//   attention.recurrent_layers* (one flag per layer, true: recurrent), and
//   ssm.conv_kernel, ssm.state_size, ssm.group_count, ssm.time_step_rank, ssm.inner_size
//   (= time_step_rank × state_size), rope.dimension_sections* (every rotated pair must take the
//   text position: the engine runs text, where M-RoPE's t, h and w positions are equal).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "activekv/result.hpp"
#include "gguf/gguf.hpp"

namespace activekv::engine {

struct ArchTraits;

// Limits on the hyper-parameters (far past any model the engine can run on a CPU;
// a value outside is refused before anything is sized from it).
inline constexpr std::uint32_t layers_max = 4096;
inline constexpr std::uint32_t embedding_max = 1u << 16;
inline constexpr std::uint32_t ffn_max = 1u << 18;
inline constexpr std::uint32_t heads_max = 1024;
inline constexpr std::uint32_t head_dim_max = 1024;
inline constexpr std::uint32_t context_tokens_max = 1u << 20;  // the RoPE tables and the reference KV are sized by it
inline constexpr std::uint32_t vocab_max = 1u << 24;
inline constexpr std::uint32_t rope_tables_max = 2;  // a base for full layers, one for window layers
inline constexpr std::uint32_t conv_kernel_max = 64;  // ssm.conv_kernel

// How RoPE pairs the elements of a head: GGUF's `llama` files rotate adjacent
// pairs (2i, 2i+1) (the converter permuted Wq and Wk to make it so); Qwen and
// Gemma files rotate the halves (i, i + rope_dims / 2), GPT-NeoX's order.
enum class RopeOrder : std::uint8_t { normal, neox };

// One table of RoPE angles: angle_i(pos) = pos × freq_scale × theta^(−2i/rope_dims) / factor_i,
// factor_i = rope_freqs.weight[i] (Llama 3's frequency scaling) or 1.
struct RopeSpec {
  float theta = 10000.0f;     // rope.freq_base (or rope.freq_base_swa)
  float freq_scale = 1.0f;    // 1 / rope.scaling.factor under linear scaling
  bool freq_factors = false;  // the file's rope_freqs.weight divides each frequency
};

struct LayerHParams {
  std::uint32_t window = 0;  // 0: attention over the whole history; W: over the last W tokens (itself included)
  std::uint32_t rope = 0;    // index into HParams::ropes
  bool recurrent = false;    // a Gated DeltaNet layer: a fixed state per context, no KV rows
  std::uint32_t kv_layer = 0;     // an attention layer's index among the KV's dense layers
  std::uint32_t state_layer = 0;  // a recurrent layer's index among the recurrent layers
};

// Gated DeltaNet (the recurrent layers of a hybrid; all zero otherwise). Per layer and token:
//   qkv = conv1d(h·Wqkvᵀ) over the last conv_kernel tokens, then silu; q, k: k_heads × state_size,
//   v: v_heads × state_size; v head j reads k head j % k_heads (llama.cpp's layout).
// A context's recurrent state, per recurrent layer (state_layer order), fp32:
//   conv window  conv_dim × (conv_kernel − 1), channel-major, oldest input first
//   matrices     v_heads × state_size × state_size: head, then value index j, then key index i
struct SsmHParams {
  std::uint32_t conv_kernel = 0;  // ssm.conv_kernel
  std::uint32_t state_size = 0;   // ssm.state_size: the key (and value) head dimension
  std::uint32_t k_heads = 0;      // ssm.group_count
  std::uint32_t v_heads = 0;      // ssm.time_step_rank
  std::uint32_t inner = 0;        // ssm.inner_size = v_heads × state_size

  std::uint32_t key_dim() const noexcept { return k_heads * state_size; }
  std::uint32_t conv_dim() const noexcept { return 2 * key_dim() + inner; }
  std::uint64_t conv_floats() const noexcept { return std::uint64_t{conv_kernel - 1} * conv_dim(); }
  std::uint64_t matrix_floats() const noexcept { return std::uint64_t{v_heads} * state_size * state_size; }
  std::uint64_t layer_state_bytes() const noexcept { return (conv_floats() + matrix_floats()) * sizeof(float); }
};

struct HParams {
  const ArchTraits* arch = nullptr;  // the table row (arch.hpp)
  std::string architecture;          // general.architecture
  std::string name;                  // general.name, for reports
  std::uint32_t layers = 0;          // block_count (all dense)
  std::uint32_t embedding = 0;       // embedding_length
  std::uint32_t ffn = 0;             // feed_forward_length
  std::uint32_t q_heads = 0;         // attention.head_count
  std::uint32_t kv_heads = 0;        // attention.head_count_kv
  std::uint32_t head_dim = 0;        // attention.key_length (= value_length)
  std::uint32_t rope_dims = 0;       // rope.dimension_count (≤ head_dim, even)
  std::uint32_t vocab = 0;           // rows of token_embd
  std::uint32_t context_tokens = 0;  // context_length
  float rope_theta = 10000.0f;       // rope.freq_base (the full layers' base)
  float rms_epsilon = 1e-5f;         // attention.layer_norm_rms_epsilon
  bool tied_output = false;          // output.weight absent: logits use token_embd
  std::uint32_t window = 0;          // attention.sliding_window; 0: no window layers
  float embedding_scale = 1.0f;      // token_embd rows × this (Gemma: sqrt(embedding))
  // q × this before attention: the runtime's kernel applies 1 / sqrt(head_dim), the model wants
  // attention_scale; 1 (nothing done) when they agree.
  float query_scale = 1.0f;
  std::vector<RopeSpec> ropes;        // 1 or 2 tables
  std::vector<LayerHParams> layer;    // per layer, `layers` of them
  SsmHParams ssm;                     // hybrids only
  std::uint32_t dense_layers = 0;     // attention layers (= layers but for a hybrid)
  std::uint32_t recurrent_layers = 0; // Gated DeltaNet layers

  std::uint32_t q_dim() const noexcept { return q_heads * head_dim; }
  std::uint32_t kv_dim() const noexcept { return kv_heads * head_dim; }
  std::uint32_t window_layers() const noexcept;
  // A context's recurrent state, all recurrent layers together (0 without them).
  std::uint64_t recurrent_state_bytes() const noexcept { return recurrent_layers * ssm.layer_state_bytes(); }
};

using ModelConfig = HParams;  // the name the engine's callers know it by

// Reads and checks the hyper-parameters of `file` (see the header comment). Errors:
// unsupported (an architecture or a RoPE scaling the engine does not run), malformed (a
// missing key, a value outside its limit, values that contradict each other or the tensors).
Result<HParams> read_hparams(const gguf::File& file);

}  // namespace activekv::engine
