// hparams.cpp — reading and checking a model's hyper-parameters (see hparams.hpp).
#include "engine/hparams.hpp"

#include <fmt/format.h>

#include <cmath>

#include "engine/arch.hpp"

namespace activekv::engine {
namespace {

Error hparams_error(const gguf::File& file, ErrorCode code, std::string message) {
  return make_error(code, file.name(), std::move(message));
}

// A whole-number hyper-parameter in [1, hi], or an error naming the file, the key and the value.
Result<std::uint32_t> positive_u32(const gguf::File& file, const std::string& key, std::uint32_t hi, const char* unit) {
  Result<std::uint32_t> v = file.get_u32(key);
  if (!v) return v.error();
  if (*v == 0 || *v > hi) {
    return hparams_error(file, ErrorCode::malformed,
                         fmt::format("metadata '{}' is {}: the engine takes 1 to {} {}", key, *v, hi, unit));
  }
  return *v;
}

// The same for a key that may be absent: `fallback` then.
Result<std::uint32_t> optional_u32(const gguf::File& file, const std::string& key, std::uint32_t fallback,
                                   std::uint32_t hi, const char* unit) {
  if (!file.has(key)) return fallback;
  return positive_u32(file, key, hi, unit);
}

// A float hyper-parameter, finite and in [lo, hi]: NaN, infinities and negatives are refused before they
// reach a table (a NaN RoPE base would silently give empty output).
Result<float> bounded_f32(const gguf::File& file, const std::string& key, float fallback, double lo, double hi) {
  if (!file.has(key)) return fallback;
  Result<float> v = file.get_f32(key);
  if (!v) return v.error();
  if (!std::isfinite(*v) || *v < lo || *v > hi) {
    return hparams_error(file, ErrorCode::malformed,
                         fmt::format("metadata '{}' is {}: it must be a finite number from {:g} to {:g}", key, *v, lo, hi));
  }
  return *v;
}

// Sizes: layers, widths, heads and the head dimension, each within its limit, and consistent.
Status read_sizes(const gguf::File& f, const std::string& p, HParams& h) {
  // Every value is checked against its limit (hparams.hpp) before anything is sized from it.
  Result<std::uint32_t> layers = positive_u32(f, p + "block_count", layers_max, "layers");
  Result<std::uint32_t> embedding = positive_u32(f, p + "embedding_length", embedding_max, "elements");
  Result<std::uint32_t> ffn = positive_u32(f, p + "feed_forward_length", ffn_max, "elements");
  Result<std::uint32_t> q_heads = positive_u32(f, p + "attention.head_count", heads_max, "heads");
  Result<std::uint32_t> context = positive_u32(f, p + "context_length", context_tokens_max, "tokens");
  for (const Result<std::uint32_t>* r : {&layers, &embedding, &ffn, &q_heads, &context})
    if (!*r) return r->error();
  h.layers = *layers;
  h.embedding = *embedding;
  h.ffn = *ffn;
  h.q_heads = *q_heads;
  h.context_tokens = *context;
  Result<std::uint32_t> kv = optional_u32(f, p + "attention.head_count_kv", h.q_heads, heads_max, "heads");
  if (!kv) return kv.error();
  h.kv_heads = *kv;
  if (h.q_heads % h.kv_heads != 0) {
    return hparams_error(f, ErrorCode::malformed,
                         fmt::format("heads do not divide: metadata '{}attention.head_count' {} is not a multiple of "
                                     "'{}attention.head_count_kv' {}",
                                     p, h.q_heads, p, h.kv_heads));
  }
  if (f.has(p + "attention.key_length")) {
    Result<std::uint32_t> key = positive_u32(f, p + "attention.key_length", head_dim_max, "elements");
    if (!key) return key.error();
    h.head_dim = *key;
  } else {
    if (h.embedding % h.q_heads != 0) {
      return hparams_error(f, ErrorCode::malformed,
                           fmt::format("heads do not divide: embedding {} / head_count {} / head_count_kv {} "
                                       "(and no '{}attention.key_length')",
                                       h.embedding, h.q_heads, h.kv_heads, p));
    }
    h.head_dim = h.embedding / h.q_heads;
    if (h.head_dim > head_dim_max) {
      return hparams_error(f, ErrorCode::malformed,
                           fmt::format("head dim {} (embedding {} / head_count {}) is past the engine's {}", h.head_dim,
                                       h.embedding, h.q_heads, head_dim_max));
    }
  }
  Result<std::uint32_t> value = optional_u32(f, p + "attention.value_length", h.head_dim, head_dim_max, "elements");
  if (!value) return value.error();
  if (*value != h.head_dim) {
    return hparams_error(f, ErrorCode::unsupported,
                         fmt::format("metadata '{}attention.value_length' {} differs from the key length {}: the "
                                     "engine's KV rows hold K and V of one head size",
                                     p, *value, h.head_dim));
  }
  Result<std::uint32_t> dims = optional_u32(f, p + "rope.dimension_count", h.head_dim, head_dim_max, "dimensions");
  if (!dims) return dims.error();
  h.rope_dims = *dims;
  if (h.head_dim % 2 != 0 || h.rope_dims > h.head_dim || h.rope_dims % 2 != 0) {
    return hparams_error(f, ErrorCode::malformed,
                         fmt::format("head dim {} and rope dimension count {} must be even, rope ≤ head dim",
                                     h.head_dim, h.rope_dims));
  }
  return Status::success();
}

// The head counts against layer 0's attention tensors: a count the tensors contradict is named
// with the tensor, before the loader reports a shape.
Status check_heads_against_tensors(const gguf::File& f, const std::string& p, const HParams& h) {
  struct Check {
    const char* tensor;
    const char* key;
    std::uint32_t heads;
  };
  for (const Check& c : {Check{"blk.0.attn_q.weight", "attention.head_count", h.q_heads},
                         Check{"blk.0.attn_k.weight", "attention.head_count_kv", h.kv_heads}}) {
    const gguf::TensorInfo* t = f.find_tensor(c.tensor);
    if (t == nullptr || t->n_dims != 2) continue;  // the loader names a missing or misshapen tensor
    if (t->ne[1] == std::uint64_t{c.heads} * h.head_dim) continue;
    return hparams_error(f, ErrorCode::malformed,
                         fmt::format("metadata '{}{}' is {}, but tensor '{}' has {} rows, not {} × head dim {} = {}", p,
                                     c.key, c.heads, c.tensor, t->ne[1], c.heads, h.head_dim,
                                     std::uint64_t{c.heads} * h.head_dim));
  }
  return Status::success();
}

// RoPE: the full layers' base and linear scaling; Llama 3's factors come from the tensor.
Status read_rope(const gguf::File& f, const std::string& p, const ArchTraits& arch, HParams& h) {
  Result<float> theta = bounded_f32(f, p + "rope.freq_base", h.rope_theta, 1.0, 1e12);
  if (!theta) return theta.error();
  h.rope_theta = *theta;
  RopeSpec full{h.rope_theta, 1.0f, arch.rope_freqs && f.find_tensor("rope_freqs.weight") != nullptr};
  std::string type = "none";
  if (f.has(p + "rope.scaling.type")) {
    Result<std::string_view> t = f.get_string(p + "rope.scaling.type");
    if (!t) return t.error();
    type = std::string(*t);
  } else if (f.has(p + "rope.scale_linear")) {
    type = "linear";  // the older key: a linear factor without a type
  }
  if (type == "linear") {
    const std::string key = f.has(p + "rope.scaling.factor") ? p + "rope.scaling.factor" : p + "rope.scale_linear";
    Result<float> factor = bounded_f32(f, key, 1.0f, 1e-3, 1e6);
    if (!factor) return factor.error();
    full.freq_scale = 1.0f / *factor;
  } else if (type != "none") {
    return hparams_error(f, ErrorCode::unsupported,
                         fmt::format("metadata '{}rope.scaling.type' is '{}': the engine runs none and linear "
                                     "(Llama 3's scaling comes from the tensor rope_freqs.weight)",
                                     p, type));
  }
  h.ropes.push_back(full);
  return Status::success();
}

// Window layers: which layers see only the last `window` tokens, and their RoPE table.
Status read_windows(const gguf::File& f, const std::string& p, const ArchTraits& arch, HParams& h) {
  h.layer.assign(h.layers, LayerHParams{});
  const std::string window_key = p + "attention.sliding_window";
  if (arch.windows == WindowRule::none || (arch.windows == WindowRule::uniform && !f.has(window_key)))
    return Status::success();
  Result<std::uint32_t> window = positive_u32(f, window_key, context_tokens_max, "tokens");
  if (!window) return window.error();
  if (*window > h.context_tokens) {
    return hparams_error(f, ErrorCode::malformed,
                         fmt::format("metadata '{}' is {}, above '{}context_length' {}: a window holds at most the "
                                     "context",
                                     window_key, *window, p, h.context_tokens));
  }
  h.window = *window;
  if (arch.windows == WindowRule::uniform) {
    for (LayerHParams& l : h.layer) l.window = h.window;
    return Status::success();
  }
  // WindowRule::pattern: a period n (layer l is a window layer iff l % n < n − 1) or one flag per layer.
  const std::string pattern_key = p + "attention.sliding_window_pattern";
  std::vector<bool> local(h.layers);
  if (f.has(pattern_key) && f.get_array_count(pattern_key).ok()) {
    Result<std::vector<bool>> flags = f.get_array<bool>(pattern_key);
    if (!flags) return flags.error();
    if (flags->size() != h.layers) {
      return hparams_error(f, ErrorCode::malformed,
                           fmt::format("metadata '{}' has {} entries, but '{}block_count' is {}: one flag per layer",
                                       pattern_key, flags->size(), p, h.layers));
    }
    for (std::uint32_t l = 0; l < h.layers; ++l) local[l] = (*flags)[l];
  } else {
    Result<std::uint32_t> period = optional_u32(f, pattern_key, arch.window_pattern, layers_max, "layers");
    if (!period) return period.error();
    for (std::uint32_t l = 0; l < h.layers; ++l) local[l] = l % *period < *period - 1;
  }
  Result<float> local_theta = bounded_f32(f, p + "rope.freq_base_swa", arch.window_rope_theta, 1.0, 1e12);
  if (!local_theta) return local_theta.error();
  // Window layers take their own base, unscaled; full layers keep the file's base and scaling.
  h.ropes.push_back(RopeSpec{*local_theta, 1.0f, false});
  for (std::uint32_t l = 0; l < h.layers; ++l) {
    if (!local[l]) continue;
    h.layer[l].window = h.window;
    h.layer[l].rope = 1;
  }
  return Status::success();
}

// The softmax scale: attention.scale, or 1 / sqrt(key_length); Gemma 3 27B (62 layers) scales by
// its query_pre_attn_scalar, embedding / head_count, as llama.cpp does for that file.
Status read_attention_scale(const gguf::File& f, const std::string& p, HParams& h) {
  double scale = 1.0 / std::sqrt(static_cast<double>(h.head_dim));
  if (h.architecture == "gemma3" && h.layers == 62) scale = 1.0 / std::sqrt(static_cast<double>(h.embedding) / h.q_heads);
  Result<float> given = bounded_f32(f, p + "attention.scale", static_cast<float>(scale), 1e-6, 1e3);
  if (!given) return given.error();
  if (f.has(p + "attention.scale")) scale = *given;
  const double q = scale * std::sqrt(static_cast<double>(h.head_dim));
  h.query_scale = std::fabs(q - 1.0) < 1e-7 ? 1.0f : static_cast<float>(q);
  return Status::success();
}

}  // namespace

std::uint32_t HParams::window_layers() const noexcept {
  std::uint32_t n = 0;
  for (const LayerHParams& l : layer) n += l.window != 0 ? 1u : 0u;
  return n;
}

Result<HParams> read_hparams(const gguf::File& f) {
  HParams h;
  Result<std::string_view> arch_name = f.get_string("general.architecture");
  if (!arch_name) return arch_name.error();
  h.architecture = std::string(*arch_name);
  h.arch = find_arch(*arch_name);
  if (h.arch == nullptr) {
    return hparams_error(f, ErrorCode::unsupported,
                         fmt::format("architecture '{}' is not supported (the engine runs {})", *arch_name,
                                     arch_names()));
  }
  const ArchTraits& arch = *h.arch;
  if (Result<std::string_view> n = f.get_string("general.name"); n) h.name = std::string(*n);
  const std::string p = h.architecture + ".";
  if (Status s = read_sizes(f, p, h); !s) return s.error();
  if (Status s = check_heads_against_tensors(f, p, h); !s) return s.error();
  if (Status s = read_rope(f, p, arch, h); !s) return s.error();
  if (Status s = read_windows(f, p, arch, h); !s) return s.error();
  if (Status s = read_attention_scale(f, p, h); !s) return s.error();
  Result<float> eps = bounded_f32(f, p + "attention.layer_norm_rms_epsilon", arch.rms_epsilon, 1e-12, 1.0);
  if (!eps) return eps.error();
  h.rms_epsilon = *eps;
  if (arch.embedding_scaled) h.embedding_scale = std::sqrt(static_cast<float>(h.embedding));

  const gguf::TensorInfo* embd = f.find_tensor("token_embd.weight");
  if (embd == nullptr) return hparams_error(f, ErrorCode::malformed, "tensor 'token_embd.weight' is missing");
  if (embd->n_dims != 2 || embd->ne[1] == 0 || embd->ne[1] > vocab_max)
    return hparams_error(f, ErrorCode::malformed,
                         fmt::format("tensor 'token_embd.weight' must be 2-dimensional [embedding, vocab] with 1 to {} "
                                     "rows",
                                     vocab_max));
  h.vocab = static_cast<std::uint32_t>(embd->ne[1]);
  h.tied_output = f.find_tensor("output.weight") == nullptr;
  return h;
}

}  // namespace activekv::engine
