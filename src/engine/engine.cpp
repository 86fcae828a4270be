// engine.cpp — see engine.hpp.
#include "engine/engine.hpp"

#include <fmt/format.h>

#include "activekv/backend.hpp"

namespace activekv::engine {

KvRuntimeSettings Engine::runtime_settings(const Model& model, const MemorySettings& memory,
                                           const ForwardLimits& limits) {
  KvRuntimeSettings s;
  s.geometry = model.geometry();
  s.q_heads = model.config().q_heads;
  s.host_pool_bytes = memory.host_pool_bytes;
  s.device_pool_bytes = memory.device_pool_bytes;
  s.page_tokens = memory.page_tokens;
  s.tile_tokens = memory.tile_tokens;
  s.tiles = memory.tiles;
  s.max_context_tokens = memory.max_context_tokens != 0 ? memory.max_context_tokens : model.config().context_tokens;
  s.max_seqs = memory.max_seqs;
  s.step_tokens_max = limits.step_tokens_max;
  s.step_entries_max = limits.step_entries_max;
  s.policy = memory.policy;
  return s;
}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Model> model, std::unique_ptr<KvRuntime> kv,
                                               const EngineSettings& settings, std::unique_ptr<Backend> backend) {
  AK_ASSERT(model != nullptr, "Engine::create: no model");
  AK_ASSERT(kv != nullptr, "Engine::create: no KV runtime");
  if (settings.threads == 0 || settings.threads > 256)
    return make_error(ErrorCode::invalid_argument, "--threads",
                      fmt::format("threads must be between 1 and 256, not {}", settings.threads));
  const Isa isa = settings.isa_auto ? best_isa() : settings.isa;
  if (!isa_available(isa))
    return make_error(ErrorCode::unsupported, "--isa", fmt::format("this CPU cannot run the {} kernels", isa_name(isa)));
  if (settings.limits.step_tokens_max == 0 || settings.limits.step_entries_max == 0)
    return make_error(ErrorCode::invalid_argument, "step limits", "tokens and entries per step must be at least 1");
  std::unique_ptr<Engine> engine(new Engine());
  engine->backend_ = std::move(backend);
  engine->model_ = std::move(model);
  engine->kv_ = std::move(kv);
  engine->pool_ = std::make_unique<ThreadPool>(settings.threads);
  engine->forward_ = std::make_unique<Forward>(*engine->model_, *engine->kv_, *engine->pool_, isa, settings.limits);
  return engine;
}

Engine::~Engine() {
  // The forward pass and the runtime go before the backend they run on.
  forward_.reset();
  kv_.reset();
  pool_.reset();
  model_.reset();
  backend_.reset();
}

}  // namespace activekv::engine
