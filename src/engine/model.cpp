// model.cpp — binding a GGUF model's tensors to its architecture's layers (see model.hpp).
#include "engine/model.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

namespace activekv::engine {
namespace {

Error model_error(const gguf::File& file, ErrorCode code, std::string message) {
  return make_error(code, file.name(), std::move(message));
}

}  // namespace

namespace detail {

// The matrix named `name` with shape [cols, rows], of a supported type.
Result<MatrixView> bind_matrix(const gguf::File& file, const std::string& name, std::uint64_t cols, std::uint64_t rows) {
  const gguf::TensorInfo* t = file.find_tensor(name);
  if (t == nullptr) return model_error(file, ErrorCode::malformed, fmt::format("tensor '{}' is missing", name));
  if (t->n_dims != 2 || t->ne[0] != cols || t->ne[1] != rows) {
    return model_error(file, ErrorCode::malformed,
                       fmt::format("tensor '{}' has shape [{}, {}] ({} dims); the architecture needs [{}, {}]", name,
                                   t->ne[0], t->ne[1], t->n_dims, cols, rows));
  }
  if (!quant_supported(t->type)) {
    return model_error(file, ErrorCode::unsupported,
                       fmt::format("tensor {} is {}, which ActiveKV does not read; supported: {}", name,
                                   t->traits().name, quant_supported_names()));
  }
  const std::span<const std::byte> data = file.tensor_data(*t);
  MatrixView view;
  view.type = t->type;
  view.data = reinterpret_cast<const std::uint8_t*>(data.data());
  view.cols = static_cast<std::uint32_t>(cols);
  view.rows = static_cast<std::uint32_t>(rows);
  view.row_bytes = quant_row_bytes(t->type, cols);
  return view;
}

Result<const float*> bind_norm(const gguf::File& file, const std::string& name, std::uint64_t n) {
  const gguf::TensorInfo* t = file.find_tensor(name);
  if (t == nullptr) return model_error(file, ErrorCode::malformed, fmt::format("tensor '{}' is missing", name));
  if (t->type != GgmlType::f32 || t->elements != n) {
    return model_error(file, ErrorCode::unsupported,
                       fmt::format("tensor '{}' must be F32 with {} elements (it is {} with {})", name, n,
                                   t->traits().name, t->elements));
  }
  return reinterpret_cast<const float*>(file.tensor_data(*t).data());
}

}  // namespace detail

using detail::bind_matrix;
using detail::bind_norm;

Result<std::unique_ptr<Model>> Model::load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    return make_error(ErrorCode::not_found, "--model",
                      fmt::format("no model file at '{}' (give a GGUF file with --model)", path));
  }
  Result<gguf::File> file = gguf::File::open(path);
  if (!file) return file.error();
  return from_file(std::move(file).value());
}

Result<std::unique_ptr<Model>> Model::from_file(gguf::File file) {
  std::unique_ptr<Model> model(new Model(std::move(file)));
  if (Status s = model->bind(); !s) return s.error();
  return model;
}

Status Model::bind() {
  const gguf::File& f = file_;
  Result<HParams> h = read_hparams(f);
  if (!h) return h.error();
  config_ = std::move(h).value();
  const std::uint32_t e = config_.embedding;

  Result<MatrixView> te = bind_matrix(f, "token_embd.weight", e, config_.vocab);
  if (!te) return te.error();
  token_embd_ = *te;
  Result<MatrixView> out = config_.tied_output ? te : bind_matrix(f, "output.weight", e, config_.vocab);
  if (!out) return out.error();
  output_ = *out;
  Result<const float*> on = bind_norm(f, "output_norm.weight", e);
  if (!on) return on.error();
  output_norm_ = *on;
  if (config_.ropes[0].freq_factors) {
    Result<const float*> rf = bind_norm(f, "rope_freqs.weight", config_.rope_dims / 2);
    if (!rf) return rf.error();
    rope_freqs_ = *rf;
  }

  // Each layer needs 9 tensors: a block count past what the file holds is refused before the table is sized.
  if (std::uint64_t{config_.layers} * 9 > f.tensors().size()) {
    return model_error(f, ErrorCode::malformed,
                       fmt::format("metadata '{}.block_count' is {}, but the file holds {} tensors (each layer needs 9): "
                                   "tensor 'blk.{}.attn_q.weight' is missing",
                                   config_.architecture, config_.layers, f.tensors().size(), config_.layers - 1));
  }
  layers_.resize(config_.layers);
  for (std::uint32_t l = 0; l < config_.layers; ++l)
    if (Status s = bind_layer(l); !s) return s;
  return Status::success();
}

// Layer l's tensors: the nine every architecture has, then the row's optional ones (arch.hpp).
Status Model::bind_layer(std::uint32_t l) {
  if (config_.arch->gated_delta_net) return bind_hybrid_layer(l);
  const gguf::File& f = file_;
  const ArchTraits& arch = *config_.arch;
  const std::string b = fmt::format("blk.{}.", l);
  const std::uint32_t e = config_.embedding;
  const std::uint32_t qd = config_.q_dim();
  const std::uint32_t kvd = config_.kv_dim();
  LayerWeights& w = layers_[l];
  struct M {
    MatrixView* view;
    const char* name;
    std::uint32_t cols, rows;
  };
  const M matrices[] = {{&w.q, "attn_q", e, qd},         {&w.k, "attn_k", e, kvd},
                        {&w.v, "attn_v", e, kvd},        {&w.o, "attn_output", qd, e},
                        {&w.gate, "ffn_gate", e, config_.ffn}, {&w.up, "ffn_up", e, config_.ffn},
                        {&w.down, "ffn_down", config_.ffn, e}};
  for (const M& m : matrices) {
    Result<MatrixView> r = bind_matrix(f, b + m.name + ".weight", m.cols, m.rows);
    if (!r) return r.error();
    *m.view = *r;
  }
  struct V {
    const float** at;
    const char* name;
    std::uint32_t elements;
    bool wanted;
  };
  const V vectors[] = {{&w.attn_norm, "attn_norm.weight", e, true},
                       {&w.ffn_norm, "ffn_norm.weight", e, true},
                       {&w.q_bias, "attn_q.bias", qd, arch.qkv_bias},
                       {&w.k_bias, "attn_k.bias", kvd, arch.qkv_bias},
                       {&w.v_bias, "attn_v.bias", kvd, arch.qkv_bias},
                       {&w.q_norm, "attn_q_norm.weight", config_.head_dim, arch.qk_norm},
                       {&w.k_norm, "attn_k_norm.weight", config_.head_dim, arch.qk_norm},
                       {&w.post_attn_norm, "post_attention_norm.weight", e, arch.post_norms},
                       {&w.post_ffn_norm, "post_ffw_norm.weight", e, arch.post_norms}};
  for (const V& v : vectors) {
    if (!v.wanted) continue;
    Result<const float*> r = bind_norm(f, b + v.name, v.elements);
    if (!r) return r.error();
    *v.at = *r;
  }
  return Status::success();
}

Status check_vocabulary(const Model& model, std::uint64_t tokenizer_tokens) {
  const std::uint32_t rows = model.config().vocab;
  if (tokenizer_tokens == rows) return Status::success();
  return model_error(model.file(), ErrorCode::malformed,
                     fmt::format("metadata 'tokenizer.ggml.tokens' holds {} tokens but tensor 'token_embd.weight' has {} "
                                 "rows: every token id the engine can sample must have a token, and every token a row",
                                 tokenizer_tokens, rows));
}

Geometry kv_geometry(const HParams& hp) noexcept {
  Geometry g;
  g.dense_layers = hp.dense_layers;
  g.recurrent_layers = hp.recurrent_layers;
  g.recurrent_state_bytes = hp.recurrent_state_bytes();
  g.kv_heads = hp.kv_heads;
  g.head_dim = hp.head_dim;
  g.dtype = DType::f16;
  // Window layers (hparams: a uniform window; layers past the table's limit are refused by check_runnable).
  g.kinds.window_tokens = hp.window_layers() != 0 ? hp.window : 0;
  for (std::uint32_t l = 0; l < hp.layers; ++l) {
    const LayerHParams& layer = hp.layer[l];
    if (!layer.recurrent && layer.window != 0 && layer.kv_layer < LayerKinds::layers_max) g.kinds.set_window(layer.kv_layer);
  }
  return g;
}

Geometry Model::geometry() const noexcept { return kv_geometry(config_); }

std::uint64_t Model::weight_bytes_per_token() const noexcept {
  std::uint64_t bytes = static_cast<std::uint64_t>(output_.rows) * output_.row_bytes;
  for (const LayerWeights& w : layers_) {
    for (const MatrixView* m :
         {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down, &w.qkv, &w.z, &w.beta, &w.alpha, &w.ssm_out})
      bytes += static_cast<std::uint64_t>(m->rows) * m->row_bytes;
  }
  return bytes;
}

}  // namespace activekv::engine
