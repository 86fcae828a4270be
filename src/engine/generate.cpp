// generate.cpp — see generate.hpp.
#include "engine/generate.hpp"

#include <algorithm>
#include <chrono>

namespace activekv::engine {
namespace {

std::uint64_t now_ns() noexcept {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count());
}

}  // namespace

Result<GenerateStats> generate(Engine& engine, Sampler& sampler, const GenerateRequest& request) {
  if (request.prompt.empty()) return make_error(ErrorCode::invalid_argument, "--prompt", "the prompt has no tokens");
  GenerateStats stats;
  stats.prompt_tokens = static_cast<std::uint32_t>(request.prompt.size());
  const std::uint32_t chunk = engine.limits().step_tokens_max;
  // A context that adopted a retained prefix (open_context with the prompt) starts at its length:
  // its rows, and a hybrid's state, are the prefix's already.
  const std::uint32_t reused = engine.length(request.context);
  if (reused >= request.prompt.size())
    return make_error(ErrorCode::invalid_argument, "--prompt",
                      "the context already holds the whole prompt: at least one prompt token must be prefilled");
  stats.reused_tokens = reused;
  engine.note_prompt(request.context, stats.prompt_tokens);
  std::uint64_t t0 = now_ns();
  for (std::size_t fed = reused; fed < request.prompt.size();) {
    // Chunks end where the KV checkpoints a hybrid's state (the prompt's last whole page, every K
    // pages), so those checkpoints are taken; the output does not depend on the cut.
    const std::uint32_t to_checkpoint = engine.tokens_to_checkpoint(request.context);
    const std::size_t n = std::min<std::size_t>({chunk, request.prompt.size() - fed, to_checkpoint});
    const bool last = fed + n == request.prompt.size();
    const StepInput in{request.context, request.prompt.subspan(fed, n), last};
    if (Status s = engine.step({&in, 1}); !s) return s.error();
    fed += n;
  }
  stats.prefill_ns = now_ns() - t0;
  t0 = now_ns();
  if (request.on_logits != nullptr) request.on_logits(request.user, engine.logits(0));
  TokenId token = sampler.sample(engine.logits(0));
  for (;;) {
    if (std::find(request.stop_tokens.begin(), request.stop_tokens.end(), token) != request.stop_tokens.end()) {
      stats.stopped = true;
      break;
    }
    ++stats.generated_tokens;
    if (request.on_token != nullptr && !request.on_token(request.user, token)) break;
    if (stats.generated_tokens >= request.max_tokens) break;
    const StepInput in{request.context, {&token, 1}, true};
    if (Status s = engine.step({&in, 1}); !s) return s.error();
    if (request.on_logits != nullptr) request.on_logits(request.user, engine.logits(0));
    token = sampler.sample(engine.logits(0));
  }
  stats.decode_ns = now_ns() - t0;
  return stats;
}

}  // namespace activekv::engine
