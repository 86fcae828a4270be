// qwen2.cpp — the Qwen2 / Qwen2.5 layer: Llama's, with biases on Q, K and V and NeoX RoPE.
//
//   h = rmsnorm(x) ⊙ attn_norm
//   q, k, v = h·Wqᵀ + bq, h·Wkᵀ + bk, h·Wvᵀ + bv;  rope(q, k)   halves (i, i + d/2)
//   x += attention(q, k, v)·Woᵀ
//   h = rmsnorm(x) ⊙ ffn_norm
//   x += (silu(h·Wgateᵀ) ⊙ h·Wupᵀ)·Wdownᵀ
#include "engine/blocks.hpp"
#include "engine/models/models.hpp"

namespace activekv::engine::models {

Status qwen2_layer(Blocks& b, std::uint32_t l) {
  const LayerWeights& w = b.weights(l);
  const HParams& hp = b.hp();
  b.norm(b.x(), w.attn_norm, b.h(), hp.embedding, b.rows());
  const Blocks::Product qkv[] = {{&w.q, b.h(), b.q()}, {&w.k, b.h(), b.k()}, {&w.v, b.h(), b.v()}};
  b.matmul(qkv);
  b.add_bias(b.q(), w.q_bias, hp.q_dim());
  b.add_bias(b.k(), w.k_bias, hp.kv_dim());
  b.add_bias(b.v(), w.v_bias, hp.kv_dim());
  b.rope(b.q(), hp.q_heads, l);
  b.rope(b.k(), hp.kv_heads, l);
  if (Status s = b.attention(l); !s) return s;
  const Blocks::Product o[] = {{&w.o, b.attn(), b.h()}};
  b.matmul(o);
  b.add(b.x(), b.h(), hp.embedding);
  b.norm(b.x(), w.ffn_norm, b.h(), hp.embedding, b.rows());
  const Blocks::Product gate_up[] = {{&w.gate, b.h(), b.gate()}, {&w.up, b.h(), b.up()}};
  b.matmul(gate_up);
  b.activate(FfnKind::swiglu);
  const Blocks::Product down[] = {{&w.down, b.gate(), b.h()}};
  b.matmul(down);
  b.add(b.x(), b.h(), hp.embedding);
  return Status::success();
}

}  // namespace activekv::engine::models
