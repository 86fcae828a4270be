// model.cpp — reading and validating a Llama GGUF (see model.hpp).
#include "engine/model.hpp"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

namespace activekv::engine {
namespace {

Error model_error(const gguf::File& file, ErrorCode code, std::string message) {
  return make_error(code, file.name(), std::move(message));
}

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

// A whole-number hyper-parameter in [1, hi], or an error naming the file, the key and the value.
Result<std::uint32_t> positive_u32(const gguf::File& file, const std::string& key, std::uint32_t hi, const char* unit) {
  Result<std::uint32_t> v = file.get_u32(key);
  if (!v) return v.error();
  if (*v == 0 || *v > hi) {
    return model_error(file, ErrorCode::malformed,
                       fmt::format("metadata '{}' is {}: the engine takes 1 to {} {}", key, *v, hi, unit));
  }
  return *v;
}

// A float hyper-parameter, finite and in [lo, hi]: NaN, infinities and negatives are refused before they
// reach a table (a NaN RoPE base would silently give empty output).
Result<float> bounded_f32(const gguf::File& file, const std::string& key, float fallback, double lo, double hi) {
  if (!file.has(key)) return fallback;
  Result<float> v = file.get_f32(key);
  if (!v) return v.error();
  if (!std::isfinite(*v) || *v < lo || *v > hi) {
    return model_error(file, ErrorCode::malformed,
                       fmt::format("metadata '{}' is {}: it must be a finite number from {:g} to {:g}", key, *v, lo, hi));
  }
  return *v;
}

}  // namespace

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
  Result<std::string_view> arch = f.get_string("general.architecture");
  if (!arch) return arch.error();
  config_.architecture = std::string(*arch);
  if (config_.architecture != "llama") {
    return model_error(f, ErrorCode::unsupported,
                       fmt::format("architecture '{}' is not supported (the engine runs 'llama')", *arch));
  }
  if (Result<std::string_view> n = f.get_string("general.name"); n) config_.name = std::string(*n);
  const std::string p = config_.architecture + ".";
  // Every value is checked against its limit (model.hpp) before anything is sized from it.
  Result<std::uint32_t> layers = positive_u32(f, p + "block_count", layers_max, "layers");
  Result<std::uint32_t> embedding = positive_u32(f, p + "embedding_length", embedding_max, "elements");
  Result<std::uint32_t> ffn = positive_u32(f, p + "feed_forward_length", ffn_max, "elements");
  Result<std::uint32_t> q_heads = positive_u32(f, p + "attention.head_count", heads_max, "heads");
  Result<std::uint32_t> context = positive_u32(f, p + "context_length", context_tokens_max, "tokens");
  for (const Result<std::uint32_t>* r : {&layers, &embedding, &ffn, &q_heads, &context})
    if (!*r) return r->error();
  config_.layers = *layers;
  config_.embedding = *embedding;
  config_.ffn = *ffn;
  config_.q_heads = *q_heads;
  config_.context_tokens = *context;
  config_.kv_heads = config_.q_heads;
  if (f.has(p + "attention.head_count_kv")) {
    Result<std::uint32_t> kv = positive_u32(f, p + "attention.head_count_kv", heads_max, "heads");
    if (!kv) return kv.error();
    config_.kv_heads = *kv;
  }
  if (config_.embedding % config_.q_heads != 0 || config_.q_heads % config_.kv_heads != 0) {
    return model_error(f, ErrorCode::malformed,
                       fmt::format("heads do not divide: embedding {} / head_count {} / head_count_kv {}",
                                   config_.embedding, config_.q_heads, config_.kv_heads));
  }
  config_.head_dim = config_.embedding / config_.q_heads;
  if (config_.head_dim > head_dim_max) {
    return model_error(f, ErrorCode::malformed,
                       fmt::format("head dim {} (embedding {} / head_count {}) is past the engine's {}", config_.head_dim,
                                   config_.embedding, config_.q_heads, head_dim_max));
  }
  config_.rope_dims = config_.head_dim;
  if (f.has(p + "rope.dimension_count")) {
    Result<std::uint32_t> dims = positive_u32(f, p + "rope.dimension_count", head_dim_max, "dimensions");
    if (!dims) return dims.error();
    config_.rope_dims = *dims;
  }
  if (config_.head_dim % 2 != 0 || config_.rope_dims > config_.head_dim || config_.rope_dims % 2 != 0) {
    return model_error(f, ErrorCode::malformed,
                       fmt::format("head dim {} and rope dimension count {} must be even, rope ≤ head dim",
                                   config_.head_dim, config_.rope_dims));
  }
  Result<float> theta = bounded_f32(f, p + "rope.freq_base", config_.rope_theta, 1.0, 1e12);
  if (!theta) return theta.error();
  config_.rope_theta = *theta;
  Result<float> eps = bounded_f32(f, p + "attention.layer_norm_rms_epsilon", config_.rms_epsilon, 1e-12, 1.0);
  if (!eps) return eps.error();
  config_.rms_epsilon = *eps;

  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (embd == nullptr) return model_error(f, ErrorCode::malformed, "tensor 'token_embd.weight' is missing");
  if (embd->n_dims != 2 || embd->ne[1] == 0 || embd->ne[1] > vocab_max)
    return model_error(f, ErrorCode::malformed,
                       fmt::format("tensor 'token_embd.weight' must be 2-dimensional [embedding, vocab] with 1 to {} rows",
                                   vocab_max));
  config_.vocab = static_cast<std::uint32_t>(embd->ne[1]);
  const std::uint32_t e = config_.embedding;
  const std::uint32_t qd = config_.q_heads * config_.head_dim;
  const std::uint32_t kvd = config_.kv_heads * config_.head_dim;

  Result<MatrixView> te = bind_matrix(f, "token_embd.weight", e, config_.vocab);
  if (!te) return te.error();
  token_embd_ = *te;
  config_.tied_output = f.find_tensor("output.weight") == nullptr;
  Result<MatrixView> out = config_.tied_output ? te : bind_matrix(f, "output.weight", e, config_.vocab);
  if (!out) return out.error();
  output_ = *out;
  Result<const float*> on = bind_norm(f, "output_norm.weight", e);
  if (!on) return on.error();
  output_norm_ = *on;

  // Each layer needs 9 tensors: a block count past what the file holds is refused before the table is sized.
  if (std::uint64_t{config_.layers} * 9 > f.tensors().size()) {
    return model_error(f, ErrorCode::malformed,
                       fmt::format("metadata '{}block_count' is {}, but the file holds {} tensors (each layer needs 9): "
                                   "tensor 'blk.{}.attn_q.weight' is missing",
                                   p, config_.layers, f.tensors().size(), config_.layers - 1));
  }
  layers_.resize(config_.layers);
  for (std::uint32_t l = 0; l < config_.layers; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
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
    Result<const float*> an = bind_norm(f, b + "attn_norm.weight", e);
    if (!an) return an.error();
    w.attn_norm = *an;
    Result<const float*> fn = bind_norm(f, b + "ffn_norm.weight", e);
    if (!fn) return fn.error();
    w.ffn_norm = *fn;
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

Geometry Model::geometry() const noexcept {
  Geometry g;
  g.dense_layers = config_.layers;
  g.recurrent_layers = 0;
  g.kv_heads = config_.kv_heads;
  g.head_dim = config_.head_dim;
  g.dtype = DType::f16;
  return g;
}

std::uint64_t Model::weight_bytes_per_token() const noexcept {
  std::uint64_t bytes = static_cast<std::uint64_t>(output_.rows) * output_.row_bytes;
  for (const LayerWeights& w : layers_) {
    for (const MatrixView* m : {&w.q, &w.k, &w.v, &w.o, &w.gate, &w.up, &w.down})
      bytes += static_cast<std::uint64_t>(m->rows) * m->row_bytes;
  }
  return bytes;
}

}  // namespace activekv::engine
