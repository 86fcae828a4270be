// engine.hpp — the reference inference engine's API, for the scheduler and the tools.
//
// An Engine is a loaded model, a thread pool, and a forward pass whose KV
// lives entirely in a KvRuntime (include/activekv/kv_runtime.hpp). The caller
// decides the memory: it builds the runtime (and its backend) from
// runtime_settings() and hands both over; the engine owns them from then on.
//
//   auto model = Model::load(path);                                   // Result
//   KvRuntimeSettings kvs = Engine::runtime_settings(**model, memory);
//   auto kv = KvRuntime::create(kvs, *backend);                       // warm-up: allocates once
//   auto engine = Engine::create(std::move(*model), std::move(*kv), settings, std::move(backend));
//   auto a = engine->open_context(tokens_max);                        // admission (may queue)
//   StepInput in[] = {{a->context, prompt_chunk, /*want_logits=*/true}, {b, {&tok, 1}, true}};
//   engine->step(in);                                                 // one batched step
//   TokenId next = sampler.sample(engine->logits(0));
//   engine->finish(a->context);
//
// A step takes any mix of prefill chunks and single decode tokens (one entry
// per context, each context at most once), limited by EngineSettings::limits.
// After the first step of each shape (warm-up), a step allocates nothing on
// the heap and nothing on the device (invariant 7); logits stay valid until
// the next step.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "activekv/backend.hpp"
#include "activekv/kv_runtime.hpp"
#include "engine/forward.hpp"
#include "engine/matmul.hpp"
#include "engine/model.hpp"
#include "engine/thread_pool.hpp"

namespace activekv::engine {

struct EngineSettings {
  std::uint32_t threads = 2;             // --threads: the caller plus threads − 1 workers
  bool isa_auto = true;                  // choose best_isa(); otherwise `isa`
  Isa isa = Isa::portable;
  ForwardLimits limits;                  // tokens and entries per step
};

// The operator's memory settings, mapped onto KvRuntimeSettings by runtime_settings().
struct MemorySettings {
  std::uint64_t host_pool_bytes = 0;     // --host-pool
  std::uint64_t device_pool_bytes = 0;   // --device-pool
  std::uint32_t page_tokens = 16;        // P
  std::uint32_t tile_tokens = 256;       // T (a multiple of P)
  std::uint32_t tiles = 2;               // staging tile slots
  std::uint32_t max_context_tokens = 0;  // 0: the model's context length
  std::uint32_t max_seqs = 1;
  ResidencyPolicyKind policy = ResidencyPolicyKind::exact;
};

class Engine {
 public:
  // The KV runtime settings for this model: geometry and q_heads from the
  // model, sizes from `memory`, step limits from `limits`.
  static KvRuntimeSettings runtime_settings(const Model& model, const MemorySettings& memory,
                                            const ForwardLimits& limits);

  // Takes ownership of all three; `backend` (may be null) must outlive `kv` and is destroyed after it.
  static Result<std::unique_ptr<Engine>> create(std::unique_ptr<Model> model, std::unique_ptr<KvRuntime> kv,
                                                const EngineSettings& settings,
                                                std::unique_ptr<Backend> backend = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const Model& model() const noexcept { return *model_; }
  const ModelConfig& config() const noexcept { return model_->config(); }
  KvRuntime& kv() noexcept { return *kv_; }
  const KvRuntime& kv() const noexcept { return *kv_; }

  // Contexts, through the runtime's admission.
  Result<Admission> open_context(std::uint32_t tokens_max) { return kv_->open_context(tokens_max); }
  bool is_admitted(ContextId context) const { return kv_->is_admitted(context); }
  std::uint32_t length(ContextId context) const { return kv_->length(context); }
  void finish(ContextId context) { kv_->finish(context); }
  void cancel(ContextId context) { kv_->cancel(context); }

  // One batched step (forward.hpp); errors leave every context unchanged.
  Status step(std::span<const StepInput> inputs) { return forward_->step(inputs); }
  // Entry e's logits from the last step (config().vocab floats), empty if not wanted.
  std::span<const float> logits(std::uint32_t entry) const noexcept { return forward_->logits(entry); }

  const PhaseTimes& times() const noexcept { return forward_->times(); }
  void reset_times() noexcept { forward_->reset_times(); }
  Isa isa() const noexcept { return forward_->isa(); }
  std::uint32_t threads() const noexcept { return pool_->threads(); }
  const ForwardLimits& limits() const noexcept { return forward_->limits(); }

 private:
  Engine() = default;

  std::unique_ptr<Backend> backend_;  // declared first: destroyed last
  std::unique_ptr<Model> model_;
  std::unique_ptr<KvRuntime> kv_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<Forward> forward_;
};

}  // namespace activekv::engine
