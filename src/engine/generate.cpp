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
  std::uint64_t t0 = now_ns();
  for (std::size_t fed = 0; fed < request.prompt.size(); fed += chunk) {
    const std::size_t n = std::min<std::size_t>(chunk, request.prompt.size() - fed);
    const bool last = fed + n == request.prompt.size();
    const StepInput in{request.context, request.prompt.subspan(fed, n), last};
    if (Status s = engine.step({&in, 1}); !s) return s.error();
  }
  stats.prefill_ns = now_ns() - t0;
  t0 = now_ns();
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
    token = sampler.sample(engine.logits(0));
  }
  stats.decode_ns = now_ns() - t0;
  return stats;
}

}  // namespace activekv::engine
