// forward.hpp — the forward pass on the CPU, with every byte of KV in the KV
// runtime, for every architecture of the table (arch.hpp).
//
// One step runs a batch of entries — each one context and its new tokens (a
// prefill chunk, or one decode token) — through every layer together:
//
//   x = token_embd[tokens] (× embedding_scale)              N × embedding, N = Σ tokens
//   kv.begin_step(entries)                                  the runtime plans and stages
//   for each layer l:  the architecture's builder (models/), e.g. llama:
//     h = rmsnorm(x) ⊙ attn_norm
//     q, k, v = h·Wqᵀ, h·Wkᵀ, h·Wvᵀ;  rope(q, k) at each token's position
//     kv.write_kv(l, k, v);  a = kv.attend(l, q)            rows to the tail page; paged attention
//     x += a·Woᵀ
//     h = rmsnorm(x) ⊙ ffn_norm
//     x += (silu(h·Wgateᵀ) ⊙ h·Wupᵀ)·Wdownᵀ
//   kv.end_step()                                           tail rows written back to the host
//   logits[e] = (rmsnorm(x[last token of e]) ⊙ output_norm)·Woutᵀ   for entries that want them
//
// RoPE pairs elements in the architecture's order (hparams.hpp: GGUF llama
// files rotate adjacent pairs (2i, 2i+1), the converter having permuted Wq and
// Wk; Qwen and Gemma rotate the halves), by pos × theta^(−2i/rope_dims) with
// the layer's table (window layers may have their own base).
//
// What it owns: the step's bookkeeping (entries, logits) and the blocks'
// buffers (blocks.hpp), sized at construction for step_tokens_max tokens and
// step_entries_max entries, so a step allocates nothing (invariant 7). It
// holds no KV: positions come from the runtime (kv.length()), and attention
// is the runtime's.
//
// Matrix products are split by output rows over the thread pool; q/k/v share
// one parallel region, as do gate/up.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/blocks.hpp"
#include "engine/kv_access.hpp"
#include "engine/matmul.hpp"
#include "engine/matmul_q16.hpp"
#include "engine/model.hpp"
#include "engine/thread_pool.hpp"

namespace activekv::engine {

using TokenId = std::uint32_t;

struct StepInput {
  ContextId context;
  std::span<const TokenId> tokens;  // ≥ 1: a prefill chunk or one decode token
  bool want_logits = false;         // logits of the entry's last token
};

// Time spent per phase, accumulated over steps (nanoseconds).
struct PhaseTimes {
  std::uint64_t matmul_ns = 0;     // weight products, logits included
  std::uint64_t logits_ns = 0;     // of matmul_ns: the final norm and the output product (not in total_ns)
  std::uint64_t attention_ns = 0;  // kv.attend
  std::uint64_t copies_ns = 0;     // kv.write_kv and kv.end_step (rows in, tail write-back)
  std::uint64_t planning_ns = 0;   // kv.begin_step (plan, reclamation, staging issue)
  std::uint64_t other_ns = 0;      // embedding, norms, rope, activations
  std::uint64_t recurrent_ns = 0;  // a hybrid's Gated DeltaNet: convolution, recurrence, gate (its products are matmul)
  std::uint64_t steps = 0;
  std::uint64_t tokens = 0;
  std::uint64_t total_ns() const noexcept {
    return matmul_ns + attention_ns + copies_ns + planning_ns + other_ns + recurrent_ns;
  }
  PhaseTimes& operator+=(const PhaseTimes& t) noexcept {
    matmul_ns += t.matmul_ns;
    logits_ns += t.logits_ns;
    attention_ns += t.attention_ns;
    copies_ns += t.copies_ns;
    planning_ns += t.planning_ns;
    other_ns += t.other_ns;
    recurrent_ns += t.recurrent_ns;
    steps += t.steps;
    tokens += t.tokens;
    return *this;
  }
};

struct ForwardLimits {
  std::uint32_t step_tokens_max = 256;  // Σ tokens of one step
  std::uint32_t step_entries_max = 16;  // entries of one step
  std::uint32_t context_tokens = 0;     // the run's longest context (≤ the model's); 0: the model's.
                                        // The RoPE tables are sized by it, not by the model's.
};

// Most tokens one step may feed: the forward pass's buffers are sized by it
// (tokens × (embedding + ffn + heads) floats).
inline constexpr std::uint32_t step_tokens_limit = 8192;

// Whether the forward pass can run `model` under `limits`. Window layers (hparams.hpp) need
// attention restricted to the last W tokens, which the KV does not do yet (docs/ENGINE.md, "Window
// layers"): a window at least the run's context never masks anything, so such a model runs, exactly;
// a smaller one is refused, naming the key, the layers and the --max-context that would run.
Status check_runnable(const Model& model, const ForwardLimits& limits);

class Forward {
 public:
  // activations: the width of the quantised products' activations (matmul_q8.hpp, docs/ENGINE-ARITHMETIC.md).
  Forward(const Model& model, KvAccess& kv, ThreadPool& pool, Isa isa, ForwardLimits limits,
          Activations activations = Activations::q16);

  // One step. Errors (nothing is changed): too many tokens or entries for the
  // limits, an empty entry, a token id outside the vocabulary, a context that
  // would pass the model's context length; and whatever the KV reports (a
  // failed fence: the step's contexts are then faulted, see kv_runtime.hpp).
  Status step(std::span<const StepInput> inputs);

  // The logits of entry e of the last step (vocab floats), empty when it did not want them.
  std::span<const float> logits(std::uint32_t entry) const noexcept;

  const PhaseTimes& times() const noexcept { return times_; }
  void reset_times() noexcept { times_ = {}; }
  const ForwardLimits& limits() const noexcept { return limits_; }
  Isa isa() const noexcept { return isa_; }
  Activations activations() const noexcept { return activations_; }

 private:
  Status validate(std::span<const StepInput> inputs) const;
  void embed(std::span<const StepInput> inputs);
  void final_logits(std::span<const StepInput> inputs);

  const Model& model_;
  const HParams& cfg_;
  KvAccess& kv_;
  Isa isa_;
  Activations activations_;
  ForwardLimits limits_;
  PhaseTimes times_;
  std::uint32_t context_tokens_ = 0;       // positions the RoPE tables cover (ForwardLimits::context_tokens)
  Blocks blocks_;                          // the activations and the shared layer blocks

  std::vector<StepEntry> entries_;         // the runtime's view of the step
  std::vector<std::uint32_t> logit_rows_;  // per entry: row index into logits_, or UINT32_MAX
  std::vector<float> logits_;              // step_entries_max × vocab
  std::uint32_t logit_count_ = 0;
};

}  // namespace activekv::engine
