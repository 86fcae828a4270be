// qwen35.cpp — the Qwen3.5 hybrid layer: Gated DeltaNet on most layers, gated full attention on
// every n-th (hparams.hpp: full_attention_interval or attention.recurrent_layers).
//
//   h = rmsnorm(x) ⊙ attn_norm
//   recurrent layer:  x += delta_net(h)                      (delta_net.cpp; state in the KV)
//   attention layer:  [q | g] per head = h·Wqᵀ;  k, v = h·Wkᵀ, h·Wvᵀ
//                     q_h = rmsnorm(q_h) ⊙ q_norm, k_h = rmsnorm(k_h) ⊙ k_norm  per head
//                     rope(q, k)   halves, the first rope.dimension_count elements of each head
//                     x += (attention(q, k, v) ⊙ sigmoid(g))·Woᵀ
//   h = rmsnorm(x) ⊙ post_attention_norm                     (the FFN's input norm)
//   x += (silu(h·Wgateᵀ) ⊙ h·Wupᵀ)·Wdownᵀ
#include <cmath>

#include "engine/blocks.hpp"
#include "engine/models/models.hpp"

namespace activekv::engine::models {
namespace {

// wide() holds per row and head [query | gate]: the queries to q(), the gates to aux().
void split_query_gate(Blocks& b) {
  const HParams& hp = b.hp();
  const std::size_t d = hp.head_dim;
  for (std::uint32_t r = 0; r < b.rows(); ++r) {
    for (std::uint32_t head = 0; head < hp.q_heads; ++head) {
      const float* from = b.wide() + (std::size_t{r} * hp.q_heads + head) * 2 * d;
      float* q = b.q() + (std::size_t{r} * hp.q_heads + head) * d;
      float* g = b.aux() + (std::size_t{r} * hp.q_heads + head) * d;
      for (std::size_t i = 0; i < d; ++i) q[i] = from[i];
      for (std::size_t i = 0; i < d; ++i) g[i] = from[d + i];
    }
  }
}

// attn() ⊙= sigmoid(gate).
void apply_gate(Blocks& b) {
  const std::size_t count = std::size_t{b.rows()} * b.hp().q_dim();
  for (std::size_t i = 0; i < count; ++i) b.attn()[i] *= 1.0f / (1.0f + std::exp(-b.aux()[i]));
}

Status gated_attention(Blocks& b, std::uint32_t l) {
  const LayerWeights& w = b.weights(l);
  const HParams& hp = b.hp();
  const Blocks::Product qkv[] = {{&w.q, b.h(), b.wide()}, {&w.k, b.h(), b.k()}, {&w.v, b.h(), b.v()}};
  b.matmul(qkv);
  split_query_gate(b);
  b.norm(b.q(), w.q_norm, b.q(), hp.head_dim, b.rows() * hp.q_heads);
  b.norm(b.k(), w.k_norm, b.k(), hp.head_dim, b.rows() * hp.kv_heads);
  b.rope(b.q(), hp.q_heads, l);
  b.rope(b.k(), hp.kv_heads, l);
  if (Status s = b.attention(l); !s) return s;
  apply_gate(b);
  const Blocks::Product o[] = {{&w.o, b.attn(), b.h()}};
  b.matmul(o);
  return Status::success();
}

}  // namespace

Status qwen35_layer(Blocks& b, std::uint32_t l) {
  const LayerWeights& w = b.weights(l);
  const HParams& hp = b.hp();
  b.norm(b.x(), w.attn_norm, b.h(), hp.embedding, b.rows());
  Status mixed = hp.layer[l].recurrent ? b.delta_net(l) : gated_attention(b, l);
  if (!mixed) return mixed;
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
