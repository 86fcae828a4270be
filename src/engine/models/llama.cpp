// llama.cpp — the Llama layer (Llama 2 and 3.x, SmolLM, Mistral-style files).
//
//   h = rmsnorm(x) ⊙ attn_norm
//   q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ;  rope(q, k)        adjacent pairs; Llama 3 factors from rope_freqs
//   x += attention(q, k, v)·Woᵀ                       a window where the file sets one (all layers)
//   h = rmsnorm(x) ⊙ ffn_norm
//   x += (silu(h·Wgateᵀ) ⊙ h·Wupᵀ)·Wdownᵀ
#include "engine/blocks.hpp"
#include "engine/models/models.hpp"

namespace activekv::engine::models {

Status llama_layer(Blocks& b, std::uint32_t l) {
  const LayerWeights& w = b.weights(l);
  const HParams& hp = b.hp();
  b.norm(b.x(), w.attn_norm, b.h(), hp.embedding, b.rows());
  const Blocks::Product qkv[] = {{&w.q, b.h(), b.q()}, {&w.k, b.h(), b.k()}, {&w.v, b.h(), b.v()}};
  b.matmul(qkv);
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
