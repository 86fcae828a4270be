// model.hpp — a model of one of the engine's architectures, read from a GGUF file.
//
// What it owns: the GGUF file (an mmap; the weights are never copied) and a
// table of views into it — one MatrixView per weight matrix, pointers to the
// fp32 norm and bias vectors — plus the hyper-parameters (hparams.hpp), which
// say which architecture's row (arch.hpp) the tensors follow.
//
// The invariant: a Model that load() returned can be computed with. The
// hyper-parameters passed read_hparams(); every tensor the architecture's
// layers read exists, has exactly the shape the hyper-parameters imply, and has
// a type the kernels support. Anything else is an Error naming the file and
// the tensor or key — the forward pass never re-checks.
//
// Shapes, GGUF order (ne[0] is the contiguous, input dimension):
//   token_embd    [embedding, vocab]        also the output matrix when output.weight is absent (tied)
//   blk.L.attn_q  [embedding, q_heads × head_dim]      (q_dim; bias [q_dim] where qkv_bias)
//   blk.L.attn_k  [embedding, kv_heads × head_dim]     (kv_dim; and attn_v)
//   blk.L.attn_output [q_heads × head_dim, embedding]
//   blk.L.attn_q_norm, attn_k_norm [head_dim]          where qk_norm
//   blk.L.ffn_gate, ffn_up [embedding, ffn]; ffn_down [ffn, embedding]
//   *_norm        [embedding] F32 (post_attention_norm, post_ffw_norm where post_norms)
//   rope_freqs    [rope_dims / 2] F32, optional (Llama 3's frequency factors)
// Qwen3.5 (gated_delta_net), attention layers: attn_q [embedding, 2 × q_dim] (per head a query then
// a gate), attn_k, attn_v, attn_output, attn_{q,k}_norm, post_attention_norm (the FFN's input norm);
// recurrent layers instead of attn_q/k/v/output and the Q/K norms (hparams.hpp SsmHParams):
//   attn_qkv [embedding, conv_dim]   attn_gate [embedding, inner]   ssm_out [inner, embedding]
//   ssm_beta, ssm_alpha [embedding, v_heads]   ssm_conv1d [conv_kernel, conv_dim] F32
//   ssm_dt.bias, ssm_a [v_heads] F32   ssm_norm [state_size] F32
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "activekv/geometry.hpp"
#include "activekv/result.hpp"
#include "engine/arch.hpp"
#include "engine/hparams.hpp"
#include "engine/matmul.hpp"
#include "gguf/gguf.hpp"

namespace activekv::engine {

// One layer's weights. The optional ones are null where the architecture has none (arch.hpp).
struct LayerWeights {
  const float* attn_norm = nullptr;       // [embedding]
  MatrixView q, k, v, o;
  const float* q_bias = nullptr;          // [q_dim]   qkv_bias
  const float* k_bias = nullptr;          // [kv_dim]
  const float* v_bias = nullptr;          // [kv_dim]
  const float* q_norm = nullptr;          // [head_dim] qk_norm: RMS norm of each query head
  const float* k_norm = nullptr;          // [head_dim]
  const float* post_attn_norm = nullptr;  // [embedding] post_norms: on the attention output
  const float* ffn_norm = nullptr;        // [embedding]
  MatrixView gate, up, down;
  const float* post_ffn_norm = nullptr;   // [embedding] post_norms: on the FFN output
  // Gated DeltaNet (recurrent layers of a hybrid):
  MatrixView qkv;                         // attn_qkv: the convolution's input channels
  MatrixView z;                           // attn_gate: the output gate
  MatrixView beta, alpha;                 // ssm_beta, ssm_alpha: per value head
  MatrixView ssm_out;
  const float* conv = nullptr;            // ssm_conv1d: channel c's taps at c × conv_kernel, oldest first
  const float* dt_bias = nullptr;         // ssm_dt.bias [v_heads]
  const float* a = nullptr;               // ssm_a [v_heads]: −exp(A_log), the decay rate
  const float* ssm_norm = nullptr;        // [state_size]
};

class Model {
 public:
  // Opens and validates `path`. Errors: not_found (no such file), malformed
  // (not GGUF, or damaged), unsupported (architecture or tensor type).
  static Result<std::unique_ptr<Model>> load(const std::string& path);
  // Validates an already parsed file (tests build small ones in memory).
  static Result<std::unique_ptr<Model>> from_file(gguf::File file);

  const HParams& config() const noexcept { return config_; }
  const ArchTraits& arch() const noexcept { return *config_.arch; }
  // The KV geometry: the attention layers dense, f16 rows, window layers marked; a hybrid's
  // recurrent state (hparams.hpp).
  Geometry geometry() const noexcept;  // kv_geometry(config())
  const gguf::File& file() const noexcept { return file_; }

  const MatrixView& token_embd() const noexcept { return token_embd_; }
  const MatrixView& output() const noexcept { return output_; }
  const float* output_norm() const noexcept { return output_norm_; }
  // rope_freqs.weight (rope_dims / 2 floats), or null.
  const float* rope_freqs() const noexcept { return rope_freqs_; }
  const LayerWeights& layer(std::uint32_t l) const noexcept { return layers_[l]; }
  // Bytes of weights one token's forward pass reads (every matrix once, the
  // embedding row aside): the memory-traffic floor per decode step.
  std::uint64_t weight_bytes_per_token() const noexcept;

 private:
  explicit Model(gguf::File file) : file_(std::move(file)) {}
  Status bind();
  Status bind_layer(std::uint32_t l);
  Status bind_hybrid_layer(std::uint32_t l);  // Qwen3.5's layers (model_hybrid.cpp)

  gguf::File file_;
  HParams config_;
  MatrixView token_embd_;
  MatrixView output_;
  const float* output_norm_ = nullptr;
  const float* rope_freqs_ = nullptr;
  std::vector<LayerWeights> layers_;
};

namespace detail {
// The loader's binders, shared by model.cpp and model_hybrid.cpp: a matrix named `name` of shape
// [cols, rows] and a supported type; an F32 vector of n elements. Errors name the file and tensor.
Result<MatrixView> bind_matrix(const gguf::File& file, const std::string& name, std::uint64_t cols, std::uint64_t rows);
Result<const float*> bind_norm(const gguf::File& file, const std::string& name, std::uint64_t n);
}  // namespace detail

// The tokenizer's vocabulary and token_embd's rows must agree: a sampled id
// past the vocabulary has no text, a token past the rows no embedding. Error:
// malformed, naming the file, tokenizer.ggml.tokens and token_embd.weight.
Status check_vocabulary(const Model& model, std::uint64_t tokenizer_tokens);

// The KV geometry a model's hyper-parameters give: every layer dense, f16 rows, the window
// layers in the layer-kind table (what `activekv plan --model` plans from, without the weights).
Geometry kv_geometry(const HParams& hp) noexcept;

}  // namespace activekv::engine
