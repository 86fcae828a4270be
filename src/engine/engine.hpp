// engine.hpp — the reference inference engine's API, for the scheduler and the tools.
//
// An Engine is a loaded model, a thread pool, and a forward pass whose KV
// lives behind a KvAccess (kv_access.hpp) — in production the ActiveKV
// runtime (runtime_kv.hpp), which the caller creates from the model's
// geometry and owns, with its backend, for longer than the engine:
//
//   auto model  = Model::load(path);                          // Result; the mmap'd GGUF
//   auto runtime = KvRuntime::create(settings, backend);      // warm-up: allocates once
//   auto engine = Engine::create(std::move(*model), std::make_unique<RuntimeKv>(**runtime), settings);
//   // admission is the runtime's: runtime->open_context(request_id, tokens_max)
//   StepInput in[] = {{a, prompt_chunk, /*want_logits=*/true}, {b, {&token, 1}, true}};
//   engine->step(in);                                         // one batched step
//   TokenId next = sampler.sample(engine->logits(0));
//
// A step takes any mix of prefill chunks and single decode tokens (one entry
// per context, each context at most once), within EngineSettings::limits.
// After warm-up a step allocates nothing on the heap and nothing on the device
// (invariant 7); logits stay valid until the next step.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "engine/forward.hpp"
#include "engine/kv_access.hpp"
#include "engine/matmul.hpp"
#include "engine/model.hpp"
#include "engine/thread_pool.hpp"

namespace activekv::engine {

struct EngineSettings {
  std::uint32_t threads = 2;  // --threads: the caller plus threads − 1 workers
  bool isa_auto = true;       // choose best_isa(); otherwise `isa`
  Isa isa = Isa::portable;
  // --activations: the quantised products' activation width (matmul_q8.hpp; docs/ENGINE-ARITHMETIC.md, "Activation width").
  Activations activations = Activations::q16;
  ForwardLimits limits;       // tokens and entries per step
};

class Engine {
 public:
  // Refuses threads outside 1..256, an instruction set this CPU lacks, zero limits.
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<Model> model, std::unique_ptr<KvAccess> kv,
                                                const EngineSettings& settings);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Model& model() const noexcept { return *model_; }
  const ModelConfig& config() const noexcept { return model_->config(); }

  // One batched step (forward.hpp); a validation error leaves every context unchanged.
  Status step(std::span<const StepInput> inputs) { return forward_->step(inputs); }
  // Entry e's logits from the last step (config().vocab floats), empty if not wanted.
  std::span<const float> logits(std::uint32_t entry) const noexcept { return forward_->logits(entry); }

  // The context's length (tokens in its KV: an adopted prefix's, before its first step).
  std::uint32_t length(ContextId context) const { return kv_->length(context); }
  // Where a hybrid's state is checkpointed for prefix reuse (KvAccess::note_prompt,
  // tokens_to_checkpoint): a caller that cuts prefill chunks there keeps the checkpoints.
  void note_prompt(ContextId context, std::uint32_t prompt_tokens) { kv_->note_prompt(context, prompt_tokens); }
  std::uint32_t tokens_to_checkpoint(ContextId context) const { return kv_->tokens_to_checkpoint(context); }

  const PhaseTimes& times() const noexcept { return forward_->times(); }
  void reset_times() noexcept { forward_->reset_times(); }
  Isa isa() const noexcept { return forward_->isa(); }
  Activations activations() const noexcept { return forward_->activations(); }
  std::uint32_t threads() const noexcept { return pool_->threads(); }
  const ForwardLimits& limits() const noexcept { return forward_->limits(); }

 private:
  Engine() = default;

  std::unique_ptr<Model> model_;
  std::unique_ptr<KvAccess> kv_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Forward> forward_;
};

}  // namespace activekv::engine
