// model_hybrid.cpp — binding a Qwen3.5 hybrid's layers (see model.hpp for the shapes).
//
// An attention layer carries a gated query (attn_q gives a query and a gate per head), Q/K norms
// and post_attention_norm, which is its FFN's input norm; a recurrent layer carries the Gated
// DeltaNet's tensors instead (hparams.hpp SsmHParams). Both carry attn_norm and the FFN. Every
// shape follows from the hyper-parameters, so a tensor that contradicts them is named here and
// nothing downstream re-checks.
#include <fmt/format.h>

#include "engine/model.hpp"

namespace activekv::engine {

using detail::bind_matrix;
using detail::bind_norm;

namespace {

struct MatrixSlot {
  MatrixView* view;
  const char* name;
  std::uint32_t cols, rows;
};

struct VectorSlot {
  const float** at;
  const char* name;
  std::uint64_t elements;
};

Status bind_all(const gguf::File& f, const std::string& prefix, std::initializer_list<MatrixSlot> matrices,
                std::initializer_list<VectorSlot> vectors) {
  for (const MatrixSlot& m : matrices) {
    Result<MatrixView> r = bind_matrix(f, prefix + m.name + ".weight", m.cols, m.rows);
    if (!r) return r.error();
    *m.view = *r;
  }
  for (const VectorSlot& v : vectors) {
    Result<const float*> r = bind_norm(f, prefix + v.name, v.elements);
    if (!r) return r.error();
    *v.at = *r;
  }
  return Status::success();
}

}  // namespace

Status Model::bind_hybrid_layer(std::uint32_t l) {
  const gguf::File& f = file_;
  const HParams& h = config_;
  const SsmHParams& s = h.ssm;
  const std::string b = fmt::format("blk.{}.", l);
  const std::uint32_t e = h.embedding;
  LayerWeights& w = layers_[l];
  Status common = bind_all(f, b,
                           {{&w.gate, "ffn_gate", e, h.ffn}, {&w.up, "ffn_up", e, h.ffn}, {&w.down, "ffn_down", h.ffn, e}},
                           {{&w.attn_norm, "attn_norm.weight", e}, {&w.ffn_norm, "post_attention_norm.weight", e}});
  if (!common) return common;
  if (!h.layer[l].recurrent) {
    return bind_all(f, b,
                    {{&w.q, "attn_q", e, 2 * h.q_dim()},
                     {&w.k, "attn_k", e, h.kv_dim()},
                     {&w.v, "attn_v", e, h.kv_dim()},
                     {&w.o, "attn_output", h.q_dim(), e}},
                    {{&w.q_norm, "attn_q_norm.weight", h.head_dim}, {&w.k_norm, "attn_k_norm.weight", h.head_dim}});
  }
  Status ssm = bind_all(f, b,
                        {{&w.qkv, "attn_qkv", e, s.conv_dim()},
                         {&w.z, "attn_gate", e, s.inner},
                         {&w.beta, "ssm_beta", e, s.v_heads},
                         {&w.alpha, "ssm_alpha", e, s.v_heads},
                         {&w.ssm_out, "ssm_out", s.inner, e}},
                        {{&w.dt_bias, "ssm_dt.bias", s.v_heads},
                         {&w.a, "ssm_a", s.v_heads},
                         {&w.ssm_norm, "ssm_norm.weight", s.state_size}});
  if (!ssm) return ssm;
  // The convolution's taps: [conv_kernel, conv_dim], the kernel contiguous per channel.
  const std::string conv = b + "ssm_conv1d.weight";
  const gguf::TensorInfo* t = f.find_tensor(conv);
  if (t != nullptr && (t->n_dims != 2 || t->ne[0] != s.conv_kernel || t->ne[1] != s.conv_dim())) {
    return make_error(ErrorCode::malformed, f.name(),
                      fmt::format("tensor '{}' has shape [{}, {}] ({} dims); metadata '{}.ssm.conv_kernel' {} and the "
                                  "channels 2 × {} + {} need [{}, {}]",
                                  conv, t->ne[0], t->ne[1], t->n_dims, h.architecture, s.conv_kernel, s.key_dim(),
                                  s.inner, s.conv_kernel, s.conv_dim()));
  }
  Result<const float*> taps = bind_norm(f, conv, std::uint64_t{s.conv_kernel} * s.conv_dim());
  if (!taps) return taps.error();
  w.conv = *taps;
  return Status::success();
}

}  // namespace activekv::engine
