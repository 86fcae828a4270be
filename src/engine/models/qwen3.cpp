// qwen3.cpp — the Qwen3 layer: Llama's, with an RMS norm on each Q and K head before NeoX RoPE.
//
//   h = rmsnorm(x) ⊙ attn_norm
//   q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ
//   q_h = rmsnorm(q_h) ⊙ q_norm, k_h = rmsnorm(k_h) ⊙ k_norm  per head;  rope(q, k)   halves (i, i + d/2)
//   x += attention(q, k, v)·Woᵀ                     q_heads × key_length may differ from embedding
//   h = rmsnorm(x) ⊙ ffn_norm
//   x += (silu(h·Wgateᵀ) ⊙ h·Wupᵀ)·Wdownᵀ
#include "engine/blocks.hpp"
#include "engine/models/models.hpp"

namespace activekv::engine::models {

Status qwen3_layer(Blocks& b, std::uint32_t l) {
  const LayerWeights& w = b.weights(l);
  const HParams& hp = b.hp();
  b.norm(b.x(), w.attn_norm, b.h(), hp.embedding, b.rows());
  const Blocks::Product qkv[] = {{&w.q, b.h(), b.q()}, {&w.k, b.h(), b.k()}, {&w.v, b.h(), b.v()}};
  b.matmul(qkv);
  b.norm(b.q(), w.q_norm, b.q(), hp.head_dim, b.rows() * hp.q_heads);
  b.norm(b.k(), w.k_norm, b.k(), hp.head_dim, b.rows() * hp.kv_heads);
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
