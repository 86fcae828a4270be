// engine.cpp — see engine.hpp.
#include "engine/engine.hpp"

#include <fmt/format.h>

namespace activekv::engine {

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Model> model, std::unique_ptr<KvAccess> kv,
                                               const EngineSettings& settings) {
  AK_ASSERT(model != nullptr, "Engine::create: no model");
  AK_ASSERT(kv != nullptr, "Engine::create: no KV");
  if (settings.threads == 0 || settings.threads > 256)
    return make_error(ErrorCode::invalid_argument, "--threads",
                      fmt::format("threads must be between 1 and 256, not {}", settings.threads));
  const Isa isa = settings.isa_auto ? best_isa() : settings.isa;
  if (!isa_available(isa))
    return make_error(ErrorCode::unsupported, "--isa", fmt::format("this CPU cannot run the {} kernels", isa_name(isa)));
  if (settings.limits.step_tokens_max == 0 || settings.limits.step_entries_max == 0)
    return make_error(ErrorCode::invalid_argument, "step limits", "tokens and entries per step must be at least 1");
  if (settings.limits.step_tokens_max > step_tokens_limit)
    return make_error(ErrorCode::invalid_argument, "step limits",
                      fmt::format("{} tokens per step is past the engine's {}", settings.limits.step_tokens_max,
                                  step_tokens_limit));
  if (settings.limits.context_tokens > model->config().context_tokens)
    return make_error(ErrorCode::invalid_argument, "--max-context",
                      fmt::format("{} is past the model's llama.context_length {}", settings.limits.context_tokens,
                                  model->config().context_tokens));
  if (Status s = check_runnable(*model, settings.limits); !s) return s.error();
  std::unique_ptr<Engine> engine(new Engine());
  engine->model_ = std::move(model);
  engine->kv_ = std::move(kv);
  engine->pool_ = std::make_unique<ThreadPool>(settings.threads);
  engine->forward_ = std::make_unique<Forward>(*engine->model_, *engine->kv_, *engine->pool_, isa, settings.limits,
                                               settings.activations);
  engine->kv_->share_threads(engine->pool_.get());
  return engine;
}

Engine::~Engine() {
  forward_.reset();  // before the pool and the KV it uses
  if (kv_ != nullptr) kv_->share_threads(nullptr);  // the runtime outlives the pool
  pool_.reset();
  kv_.reset();
}

}  // namespace activekv::engine
