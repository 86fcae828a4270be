// eval_rig.cpp — see eval_rig.hpp.
#include "eval/eval_rig.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "engine/matmul.hpp"

namespace activekv::eval {

Result<std::unique_ptr<EvalRig>> EvalRig::create(const engine::Model& model, engine::ThreadPool& pool,
                                                 std::span<const EvalSetting> settings, const RigSettings& rig) {
  const engine::ModelConfig& cfg = model.config();
  if (rig.context_tokens == 0 || rig.context_tokens > cfg.context_tokens)
    return make_error(ErrorCode::invalid_argument, "--context",
                      fmt::format("{} is out of range: the model's llama.context_length is {}", rig.context_tokens,
                                  cfg.context_tokens));
  if (rig.page_tokens == 0 || rig.page_tokens > rig.context_tokens)
    return make_error(ErrorCode::invalid_argument, "--page-tokens",
                      fmt::format("{} is out of range: give 1 to --context {}", rig.page_tokens, rig.context_tokens));
  // A prefill chunk longer than the context would be refused by the plan: no step can carry more than the context.
  const engine::ForwardLimits limits{std::min(rig.chunk_tokens, rig.context_tokens), 1, rig.context_tokens};
  // A window layer narrower than the context (until the KV keeps window rings) is refused here, naming --context.
  if (Status runnable = engine::check_runnable(model, limits); !runnable)
    return make_error(ErrorCode::invalid_argument, "--context",
                      fmt::format("{} tokens cannot run on this model: {}", rig.context_tokens, runnable.error().message));
  MemorySettings memory;
  memory.max_context_tokens = rig.context_tokens;
  memory.page_tokens = rig.page_tokens;
  memory.tile_tokens = std::max(rig.page_tokens, std::min(rig.tile_tokens, rig.context_tokens) / rig.page_tokens * rig.page_tokens);
  memory.max_seqs = rig.contexts;
  KvRuntimeSettings s = engine::runtime_settings(model, memory, limits);
  const std::uint64_t history_bytes =
      std::uint64_t{s.memory.geometry.dense_layers} * rig.context_tokens * s.memory.geometry.row_bytes();
  if (rig.host_pool_bytes != 0 && rig.host_pool_bytes / history_bytes < rig.contexts)
    return make_error(ErrorCode::refused, "--host-pool",
                      fmt::format("{} bytes hold {} histories of --context {} tokens; the evaluation keeps {} at once "
                                  "(one per setting): give at least {} bytes, or lower --context or the settings",
                                  rig.host_pool_bytes, rig.host_pool_bytes / history_bytes, rig.context_tokens,
                                  rig.contexts, history_bytes * rig.contexts));
  s.memory.host_pool_bytes = rig.host_pool_bytes != 0 ? rig.host_pool_bytes : history_bytes * rig.contexts;
  s.memory.device_pool_bytes = rig.device_pool_bytes;
  s.prefix_reuse = true;  // the settings' contexts adopt the one exact prefix (setting_contexts.hpp)
  for (const EvalSetting& e : settings) {
    if (e.sparse.enabled()) {
      s.sparse = e.sparse;
      break;
    }
  }

  std::unique_ptr<EvalRig> r(new EvalRig(model));
  BackendOptions options;
  options.compute_threads = rig.compute_threads;
  Result<std::unique_ptr<Backend>> backend = make_backend(rig.backend, options);
  if (!backend) return backend.error();
  r->backend_ = std::move(backend).value();
  engine::choose_history_reads(s, *r->backend_);
  Result<std::unique_ptr<KvRuntime>> runtime = KvRuntime::create(s, *r->backend_);
  if (!runtime) return runtime.error();
  r->runtime_ = std::move(runtime).value();
  if (r->runtime_->plan().host.concurrency < rig.contexts)
    return make_error(ErrorCode::refused, "--host-pool",
                      fmt::format("holds {} histories of {} tokens; the evaluation keeps {} at once (one per setting): "
                                  "give at least {} bytes, or lower --context or the settings",
                                  r->runtime_->plan().host.concurrency, rig.context_tokens, rig.contexts,
                                  history_bytes * rig.contexts));
  r->kv_ = std::make_unique<engine::RuntimeKv>(*r->runtime_);
  r->forward_ = std::make_unique<engine::Forward>(model, *r->kv_, pool, engine::best_isa(), limits, rig.activations);
  return r;
}

EvalRig::~EvalRig() {
  forward_.reset();  // before the KV it uses, which goes before the runtime and its backend
  kv_.reset();
  runtime_.reset();
  backend_.reset();
}

}  // namespace activekv::eval
