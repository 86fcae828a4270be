// model.hpp — a Llama-architecture model, read from a GGUF file.
//
// What it owns: the GGUF file (an mmap; the weights are never copied) and a
// table of views into it — one MatrixView per weight matrix, pointers to the
// fp32 norm vectors — plus the hyper-parameters from the metadata.
//
// The invariant: a Model that load() returned can be computed with. Every
// tensor the forward pass reads exists, has exactly the shape the metadata
// implies, and has a type the kernels support; every hyper-parameter is
// non-zero and consistent (embedding = q_heads × head_dim, q_heads a multiple
// of kv_heads, an even head_dim). Anything else is an Error naming the file
// and the tensor or key — the forward pass never re-checks.
//
// Shapes, GGUF order (ne[0] is the contiguous, input dimension):
//   token_embd    [embedding, vocab]        also the output matrix when output.weight is absent (tied)
//   blk.L.attn_q  [embedding, q_heads × head_dim]
//   blk.L.attn_k  [embedding, kv_heads × head_dim]     (and attn_v)
//   blk.L.attn_output [q_heads × head_dim, embedding]
//   blk.L.ffn_gate, ffn_up [embedding, ffn]; ffn_down [ffn, embedding]
//   *_norm        [embedding] F32
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "activekv/geometry.hpp"
#include "activekv/result.hpp"
#include "engine/matmul.hpp"
#include "gguf/gguf.hpp"

namespace activekv::engine {

// Limits on the hyper-parameters (far past any Llama the engine can run on a CPU;
// a value outside is refused before anything is sized from it).
inline constexpr std::uint32_t layers_max = 4096;
inline constexpr std::uint32_t embedding_max = 1u << 16;
inline constexpr std::uint32_t ffn_max = 1u << 18;
inline constexpr std::uint32_t heads_max = 1024;
inline constexpr std::uint32_t head_dim_max = 1024;
inline constexpr std::uint32_t context_tokens_max = 1u << 20;  // the RoPE tables and the reference KV are sized by it
inline constexpr std::uint32_t vocab_max = 1u << 24;

struct ModelConfig {
  std::string architecture;           // "llama"
  std::string name;                   // general.name, for reports
  std::uint32_t layers = 0;           // llama.block_count (all dense)
  std::uint32_t embedding = 0;        // llama.embedding_length
  std::uint32_t ffn = 0;              // llama.feed_forward_length
  std::uint32_t q_heads = 0;          // llama.attention.head_count
  std::uint32_t kv_heads = 0;         // llama.attention.head_count_kv
  std::uint32_t head_dim = 0;         // embedding / q_heads
  std::uint32_t rope_dims = 0;        // llama.rope.dimension_count (≤ head_dim)
  std::uint32_t vocab = 0;            // rows of token_embd
  std::uint32_t context_tokens = 0;   // llama.context_length
  float rope_theta = 10000.0f;        // llama.rope.freq_base
  float rms_epsilon = 1e-5f;          // llama.attention.layer_norm_rms_epsilon
  bool tied_output = false;           // output.weight absent: logits use token_embd
};

struct LayerWeights {
  const float* attn_norm = nullptr;  // [embedding]
  MatrixView q, k, v, o;
  const float* ffn_norm = nullptr;   // [embedding]
  MatrixView gate, up, down;
};

class Model {
 public:
  // Opens and validates `path`. Errors: not_found (no such file), malformed
  // (not GGUF, or damaged), unsupported (architecture or tensor type).
  static Result<std::unique_ptr<Model>> load(const std::string& path);
  // Validates an already parsed file (tests build small ones in memory).
  static Result<std::unique_ptr<Model>> from_file(gguf::File file);

  const ModelConfig& config() const noexcept { return config_; }
  // The KV geometry: every layer dense, f16 rows.
  Geometry geometry() const noexcept;
  const gguf::File& file() const noexcept { return file_; }

  const MatrixView& token_embd() const noexcept { return token_embd_; }
  const MatrixView& output() const noexcept { return output_; }
  const float* output_norm() const noexcept { return output_norm_; }
  const LayerWeights& layer(std::uint32_t l) const noexcept { return layers_[l]; }
  // Bytes of weights one token's forward pass reads (every matrix once, the
  // embedding row aside): the memory-traffic floor per decode step.
  std::uint64_t weight_bytes_per_token() const noexcept;

 private:
  explicit Model(gguf::File file) : file_(std::move(file)) {}
  Status bind();

  gguf::File file_;
  ModelConfig config_;
  MatrixView token_embd_;
  MatrixView output_;
  const float* output_norm_ = nullptr;
  std::vector<LayerWeights> layers_;
};

// The tokenizer's vocabulary and token_embd's rows must agree: a sampled id
// past the vocabulary has no text, a token past the rows no embedding. Error:
// malformed, naming the file, tokenizer.ggml.tokens and token_embd.weight.
Status check_vocabulary(const Model& model, std::uint64_t tokenizer_tokens);

}  // namespace activekv::engine
