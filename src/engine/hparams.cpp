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

// The head counts against the first attention layer's tensors: a count the tensors contradict is
// named with the tensor, before the loader reports a shape. A hybrid's attn_q gives a query and a
// gate per head (twice the rows); its first layers may be recurrent.
Status check_heads_against_tensors(const gguf::File& f, const std::string& p, const HParams& h) {
  std::uint32_t first = 0;
  while (first < h.layers && h.layer[first].recurrent) ++first;
  if (first == h.layers) return Status::success();  // read_recurrent refused a model without attention layers
  const std::uint64_t q_factor = h.arch->gated_delta_net ? 2 : 1;
  struct Check {
    std::string tensor;
    const char* key;
    std::uint32_t heads;
    std::uint64_t factor;
  };
  const std::string b = fmt::format("blk.{}.", first);
  for (const Check& c : {Check{b + "attn_q.weight", "attention.head_count", h.q_heads, q_factor},
                         Check{b + "attn_k.weight", "attention.head_count_kv", h.kv_heads, 1}}) {
    const gguf::TensorInfo* t = f.find_tensor(c.tensor);
    if (t == nullptr || t->n_dims != 2) continue;  // the loader names a missing or misshapen tensor
    const std::uint64_t want = c.factor * c.heads * h.head_dim;
    if (t->ne[1] == want) continue;
    return hparams_error(f, ErrorCode::malformed,
                         fmt::format("metadata '{}{}' is {}, but tensor '{}' has {} rows, not {}{} × head dim {} = {}",
                                     p, c.key, c.heads, c.tensor, t->ne[1], c.factor == 2 ? "2 × " : "", c.heads,
                                     h.head_dim, want));
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

// Hybrids: which layers are recurrent, the Gated DeltaNet sizes, and the KV's dense layer of each
// attention layer (every layer's own index where the model has no recurrent layers).
Status read_layer_kinds(const gguf::File& f, const std::string& p, HParams& h) {
  const std::string flags_key = p + "attention.recurrent_layers";
  const std::string interval_key = p + "full_attention_interval";
  if (f.has(flags_key)) {
    Result<std::vector<bool>> flags = f.get_array<bool>(flags_key);
    if (!flags) return flags.error();
    if (flags->size() != h.layers) {
      return hparams_error(f, ErrorCode::malformed,
                           fmt::format("metadata '{}' has {} entries, but '{}block_count' is {}: one flag per layer",
                                       flags_key, flags->size(), p, h.layers));
    }
    for (std::uint32_t l = 0; l < h.layers; ++l) h.layer[l].recurrent = (*flags)[l];
  } else {
    if (f.has(interval_key)) {
      Result<std::uint32_t> raw = f.get_u32(interval_key);
      if (!raw) return raw.error();
      if (*raw == 0) {
        return hparams_error(f, ErrorCode::malformed,
                             fmt::format("metadata '{}' is 0: every n-th layer is full attention, n from 1 to {}",
                                         interval_key, h.layers));
      }
    }
    Result<std::uint32_t> interval = optional_u32(f, interval_key, 4, layers_max, "layers");
    if (!interval) return interval.error();
    for (std::uint32_t l = 0; l < h.layers; ++l) h.layer[l].recurrent = (l + 1) % *interval != 0;
  }
  for (std::uint32_t l = 0; l < h.layers; ++l) {
    LayerHParams& layer = h.layer[l];
    if (layer.recurrent) {
      layer.state_layer = h.recurrent_layers++;
    } else {
      layer.kv_layer = h.dense_layers++;
    }
  }
  if (h.dense_layers == 0) {
    return hparams_error(f, ErrorCode::malformed,
                         fmt::format("no full-attention layer among the {} layers (metadata '{}' or '{}'): the KV "
                                     "needs at least one",
                                     h.layers, interval_key, flags_key));
  }
  return Status::success();
}

Status read_ssm(const gguf::File& f, const std::string& p, HParams& h) {
  SsmHParams& s = h.ssm;
  struct Key {
    std::uint32_t* at;
    const char* name;
    std::uint32_t hi;
    const char* unit;
  };
  for (const Key& k : {Key{&s.conv_kernel, "ssm.conv_kernel", conv_kernel_max, "tokens"},
                       Key{&s.state_size, "ssm.state_size", head_dim_max, "elements"},
                       Key{&s.k_heads, "ssm.group_count", heads_max, "heads"},
                       Key{&s.v_heads, "ssm.time_step_rank", heads_max, "heads"},
                       Key{&s.inner, "ssm.inner_size", embedding_max * 4, "elements"}}) {
    Result<std::uint32_t> v = positive_u32(f, p + k.name, k.hi, k.unit);
    if (!v) return v.error();
    *k.at = *v;
  }
  if (s.v_heads % s.k_heads != 0) {
    return hparams_error(f, ErrorCode::malformed,
                         fmt::format("heads do not divide: metadata '{}ssm.time_step_rank' {} (value heads) is not a "
                                     "multiple of '{}ssm.group_count' {} (key heads)",
                                     p, s.v_heads, p, s.k_heads));
  }
  if (std::uint64_t{s.v_heads} * s.state_size != s.inner) {
    return hparams_error(f, ErrorCode::malformed,
                         fmt::format("metadata '{}ssm.inner_size' is {}, not '{}ssm.time_step_rank' {} × "
                                     "'{}ssm.state_size' {} = {}",
                                     p, s.inner, p, s.v_heads, p, s.state_size,
                                     std::uint64_t{s.v_heads} * s.state_size));
  }
  return Status::success();
}

// M-RoPE sections (Qwen3.5's interleaved layout): pair i takes section i % Σ sections' position,
// t (i % 3 == 0, i < 3 s0), h (i % 3 == 1, i < 3 s1), w (i % 3 == 2, i < 3 s2), else e. Text gives
// t = h = w = the token's position and e = 0: a pair left to e would not rotate, which the RoPE
// tables do not express, so such sections are refused.
Status check_rope_sections(const gguf::File& f, const std::string& p, const HParams& h) {
  const std::string key = p + "rope.dimension_sections";
  if (!f.has(key)) return Status::success();
  Result<std::vector<std::int64_t>> sections = f.get_array<std::int64_t>(key);
  if (!sections) return sections.error();
  std::int64_t s[4] = {0, 0, 0, 0};
  std::int64_t total = 0;
  for (std::size_t i = 0; i < sections->size() && i < 4; ++i) {
    s[i] = (*sections)[i];
    if (s[i] < 0 || s[i] > head_dim_max) {
      return hparams_error(f, ErrorCode::malformed, fmt::format("metadata '{}' has entry {} = {}", key, i, s[i]));
    }
    total += s[i];
  }
  if (total == 0) return Status::success();
  for (std::int64_t i = 0; i < h.rope_dims / 2; ++i) {
    const std::int64_t sector = i % total;
    const bool text = (sector % 3 == 0 && sector < 3 * s[0]) || (sector % 3 == 1 && sector < 3 * s[1]) ||
                      (sector % 3 == 2 && sector < 3 * s[2]);
    if (text) continue;
    return hparams_error(f, ErrorCode::unsupported,
                         fmt::format("metadata '{}' [{}, {}, {}, {}] leaves rotary pair {} of {} to the fourth "
                                     "(non-text) section: the engine runs text, where every pair takes the token's "
                                     "position",
                                     key, s[0], s[1], s[2], s[3], i, h.rope_dims / 2));
  }
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
  if (Status s = read_rope(f, p, arch, h); !s) return s.error();
  if (Status s = read_windows(f, p, arch, h); !s) return s.error();
  if (arch.gated_delta_net) {
    if (Status s = read_layer_kinds(f, p, h); !s) return s.error();
    if (Status s = read_ssm(f, p, h); !s) return s.error();
    if (Status s = check_rope_sections(f, p, h); !s) return s.error();
  } else {
    for (std::uint32_t l = 0; l < h.layers; ++l) h.layer[l].kv_layer = l;
    h.dense_layers = h.layers;
  }
  if (Status s = check_heads_against_tensors(f, p, h); !s) return s.error();
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
