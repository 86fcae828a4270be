// kv_access.hpp — the narrow door between the forward pass and the KV.
//
// The forward pass needs five things from wherever the KV lives: a context's
// length, to open a step over some entries, to write each layer's new K/V
// rows, to run each layer's attention, and to close the step. Nothing else —
// admission, budgets and explanations belong to the KV runtime's owner (the
// scheduler, the generate command), not to the arithmetic.
//
// Two implementations:
//   RuntimeKv    (runtime_kv.hpp)  the ActiveKV runtime: pages on the device,
//                                  staged tiles, write-back; the production path
//   ReferenceKv  (reference_kv_access.hpp) the runtime's contiguous oracle, for
//                                  tests: same paged attention math, no device
// Layouts are the runtime's (kv_runtime.hpp): k, v are total_new × kv_heads ×
// head_dim fp32; q, out total_new × q_heads × head_dim; entries concatenated
// in step order; entry e's tokens sit at positions length(e) ... during the step.
//
// A hybrid model's recurrent layers (hparams.hpp SsmHParams) keep a fixed-size
// state per context instead of rows: recurrent_state(context) is that state,
// geometry.recurrent_state_bytes bytes laid out by the model, all zero for a
// context that starts empty, valid from begin_step to end_step for a context in
// the step. The forward pass reads and updates it in place, token by token.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "activekv/kv_runtime.hpp"
#include "activekv/result.hpp"

namespace activekv::engine {

class ThreadPool;

class KvAccess {
 public:
  virtual ~KvAccess() = default;
  // Tokens already in the context (its next position), between steps.
  virtual std::uint32_t length(ContextId context) const = 0;
  virtual Status begin_step(std::span<const StepEntry> entries) = 0;
  virtual Status write_kv(std::uint32_t layer, const float* k, const float* v) = 0;
  virtual Status attend(std::uint32_t layer, const float* q, float* out) = 0;
  virtual Status end_step() = 0;
  // The recurrent state of `context`, a context of the current step. A KV without recurrent state
  // (a model with attention layers only) answers unsupported.
  virtual Result<std::span<std::byte>> recurrent_state(ContextId context) {
    (void)context;
    return make_error(ErrorCode::unsupported, "recurrent state", "this KV holds no recurrent state");
  }
  // Prefix reuse for a hybrid (KvRuntime::note_prompt, tokens_to_checkpoint): the prompt's length,
  // so the KV keeps a checkpoint of the state at the prompt's last whole page; and the tokens a
  // context may append before the next position where the KV checkpoints its state, so a caller
  // cuts its prefill chunk there. A KV that keeps no checkpoints ignores the one, answers
  // UINT32_MAX to the other.
  virtual void note_prompt(ContextId context, std::uint32_t prompt_tokens) { (void)context, (void)prompt_tokens; }
  virtual std::uint32_t tokens_to_checkpoint(ContextId context) const {
    (void)context;
    return UINT32_MAX;
  }
  // The engine's threads, for the KV's own parallel work between the forward pass's regions (the
  // sparse selection's bound); null takes them back. Between steps only; nothing by default.
  virtual void share_threads(ThreadPool* pool) { (void)pool; }
  // attend() runs its kernel on the shared threads: the forward pass keeps its workers awake.
  virtual bool attention_borrows_threads() const { return false; }
};

}  // namespace activekv::engine
